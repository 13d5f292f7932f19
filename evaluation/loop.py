"""Loop evaluation: run every labelled question through the loop and score what came back.

Per question it records whether the outcome matches the label (``gave_up`` for a
question the collection cannot answer), how correct the answer is (an LLM judge
with `JUDGE_PROMPT` when a judge model is given, else the share of key facts the
answer contains, compared normalised), the grounding score, how the run ended,
its turns, searches and repeated searches, tokens and latency. The report is
plain JSON, so two runs can be saved and diffed (`evaluation.report`).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import HumanMessage

from arcana_loop.core import bridge
from arcana_loop.core.context import CONTEXT_FIELDS, LoopContext
from arcana_loop.evaluation.cases import CaseSet, EvalCase, as_cases
from arcana_loop.evaluation.metrics import distribution, key_fact_recall
from arcana_loop.evaluation.parse import parse_json_object, reply_text
from arcana_loop.evaluation.prompts import JUDGE_PROMPT
from arcana_loop.evaluation.tokens import ESTIMATED_CONTROLLER, EstimatingOfflineController
from arcana_loop.graph.run import LoopResult, arun
from arcana_loop.nodes.duplicates import normalize_query
from arcana_loop.nodes.models import OFFLINE, ModelCaller, ModelSpec, resolve_model

Progress = Callable[[int, int], None]

_CITATION = re.compile(r"\s*\[[0-9a-f]{16,}\]")
"""A chunk id cited in brackets, as the loop's answers do; removed before key facts are matched,
since a citation placed before a sentence's full stop can split a fact in two."""


def outcome_of(result: LoopResult) -> str:
    """Return ``answered``, ``gave_up`` or ``error`` for a finished run.

    A run that hit ``max_iterations`` but wrote a fallback answer counts as answered:
    the caller got an answer either way.
    """
    if result.terminated_by == "gave_up":
        return "gave_up"
    if result.terminated_by in ("answered", "max_iterations") and result.answer:
        return "answered"
    return "error"


def _controller(spec: ModelSpec, estimate_tokens: bool) -> tuple[ModelSpec, str, bool]:
    """Return the controller to run, its name in the report, and whether its tokens are estimated."""
    if spec == OFFLINE and estimate_tokens:
        return EstimatingOfflineController(), ESTIMATED_CONTROLLER, True
    return (
        spec,
        spec if isinstance(spec, str) else getattr(spec, "__name__", type(spec).__name__),
        False,
    )


def _check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(options) - CONTEXT_FIELDS
    if unknown:
        raise TypeError(f"unknown loop option(s): {', '.join(sorted(unknown))}")
    LoopContext(
        **{k: v for k, v in options.items() if v is not None}
    )  # a bad value fails now, not per case
    return dict(options)


async def judge_answer(judge: ModelCaller, case: EvalCase, answer: str | None) -> tuple[float, str]:
    """Score an answer from 0 to 1 with the judge model; return the score and the judge's reason.

    Raises:
        ValueError: when the judge's reply has no JSON object or no score between 0 and 1.
    """
    prompt = JUDGE_PROMPT.format(
        question=case.question,
        reference=case.reference or "(none)",
        key_facts="\n".join(f if isinstance(f, str) else " or ".join(f) for f in case.key_facts)
        or "(none)",
        answer=answer or "(no answer)",
    )
    reply = await asyncio.to_thread(
        judge.invoke, [HumanMessage(content=prompt)], [], {"temperature": 0.0}
    )
    data = parse_json_object(reply_text(reply.content))
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        raise ValueError(f"the judge's score must be a number from 0 to 1, got {score!r}")
    return float(score), str(data.get("reason", ""))


def _tokens(usage: Mapping[str, Any]) -> tuple[int | None, int | None]:
    total = (usage.get("total") or {}).get("total_tokens")
    controller_input = (usage.get("controller") or {}).get("input_tokens")
    return total, controller_input


def repeated_searches(history: Sequence[Mapping[str, Any]]) -> int:
    """Count the searches that repeat an earlier one of the run (same normalised query and scope).

    Counted whether or not the duplicate guard caught them, so runs with the guard on
    and off compare: with it on they are answered from the history, with it off they are sent.
    """
    seen: set[tuple[str, str]] = set()
    repeats = 0
    for entry in history:
        query = entry["args"].get("query")
        if entry["tool"] != "search" or not isinstance(query, str):
            continue
        key = (normalize_query(query), repr(entry["args"].get("collection")))
        repeats += key in seen
        seen.add(key)
    return repeats


