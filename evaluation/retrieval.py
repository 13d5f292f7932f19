"""Retrieval evaluation: run each labelled question through the knowledge base in each search mode."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from arcana_loop.evaluation.cases import CaseSet, EvalCase, as_cases, chunk_key
from arcana_loop.evaluation.metrics import DEFAULT_KS, mean_scores, quantile, retrieval_scores

SearchLike = Callable[..., list[Mapping[str, Any]]]
"""``search(query, collection=..., limit=..., mode=...) -> ranked chunks`` (``KnowledgeBase.search``)."""


def evaluate_retrieval(
    cases: CaseSet | Sequence[EvalCase | Mapping[str, Any]],
    kb: Any,
    collection: str | list[str] | None = None,
    modes: Iterable[str] = ("semantic", "fulltext", "hybrid"),
    k: Iterable[int] = DEFAULT_KS,
) -> dict[str, Any]:
    """Score retrieval per search mode over the cases that have relevance labels.

    Args:
        cases: labelled cases; those without ``relevant_ids``/``relevant_sources``
            (unanswerable questions) are skipped.
        kb: a `KnowledgeBase`, or any ``search(query, collection=, limit=, mode=)`` callable.
        collection: the collection searched (default: the case set's).
        modes: the search modes compared.
        k: cut-offs; the search asks for ``max(k)`` results.

    Returns:
        ``{"kind": "retrieval", "collection", "ks", "cases", "modes": {mode: {"summary": means,
        "latency_ms": {...}, "per_case": [...]}}}``.
    """
    wanted: list[Any] = list(k)  # typed as ints, but CLI and JSON callers send anything
    if not wanted or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in wanted):
        raise ValueError(f"k must be one or more integers >= 1, got {wanted}")
    ks = tuple(sorted(set(wanted)))
    modes = list(modes)
    if not modes:
        raise ValueError("modes must name at least one search mode")
    if collection is None and isinstance(cases, CaseSet):
        collection = cases.collection
    labelled = [c for c in as_cases(cases) if c.relevant[1]]
    search: SearchLike = kb.search if hasattr(kb, "search") else kb
    report: dict[str, Any] = {
        "kind": "retrieval",
        "collection": collection,
        "ks": list(ks),
        "cases": len(labelled),
        "modes": {},
    }
    for mode in modes:
        per_case: list[dict[str, Any]] = []
        for case in labelled:
            by, relevant = case.relevant
            started = time.perf_counter()
            hits = search(case.question, collection=collection, limit=max(ks), mode=mode)
            elapsed = (time.perf_counter() - started) * 1000
            keys = [chunk_key(h, by, case) for h in hits]
            per_case.append(
                {
                    "id": case.id,
                    "kind": case.kind,
                    "retrieved": keys,
                    "latency_ms": round(elapsed, 3),
                    **retrieval_scores(keys, relevant, ks),
                }
            )
        latencies = sorted(row["latency_ms"] for row in per_case)
        report["modes"][mode] = {
            "summary": mean_scores(
                {n: v for n, v in row.items() if "@" in n or n == "mrr"} for row in per_case
            ),
            "latency_ms": {"p50": quantile(latencies, 0.5), "p95": quantile(latencies, 0.95)},
            "per_case": per_case,
        }
    return report
