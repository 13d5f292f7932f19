"""Write extractions into the entity tables, and keep them consistent with the chunks.

`write_extractions` is one transaction for a set of chunks: it removes what
those chunks said before (mentions, relationship evidence), writes what they
say now, marks the chunks as seen, prunes entities no chunk mentions any more
and marks the collection's communities dirty. A chunk deleted meanwhile is
simply left out (its rows would violate a foreign key). Either all of it
commits or none of it does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from arcana_loop.knowledge.entities.offline import CO_OCCURS
from arcana_loop.knowledge.entities.schema import entity_vectors_table
from arcana_loop.knowledge.entities.types import ChunkText, Extraction, normalize_name
from arcana_loop.knowledge.placed import PLACED_POSITION_SQL

EmbedFn = Callable[[list[str]], np.ndarray[Any, Any]]
_ENTITY_LOCK = 0x6B6772  # "kgr": with the collection id, serialises entity writes per collection
UNDIRECTED_TYPES = frozenset({CO_OCCURS})
"""Relationship types whose direction means nothing: stored with the ends in a fixed order."""


@dataclass
class _Entity:
    name: str
    type: str
    description: str


@dataclass
class Prepared:
    """Extractions merged into rows keyed by normalised entity name."""

    entities: dict[str, _Entity] = field(default_factory=dict)
    mentions: list[tuple[str, str, int, int]] = field(default_factory=list)
    relationships: dict[tuple[str, str, str, str], tuple[str, float]] = field(default_factory=dict)
    """`(source, target, type, chunk_id) -> (description, strength)`."""
    chunks: dict[str, str | None] = field(default_factory=dict)
    """Chunk id -> skipped reason (`None` when used)."""


def prepare(extractions: Sequence[Extraction]) -> Prepared:
    """Merge extractions: the first name, type and description of an entity win."""
    out = Prepared()
    for ext in extractions:
        out.chunks[ext.chunk_id] = ext.skipped
        if ext.skipped is not None:
            continue
        for ent in ext.entities:
            key = normalize_name(ent.name)
            if not key:
                continue
            held = out.entities.setdefault(key, _Entity(ent.name, ent.type, ent.description))
            held.type = held.type or ent.type
            held.description = held.description or ent.description
            out.mentions += [(key, ext.chunk_id, s, max(s, e)) for s, e in set(ent.spans)]
        for rel in ext.relationships:
            src, tgt = normalize_name(rel.source), normalize_name(rel.target)
            if src == tgt or src not in out.entities or tgt not in out.entities:
                continue
            if rel.type in UNDIRECTED_TYPES and tgt < src:
                src, tgt = tgt, src
            rkey = (src, tgt, rel.type, ext.chunk_id)
            old = out.relationships.get(rkey)
            if old is None or rel.strength > old[1]:
                out.relationships[rkey] = (rel.description, float(rel.strength))
    return out


def entity_text(name: str, description: str) -> str:
    """Return the text an entity is embedded from: its name, then its description."""
    return f"{name}. {description}" if description else name


def write_extractions(
    conn: psycopg.Connection[Any],
    *,
    collection_id: int,
    dimension: int,
    extractor: str,
    prepared: Prepared,
    vectors: np.ndarray[Any, Any],
) -> None:
    """Write `prepared` (with one vector per entity, in order) in one transaction."""
    chunk_ids = list(prepared.chunks)
    with conn.transaction():
        lock(conn, collection_id)
        conn.execute("DELETE FROM kb_graph_mentions WHERE chunk_id = ANY(%s)", (chunk_ids,))
        conn.execute("DELETE FROM kb_graph_relationships WHERE chunk_id = ANY(%s)", (chunk_ids,))
        live = {
            r[0]
            for r in conn.execute(
                "SELECT id FROM kb_chunks WHERE id = ANY(%s) AND collection_id = %s",
                (chunk_ids, collection_id),
            ).fetchall()
        }
        mentions = [m for m in prepared.mentions if m[1] in live]
        used = {m[0] for m in mentions}
        keys = sorted(k for k in prepared.entities if k in used)  # one lock order for every writer
        ids = _upsert_entities(conn, collection_id, prepared, keys)
        index = {k: i for i, k in enumerate(prepared.entities)}
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {t} (entity_id, collection_id, embedding) VALUES (%s, %s, %s)"
                    " ON CONFLICT (entity_id) DO NOTHING"
                ).format(t=entity_vectors_table(dimension)),
                [(ids[k], collection_id, vectors[index[k]]) for k in keys],
            )
        _insert_mentions(conn, ids, mentions)
        _insert_relationships(conn, collection_id, ids, prepared, live)
        conn.execute(
            "INSERT INTO kb_graph_chunks (chunk_id, collection_id, skipped_reason)"
            " SELECT u.c, %s, u.r FROM unnest(%s::text[], %s::text[]) AS u(c, r)"
            " ON CONFLICT (chunk_id) DO UPDATE SET skipped_reason = EXCLUDED.skipped_reason",
            (
                collection_id,
                [c for c in chunk_ids if c in live],
                [prepared.chunks[c] for c in chunk_ids if c in live],
            ),
        )
        mark_dirty(conn, collection_id, extractor)
        prune(conn, collection_id)


def _upsert_entities(
    conn: psycopg.Connection[Any], collection_id: int, prepared: Prepared, keys: list[str]
) -> dict[str, int]:
    if not keys:
        return {}
    ents = [prepared.entities[k] for k in keys]
    rows = conn.execute(
        "INSERT INTO kb_graph_entities (collection_id, name, norm_name, type, description)"
        " SELECT %s, u.n, u.k, u.t, u.d"
        " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS u(n, k, t, d)"
        " ON CONFLICT (collection_id, norm_name) DO UPDATE SET"
        "  type = CASE WHEN kb_graph_entities.type = '' THEN EXCLUDED.type"
        "   ELSE kb_graph_entities.type END,"
        "  description = CASE WHEN kb_graph_entities.description = '' THEN EXCLUDED.description"
        "   ELSE kb_graph_entities.description END"
        " RETURNING norm_name, id",
        (
            collection_id,
            [e.name for e in ents],
            keys,
            [e.type for e in ents],
            [e.description for e in ents],
        ),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def _insert_mentions(
    conn: psycopg.Connection[Any], ids: dict[str, int], mentions: list[tuple[str, str, int, int]]
) -> None:
    if not mentions:
        return
    conn.execute(
        "INSERT INTO kb_graph_mentions (entity_id, chunk_id, start_offset, end_offset)"
        " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::int[])"
        " ON CONFLICT DO NOTHING",
        (
            [ids[m[0]] for m in mentions],
            [m[1] for m in mentions],
            [m[2] for m in mentions],
            [m[3] for m in mentions],
        ),
    )


def _insert_relationships(
    conn: psycopg.Connection[Any],
    collection_id: int,
    ids: dict[str, int],
    prepared: Prepared,
    live: set[str],
) -> None:
    rows = [
        (ids[s], ids[t], c, typ, desc, strength)
        for (s, t, typ, c), (desc, strength) in prepared.relationships.items()
        if c in live and s in ids and t in ids
    ]
    if not rows:
        return
    conn.execute(
        "INSERT INTO kb_graph_relationships"
        " (source_id, target_id, chunk_id, collection_id, type, description, strength)"
        " SELECT u.s, u.t, u.c, %s, u.y, u.d, u.w FROM unnest("
        "  %s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::text[], %s::float8[]"
        " ) AS u(s, t, c, y, d, w) ON CONFLICT DO NOTHING",
        (collection_id, *[[r[i] for r in rows] for i in range(6)]),
    )


def lock(conn: psycopg.Connection[Any], collection_id: int) -> None:
    """Take the collection's entity write lock until the transaction ends.

    Without it, a prune could delete an entity another transaction is adding
    mentions to: the prune's NOT EXISTS reads its own snapshot.
    """
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_ENTITY_LOCK, collection_id % 2**31))


def mark_dirty(conn: psycopg.Connection[Any], collection_id: int, extractor: str | None) -> None:
    """Record that the collection's entities changed (its communities are stale)."""
    if extractor is None:
        conn.execute(
            "UPDATE kb_graph_collections SET dirty = true, version = version + 1,"
            " updated_at = now() WHERE collection_id = %s",
            (collection_id,),
        )
        return
    conn.execute(
        "INSERT INTO kb_graph_collections (collection_id, extractor) VALUES (%s, %s)"
        " ON CONFLICT (collection_id) DO UPDATE SET dirty = true,"
        " version = kb_graph_collections.version + 1, extractor = EXCLUDED.extractor,"
        " updated_at = now()",
        (collection_id, extractor),
    )