def _case_row(case: EvalCase, result: LoopResult, latency: float) -> dict[str, Any]:
    searches = [e for e in result.tool_history if e["tool"] == "search"]
    duplicates = sum(1 for e in searches if "duplicate_of" in e)
    outcome = outcome_of(result)
    total_tokens, controller_input = _tokens(result.usage)
    grounding = result.grounding or {}
    return {
        "id": case.id,
        "kind": case.kind,
        "question": case.question,
        "expected": case.expected,
        "outcome": outcome,
        "outcome_ok": outcome == case.expected,
        "terminated_by": result.terminated_by,
        "answer": result.answer,
        "correctness": None,
        "correctness_method": None,
        "grounding_score": grounding.get("score"),
        "coverage": result.coverage,
        "repaired": bool(result.repair and result.repair.get("ran")),
        "iterations": result.iterations,
        "searches": len(searches),
        "repeated_searches": repeated_searches(searches),
        "searches_sent": len(searches) - duplicates,
        "duplicate_searches": duplicates,
        "tokens": total_tokens,
        "controller_input_tokens": controller_input,
        "latency_s": round(latency, 4),
        "error": result.error,
    }


async def _score(row: dict[str, Any], case: EvalCase, judge: ModelCaller | None) -> None:
    if case.expected == "gave_up":
        return  # scored by outcome_ok alone: the right result is no answer
    if row["outcome"] != "answered":
        row["correctness"], row["correctness_method"] = 0.0, "no_answer"
        return
    if judge is not None:
        try:
            row["correctness"], row["judge_reason"] = await judge_answer(judge, case, row["answer"])
            row["correctness_method"] = "judge"
            return
        except Exception as exc:  # a judge failure must not lose the case: fall back to key facts
            row["judge_error"] = f"{type(exc).__name__}: {exc}"
    if case.key_facts:
        answer = _CITATION.sub("", row["answer"] or "")
        row["correctness"], row["correctness_method"] = (
            key_fact_recall(answer, case.key_facts),
            "key_facts",
        )


def _failed_row(case: EvalCase, exc: BaseException, latency: float) -> dict[str, Any]:
    empty = LoopResult(
        question=case.question,
        answer=None,
        terminated_by="error",
        iterations=0,
        tool_history=[],
        chunks=[],
        error=f"{type(exc).__name__}: {exc}",
    )
    return _case_row(case, empty, latency)


