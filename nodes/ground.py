"""The ``ground`` node: score the answer against the gathered chunks, claim by claim.

Runs only when a grounder is configured. Grounding never loses the answer: a
grounder that fails, times out or returns garbage leaves ``grounding`` as ``None``,
and why is noted in ``error``. It gets ``ground_timeout`` seconds, or the time left
of ``max_seconds`` when that is less (``max_seconds`` bounds the whole run).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopState
from arcana_loop.nodes.budget import usage_record
from arcana_loop.nodes.common import emit
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.evidence import coverage_of
from arcana_loop.nodes.models import ChatModelCaller, cached_model
from arcana_loop.nodes.policy import Policy, PolicyView

TIMED_OUT = "grounding timed out after {seconds:.3g} s ({limit}); the answer stands, ungrounded"
FAILED = "{reason}; the answer stands, ungrounded"
NO_TIME_LEFT = "grounding timed out: max_seconds was spent before it could start; the answer stands, ungrounded"


def ground_seconds(
    state: LoopState, ctx: LoopContext, now: float | None = None
) -> tuple[float, str]:
    """Return the seconds grounding may take and which limit set them: ``ground_timeout`` or ``max_seconds``.

    The seconds are 0 or less when ``max_seconds`` is already spent.
    """
    started = state.get("started_at")
    if ctx.max_seconds is not None and started is not None:
        left = ctx.max_seconds - ((now or time.time()) - started)
        if left < ctx.ground_timeout:
            return left, "the time left of max_seconds"
    return ctx.ground_timeout, "ground_timeout"


def judge_model_for(deps: LoopDeps, ctx: LoopContext) -> Any:
    """Return the judge model for ``llm_judge``: the context's, else the answer model, else the controller.

    The offline controller is no judge (it quotes passages, it writes no verdict): with
    it and no other model, there is none.
    """
    if ctx.judge_model is not None:
        return ctx.judge_model  # the judge resolves model names itself
    for caller in (deps.answer_llm, deps.controller_llm):
        if isinstance(caller, ChatModelCaller):
            return None if _offline(caller.model) else caller.model
    spec = ctx.answer_model or ctx.controller_model
    caller = cached_model(spec) if spec else None
    if isinstance(caller, ChatModelCaller) and not _offline(caller.model):
        return caller.model
    return None


def _offline(model: Any) -> bool:
    from arcana_loop.nodes.offline import OfflineController

    return isinstance(model, OfflineController)


NO_JUDGE = (
    "the llm_judge grounder needs a model to judge with: set judge_model (or give an answer"
    " or controller model; the offline controller is none), or use the local grounder"
)


def check_grounder(deps: LoopDeps, ctx: LoopContext) -> None:
    """Raise, before a question's first turn, for a grounder that could not run.

    An unknown name would fail only once the answer is written; ``llm_judge`` with no
    model to judge with would leave every answer ungrounded.

    Raises:
        ValueError: for an unknown grounder name, or ``llm_judge`` without a judge model.
    """
    if deps.grounder is not None or ctx.grounder is None:
        return
    if ctx.grounder == "llm_judge" and judge_model_for(deps, ctx) is None:
        raise ValueError(NO_JUDGE)
    grounder_for(deps, ctx)


def grounder_for(deps: LoopDeps, ctx: LoopContext) -> Any:
    """Return the run's grounder: the object given, else the one named in the context."""
    if deps.grounder is not None:
        return deps.grounder
    from arcana_loop.grounding.resolve import resolve_grounder

    if ctx.grounder == "llm_judge":
        return resolve_grounder("llm_judge", judge_model=judge_model_for(deps, ctx))
    return resolve_grounder(ctx.grounder)


def _inputs(state: LoopState) -> dict[str, Any]:
    return {
        "question": state["question"],
        "answer": state.get("answer"),
        "chunks": state.get("chunks") or [],
        "tool_history": state.get("tool_history") or [],
        "error": state.get("error"),
        "terminated_by": state.get("terminated_by"),
    }


def _would_ground(state: LoopState) -> bool:
    """Whether grounding applies, as `grounding.apply` decides (a give-up, for one, is not grounded)."""
    from arcana_loop.grounding.apply import applies

    return applies(
        state.get("answer"),
        state.get("chunks") or [],
        state.get("error"),
        state.get("terminated_by"),
    )


def _graded(
    view: PolicyView,
    policies: Sequence[Policy],
    grounding: dict[str, Any] | None,
    note: str | None,
) -> dict[str, Any]:
    tokens = None if grounding is None else grounding.pop("usage", None)
    update: dict[str, Any] = {
        "grounding": grounding,
        "coverage": coverage_of(grounding, view.ctx.min_support),
    }
    for policy in policies:
        update.update(policy.after_ground(view, grounding))
    if tokens:
        update["usage"] = usage_record("judge", tokens)
    if note is not None:
        update["error"] = note
    return update


def ground(state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps) -> dict[str, Any]:
    """Ground the answer within its time; the answer stands whatever the grounder does."""
    from arcana_loop.grounding.apply import ground_answer

    seconds, limit = ground_seconds(state, runtime.context)
    view = PolicyView(state, runtime.context, state.get("iterations", 0))
    if seconds <= 0:
        note = NO_TIME_LEFT if _would_ground(state) else None
        return _graded(view, deps.policies, None, note)
    notes: list[str] = []
    result = ground_answer(
        **_inputs(state),
        grounder=grounder_for(deps, runtime.context),
        timeout=seconds,
        emit=lambda e: emit(runtime, e),
        on_timeout=lambda s: notes.append(TIMED_OUT.format(seconds=s, limit=limit)),
        on_failure=lambda reason: notes.append(FAILED.format(reason=reason)),
    )
    return _graded(view, deps.policies, result, notes[0] if notes else None)
