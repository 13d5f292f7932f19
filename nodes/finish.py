"""The ``finish`` node: where every ending of a question routes, and the one place it ends.

It adds the question's closing message (its answer, or why it has none) to the
conversation and sends the run's stop event.
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.graph.context import LoopContext
from arcana_loop.graph.conversation import closing_message
from arcana_loop.graph.deps import LoopDeps
from arcana_loop.graph.state import LoopState
from arcana_loop.nodes.common import emit, offered_tools, scope_of
from arcana_loop.nodes.lifecycle import stop_event

NAME = "finish"


class FinishUpdate(TypedDict, total=False):
    """What finishing changes."""

    messages: list[BaseMessage]


def finish(state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps) -> FinishUpdate:
    """End the question: its closing message on the conversation, then the stop event."""
    tool_count = len(offered_tools(deps, scope_of(state), runtime.context))
    emit(runtime, stop_event(state, runtime.context, tool_count))
    closing = closing_message(state)
    return {} if closing is None else {"messages": [closing]}
