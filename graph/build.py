"""Graph assembly: the nodes, the conditional edges between them, and the served graphs.

Every run enters at ``start``, which opens the question (or carries on an interrupted
one where it stopped). ``controller`` calls the
model; tool calls go to ``tools``, which loops back until a tool ends the run. Then,
as configured: ``answerer`` rewrites an ``answer``, ``synthesis`` writes one when the
turn budget ran out, and ``ground`` scores it. Every ending goes through ``finish``,
which closes the question.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import (
    AnswerOutput,
    LoopInput,
    LoopOutput,
    LoopState,
    RunInput,
    add_usage,
)
from arcana_loop.graph.routing import Node, Route, Routers
from arcana_loop.nodes.answerer import answerer
from arcana_loop.nodes.budget import BudgetLedger
from arcana_loop.nodes.controller import controller
from arcana_loop.nodes.deps import LoopDeps, PromptFn, SynthesizerFn
from arcana_loop.nodes.duplicates import DuplicateSearches
from arcana_loop.nodes.evidence import EvidenceRepair
from arcana_loop.nodes.finish import finish
from arcana_loop.nodes.ground import ground
from arcana_loop.nodes.models import ModelSpec, resolve_model
from arcana_loop.nodes.policy import Policy
from arcana_loop.nodes.search_first import SearchFirst
from arcana_loop.nodes.start import start
from arcana_loop.nodes.synthesis import synthesis
from arcana_loop.nodes.tools import tools
from arcana_loop.tools.base import SearchFn
from arcana_loop.tools.schemas import resolve_tools

GRAPH_NAME = "arcana-loop"
GRAPH_DESCRIPTION = (
    "Answer a question from the knowledge base: an agent searches it, reads what it finds and answers. "
    "Input: question, or chat messages whose last human message is the question; a thread keeps the conversation, so follow-ups work (optionally collection, a name or a list of names to search in). "
    "Output: answer first, then terminated_by (answered, gave_up, max_iterations or error), error, "
    "coverage, the searches made (tool_history) and the chunks the answer rests on."
)
"""What the served graph does, as its assistant's description (``langgraph.json``) shows it, e.g. to MCP clients."""
ANSWER_GRAPH_NAME = "arcana-loop-answer"
ANSWER_GRAPH_DESCRIPTION = (
    "Answer a question from the knowledge base, briefly: the same agent as arcana-loop, whose "
    "output is only the answer, terminated_by, error and the sources it cites (title, file, "
    "section, pages). Input: question (optionally collection, a name or a list of names)."
)
"""The served brief graph's description: for MCP clients and others that show a result as text."""

LoopGraph = StateGraph[LoopState, LoopContext, LoopInput, LoopOutput]

POLICIES: tuple[Policy, ...] = (
    BudgetLedger(),
    DuplicateSearches(),
    SearchFirst(),
    EvidenceRepair(),
)
"""The loop's rules, each one object with hooks (``nodes/policy.py``); the nodes call every one's hooks."""


def _with_seconds(name: str, update: Any, seconds: float) -> Any:
    """Add the node's wall time to its usage write (and to the thread's usage, when the node writes it)."""
    timing = {"node_seconds": {name: seconds}}
    if not isinstance(update, dict):
        return update
    usage = update.get("usage")
    timed = {**update, "usage": add_usage(usage, timing) if usage else timing}
    if "thread_usage" in update:
        timed["thread_usage"] = add_usage(update["thread_usage"], timing)
    return timed


def _timed(
    body: Callable[..., Any], deps: LoopDeps
) -> Callable[[LoopState, Runtime[LoopContext]], Any]:
    """Close a node's function over the graph's dependencies, adding its wall time to ``usage["node_seconds"]``."""

    def timed(state: LoopState, runtime: Runtime[LoopContext]) -> Any:
        started = time.perf_counter()
        update = body(state, runtime, deps=deps)
        return _with_seconds(body.__name__, update, time.perf_counter() - started)

    return timed


