"""Evaluation metrics: retrieval metrics over ranked keys, and answer metrics over key facts.

Retrieval metrics are pure functions of a ranked list of keys and a set of relevant keys. A *key* is whatever relevance is labelled by: a chunk id, or a document source such
as ``pydoc:asyncio.tasks``. Several retrieved chunks may share one source key, so
recall counts *distinct* relevant keys found, while precision counts relevant
*positions* in the top ``k`` and always divides by ``k`` (a short list is not rewarded).
"""

from __future__ import annotations

import re
import statistics
import unicodedata
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


def retrieval_scores(
    retrieved: Sequence[str], relevant: Collection[str], ks: Iterable[int] = DEFAULT_KS
) -> dict[str, float]:
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


_NON_WORD = re.compile(r"[^\w]+")


def normalize_text(text: str) -> str:
    """Return text for containment checks: NFKC, case-folded, punctuation as single spaces.

    ``"(done, pending)"`` and ``"done pending"`` compare equal; underscores are kept,
    so ``cache_info`` stays one word.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())


def fact_found(fact: str, text: str) -> bool:
    """Whether a key fact occurs in a text, compared normalised and on word boundaries."""
    wanted = normalize_text(fact)
    if not wanted:
        raise ValueError(f"key fact {fact!r} is empty once normalised")
    return f" {wanted} " in f" {normalize_text(text)} "


def key_fact_recall(answer: str | None, key_facts: Sequence[str | Sequence[str]]) -> float:
    """Share of the key facts an answer contains (0.0 for no answer, 1.0 when there are none).

    A key fact given as a list of alternatives is found when any one of them is.
    """
    if not key_facts:
        return 1.0
    if not answer:
        return 0.0
    found = 0
    for fact in key_facts:
        alternatives = [fact] if isinstance(fact, str) else fact
        found += any(fact_found(alt, answer) for alt in alternatives)
    return found / len(key_facts)


def quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of the values (``None`` for none)."""
    if not 0 <= q <= 1:
        raise ValueError(f"q must be between 0 and 1, got {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def distribution(values: Iterable[float]) -> dict[str, float | int | None]:
    """``count``, ``mean``, ``p50``, ``p95``, ``min`` and ``max`` of the values."""
    items = [float(v) for v in values]
    if not items:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "min": None, "max": None}
    return {
        "count": len(items),
        "mean": statistics.fmean(items),
        "p50": quantile(items, 0.5),
        "p95": quantile(items, 0.95),
        "min": min(items),
        "max": max(items),
    }
