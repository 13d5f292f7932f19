"""Grounding a finished run: short-circuits, the grounder call, validation and attribution.

Used by both the graph's ``ground`` node and ``graph.ground``, so the two agree.
Grounding never loses the answer: a grounder that raises, times out or returns
garbage leaves the grounding as ``None`` and logs why. With a timeout, a synchronous
grounder runs in a thread of its own (`core.bridge.in_thread`): one that never
returns is abandoned there; an ``async def`` one is cancelled.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from arcana_loop.core import bridge
from arcana_loop.grounding.attribution import enrich
from arcana_loop.grounding.resolve import grounder_name
from arcana_loop.grounding.types import GroundingResult

logger = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
OnTimeout = Callable[[float], None]
"""Told the seconds a grounding was given when it timed out."""
OnFailure = Callable[[str], None]
"""Told why a grounding failed (the grounder raised, or returned what is no grounding), in one line."""


def _timed_out(name: str, timeout: float, on_timeout: OnTimeout | None) -> None:
    logger.warning("grounder %s timed out after %.3g s; grounding is None", name, timeout)
    if on_timeout is not None:
        on_timeout(timeout)


GAVE_UP = "gave_up"


def applies(answer: Any, chunks: Sequence[Any], error: Any, terminated_by: Any = None) -> bool:
    """Whether an answer can be grounded: no error, an answer that is a claim (not a give-up), chunks to ground it in."""
    return error is None and answer is not None and bool(chunks) and terminated_by != GAVE_UP


def _stop(question: str, name: str, result: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "event": "ground_stop",
        "question": question,
        "grounder": name,
        "score": None if result is None else result["score"],
        "hallucinated_span_count": None if result is None else len(result["hallucinated_spans"]),
        "faithful_span_count": None if result is None else len(result["faithful_spans"]),
    }


def _finish(
    raw: Any, tool_history: Sequence[Any], name: str, on_failure: OnFailure | None
) -> dict[str, Any] | None:
    try:
        data = GroundingResult.from_mapping(raw).to_dict()
        if data.get("usage") is None:
            del data["usage"]  # only grounders that call a model report tokens
        return enrich(data, tool_history)
    except Exception as exc:  # garbage from a grounder: no grounding, the answer stays
        logger.warning("grounder %s returned an unusable result: %s", name, exc)
        if on_failure is not None:
            on_failure(f"grounder {name} returned an unusable result: {exc}")
        return None


def _grounded(
    grounder: Any,
    answer: str,
    chunks: list[dict[str, Any]],
    question: str,
    timeout: float | None,
    opts: dict[str, Any],
) -> Any:
    """Call the grounder within ``timeout`` seconds: an async one through the bridge (cancelled at the timeout), a sync one in a thread of its own."""
    aground = getattr(grounder, "aground", None)
    if aground is not None and (
        not hasattr(grounder, "ground") or inspect.iscoroutinefunction(aground)
    ):
        return bridge.wait(aground(answer, chunks, question=question, **opts), timeout)
    call = functools.partial(grounder.ground, answer, chunks, question=question, **opts)
    return call() if timeout is None else bridge.in_thread(call).result(timeout=timeout)


def ground_answer(
    *,
    question: str,
    answer: str | None,
    chunks: Sequence[dict[str, Any]],
    tool_history: Sequence[Any],
    error: str | None = None,
    grounder: Any,
    timeout: float | None = None,
    emit: Emit | None = None,
    on_timeout: OnTimeout | None = None,
    on_failure: OnFailure | None = None,
    terminated_by: str | None = None,
    **opts: Any,
) -> dict[str, Any] | None:
    """Ground an answer; ``None`` when grounding does not apply, fails or takes over ``timeout`` seconds.

    It does not apply to a give-up (``terminated_by="gave_up"``): "Could not answer: ..." is no claim to score.
    """
    if not applies(answer, chunks, error, terminated_by) or grounder is None:
        return None
    assert answer is not None
    name = grounder_name(grounder)
    if emit:
        emit({"event": "ground_start", "question": question, "grounder": name})
    result = None
    try:
        result = _finish(
            _grounded(grounder, answer, list(chunks), question, timeout, opts),
            tool_history,
            name,
            on_failure,
        )
    except TimeoutError:
        _timed_out(name, timeout or 0.0, on_timeout)
    except Exception as exc:  # a failing grounder never loses the answer
        logger.warning("grounder %s failed: %s: %s", name, type(exc).__name__, exc)
        if on_failure is not None:
            on_failure(f"grounder {name} failed: {type(exc).__name__}: {exc}")
    if emit:
        emit(_stop(question, name, result))
    return result
