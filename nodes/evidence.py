"""Evidence-checked answers: how well the evidence holds an answer, and the repair (the `EvidenceRepair` policy).

With a grounder and ``min_support`` set, an answer whose grounding score falls
below it goes back to the controller (at most ``max_repairs`` times) with its
unsupported claims listed; ``terminated_by`` keeps its four values and the result
says separately how well the final answer is supported (``coverage``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arcana_loop.core.state import Coverage
from arcana_loop.nodes import prompts
from arcana_loop.nodes.conversation import instruction as instruction_message
from arcana_loop.nodes.policy import Policy, PolicyView

MAX_LISTED_CLAIMS = 10


def coverage_of(grounding: Mapping[str, Any] | None, min_support: float | None) -> Coverage | None:
    """Return ``supported``, ``partially_supported`` or ``unsupported`` for a grounding result.

    The label agrees with the claims it sums up: every claim supported gives
    ``supported``, none ``unsupported``, a mix ``partially_supported``. With
    ``min_support`` set, an answer scored below it is never ``supported`` (it is the
    bar the repair step holds answers to). A result without claims falls back to its
    score: 0 is ``unsupported``, anything else ``partially_supported`` unless it
    reaches ``min_support``.
    """
    if grounding is None:
        return None
    score = float(grounding.get("score", 0.0))
    verdicts = [
        c.get("verdict") == "supported"
        for c in grounding.get("claims") or []
        if isinstance(c, Mapping)
    ]
    below_bar = min_support is not None and score < min_support
    if verdicts:
        if all(verdicts) and not below_bar:
            return "supported"
        return "partially_supported" if any(verdicts) else "unsupported"
    if min_support is not None and not below_bar:
        return "supported"
    return "partially_supported" if score > 0 else "unsupported"


def unsupported_claims(grounding: Mapping[str, Any]) -> list[str]:
    """Return the texts of the claims the evidence does not support, in answer order."""
    claims = grounding.get("claims") or []
    texts = [
        c.get("text", "")
        for c in claims
        if isinstance(c, Mapping) and c.get("verdict") != "supported"
    ]
    if not texts:
        texts = [
            s.get("text", "")
            for s in grounding.get("hallucinated_spans") or []
            if isinstance(s, Mapping)
        ]
    return [t for t in texts if t]


class EvidenceRepair(Policy):
    """With a grounder and ``min_support``: an answer scored below it goes back to the controller, its unsupported claims listed."""

    def after_ground(self, view: PolicyView, grounding: dict[str, Any] | None) -> dict[str, Any]:
        """Record the score after a repair, and send the answer back when one is due."""
        state, ctx = view.state, view.ctx
        update: dict[str, Any] = {}
        repair = state.get("repair")
        score = None if grounding is None else float(grounding.get("score", 0.0))
        if repair is not None and repair.get("score_after") is None:
            update["repair"] = {**repair, "score_after": score}
        due = (
            ctx.min_support is not None
            and score is not None
            and score < ctx.min_support
            and int(state.get("repairs") or 0) < ctx.max_repairs
            and state.get("terminated_by") in ("answered", "max_iterations")
        )
        if not due or grounding is None or score is None or ctx.min_support is None:
            return update
        claims = unsupported_claims(grounding)[:MAX_LISTED_CLAIMS]
        listed = "\n".join(f"- {c}" for c in claims) or "- (the grounder listed none)"
        instruction = prompts.REPAIR_PROMPT.format(
            score=score, min_support=ctx.min_support, claims=listed
        )
        return {
            # the loop's, not the user's: no new question
            "messages": [instruction_message(instruction)],
            "terminated_by": None,
            "budget_stop": None,
            "repairs": int(state.get("repairs") or 0) + 1,
            "repair": {
                "ran": True,
                "unsupported_claims": claims,
                "score_before": score,
                "score_after": None,
            },
        }