def prune(conn: psycopg.Connection[Any], collection_id: int) -> int:
    """Delete the collection's entities that no chunk mentions; return how many went."""
    cur = conn.execute(
        "DELETE FROM kb_graph_entities e WHERE e.collection_id = %s"
        " AND NOT EXISTS (SELECT 1 FROM kb_graph_mentions m WHERE m.entity_id = e.id)",
        (collection_id,),
    )
    return cur.rowcount


def after_chunks_removed(conn: psycopg.Connection[Any], collection_ids: Sequence[int]) -> None:
    """Keep entities consistent after chunks of these collections were deleted or replaced.

    Mentions and relationship evidence went with their chunks (cascade); what is
    left is entities nobody mentions, and communities that may have changed.
    """
    rows = conn.execute(
        "SELECT collection_id FROM kb_graph_collections WHERE collection_id = ANY(%s)",
        (list(collection_ids),),
    ).fetchall()
    for (coll_id,) in sorted(rows):
        lock(conn, coll_id)
        prune(conn, coll_id)
        mark_dirty(conn, coll_id, None)


def has_entities(conn: psycopg.Connection[Any], collection_id: int) -> bool:
    """Whether entities were ever built for the collection."""
    row = conn.execute(
        "SELECT 1 FROM kb_graph_collections WHERE collection_id = %s", (collection_id,)
    ).fetchone()
    return row is not None


