"""The ``controller`` node: one LLM round-trip that picks the next tool calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    InvalidToolCall,
    SystemMessage,
)
from langchain_core.messages.tool import invalid_tool_call
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.graph import prompts
from arcana_loop.graph.budget import exhausted, usage_of
from arcana_loop.graph.context import LoopContext
from arcana_loop.graph.conversation import compact_earlier, fresh_state, fresh_view, new_question
from arcana_loop.graph.deps import LoopDeps
from arcana_loop.graph.models import ModelCaller
from arcana_loop.graph.policy import should_send_back
from arcana_loop.graph.state import BudgetStop, LoopState, TerminatedBy
from arcana_loop.graph.text import check_question, describe_error
from arcana_loop.nodes.common import (
    emit,
    loop_opts,
    offered_tools,
    scope_of,
    system_message,
)
from arcana_loop.nodes.lifecycle import start_event
from arcana_loop.tools.execute import (
    GIVE_UP_ANSWER,
    KEPT_ARGUMENT_CHARS,
    REFUSED_MARK,
    kept_arguments,
    oversized_arguments,
)
from arcana_loop.tools.schemas import ToolSchema

EMPTY_REPLY = "the controller replied with neither a tool call nor any text"


class ControllerUpdate(TypedDict, total=False):
    """What the controller changes."""

    messages: list[BaseMessage]
    iterations: int
    terminated_by: TerminatedBy
    answer: str | None
    error: str | None
    usage: dict[str, Any]
    started_at: float
    budget_stop: BudgetStop
    options: dict[str, Any]
    search_nudged: bool


@dataclass(frozen=True, slots=True)
class Turn:
    """One prepared controller call."""

    model: ModelCaller
    sent: list[BaseMessage]
    tools: list[ToolSchema]
    opts: dict[str, Any]


def normalize_reply(reply: AIMessage, iteration: int) -> AIMessage:
    """Give every tool call a unique, non-empty id, so each can be answered by a tool message."""
    seen: set[str] = set()
    fixed: list[dict[str, Any]] = []
    for index, call in enumerate([*reply.tool_calls, *reply.invalid_tool_calls]):
        call_id = call.get("id") or f"call_{iteration}_{index}"
        while call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        fixed.append({**call, "id": call_id})
    originals = [c.get("id") for c in [*reply.tool_calls, *reply.invalid_tool_calls]]
    if originals == [c["id"] for c in fixed]:
        return reply
    count = len(reply.tool_calls)
    return reply.model_copy(
        update={"tool_calls": fixed[:count], "invalid_tool_calls": fixed[count:]}
    )


def bound_arguments(reply: AIMessage) -> AIMessage:
    """Refuse tool calls whose arguments are too deep or too large to keep, keeping a bounded copy.

    Such a call becomes an invalid call (answered with a tool error, never run) whose
    arguments are bounded JSON text; the raw calls in ``additional_kwargs`` are bounded
    too. Kept whole, ~250 levels of nesting cannot be checkpointed and megabytes of
    arguments would be stored and sent again every turn. Ids must already be unique.
    """
    kept, refused = [], []
    for call in reply.tool_calls:
        reason = oversized_arguments(call["args"])
        if reason is None:
            kept.append(call)
        else:
            refused.append(
                invalid_tool_call(
                    name=call["name"],
                    args=kept_arguments(call["args"]),
                    id=call["id"],
                    error=REFUSED_MARK + reason,
                )
            )
    invalid = [_bounded_invalid(call) for call in reply.invalid_tool_calls]
    changed = [
        call
        for call, original in zip(invalid, reply.invalid_tool_calls, strict=True)
        if call is not original
    ]
    if not refused and not changed:
        return reply
    bounded_ids = {call["id"] for call in [*refused, *changed]}
    update: dict[str, Any] = {"tool_calls": kept, "invalid_tool_calls": [*refused, *invalid]}
    raw = reply.additional_kwargs.get("tool_calls")
    if isinstance(raw, list):
        update["additional_kwargs"] = {
            **reply.additional_kwargs,
            "tool_calls": [_bounded_raw(c, bounded_ids) for c in raw],
        }
    return reply.model_copy(update=update)


def _bounded_invalid(call: InvalidToolCall) -> InvalidToolCall:
    """An invalid call with its raw arguments and error cut to a bound (the same call when within it)."""
    args, error = call.get("args"), call.get("error")
    long_args = isinstance(args, str) and len(args) > KEPT_ARGUMENT_CHARS
    long_error = isinstance(error, str) and len(error) > KEPT_ARGUMENT_CHARS
    if not (long_args or long_error):
        return call
    return {
        **call,
        "args": kept_arguments(args) if long_args else args,
        "error": kept_arguments(error) if long_error else error,
    }


def _bounded_raw(call: Any, ids: set[str | None]) -> Any:
    """A provider's raw tool call, its arguments text bounded when the call was bounded."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("id") not in ids:
        return call
    return {
        **call,
        "function": {**function, "arguments": kept_arguments(function.get("arguments") or "")},
    }


def sent_back_last_turn(state: LoopState) -> bool:
    """Whether the last turn's plain-text reply was sent back to search first (it is the last message)."""
    messages = state.get("messages") or []
    return (
        bool(state.get("search_nudged"))
        and bool(messages)
        and isinstance(messages[-1], AIMessage)
        and not (messages[-1].tool_calls or messages[-1].invalid_tool_calls)
    )


