"""Retrieval metrics: pure functions of a ranked list of keys and a set of relevant keys.

A *key* is whatever relevance is labelled by: a chunk id, or a document source such
as ``pydoc:asyncio.tasks``. Several retrieved chunks may share one source key, so
recall counts *distinct* relevant keys found, while precision counts relevant
*positions* in the top ``k`` and always divides by ``k`` (a short list is not rewarded).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def recall_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the relevant keys found in the top ``k`` (1.0 when nothing is relevant)."""
    _check_k(k)
    if not relevant:
        return 1.0
    return len(set(retrieved[:k]) & set(relevant)) / len(set(relevant))


def precision_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Relevant positions in the top ``k``, divided by ``k``."""
    _check_k(k)
    wanted = set(relevant)
    return sum(1 for key in retrieved[:k] if key in wanted) / k


def hit_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 when any relevant key is in the top ``k``, else 0.0."""
    _check_k(k)
    wanted = set(relevant)
    return 1.0 if any(key in wanted for key in retrieved[:k]) else 0.0


def reciprocal_rank(retrieved: Sequence[str], relevant: Collection[str]) -> float:
    """1 / rank of the first relevant key (1-based), 0.0 when none is retrieved."""
    wanted = set(relevant)
    for rank, key in enumerate(retrieved, start=1):
        if key in wanted:
            return 1.0 / rank
    return 0.0


def retrieval_scores(retrieved: Sequence[str], relevant: Collection[str], ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
    """Every metric for one query: ``recall@k``, ``precision@k``, ``hit@k`` per ``k``, and ``mrr``."""
    scores: dict[str, float] = {}
    for k in ks:
        scores[f"recall@{k}"] = recall_at_k(retrieved, relevant, k)
        scores[f"precision@{k}"] = precision_at_k(retrieved, relevant, k)
        scores[f"hit@{k}"] = hit_at_k(retrieved, relevant, k)
    scores["mrr"] = reciprocal_rank(retrieved, relevant)
    return scores


def mean_scores(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric over queries (metrics missing from a row are left out of its mean)."""
    columns: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row.items():
            columns.setdefault(name, []).append(float(value))
    return {name: statistics.fmean(values) for name, values in columns.items()}
