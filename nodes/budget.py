"""The loop's budget: turns, tokens and time, shown to the controller and enforced (the `BudgetLedger` policy).

The controller reads a short status every turn in its system prompt (rebuilt per
call, so the conversation itself never changes), and the run ends like a spent
``max_iterations`` (with synthesis) when a hard limit is reached.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import AIMessage

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import BudgetStop, LoopState
from arcana_loop.nodes import prompts
from arcana_loop.nodes.policy import Policy, PolicyView
from arcana_loop.tools import registry


def usage_of(role: str, message: Any) -> dict[str, Any]:
    """Return the usage record of one model reply: its tokens under ``role`` and ``total``."""
    metadata = getattr(message, "usage_metadata", None) if isinstance(message, AIMessage) else None
    if not metadata:
        return {}
    return usage_record(
        role,
        {k: int(metadata.get(k) or 0) for k in ("input_tokens", "output_tokens", "total_tokens")},
    )


def usage_record(role: str, tokens: dict[str, int] | None) -> dict[str, Any]:
    """Return the usage record of token counts: under ``role`` and ``total`` (empty without counts)."""
    return {role: tokens, "total": tokens} if tokens else {}


def tokens_used(state: LoopState) -> int:
    """Return the tokens all models have used so far in this run."""
    return int(((state.get("usage") or {}).get("total") or {}).get("total_tokens", 0))


def turn_limit(state: LoopState, ctx: LoopContext) -> int:
    """Return the controller turns allowed, counting the extra turns each repair grants."""
    return ctx.max_iterations + int(state.get("repairs") or 0) * ctx.repair_turns


def exhausted(state: LoopState, ctx: LoopContext, now: float | None = None) -> BudgetStop | None:
    """Return which budget is spent, or ``None`` while the run may take another turn."""
    if int(state.get("iterations") or 0) >= turn_limit(state, ctx):
        return "iterations"
    if ctx.max_tokens_total is not None and tokens_used(state) >= ctx.max_tokens_total:
        return "tokens"
    started = state.get("started_at")
    if (
        ctx.max_seconds is not None
        and started is not None
        and (now or time.time()) - started >= ctx.max_seconds
    ):
        return "seconds"
    return None


def budget_section(state: LoopState, ctx: LoopContext, now: float | None = None) -> str:
    """Return the budget status section of the system prompt for the coming turn."""
    if not ctx.budget_ledger:
        return ""
    started = state.get("started_at")
    elapsed = 0.0 if started is None else max((now or time.time()) - started, 0.0)
    history = state.get("tool_history") or []
    searches = sum(1 for e in history if registry.is_search(e["tool"]) and "duplicate_of" not in e)
    limits = []
    if ctx.max_tokens_total is not None:
        limits.append(f"at most {ctx.max_tokens_total:,} tokens")
    if ctx.max_seconds is not None:
        limits.append(f"at most {ctx.max_seconds:g} s")
    return prompts.BUDGET_SECTION.format(
        turn=int(state.get("iterations") or 0) + 1,
        turns=turn_limit(state, ctx),
        searches=searches,
        chunks=len(state.get("chunks") or []),
        chunk_cap=ctx.chunk_cap,
        tokens=tokens_used(state),
        elapsed=elapsed,
        limits=("; hard limits: " + ", ".join(limits)) if limits else "",
    )


class BudgetLedger(Policy):
    """The budget: a spent one ends the turn before the model call; the ledger fills the system prompt's status."""

    def before_model(self, view: PolicyView) -> dict[str, Any] | None:
        """End like a spent ``max_iterations`` once any budget is spent."""
        stop = exhausted(view.state, view.ctx)
        return None if stop is None else {"terminated_by": "max_iterations", "budget_stop": stop}

    def prompt_slots(self, view: PolicyView) -> dict[str, str]:
        """The budget status (empty with ``budget_ledger`` off)."""
        return {"budget_section": budget_section(view.state, view.ctx)}