def check_input(state: LoopState) -> None:
    """Reject a run input that `run` would have refused (server clients send any JSON).

    Raises:
        TypeError, ValueError: for a bad question, or a malformed collection.
    """
    check_question(state["question"])
    scope_of(state)


def open_question(state: LoopState) -> tuple[LoopState, dict[str, Any]]:
    """Start a new question when the run brings one (see ``graph.conversation``).

    Returns:
        The state as this turn reads it, and the writes that start the question
        (empty when the run continues the current question).

    Raises:
        TypeError, ValueError: for a missing or bad question, or a malformed collection.
    """
    asked = new_question(state)
    if asked is None:
        return state, {}
    writes = fresh_state(asked, state)
    view: Any = fresh_view(state, writes)
    check_input(view)
    return view, writes


def _merged(opening: dict[str, Any], update: ControllerUpdate) -> ControllerUpdate:
    """The turn's update on top of the writes that opened a question (messages and usage added to them)."""
    if not opening:
        return update
    merged: Any = {**opening, **update}
    merged["messages"] = [*opening["messages"], *update.get("messages", [])]
    merged["usage"] = {**opening["usage"], **update.get("usage", {})}
    return cast(ControllerUpdate, merged)


def _prepare(
    deps: LoopDeps, state: LoopState, runtime: Runtime[LoopContext], opening: dict[str, Any]
) -> Turn | ControllerUpdate:
    ctx = runtime.context
    iterations = state.get("iterations", 0)
    stop = exhausted(state, ctx)
    if stop is not None:
        return {"terminated_by": "max_iterations", "budget_stop": stop}
    tools = offered_tools(deps, scope_of(state), ctx)
    if opening and (reason := deps.unsearchable(scope_of(state))) is not None:
        # before any model call: a question about nothing stored is no question for a model
        return {"terminated_by": "gave_up", "answer": GIVE_UP_ANSWER.format(reason=reason)}
    opts = loop_opts(ctx, state, tools, "controller")
    if opening:
        emit(runtime, start_event(state, ctx, len(tools)))
    try:
        model = deps.controller(ctx)
    except Exception as exc:  # a model that cannot be created fails like a model call
        return {
            "iterations": iterations + 1,
            "terminated_by": "error",
            "error": describe_error(exc),
        }
    system = system_message(deps, ctx, state, opts)
    if sent_back_last_turn(state):
        # a note in the system prompt, not a forged user turn: the conversation stays the user's
        system = SystemMessage(content=system.text + prompts.SEARCH_FIRST_NOTE)
    sent: list[BaseMessage] = [
        system,
        *compact_earlier(
            state.get("messages", []), state.get("question_message_id"), scope_of(state)
        ),
    ]
    return Turn(model, sent, tools, opts)


def _finish(
    state: LoopState, ctx: LoopContext, turn: Turn, reply: AIMessage | BaseException
) -> ControllerUpdate:
    iterations = state.get("iterations", 0)
    if isinstance(reply, BaseException):
        return {
            "iterations": iterations + 1,
            "terminated_by": "error",
            "error": describe_error(reply),
        }
    reply = bound_arguments(normalize_reply(reply, iterations))
    update: ControllerUpdate = {
        "messages": [reply],
        "iterations": iterations + 1,
        "usage": usage_of("controller", reply),
    }
    if not (reply.tool_calls or reply.invalid_tool_calls):
        text = reply.text
        if not text.strip():  # an empty reply is no answer, and "answered" would hide the failure
            update["terminated_by"] = "error"
            update["error"] = EMPTY_REPLY
            return update
        if should_send_back(state, ctx, iterations + 1, turn.opts["tools"]):
            update["search_nudged"] = True  # no outcome: the next turn is told to search first
            return update
        update["terminated_by"] = "answered"
        update["answer"] = text
    return update


def _with_options(
    state: LoopState,
    runtime: Runtime[LoopContext],
    opening: dict[str, Any],
    update: ControllerUpdate,
) -> ControllerUpdate:
    """The turn's update on top of the writes that opened a question, with the run's options when they changed."""
    update = _merged(opening, update)
    if "options" not in state or opening:
        # the context is not checkpointed; resumes, traces and recorded replays need it. `run`
        # sends it with the input; a served run's input may lack it or carry anything, and each
        # question of a conversation may run with other options
        options = runtime.context.as_options()
        if state.get("options") != options:
            update["options"] = options
    return update


def controller(
    state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps
) -> ControllerUpdate:
    """Run one controller turn (the first of a new question when the run brings one)."""
    state, opening = open_question(state)
    turn = _prepare(deps, state, runtime, opening)
    if not isinstance(turn, Turn):  # the turn ended before a model call (a spent budget, no model)
        return _with_options(state, runtime, opening, turn)
    try:
        reply: AIMessage | BaseException = turn.model.invoke(turn.sent, turn.tools, turn.opts)
    except Exception as exc:  # the one catch-all: any LLM failure ends the run as "error"
        reply = exc
    return _with_options(state, runtime, opening, _finish(state, runtime.context, turn, reply))
