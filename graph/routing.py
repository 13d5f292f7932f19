"""Where the loop goes after each node: every routing decision of the graph, in one place.

Routers read ``terminated_by`` and whether the controller's last message holds
tool calls. Which optional nodes exist for a run (an answer model, a grounder)
depends on the graph's dependencies and the run's context, so the routers are
made per graph by `make_routers`; each keeps a ``Literal`` return type, which is
what makes LangGraph draw every edge.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, assert_never

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import ensure_config, run_in_executor, set_config_context
from langgraph.runtime import get_runtime

from arcana_loop.core.bridge import caller_loop
from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import ControllerRouteView, OutcomeView, ToolsRouteView
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.tools import registry

AfterStart = Literal["controller", "tools", "finish"]
AfterController = Literal["controller", "tools", "answerer", "synthesis", "ground", "finish"]
AfterTools = Literal["controller", "answerer", "ground", "finish"]
AfterAnswer = Literal["ground", "finish"]
AfterGround = Literal["controller", "finish"]


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


ContextFn = Callable[[], LoopContext]
"""How a router gets the run's context: asked for only by the decisions that read it."""


def _context_in(config: RunnableConfig | None) -> LoopContext:
    """Return the run's context, with the step's config made current so `get_runtime` finds the run."""
    with set_config_context(ensure_config(config)) as context:
        return context.run(_context)


@dataclass(frozen=True)
class Routers:
    """The routing functions of one graph."""

    deps: LoopDeps

    def after_start(self, state: ControllerRouteView, context: ContextFn = _context) -> AfterStart:
        """To the controller, unless the question ended as it opened (nothing stored to search).

        A question carried on (asked again after its process stopped) goes on where it
        stopped: tool calls that never ran go to ``tools``, which answers each of them.
        """
        if state.get("terminated_by") is not None:
            return "finish"
        messages = state.get("messages") or []
        return "tools" if messages and has_tool_calls(messages[-1]) else "controller"

    def after_answer(self, state: OutcomeView, context: ContextFn = _context) -> AfterAnswer:
        """After the answer is settled: ground it when a grounder is configured, else finish."""
        return "ground" if self.deps.has_grounder(context()) else "finish"

    def after_controller(
        self, state: ControllerRouteView, context: ContextFn = _context
    ) -> AfterController:
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
            raise ValueError(
                "the controller ended its turn without tool calls and without an outcome"
            )
        match outcome:
            case "max_iterations":
                if context().fallback_synthesis and state.get("chunks"):
                    return "synthesis"
                return self.after_answer(state, context)
            case "answered":
                if self.deps.has_answerer(context()):
                    return "answerer"
                return self.after_answer(state, context)
            case "error" | "gave_up":
                return self.after_answer(state, context)
            case _:
                assert_never(outcome)

    def after_tools(self, state: ToolsRouteView, context: ContextFn = _context) -> AfterTools:
        """Back to the controller unless a tool ended the run; an answer by a tool may be rewritten first."""
        outcome = state.get("terminated_by")
        if outcome is None:
            return "controller"
        history = state.get("tool_history") or []
        answered_by_tool = (
            outcome == "answered"
            and bool(history)
            and registry.ends_as(history[-1]["tool"]) == "answered"
        )
        if answered_by_tool and self.deps.has_answerer(context()):
            return "answerer"
        return self.after_answer(state, context)

    def after_ground(self, state: OutcomeView, context: ContextFn = _context) -> AfterGround:
        """Finish, unless the answer went back to the controller for a repair."""
        return "controller" if state.get("terminated_by") is None else "finish"


class Route(RunnableLambda[Any, Any]):
    """A router as a conditional edge that is no traced run of its own.

    LangGraph wraps a plain function given to ``add_conditional_edges`` in a traced
    runnable, so every routing decision showed up in LangSmith as a run of its own
    (``after_controller``, ``after_tools``...) beside the node that made it. A
    `RunnableLambda` keeps what LangGraph reads from the function (its ``Literal``
    return type draws the edges, its first parameter's type is the state view it
    reads); calling the function directly, without a callback run, keeps it out of traces.
    """

    def __init__(self, router: Callable[..., Any]) -> None:  # (state, ContextFn) -> destination
        super().__init__(router)
        self.router = router

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Call the router; the run's context is looked up only when the decision reads it.

        Most decisions (tool calls go to ``tools``, a turn without an outcome goes back to
        the controller) read only the state. The ones that read the run's options make the
        step's config current with langchain-core's `set_config_context`, in a copy of the
        context, the way a runnable's own call does, but start no run: the decision is not
        traced. Making it current for every decision cost 1.0 M instructions a loop
        (`bench.loop_instructions`), most of what the routers cost.
        """
        return self.router(input, partial(_context_in, config))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Call the router (a cheap, synchronous decision) the same way."""
        return self.invoke(input, config)


class Node(RunnableLambda[Any, Any]):
    """A node: one function of the state and the run's `Runtime`, run untraced inside the node's own traced task.

    LangGraph runs each node as a traced task; a node given as a plain function is
    run inside it without a second run of its own, and so is this one. The body is
    synchronous (see `core.bridge`): an async caller runs it in a worker thread, with
    the caller's event loop recorded for the dependencies that are ``async def``.
    """

    def __init__(self, name: str, body: Callable[[Any, Any], Any]) -> None:
        super().__init__(body, name=name)
        self.body = body

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the body with the run's runtime (LangGraph's public accessor)."""
        runtime = get_runtime(LoopContext)
        given: object = runtime.context  # None for a graph invoked without context=
        if given is None:  # which runs on the defaults
            runtime = runtime.override(context=LoopContext())
        return self.body(input, runtime)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the body in a worker thread, so the caller's event loop stays free."""
        with caller_loop(asyncio.get_running_loop()):
            return await run_in_executor(config, self.invoke, input)

    # LangGraph streams a node (``astream_events``, the server's ``events`` mode) through
    # these; `RunnableLambda`'s own would call the body without the runtime. A node's
    # input is one state, whole: the last chunk the stream gives.
    def transform(
        self, input: Iterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """Run the body once on the state the stream gives, yielding its update."""
        states = list(input)
        yield self.invoke(states[-1] if states else None, config)

    async def atransform(
        self, input: AsyncIterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Run the body once (in a worker thread) on the state the stream gives, yielding its update."""
        states = [state async for state in input]
        yield await self.ainvoke(states[-1] if states else None, config)