def _prompt_fn(value: str | Callable[..., str] | None, name: str) -> PromptFn | None:
    """Normalise a prompt given as a function of the options (strings travel in the context)."""
    if value is None or isinstance(value, str):
        return None
    if not callable(value):
        raise TypeError(f"{name} must be a string or a function of the options")
    try:
        takes_nothing = not inspect.signature(value).parameters
    except (TypeError, ValueError):
        takes_nothing = False
    if takes_nothing:
        zero = value
        return lambda _opts: zero()
    return value


def make_deps(
    *,
    controller_llm: ModelSpec | None = None,
    answer_llm: ModelSpec | None = None,
    search_fn: SearchFn | None = None,
    tools: Sequence[BaseTool] | None = None,
    synthesizer: SynthesizerFn | None = None,
    grounder: Any = None,
    system_prompt: str | Callable[..., str] | None = None,
    answer_prompt: str | Callable[..., str] | None = None,
    synthesis_prompt: str | Callable[..., str] | None = None,
) -> LoopDeps:
    """Validate and resolve the factory dependencies of a graph.

    ``tools``: a list holding any of the default tools (``DEFAULT_TOOLS``) replaces them;
    a list of custom tools only is added to them (see ``tools.schemas.resolve_tools``).
    """
    if grounder is not None:
        from arcana_loop.grounding.resolve import resolve_grounder

        grounder = resolve_grounder(grounder)
    if search_fn is not None and not callable(search_fn):
        raise TypeError(
            "search_fn must be callable: search_fn(query, collection=..., limit=..., **search_opts)"
        )
    if synthesizer is not None and not callable(synthesizer):
        raise TypeError("synthesizer must be a function (messages, opts) -> str")
    toolset = resolve_tools(tools)  # checks the tools before their names are read
    return LoopDeps(
        controller_llm=resolve_model(controller_llm) if controller_llm is not None else None,
        answer_llm=resolve_model(answer_llm) if answer_llm is not None else None,
        search_fn=search_fn,
        toolset=toolset,
        synthesizer=synthesizer,
        grounder=grounder,
        system_prompt=_prompt_fn(system_prompt, "system_prompt"),
        answer_prompt=_prompt_fn(answer_prompt, "answer_prompt"),
        synthesis_prompt=_prompt_fn(synthesis_prompt, "synthesis_prompt"),
        policies=POLICIES,
    )


def build_graph(
    deps: LoopDeps | None = None, *, run_input: bool = False, brief: bool = False, **kwargs: Any
) -> LoopGraph:
    """Build the loop graph (uncompiled, so callers choose the checkpointer).

    Args:
        deps: resolved dependencies; or pass `make_deps` keyword arguments instead.
        run_input: accept `RunInput` (the input with the run's options, what `run` sends)
            instead of the public `LoopInput` a served graph shows its clients.
        brief: output `AnswerOutput` (answer, how it ended, its sources) instead of `LoopOutput`.
        **kwargs: `make_deps` keyword arguments, when ``deps`` is not given.

    Returns:
        A ``StateGraph`` to ``compile()``.
    """
    deps = deps if deps is not None else make_deps(**kwargs)
    routers = Routers(deps)
    input_schema: type[Any] = RunInput if run_input else LoopInput
    output_schema: type[Any] = AnswerOutput if brief else LoopOutput
    builder: LoopGraph = StateGraph(
        LoopState,
        context_schema=LoopContext,
        input_schema=input_schema,
        output_schema=output_schema,
    )
    for body in (start, controller, tools, answerer, synthesis, ground, finish):
        builder.add_node(body.__name__, Node(body.__name__, _timed(body, deps)))
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", Route(routers.after_start))
    builder.add_conditional_edges("controller", Route(routers.after_controller))
    builder.add_conditional_edges("tools", Route(routers.after_tools))
    builder.add_conditional_edges("answerer", Route(routers.after_answer))
    builder.add_conditional_edges("synthesis", Route(routers.after_answer))
    builder.add_conditional_edges("ground", Route(routers.after_ground))
    builder.add_edge("finish", END)
    return builder


graph = build_graph().compile(name=GRAPH_NAME)
"""The served graph: models, grounder and search options come from the run's context."""
answer_graph = build_graph(brief=True).compile(name=ANSWER_GRAPH_NAME)
"""The same loop served with a brief output (`AnswerOutput`), for MCP clients."""
