"""Which embedder a call uses when the knowledge base was opened without one.

Each collection records the embedder it was built with (`kb_collections`:
``embedding_model``, ``dimension``). `KnowledgeBase()` with no embedder (the
CLI's, the loop's default) therefore reads and writes each collection with the
embedder that collection records, and creates new collections with the default
(`embeddings.default_embedder_name`). An existing collection keeps its embedder
until it is re-embedded (`knowledge.reembed`).

A search embeds its query once, so its scope needs one embedder: a search naming
collections of two embedders is an `EmbeddingMismatch` naming both; a search of
every collection covers those of the default embedder (or, when none uses it, of
the embedder most collections use) and says once which it left out.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from arcana_loop.knowledge.embeddings import cli_name
from arcana_loop.knowledge.errors import EmbeddingMismatch

logger = logging.getLogger(__name__)

Record = tuple[str, int]
"""What a collection records of its embedder: its name and its dimension."""

RECORDS_SQL = (
    "SELECT name, embedding_model, dimension FROM kb_collections"
    " WHERE %(n)s::text[] IS NULL OR name = ANY(%(n)s) ORDER BY name"
)
"""Each collection of a scope (``n``: names, or NULL for all) with its embedder's record."""


def choose_record(
    rows: Sequence[Sequence[Any]], names: list[str] | None, mode: str, *, default: Record
) -> Record:
    """The embedder one call uses, from its scope's `RECORDS_SQL` rows.

    Args:
        rows: (name, model, dimension) of each collection in scope.
        names: The names the call gave, or `None` for every collection.
        mode: The search mode: a full-text search embeds nothing, so any record serves.
        default: The record of the embedder new collections use.

    Raises:
        EmbeddingMismatch: if named collections record different embedders.
    """
    records = sorted({(str(r[1]), int(r[2])) for r in rows})
    if not records:
        return default
    if len(records) == 1 or mode == "fulltext":
        return default if default in records else records[0]
    if names is not None:
        first, other = _two_sides(rows)
        raise EmbeddingMismatch(
            f"collections {first[0]!r} ({first[1]}) and {other[0]!r} ({other[1]}) were embedded"
            " with different models, and a search embeds its query once: search them one at"
            f" a time, or re-embed one (arcana-loop reembed {other[0]} --embeddings"
            f" {cli_name(first[1])})"
        )
    counts = Counter((str(r[1]), int(r[2])) for r in rows)
    pick = default if default in counts else max(sorted(counts), key=lambda r: counts[r])
    _say_left_out(pick, tuple(str(r[0]) for r in rows if (str(r[1]), int(r[2])) != pick))
    return pick


def _two_sides(rows: Sequence[Sequence[Any]]) -> tuple[tuple[str, str], tuple[str, str]]:
    first = (str(rows[0][0]), str(rows[0][1]))
    other = next((str(r[0]), str(r[1])) for r in rows if (r[1], r[2]) != (rows[0][1], rows[0][2]))
    return first, other


@lru_cache(maxsize=32)
def _say_left_out(pick: Record, left: tuple[str, ...]) -> None:
    """Warn once per process (per choice) that a search of every collection leaves some out."""
    logger.warning(
        "a search of every collection covers those embedded with %s; %s %s another embedder"
        " and %s left out (name %s, or re-embed: arcana-loop reembed NAME --embeddings %s)",
        pick[0],
        ", ".join(repr(name) for name in left),
        "uses" if len(left) == 1 else "use",
        "is" if len(left) == 1 else "are",
        "it" if len(left) == 1 else "them",
        cli_name(pick[0]),
    )
