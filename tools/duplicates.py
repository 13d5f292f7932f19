"""The duplicate-search guard: a repeated query is answered from the history, not sent again.

Two searches are the same when their normalised text is equal, or (optionally) when
their query embeddings are at least ``similarity`` alike, and they ran in the same
scope. The controller is told when it searched that before and what came back.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from graph.state import ToolEvent
from tools.schemas import SEARCH
from tools.scoping import Scope, ScopeError

_PUNCTUATION = re.compile(r"[^\w\s.:/-]+|(?<!\w)[.:/-]|[.:/-](?!\w)")


@lru_cache(maxsize=4096)  # every turn compares against every earlier query again
def normalize_query(query: str) -> str:
    """Return a query's comparison key: case-folded, punctuation and spacing ignored.

    Dots, colons, slashes and hyphens inside words are kept, so ``asyncio.wait_for``
    and ``asyncio wait_for`` stay different queries.
    """
    text = unicodedata.normalize("NFKC", query).casefold()
    return " ".join(_PUNCTUATION.sub(" ", text).split())


def scope_key(collection: str | list[str] | None) -> str:
    """Return a comparison key for a resolved search scope."""
    if collection is None:
        return "null"
    return json.dumps(sorted(collection) if isinstance(collection, list) else collection)


@dataclass(frozen=True, slots=True)
class PastSearch:
    """A search the run already made."""

    query: str
    key: str
    scope: str
    iteration: int
    call_id: str | None
    """Set for a search planned earlier in the same turn (its results are not known yet)."""
    returned_chunk_ids: tuple[str, ...] = ()


def past_searches(history: Sequence[ToolEvent], scope: Scope) -> list[PastSearch]:
    """Return the searches in a tool history that really ran, oldest first."""
    past = []
    for entry in history:
        query = entry["args"].get("query")
        if entry["tool"] != SEARCH or "duplicate_of" in entry or not isinstance(query, str):
            continue
        if entry["summary"].startswith("search error"):
            continue
        try:
            resolved = scope.resolve(entry["args"].get("collection"))
        except ScopeError:
            continue
        past.append(
            PastSearch(query, normalize_query(query), scope_key(resolved), entry["iteration"], None, tuple(entry["returned_chunk_ids"]))
        )
    return past


Embed = Callable[[str], Sequence[float]]


@lru_cache(maxsize=4096)
def _default_vector(text: str) -> tuple[float, ...]:
    from knowledge.embeddings import default_embeddings

    return tuple(default_embeddings().embed_query(text))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return dot / norm if norm else 0.0


def find_duplicate(
    query: str, scope: str, past: Sequence[PastSearch], *, similarity: float | None, embed: Embed | None = None
) -> PastSearch | None:
    """Return the earliest past search this one repeats, or ``None``."""
    key = normalize_query(query)
    same_scope = [p for p in past if p.scope == scope]
    for earlier in same_scope:
        if earlier.key == key:
            return earlier
    if similarity is None or not same_scope:
        return None
    vector: Callable[[str], Any] = embed or _default_vector
    mine = vector(key)
    for earlier in same_scope:
        if _cosine(mine, vector(earlier.key)) >= similarity:
            return earlier
    return None
