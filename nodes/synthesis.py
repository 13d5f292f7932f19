"""The ``synthesis`` node: one tool-less call that writes an answer when the turn budget ran out.

The writer is, in order: the ``synthesizer(messages, opts) -> str`` function given,
the answer model, the controller. A failure leaves ``answer`` as ``None``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.core import bridge
from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import SYNTHESIS, LoopState, ToolEvent
from arcana_loop.core.text import describe_error
from arcana_loop.nodes import prompts
from arcana_loop.nodes.budget import usage_of
from arcana_loop.nodes.common import (
    emit,
    logger,
    loop_opts,
    render_instruction,
    system_message,
)
from arcana_loop.nodes.conversation import ANSWER_NAME, compact_earlier
from arcana_loop.nodes.conversation import instruction as instruction_message
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.lifecycle import tool_call_event
from arcana_loop.tools.scoping import scope_of

SUMMARY = "Synthesized from {count} chunks"
SYNTHESIS_FAILED = "fallback synthesis failed: {reason}"
SYNTHESIS_EMPTY = "fallback synthesis returned no text"


class SynthesisUpdate(TypedDict, total=False):
    """What the synthesis changes."""

    messages: list[BaseMessage]
    answer: str
    tool_history: list[ToolEvent]
    usage: dict[str, Any]
    error: str


def _prepare(
    deps: LoopDeps, state: LoopState, ctx: LoopContext
) -> tuple[list[BaseMessage], HumanMessage, dict[str, Any]]:
    opts = loop_opts(ctx, state, [], "fallback")
    note = instruction_message(
        render_instruction(
            deps.synthesis_prompt,
            ctx.synthesis_prompt,
            prompts.SYNTHESIS_PROMPT,
            opts,
            "synthesis_prompt",
        )
    )
    conversation = compact_earlier(
        state["messages"], state.get("question_message_id"), scope_of(state)
    )
    return [system_message(deps, ctx, state, opts), *conversation, note], note, opts


def _write(deps: LoopDeps, ctx: LoopContext, sent: list[BaseMessage], opts: dict[str, Any]) -> Any:
    """The synthesizer's text (sync or ``async def``), else the answer model's or the controller's reply."""
    if deps.synthesizer is not None:
        return bridge.call(deps.synthesizer, sent, opts)
    model = deps.answerer(ctx) or deps.controller(ctx)
    return model.invoke(sent, [], opts)


def _written(
    state: LoopState, runtime: Runtime[LoopContext], instruction: HumanMessage, text: Any
) -> SynthesisUpdate:
    if isinstance(text, BaseException):
        # the run ends without an answer; error says why (terminated_by stays max_iterations)
        failed: SynthesisUpdate = {"error": SYNTHESIS_FAILED.format(reason=describe_error(text))}
        logger.warning("%s", failed["error"])
        return failed
    written = (text.text if isinstance(text, AIMessage) else text) or ""
    if not (isinstance(written, str) and written.strip()):
        logger.warning("%s", SYNTHESIS_EMPTY)
        return {"error": SYNTHESIS_EMPTY}
    entry: ToolEvent = {
        "tool": SYNTHESIS,
        "args": {"text": written},
        "iteration": state.get("iterations", 0),
        "summary": SUMMARY.format(count=len(state.get("chunks") or [])),
        "returned_chunk_ids": [],
    }
    emit(runtime, tool_call_event(entry, len(state.get("tool_history") or []) + 1))
    # the reply's id: a streaming client has its tokens under it
    reply_id = text.id if isinstance(text, AIMessage) else None
    # and its metadata, which says how it was made (an extracted answer: `core.sources.answer_kind`)
    metadata = text.response_metadata if isinstance(text, AIMessage) else {}
    closing = AIMessage(content=written, id=reply_id, name=ANSWER_NAME, response_metadata=metadata)
    return {
        "messages": [instruction, closing],
        "answer": written,
        "tool_history": [entry],
        "usage": usage_of("synthesis", text),
    }


def synthesis(
    state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps
) -> SynthesisUpdate:
    """Write the fallback answer from the gathered chunks; a failure leaves it unset and says why in ``error``."""
    sent, instruction, opts = _prepare(deps, state, runtime.context)
    result: Any
    try:
        result = _write(deps, runtime.context, sent, opts)
    except Exception as exc:  # a failed synthesis leaves the answer unset
        result = exc
    return _written(state, runtime, instruction, result)