def pending_chunks(
    conn: psycopg.Connection[Any], collection_id: int, *, rebuild: bool
) -> list[ChunkText]:
    """Return the chunks the extractor has not used yet (all of them with `rebuild`).

    Chunks an extractor skipped count as not used, so a later build retries them.
    """
    query = sql.SQL(
        "SELECT c.id, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
        " LEFT JOIN kb_graph_chunks g ON g.chunk_id = c.id"
        " WHERE c.collection_id = %s"
        " AND (%s OR g.chunk_id IS NULL OR g.skipped_reason IS NOT NULL)"
        " ORDER BY c.document_id, {position}"  # in document order
    ).format(position=sql.SQL(PLACED_POSITION_SQL))
    rows = conn.execute(query, (collection_id, rebuild)).fetchall()
    return [ChunkText(r[0], r[1]) for r in rows]


def entity_counts(conn: psycopg.Connection[Any], collection_id: int) -> dict[str, int]:
    """Return entity, relationship, mention and community counts of a collection."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM kb_graph_entities WHERE collection_id = %(c)s),"
        " (SELECT count(*) FROM kb_graph_relationships WHERE collection_id = %(c)s),"
        " (SELECT count(*) FROM kb_graph_mentions m JOIN kb_graph_entities e"
        "   ON e.id = m.entity_id WHERE e.collection_id = %(c)s),"
        " (SELECT count(*) FROM kb_graph_communities WHERE collection_id = %(c)s)",
        {"c": collection_id},
    ).fetchone()
    assert row is not None  # an aggregate always returns a row
    return dict(
        zip(("entities", "relationships", "mentions", "communities"), map(int, row), strict=True)
    )
