"""Where the loop goes after each node: every routing decision of the graph, in one place.

Routers read ``terminated_by`` and whether the controller's last message holds
tool calls. Which optional nodes exist for a run (an answer model, a grounder)
depends on the graph's dependencies and the run's context, so the routers are
made per graph by `make_routers`; each keeps a ``Literal`` return type, which is
what makes LangGraph draw every edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import ensure_config, set_config_context
from langgraph.runtime import get_runtime

from arcana_loop.graph.context import LoopContext
from arcana_loop.graph.deps import LoopDeps
from arcana_loop.graph.state import ControllerRouteView, OutcomeView, ToolsRouteView
from arcana_loop.tools.schemas import ANSWER

AfterController = Literal["controller", "tools", "answerer", "synthesis", "ground", "__end__"]
AfterTools = Literal["controller", "answerer", "ground", "__end__"]
AfterFinal = Literal["ground", "__end__"]
AfterGround = Literal["controller", "__end__"]


def has_tool_calls(message: object) -> bool:
    """Whether a message is an assistant message that asks for tools."""
    return isinstance(message, AIMessage) and bool(message.tool_calls or message.invalid_tool_calls)


def _context() -> LoopContext:
    """Return the run's context; a state edit outside a run (``update_state``) has none, so defaults apply."""
    try:
        runtime = get_runtime(LoopContext)
    except RuntimeError:  # called outside any runnable
        return LoopContext()
    context = getattr(runtime, "context", None)
    return context if isinstance(context, LoopContext) else LoopContext()


@dataclass(frozen=True)
class Routers:
    """The routing functions of one graph."""

    deps: LoopDeps

    def finish(self, state: OutcomeView) -> AfterFinal:
        """After the answer is settled: ground it when a grounder is configured, else stop."""
        return "ground" if self.deps.has_grounder(_context()) else "__end__"

    def after_controller(self, state: ControllerRouteView) -> AfterController:
        """Tool calls go to ``tools``; a spent budget to ``synthesis``; an answer or error finishes.

        A plain-text answer is rewritten by the answer model when one is set (as an ``answer``
        call is), or goes back to the controller when it came before any search (``require_search``).
        """
        outcome = state.get("terminated_by")
        if outcome is None:
            messages = state.get("messages") or []
            if messages and has_tool_calls(messages[-1]):
                return "tools"
            if state.get("search_nudged"):
                return "controller"
            raise ValueError("the controller ended its turn without tool calls and without an outcome")
        match outcome:
            case "max_iterations":
                if _context().fallback_synthesis and state.get("chunks"):
                    return "synthesis"
                return self.finish(state)
            case "answered":
                return "answerer" if self.deps.has_answerer(_context()) else self.finish(state)
            case "error" | "gave_up":
                return self.finish(state)
            case _:
                assert_never(outcome)

    def after_tools(self, state: ToolsRouteView) -> AfterTools:
        """Back to the controller unless a tool ended the run; an ``answer`` may be rewritten first."""
        outcome = state.get("terminated_by")
        if outcome is None:
            return "controller"
        history = state.get("tool_history") or []
        answered_by_tool = outcome == "answered" and bool(history) and history[-1]["tool"] == ANSWER
        if answered_by_tool and self.deps.has_answerer(_context()):
            return "answerer"
        return self.finish(state)

    def after_ground(self, state: OutcomeView) -> AfterGround:
        """Stop, unless the answer went back to the controller for a repair."""
        return "controller" if state.get("terminated_by") is None else "__end__"


class Route(RunnableLambda[Any, Any]):
    """A router as a conditional edge that is no traced run of its own.

    LangGraph wraps a plain function given to ``add_conditional_edges`` in a traced
    runnable, so every routing decision showed up in LangSmith as a run of its own
    (``after_controller``, ``after_tools``...) beside the node that made it. A
    `RunnableLambda` keeps what LangGraph reads from the function (its ``Literal``
    return type draws the edges, its first parameter's type is the state view it
    reads); calling the function directly, without a callback run, keeps it out of traces.
    """

    def __init__(self, router: Callable[[Any], Any]) -> None:
        super().__init__(router)
        self.router = router

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Call the router with the step's config as the current one, so `get_runtime` finds the run."""
        with set_config_context(ensure_config(config)) as context:
            return context.run(self.router, input)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Call the router (a cheap, synchronous decision) the same way."""
        return self.invoke(input, config)


class Node(RunnableLambda[Any, Any]):
    """A node with one sync and one async body, run untraced inside the node's own traced task.

    LangGraph runs each node as a traced task; a node given as a plain function is
    run inside it without a second run of its own, and so is this one. Bodies take
    the state and the run's `Runtime` (from `get_runtime`, LangGraph's public accessor).
    """

    def __init__(self, name: str, sync_body: Callable[[Any, Any], Any], async_body: Callable[[Any, Any], Any]) -> None:
        super().__init__(sync_body, afunc=async_body, name=name)
        self.sync_body, self.async_body = sync_body, async_body

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the sync body with the run's runtime."""
        return self.sync_body(input, get_runtime(LoopContext))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the async body with the run's runtime."""
        return await self.async_body(input, get_runtime(LoopContext))
