"""The ``tools`` node: execute the turn's tool calls and fold their outcomes into the state."""

from __future__ import annotations

import threading

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.core import bridge
from arcana_loop.core.channels import ChunkMerge
from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopState, TerminatedBy, ToolEvent
from arcana_loop.nodes.common import emit, offered_of
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.lifecycle import tool_call_event
from arcana_loop.nodes.policy import PolicyView
from arcana_loop.tools.base import CallOutcome, Planned, RenderView, RunEnv, Turn
from arcana_loop.tools.execute import plan_calls, render_turn


class ToolsUpdate(TypedDict, total=False):
    """What the tools node changes."""

    messages: list[BaseMessage]
    tool_history: list[ToolEvent]
    chunks: ChunkMerge
    terminated_by: TerminatedBy
    answer: str
    search_nudged: bool


def _iteration(state: LoopState) -> int:
    """The 0-based turn whose calls are being executed (the controller already counted it)."""
    return max(state.get("iterations", 1) - 1, 0)


def _entry(outcome: CallOutcome, iteration: int) -> ToolEvent:
    entry: ToolEvent = {
        "tool": outcome.name,
        "args": outcome.args,
        "iteration": iteration,
        "summary": outcome.summary,
        "returned_chunk_ids": outcome.returned_chunk_ids,
    }
    if outcome.duplicate is not None:
        entry["duplicate_of"] = outcome.duplicate.iteration
    if outcome.entities is not None:
        entry["entities"] = outcome.entities
    if outcome.ignored_args:
        entry["ignored_args"] = list(outcome.ignored_args)
    if outcome.error is not None:
        entry["error"] = outcome.error
    if outcome.unmatched:
        entry["unmatched"] = list(outcome.unmatched)
    return entry


def _plan(deps: LoopDeps, state: LoopState, ctx: LoopContext) -> list[Planned]:
    last = state["messages"][-1]
    if not isinstance(last, AIMessage):
        raise ValueError(
            f"the tools node expects an assistant message last, found {type(last).__name__}"
        )
    offered = offered_of(deps, ctx, state)
    view = PolicyView(state, ctx, state.get("iterations", 0), offered)
    builtins = frozenset(deps.toolset.builtins | set(offered).difference(deps.toolset.layout))
    settled: dict[str, CallOutcome] = {}
    for policy in deps.policies:
        settled.update(policy.before_tools(view, last.tool_calls, builtins))
    planned = plan_calls(
        last.tool_calls,
        last.invalid_tool_calls,
        turn=Turn(view.scope, _iteration(state), deps.search_fn),
        custom_tools=deps.toolset.custom,
        max_calls=ctx.max_tool_calls_per_turn,
        builtins=builtins,
        settled=settled,
    )
    for policy in deps.policies:
        planned = policy.after_plan(view, planned)
    return planned


def _run(plan: list[Planned], env: RunEnv, ctx: LoopContext) -> list[CallOutcome]:
    """Run the planned calls; concurrent steps (searches) in threads of their own, the rest here in call order."""
    concurrent = [step for step in plan if step.concurrent]
    if min(len(concurrent), ctx.max_parallel_searches) < 2:
        return [step.run(env) for step in plan]
    slots = threading.Semaphore(ctx.max_parallel_searches)

    def bounded(step: Planned) -> CallOutcome:
        with slots:
            return step.run(env)

    # each search keeps the node's context (callbacks, config, the caller's loop) in its thread
    running = {id(step): bridge.in_thread(bounded, step) for step in concurrent}
    return [running[id(step)].result() if id(step) in running else step.run(env) for step in plan]


def _fold(
    state: LoopState, runtime: Runtime[LoopContext], outcomes: list[CallOutcome]
) -> ToolsUpdate:
    iteration = _iteration(state)
    view = RenderView(
        state.get("tool_history") or [],
        iteration,
        show_once=runtime.context.show_chunks_once,
        known=state.get("chunks") or [],
    )
    outcomes = render_turn(outcomes, view)
    messages: list[BaseMessage] = [
        ToolMessage(
            content=o.content,
            tool_call_id=o.call_id,
            name=o.name,
            artifact=o.artifact,
            # LangChain's own mark of a failed call: a controller tells "it failed" from "found nothing"
            status="error" if o.error is not None else "success",
        )
        for o in outcomes
    ]
    recorded = [o for o in outcomes if o.recorded]
    history = [_entry(o, iteration) for o in recorded]
    update: ToolsUpdate = {"messages": messages, "tool_history": history}
    if any(o.sent_back for o in outcomes):
        update["search_nudged"] = True
    found = [c for o in recorded for c in o.found]
    if found:
        update["chunks"] = {"merge": found, "cap": runtime.context.chunk_cap}
    terminal = next((o for o in recorded if o.terminal is not None), None)
    if terminal is not None and terminal.terminal is not None and terminal.answer is not None:
        update["terminated_by"] = terminal.terminal
        update["answer"] = terminal.answer
    size = len(state.get("tool_history") or [])
    for offset, entry in enumerate(history, start=1):
        emit(runtime, tool_call_event(entry, size + offset))
    return update


def tools(state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps) -> ToolsUpdate:
    """Execute the turn's tool calls and fold their outcomes; results stay in call order."""
    plan = _plan(deps, state, runtime.context)
    env = RunEnv(deps.search(), runtime.context.search_opts)
    return _fold(state, runtime, _run(plan, env, runtime.context))
