"""Attribution: tie each source chunk to the search (iteration and query) that first found it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_WORD = re.compile(r"\w+")

MIN_OVERLAP = 0.1
"""A chunk is a source of a span when at least this share of the span's words is in it."""


def search_index(tool_history: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, str | None]]:
    """Return chunk id -> (iteration, query) of the earliest search that returned it."""
    index: dict[str, tuple[int, str | None]] = {}
    for entry in tool_history:
        if entry.get("tool") != "search":
            continue
        query = (entry.get("args") or {}).get("query")
        for chunk_id in entry.get("returned_chunk_ids") or []:
            index.setdefault(
                str(chunk_id),
                (int(entry.get("iteration", 0)), query if isinstance(query, str) else None),
            )
    return index


def enrich(grounding: dict[str, Any], tool_history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Return a copy of a grounding dict whose every source names its first search (or ``None``)."""
    index = search_index(tool_history)

    def source(s: Mapping[str, Any]) -> dict[str, Any]:
        iteration, query = index.get(str(s.get("chunk_id")), (None, None))
        return {**s, "search_iteration": iteration, "search_query": query}

    def item(i: Mapping[str, Any]) -> dict[str, Any]:
        return {**i, "sources": [source(s) for s in i.get("sources") or []]}

    return {
        **grounding,
        **{
            key: [item(i) for i in grounding.get(key) or []]
            for key in ("faithful_spans", "hallucinated_spans", "claims")
        },
    }


def word_set(text: str) -> set[str]:
    """Return the lowercased words of a text."""
    return {w.lower() for w in _WORD.findall(text)}


def overlap_sources(
    text: str, chunks: Sequence[Mapping[str, Any]], min_score: float = MIN_OVERLAP
) -> list[dict[str, Any]]:
    """Return sources by word overlap: the share of the span's words found in each chunk, best first."""
    words = word_set(text)
    if not words:
        return []
    scored = []
    for chunk in chunks:
        share = len(words & word_set(str(chunk.get("text") or ""))) / len(words)
        if share >= min_score:
            scored.append(
                {
                    "chunk_id": None if chunk.get("id") is None else str(chunk["id"]),
                    "score": round(share, 4),
                }
            )
    return sorted(scored, key=lambda s: s["score"], reverse=True)
