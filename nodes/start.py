"""The ``start`` node: where every run enters, and the one place a question opens (the mirror of ``finish``).

A run brings a new question (a ``question``, or a chat client's human message) or
continues an interrupted one (see ``nodes.conversation``). A new question is checked,
its per-question fields start afresh (a follow-up is told when the previous answer's
evidence has changed since, `nodes.pins`), and the run's options are recorded; then,
before any model call, a scope that holds nothing to search ends it as a give-up that names
what is missing. Everything here is an ordinary state write, so the controller reads
the opened question as LangGraph's reducers made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopState, QuestionSetup, StaleEvidence, TerminatedBy
from arcana_loop.core.text import check_question
from arcana_loop.nodes import prompts
from arcana_loop.nodes.common import emit, offered_names
from arcana_loop.nodes.conversation import fresh_state, instruction, new_question
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.ground import check_grounder
from arcana_loop.nodes.lifecycle import start_event
from arcana_loop.nodes.pins import stale_evidence
from arcana_loop.tools.give_up import GIVE_UP_ANSWER
from arcana_loop.tools.scoping import normalize_scope
from arcana_loop.tools.search import check_search_opts


class StartUpdate(TypedDict, total=False):
    """What opening a question changes (`nodes.conversation.fresh_state` writes the per-question fields)."""

    question: str
    question_message_id: str
    question_index: int
    messages: list[BaseMessage]
    usage: dict[str, Any]
    started_at: float
    terminated_by: TerminatedBy | None
    answer: str | None
    options: dict[str, Any]
    stale_evidence: StaleEvidence | None
    question_setup: QuestionSetup


def _told_of_changes(state: LoopState, update: Mapping[str, Any], deps: LoopDeps) -> dict[str, Any]:
    """When the previous answer's evidence changed since: the note, to the output and to the controller."""
    stale = stale_evidence(state.get("evidence") or [], deps.versions())
    if stale is None:
        return {}
    told = instruction(prompts.STALE_EVIDENCE_INSTRUCTION.format(note=stale["note"]))
    return {"stale_evidence": stale, "messages": [*update["messages"], told]}


def start(state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps) -> StartUpdate:
    """Open the run's question, or let the run continue an interrupted one.

    Raises:
        TypeError, ValueError: for a missing or bad question, or a malformed collection.
    """
    ctx = runtime.context
    update: dict[str, Any] = {}
    # the question's one scope check: raises on a malformed collection
    scope = normalize_scope(state.get("collection"))
    offered = offered_names(deps, ctx, scope)
    asked = new_question(state, scope)
    if asked is not None:
        check_question(asked.text)
        # a served run's options come as its context: checked before the first turn
        check_search_opts(deps.search_fn, ctx.search_opts)
        check_grounder(deps, ctx)
        update = fresh_state(asked, state)
        update.update(_told_of_changes(state, update, deps))
        reason = deps.unsearchable(scope)
        if reason is not None:
            # a question about nothing stored is no question for a model
            update.update(terminated_by="gave_up", answer=GIVE_UP_ANSWER.format(reason=reason))
        else:
            emit(runtime, start_event(asked.text, ctx, len(offered), update.get("stale_evidence")))
    # resolved once here, for every node of the question (each run may bring other options)
    setup: QuestionSetup = {"scope": scope.as_data(), "offered": offered}
    if state.get("question_setup") != setup:
        update["question_setup"] = setup
    # LangGraph does not checkpoint the context; resumes, traces and recorded replays need it.
    # `run` sends it with the input; a served run's input holds none, and every run (each
    # question of a conversation, a question carried on) may come with other options
    options = ctx.as_options()
    if state.get("options") != options:
        update["options"] = options
    return cast(StartUpdate, update)
