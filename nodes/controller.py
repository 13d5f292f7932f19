"""The ``controller`` node: one LLM round-trip that picks the next tool calls.

A turn builds the request (the tools offered, the system prompt, the conversation
as models are sent it: ``nodes.common``), calls the model (its reply is cleaned up at
the model boundary, ``nodes.models``), and reads the reply: tool calls go on to the
``tools`` node, plain text is the answer (or goes back once to search first), and a
failed call ends the run as ``error``. The question was opened by ``start``.
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import BudgetStop, LoopState, TerminatedBy
from arcana_loop.core.text import describe_error
from arcana_loop.nodes.budget import usage_of
from arcana_loop.nodes.common import controller_request, loop_opts, offered_of
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.policy import PolicyView, first_update
from arcana_loop.tools.schemas import controller_tools

EMPTY_REPLY = "the controller replied with neither a tool call nor any text"


class ControllerUpdate(TypedDict, total=False):
    """What the controller changes."""

    messages: list[BaseMessage]
    iterations: int
    terminated_by: TerminatedBy
    answer: str | None
    error: str | None
    usage: dict[str, Any]
    budget_stop: BudgetStop
    search_nudged: bool


def controller(
    state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps
) -> ControllerUpdate:
    """Run one controller turn: build the request, call the model, read its reply."""
    ctx = runtime.context
    turn = state.get("iterations", 0) + 1
    view = PolicyView(state, ctx, turn, offered_of(deps, ctx, state))
    stop = first_update(policy.before_model(view) for policy in deps.policies)
    if stop is not None:
        return cast(ControllerUpdate, stop)
    tools = controller_tools(view.scope, deps.toolset, view.offered)
    opts = loop_opts(ctx, state, tools, "controller")
    try:
        model = deps.controller(ctx)
    except Exception as exc:  # a model that cannot be created fails like a model call
        return {"iterations": turn, "terminated_by": "error", "error": describe_error(exc)}
    sent = controller_request(deps, view, opts, tools)  # a failing prompt function raises
    try:
        reply = model.invoke(sent, tools, opts)
    except Exception as exc:  # the one catch-all: any LLM failure ends the run as "error"
        return {"iterations": turn, "terminated_by": "error", "error": describe_error(exc)}
    update: ControllerUpdate = {
        "messages": [reply],
        "iterations": turn,
        "usage": usage_of("controller", reply),
    }
    if reply.tool_calls or reply.invalid_tool_calls:
        return update
    if not reply.text.strip():  # an empty reply is no answer, and "answered" would hide the failure
        return {**update, "terminated_by": "error", "error": EMPTY_REPLY}
    held = first_update(policy.after_model(view, reply) for policy in deps.policies)
    if held is not None:  # no outcome: a policy keeps the loop going (search first)
        return cast(ControllerUpdate, {**update, **held})
    return {**update, "terminated_by": "answered", "answer": reply.text}