def _mean(values: Sequence[float | int | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _right(row: Mapping[str, Any]) -> bool:
    """A case is right when it gave up as expected, or answered with every key fact."""
    if row["expected"] == "gave_up":
        return bool(row["outcome_ok"])
    return row["outcome"] == "answered" and row.get("correctness") == 1.0


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Summary metrics and distributions of per-case rows.

    ``duplicate_search_rate`` is the share of searches that repeated an earlier one of their
    run, ``guarded_search_rate`` the share the duplicate guard answered from the history;
    ``grounding_score`` is averaged over answered cases (a give-up message has nothing to ground);
    ``right`` is the share of cases answered with every key fact or given up as expected.
    """
    answerable = [r for r in rows if r["expected"] == "answered"]
    unanswerable = [r for r in rows if r["expected"] == "gave_up"]
    answered = [r for r in rows if r["outcome"] == "answered"]
    searches = sum(r["searches"] for r in rows)
    latency = distribution(r["latency_s"] for r in rows)
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in rows}):
        group = [r for r in rows if r["kind"] == kind]
        by_kind[kind] = {
            "cases": len(group),
            "outcome_accuracy": _mean([float(r["outcome_ok"]) for r in group]),
            "answer_correctness": _mean([r["correctness"] for r in group]),
            "right": _mean([float(_right(r)) for r in group]),
        }
    return {
        "cases": len(rows),
        "answer_correctness": _mean([r["correctness"] for r in answerable]),
        "outcome_accuracy": _mean([float(r["outcome_ok"]) for r in rows]),
        "right": _mean([float(_right(r)) for r in rows]),
        "answered_when_answerable": _mean([float(r["outcome_ok"]) for r in answerable]),
        "gave_up_when_unanswerable": _mean([float(r["outcome_ok"]) for r in unanswerable]),
        "grounding_score": _mean([r["grounding_score"] for r in answered]),
        "duplicate_search_rate": (sum(r["repeated_searches"] for r in rows) / searches)
        if searches
        else 0.0,
        "guarded_search_rate": (sum(r["duplicate_searches"] for r in rows) / searches)
        if searches
        else 0.0,
        "searches_per_question": _mean([r["searches"] for r in rows]),
        "searches_sent_per_question": _mean([r["searches_sent"] for r in rows]),
        "repairs": sum(1 for r in rows if r["repaired"]),
        "iterations_per_question": _mean([r["iterations"] for r in rows]),
        "tokens_per_question": _mean([r["tokens"] for r in rows]),
        "controller_input_tokens_per_question": _mean([r["controller_input_tokens"] for r in rows]),
        "latency_s": {"p50": latency["p50"], "p95": latency["p95"]},
        "errors": sum(1 for r in rows if r["outcome"] == "error"),
        "terminated_by": dict(Counter(str(r["terminated_by"]) for r in rows)),
        "distributions": {
            name: distribution(r[name] for r in rows if r[name] is not None)
            for name in (
                "iterations",
                "searches",
                "tokens",
                "controller_input_tokens",
                "latency_s",
                "grounding_score",
                "correctness",
            )
        },
        "by_kind": by_kind,
    }


async def aevaluate_loop(
    cases: CaseSet | Sequence[EvalCase | Mapping[str, Any]],
    *,
    search_fn: Any = None,
    collection: str | list[str] | None = None,
    controller: ModelSpec = OFFLINE,
    judge_model: ModelSpec | None = None,
    grounder: Any = "local",
    options: Mapping[str, Any] | None = None,
    estimate_tokens: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run each case through the loop (one at a time, so latencies do not overlap) and score it.

    Args:
        cases: the labelled cases.
        search_fn: the loop's search function, e.g. ``KnowledgeBase.search`` (default: the
            knowledge base from ``DATABASE_URL`` / the embedded server).
        collection: the collection searched (default: the case set's, else all).
        controller: any controller spec `graph.run` accepts (``"offline"``, ``"openai:gpt-4o-mini"``,
            a chat model, a function).
        judge_model: a model spec for the LLM judge; without one, answers are scored by key facts.
        grounder: the loop's grounder (``"local"``, ``"llm_judge"``, an object, or ``None``).
        options: `LoopContext` options for every run (``duplicate_guard=False``...).
        estimate_tokens: for the offline controller, attach estimated token usage (it reports none).
        progress: called with ``(done, total)`` after each case.

    Returns:
        ``{"kind": "loop", ..., "summary": {...}, "per_case": [...]}``.

    Raises:
        TypeError, ValueError: for an unknown option or a bad option value, before any case runs.
    """
    items = as_cases(cases)
    if collection is None:
        collection = cases.collection if isinstance(cases, CaseSet) else None
    opts = _check_options(options or {})
    spec, controller_name, estimated = _controller(controller, estimate_tokens)
    judge = resolve_model(judge_model) if judge_model is not None else None
    rows: list[dict[str, Any]] = []
    for index, case in enumerate(items, start=1):
        started = time.perf_counter()
        try:
            result = await arun(
                case.question,
                collection=collection or "all",
                controller_llm=spec,
                search_fn=search_fn,
                grounder=grounder,
                **opts,
            )
            row = _case_row(case, result, time.perf_counter() - started)
        except Exception as exc:  # one failing case is recorded, the others still run
            row = _failed_row(case, exc, time.perf_counter() - started)
        await _score(row, case, judge)
        rows.append(row)
        if progress:
            progress(index, len(items))
    return {
        "kind": "loop",
        "name": cases.name if isinstance(cases, CaseSet) else "cases",
        "collection": collection,
        "controller": controller_name,
        "tokens_estimated": estimated,
        "judge": None
        if judge_model is None
        else (judge_model if isinstance(judge_model, str) else type(judge_model).__name__),
        "grounder": grounder
        if isinstance(grounder, str) or grounder is None
        else type(grounder).__name__,
        "options": opts,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "summary": summarize(rows),
        "per_case": rows,
    }


def evaluate_loop(
    cases: CaseSet | Sequence[EvalCase | Mapping[str, Any]], **kwargs: Any
) -> dict[str, Any]:
    """Run `aevaluate_loop` on a new event loop (see it for the arguments)."""
    return bridge.wait(aevaluate_loop(cases, **kwargs))
