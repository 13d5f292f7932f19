"""Run start/stop and per-tool-call events, streamed live through ``stream_mode="custom"``.

The ``start`` node sends the start event when a question opens, the tools and synthesis
nodes one event per history entry, and the ``finish`` node, where every ending
routes, the stop event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import StaleEvidence, ToolEvent

LOOP_START = "loop_start"
LOOP_STOP = "loop_stop"
LOOP_EXCEPTION = "loop_exception"
TOOL_CALL = "tool_call"


def start_event(
    question: str, ctx: LoopContext, tool_count: int, stale: StaleEvidence | None = None
) -> dict[str, Any]:
    """Return the run's start event; a follow-up whose earlier evidence changed carries that too."""
    event: dict[str, Any] = {
        "event": LOOP_START,
        "question": question,
        "max_iterations": ctx.max_iterations,
        "tool_count": tool_count,
    }
    if stale is not None:  # said before the answer, as it streams
        event["stale_evidence"] = stale
    return event


def tool_call_event(entry: ToolEvent, history_size: int) -> dict[str, Any]:
    """Return the event of one history entry."""
    return {"event": TOOL_CALL, **entry, "history_size": history_size}


def stop_event(view: Mapping[str, Any], ctx: LoopContext, tool_count: int) -> dict[str, Any]:
    """Return the run's stop event: the start keys plus how the run ended."""
    return {
        "event": LOOP_STOP,
        "question": view["question"],
        "max_iterations": ctx.max_iterations,
        "tool_count": tool_count,
        "iterations": view.get("iterations", 0),
        "terminated_by": view.get("terminated_by"),
    }


def exception_event(
    question: str, max_iterations: int, iterations: int, exc: BaseException
) -> dict[str, Any]:
    """Return the event of a run that raised: the start keys, the turns run, and the error's type and message."""
    return {
        "event": LOOP_EXCEPTION,
        "question": question,
        "max_iterations": max_iterations,
        "iterations": iterations,
        "error_type": type(exc).__name__,
        "error": " ".join(str(exc).split()),
    }
