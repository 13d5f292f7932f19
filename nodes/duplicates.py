"""The duplicate-search guard (the `DuplicateSearches` policy): a repeated query is answered from the history, not sent again.

Two searches are the same when they would search identically: the same text up to
case and spacing (``C++ threads`` and ``C# threads`` are different searches), the same
scope and the same limit; the run's search options are the same for all its searches.
With ``duplicate_similarity`` set, the text may instead be merely alike (query
embeddings at least that similar); scope and limit must still match. The controller
is told when it searched that before and what came back.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from arcana_loop.core.state import ToolEvent
from arcana_loop.nodes.policy import Policy, PolicyView
from arcana_loop.tools.base import CallOutcome, Planned
from arcana_loop.tools.scoping import Scope, ScopeError
from arcana_loop.tools.search import DEFAULT_SEARCH_LIMIT, NAME, SearchCall, effective_limit

_PUNCTUATION = re.compile(r"[^\w\s.:/-]+|(?<!\w)[.:/-]|[.:/-](?!\w)")


@lru_cache(maxsize=4096)  # every turn compares against every earlier query again
def search_key(query: str) -> str:
    """Return the duplicate guard's key for a query: case-folded, runs of whitespace as one space.

    Nothing else is ignored: punctuation changes what a search finds (``C++`` and
    ``C#``; ``-snake`` may exclude a word).
    """
    return " ".join(query.casefold().split())


@lru_cache(maxsize=4096)
def normalize_query(query: str) -> str:
    """Return a loose key for reports that group similar queries: case-folded, punctuation and spacing ignored.

    Not the duplicate guard's key (`search_key`). Dots, colons, slashes and hyphens
    inside words are kept, so ``asyncio.wait_for`` and ``asyncio wait_for`` stay different.
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
    limit: int = DEFAULT_SEARCH_LIMIT
    """The number of results it asked for (after the cap)."""


def past_searches(history: Sequence[ToolEvent], scope: Scope) -> list[PastSearch]:
    """Return the searches in a tool history that really ran, oldest first."""
    past = []
    for entry in history:
        query = entry["args"].get("query")
        if entry["tool"] != NAME or "duplicate_of" in entry or not isinstance(query, str):
            continue
        limit = effective_limit(entry["args"].get("limit"))
        if "error" in entry or limit is None:  # a failed search may be sent again
            continue
        # a collection the schema did not offer was not used, so it did not narrow that search
        requested = (
            None
            if "collection" in entry.get("ignored_args", ())
            else entry["args"].get("collection")
        )
        try:
            resolved = scope.resolve(requested)
        except ScopeError:
            continue
        past.append(
            PastSearch(
                query,
                search_key(query),
                scope_key(resolved),
                entry["iteration"],
                None,
                tuple(entry["returned_chunk_ids"]),
                limit,
            )
        )
    return past


Embed = Callable[[str], Sequence[float]]


@lru_cache(maxsize=4096)
def _default_vector(text: str) -> tuple[float, ...]:
    from arcana_loop.knowledge.embeddings import default_embeddings

    return tuple(default_embeddings().embed_query(text))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return dot / norm if norm else 0.0


def find_duplicate(
    query: str,
    scope: str,
    past: Sequence[PastSearch],
    *,
    similarity: float | None,
    embed: Embed | None = None,
    limit: int = DEFAULT_SEARCH_LIMIT,
) -> PastSearch | None:
    """Return the earliest past search this one repeats (same scope and limit), or ``None``."""
    key = search_key(query)
    same_scope = [p for p in past if p.scope == scope and p.limit == limit]
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


@dataclass(slots=True)
class DuplicateGuard:
    """One turn's guard: the searches it compares a new one with, those of this turn added as planned."""

    past: list[PastSearch] = field(default_factory=list)
    similarity: float | None = None

    def check(self, step: Planned, iteration: int) -> Planned:
        """Return a planned search that repeats an earlier one as a duplicate; anything else as it is."""
        if not isinstance(step, SearchCall):
            return step
        key = scope_key(step.collection)
        earlier = find_duplicate(
            step.query, key, self.past, similarity=self.similarity, limit=step.limit
        )
        if earlier is not None:
            return CallOutcome(
                step.call_id,
                NAME,
                step.args,
                "",
                "",
                duplicate=earlier,
                rendered=False,
                ignored_args=step.ignored_args,
            )
        self.past.append(
            PastSearch(
                step.query,
                search_key(step.query),
                key,
                iteration,
                step.call_id,
                limit=step.limit,
            )
        )
        return step


class DuplicateSearches(Policy):
    """With ``duplicate_guard`` on, a planned search that repeats an earlier one (of the question or the turn) is not sent."""

    def after_plan(self, view: PolicyView, planned: list[Planned]) -> list[Planned]:
        """Replace the turn's repeated searches, in call order, with pointers to the earlier ones."""
        if not view.ctx.duplicate_guard:
            return planned
        history = view.state.get("tool_history") or []
        guard = DuplicateGuard(past_searches(history, view.scope), view.ctx.duplicate_similarity)
        iteration = max(view.turn - 1, 0)
        return [guard.check(step, iteration) for step in planned]
