"""Run start/stop and per-tool-call events, streamed live through ``stream_mode="custom"``.

A run has no single last node (it may end after the controller, the tools, the
answerer, the synthesis or the grounding), so each node asks the graph's own
router where it goes next and emits the stop event when the answer is "the end".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.graph import END
from langgraph.runtime import Runtime

from arcana_loop.graph.context import LoopContext
from arcana_loop.graph.conversation import closed
from arcana_loop.graph.deps import LoopDeps
from arcana_loop.graph.state import ToolEvent
from arcana_loop.nodes.common import emit, offered_tools, scope_of

LOOP_START = "loop_start"
LOOP_STOP = "loop_stop"
LOOP_EXCEPTION = "loop_exception"
TOOL_CALL = "tool_call"


def start_event(state: Mapping[str, Any], ctx: LoopContext, tool_count: int) -> dict[str, Any]:
    """Return the run's start event."""
    return {"event": LOOP_START, "question": state["question"], "max_iterations": ctx.max_iterations, "tool_count": tool_count}


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


def exception_event(question: str, max_iterations: int, iterations: int, exc: BaseException) -> dict[str, Any]:
    """Return the event of a run that raised: the start keys, the turns run, and the error's type and message."""
    return {
        "event": LOOP_EXCEPTION,
        "question": question,
        "max_iterations": max_iterations,
        "iterations": iterations,
        "error_type": type(exc).__name__,
        "error": " ".join(str(exc).split()),
    }


def emit_if_final(deps: LoopDeps, runtime: Runtime[LoopContext], view: Any, next_node: str) -> bool:
    """Emit the stop event when the node that produced ``view`` is the run's last; return whether it is."""
    if next_node == END:
        tool_count = len(offered_tools(deps, scope_of(view), runtime.context))
        emit(runtime, stop_event(view, runtime.context, tool_count))
        return True
    return False


def close_if_final(deps: LoopDeps, runtime: Runtime[LoopContext], update: dict[str, Any], view: Any, next_node: str) -> Any:
    """Emit the stop event and end the conversation's question with its answer message, when this node is the last.

    ``view`` is the state as it will be after ``update``, its messages ending with the
    conversation's last message; the answer message is added to ``update``'s messages.
    """
    if emit_if_final(deps, runtime, view, next_node):
        update["messages"] = closed(update.get("messages") or [], view)
    return update
