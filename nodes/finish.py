"""The ``finish`` node: where every ending of a question routes, and the one place it ends.

It adds the question's closing message (its answer, or why it has none) to the
conversation, records the sources the answer cites, how the answer was made (written
or extracted) and the evidence it rests on, pinned with its versions (`nodes.pins`),
adds the question's usage to the thread's, and sends the run's stop event.
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.core.context import LoopContext
from arcana_loop.core.sources import (
    EXTRACTED,
    answer_kind,
    cited_chunks,
    noting_extracted,
    sources_of,
)
from arcana_loop.core.state import (
    RESULT_KEYS,
    AnswerKind,
    BudgetStop,
    Coverage,
    EvidencePin,
    LoopState,
    StaleEvidence,
)
from arcana_loop.nodes.common import emit, offered_of
from arcana_loop.nodes.conversation import QUESTION_DEFAULTS, closing_message, opening_index
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.lifecycle import stop_event
from arcana_loop.nodes.pins import pin_evidence


class FinishUpdate(TypedDict, total=False):
    """What finishing changes; and, once a thread, the result fields no step wrote (`_never_written`)."""

    messages: list[BaseMessage]
    thread_usage: dict[str, Any]
    sources: list[dict[str, Any]]
    answer_kind: AnswerKind | None
    evidence: list[EvidencePin]
    iterations: int
    error: str | None
    grounding: dict[str, Any] | None
    coverage: Coverage | None
    repair: dict[str, Any] | None
    budget_stop: BudgetStop | None
    stale_evidence: StaleEvidence | None


def finish(state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps) -> FinishUpdate:
    """End the question: its closing message on the conversation, its usage on the thread's, then the stop event."""
    tool_count = len(offered_of(deps, runtime.context, state))
    emit(runtime, stop_event(state, runtime.context, tool_count))
    # once per question, not a write per step: a question that never finishes (its process
    # killed, and a new question asked) is left out of the thread's usage
    chunks = state.get("chunks") or []
    cited = cited_chunks(state.get("answer"), chunks)  # read once, for the sources and the pins
    sources = sources_of(cited)
    messages = state.get("messages") or []
    opening = opening_index(messages, state.get("question_message_id")) or 0
    update: FinishUpdate = {
        "thread_usage": dict(state.get("usage") or {}),
        "sources": [dict(s) for s in sources],
        "answer_kind": answer_kind(messages[opening:], state.get("answer"))
        if state.get("terminated_by") in ("answered", "max_iterations")
        else None,  # a give-up's "answer" is why there is none
    }
    closing = closing_message(state, sources, sources_footer=runtime.context.sources_footer)
    if closing is not None and update["answer_kind"] == EXTRACTED:
        closing = noting_extracted(closing)  # a chat client shows only the message's text
    if closing is not None:
        update["messages"] = [closing]
    pins = (
        pin_evidence(cited, chunks, state.get("grounding"), deps.versions())
        if update["answer_kind"] is not None
        else []
    )
    if pins:  # written only when there are some (`start` resets it); `_never_written` once a thread
        update["evidence"] = pins
    return cast(FinishUpdate, {**_never_written(state), **update})


_UNWRITTEN_RESULTS = {
    key: QUESTION_DEFAULTS[key] for key in RESULT_KEYS if key in QUESTION_DEFAULTS
}


def _never_written(state: LoopState) -> dict[str, Any]:
    """The result fields no step of the thread has written yet, as a question starts them.

    LangGraph's output leaves out a channel never written, so a served run's result lacked
    ``error`` (and ``grounding``, ``coverage``...) whenever nothing had set it, and a client
    reading ``output["error"]`` failed. Written once a thread, by its first question's end.
    """
    return {key: value for key, value in _UNWRITTEN_RESULTS.items() if key not in state}
