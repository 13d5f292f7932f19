"""Helpers the nodes share: rendered prompts, per-role options, live events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.runtime import Runtime

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopState
from arcana_loop.nodes import prompts
from arcana_loop.nodes.conversation import compact_earlier
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.policy import PolicyView
from arcana_loop.tools import registry
from arcana_loop.tools.base import Offer, ToolSchema, guidance_line
from arcana_loop.tools.schemas import controller_tools, tool_name
from arcana_loop.tools.scoping import Scope, scope_of

logger = logging.getLogger("arcana_loop")

Role = str  # "controller", "answer" or "fallback"


def offered_names(deps: LoopDeps, ctx: LoopContext | None, scope: Scope) -> list[str]:
    """Work out the tools a question offers, in order: the toolset's, then the optional built-ins its options offer.

    ``start`` does, once per question (``LoopState.question_setup``); every node reads them there.
    """
    offer = Offer(ctx, scope, deps.search_fn, frozenset(deps.custom_tools))
    optional = (t.name for t in registry.TOOLS if not t.default and t.offered(offer))
    return [*deps.toolset.layout, *optional]


def offered_of(deps: LoopDeps, ctx: LoopContext | None, state: LoopState) -> Sequence[str]:
    """Return the tools the question offers, as ``start`` worked them out (an older thread's state has none)."""
    setup = state.get("question_setup")
    return setup["offered"] if setup is not None else offered_names(deps, ctx, scope_of(state))


def offered_tools(deps: LoopDeps, ctx: LoopContext | None, state: LoopState) -> list[ToolSchema]:
    """Return the schemas the controller is offered."""
    return controller_tools(scope_of(state), deps.toolset, offered_of(deps, ctx, state))


def loop_opts(
    ctx: LoopContext, state: LoopState, tools: Sequence[ToolSchema], role: Role
) -> dict[str, Any]:
    """Return the resolved options a function model, synthesizer or prompt function receives.

    ``temperature`` is present only when one applies to the role.
    """
    opts: dict[str, Any] = {
        "role": role,
        "question": state["question"],
        "collection": scope_of(state).to_value(),
        "max_iterations": ctx.max_iterations,
        "chunk_cap": ctx.chunk_cap,
        "iterations": state.get("iterations", 0),
        "tools": [tool_name(t) for t in tools],
    }
    temperature = ctx.role_temperature(role)
    if temperature is not None:
        opts["temperature"] = temperature
    return opts


def system_message(
    deps: LoopDeps,
    ctx: LoopContext,
    state: LoopState,
    opts: Mapping[str, Any],
    offered: Sequence[ToolSchema] | None = None,
    view: PolicyView | None = None,
) -> SystemMessage:
    """Return the system message sent ahead of the conversation.

    Its text is the function given, else the context's string, else the default prompt.
    ``offered``: the controller's tools this turn, when the caller has them already;
    ``view``: the turn's policy view, when the caller has made it (the controller).
    """
    if deps.system_prompt is not None:
        return SystemMessage(content=_checked(deps.system_prompt(dict(opts)), "system_prompt"))
    if ctx.system_prompt is not None:
        return SystemMessage(content=ctx.system_prompt)
    scope = view.scope if view is not None else scope_of(state)
    section = ""
    if scope.kind == "pick":
        names = ", ".join(f"`{n}`" for n in scope.names)
        section = prompts.COLLECTIONS_SECTION.format(collection_names=names)
    if offered is None:
        offered = offered_tools(deps, ctx, state)
    slots = dict(prompts.SLOT_DEFAULTS)
    for schema in offered:
        tool = registry.get(tool_name(schema))
        slots.update(tool.prompt_slots if tool is not None else {})
    if view is None:
        view = PolicyView(
            state, ctx, state.get("iterations", 0) + 1, [tool_name(t) for t in offered]
        )
    for policy in deps.policies:
        slots.update(policy.prompt_slots(view))
    text = prompts.SYSTEM_PROMPT.format(
        tool_guidance=tool_guidance(offered),
        collections_section=section,
        **slots,
        max_iterations=ctx.max_iterations,
    )
    return SystemMessage(content=text)


def tool_guidance(offered: Sequence[ToolSchema]) -> str:
    """The system prompt's tool list: one line per tool actually offered, in the order offered."""
    lines = []
    for schema in offered:
        name = tool_name(schema)
        tool = registry.get(name)
        if tool is not None and tool.guidance is not None:
            lines.append(tool.guidance)  # a custom tool in a built-in's place keeps its line
        else:
            lines.append(guidance_line(name, str(schema["function"].get("description") or "")))
    return "\n".join(lines)


def render_instruction(
    fn: Callable[[dict[str, Any]], str] | None,
    text: str | None,
    default: str,
    opts: Mapping[str, Any],
    name: str,
) -> str:
    """Return an answer or synthesis instruction: the function given, else the string, else the default."""
    if fn is not None:
        return _checked(fn(dict(opts)), name)
    return text if text is not None else default


def _checked(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} function returned {type(value).__name__}, expected str")
    return value


def controller_request(
    deps: LoopDeps, view: PolicyView, opts: Mapping[str, Any], offered: Sequence[ToolSchema]
) -> list[BaseMessage]:
    """Return what the controller is sent: the system prompt and the policies' notes, then the conversation as models are sent it."""
    state = view.state
    system = system_message(deps, view.ctx, state, opts, offered, view)
    notes = "".join(policy.prompt_note(view) for policy in deps.policies)
    if notes:
        system = SystemMessage(content=system.text + notes)
    conversation = compact_earlier(
        state.get("messages", []), state.get("question_message_id"), view.scope
    )
    return [system, *conversation]


def emit(runtime: Runtime[LoopContext], event: dict[str, Any]) -> None:
    """Send a live event to ``stream_mode="custom"`` listeners (a no-op when nobody listens)."""
    runtime.stream_writer(event)
