"""Tool execution: what each tool call of a controller turn does.

The error policy lives here. Nothing a controller sends crashes the run: a bad
call becomes a tool result that says what was wrong, and the loop goes on. Calls
are first *planned* (pure: arguments checked by their tool, scope resolved,
terminating call found), then *run* (the only I/O: searches and LangChain tools, sync
or async), then *rendered* by their tools, and the ``tools`` node folds the outcomes
into one state update. No tool is named here: each is asked through the registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.tools import BaseTool

from arcana_loop.tools import registry
from arcana_loop.tools.arguments import REFUSED_MARK
from arcana_loop.tools.base import CallOutcome, CustomCall, LoopTool, Planned, RenderView, Turn
from arcana_loop.tools.schemas import offered_parameters

UNKNOWN_TOOL = "Unknown tool: {name}"
INVALID_ARGUMENTS = "Tool error: the arguments of {name} are not valid JSON ({reason})"
REFUSED_ARGUMENTS = (
    "Tool error: the call to {name} was not run: {reason}. Send smaller, flatter arguments."
)
SKIPPED_AFTER_END = "Skipped: the run ended at an earlier tool call in this turn."
SKIPPED_TOO_MANY = "Skipped: more than {limit} tool calls in one turn."


def _offered_only(
    tool: LoopTool, args: dict[str, Any], turn: Turn
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Split a built-in tool's arguments into those its schema offers and the names of the others.

    A model may send an argument the schema does not have (a ``collection`` in an
    unrestricted or locked run); it is never used, so the schema alone says what a call can do.
    """
    offered = offered_parameters(tool, turn.scope)
    ignored = tuple(sorted(k for k in args if k not in offered))
    if not ignored:
        return args, ()
    return {k: v for k, v in args.items() if k in offered}, ignored


def _plan_builtin(tool: LoopTool, call_id: str, args: dict[str, Any], turn: Turn) -> Planned:
    """Plan a call of a built-in tool on its offered arguments, recording the ignored ones."""
    used, ignored = _offered_only(tool, args, turn)
    step = tool.plan(call_id, used, turn)
    # the history keeps the arguments as sent; what was ignored is listed beside them
    return replace(step, args=args, ignored_args=ignored) if ignored else step


def _invalid(call: Mapping[str, Any], ended: bool) -> CallOutcome:
    name = str(call.get("name") or "unknown")
    error = str(call.get("error") or "unparseable")
    if error.startswith(REFUSED_MARK):
        text = REFUSED_ARGUMENTS.format(name=name, reason=error.removeprefix(REFUSED_MARK))
    else:
        text = INVALID_ARGUMENTS.format(name=name, reason=error)
    raw = call.get("args")
    return CallOutcome(
        str(call["id"]), name, {"raw_arguments": raw}, text, text, recorded=not ended
    )


def plan_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    invalid_calls: Sequence[Mapping[str, Any]],
    *,
    turn: Turn,
    custom_tools: Mapping[str, BaseTool],
    max_calls: int,
    builtins: frozenset[str] = frozenset(),
    settled: Mapping[str, CallOutcome] | None = None,
) -> list[Planned]:
    """Plan a turn's tool calls in order, stopping execution at the first terminating call.

    Every call gets an entry (so every call gets a tool message); calls after a
    terminating one, and calls beyond ``max_calls``, are planned as skipped. A custom
    tool runs as such; a built-in tool runs only when it is among ``builtins``, the ones
    offered. ``settled``: outcomes the policies gave calls instead (by call id).
    """
    settled = settled or {}
    planned: list[Planned] = []
    ended = False
    for index, call in enumerate(tool_calls):
        call_id, name = str(call["id"]), str(call["name"])
        args = dict(call.get("args") or {})
        if ended or index >= max_calls:
            content = SKIPPED_AFTER_END if ended else SKIPPED_TOO_MANY.format(limit=max_calls)
            planned.append(CallOutcome(call_id, name, args, content, content, recorded=False))
            continue
        tool = registry.get(name) if name in builtins else None
        step: Planned
        if call_id in settled:
            step = settled[call_id]
        elif name in custom_tools:
            step = CustomCall(call_id, args, custom_tools[name])
        elif tool is not None:
            step = _plan_builtin(tool, call_id, args, turn)
        else:
            text = UNKNOWN_TOOL.format(name=name)
            step = CallOutcome(call_id, name, args, text, text)
        ended = isinstance(step, CallOutcome) and step.terminal is not None
        planned.append(step)
    planned.extend(_invalid(call, ended) for call in invalid_calls)
    return planned


def render_turn(outcomes: Sequence[CallOutcome], view: RenderView) -> list[CallOutcome]:
    """Let each built-in tool write the text of its results that depend on the turn, in call order."""
    rendered = list(outcomes)
    for tool in registry.TOOLS:
        rendered = tool.render(rendered, view)
    return rendered
