"""Explore one entity: its description, strongest neighbours, community summary and chunks.

`explore` backs `KnowledgeBase.explore`, and through it the controller's optional
`explore` tool (`tools/explore.py`). Names are matched normalised, first exactly,
then as the last dotted parts of an entity (`wait_for` finds `asyncio.wait_for`),
and only in the collections of the scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arcana_loop.knowledge.entities.types import normalize_name

MAX_MATCHES = 3


def explore(
    conn: Any, ids: Sequence[int], entity: str, *, neighbours: int = 10
) -> list[dict[str, Any]]:
    """Return up to `MAX_MATCHES` matching entities of the scope, each with its context."""
    key = normalize_name(entity)
    if not key or not ids:
        return []
    rows = conn.execute(
        "SELECT e.id, e.name, e.type, e.description, k.name, e.collection_id"
        " FROM kb_graph_entities e JOIN kb_collections k ON k.id = e.collection_id"
        " WHERE e.collection_id = ANY(%(ids)s)"
        " AND (e.norm_name = %(key)s OR right(e.norm_name, %(n)s) = %(suffix)s)"
        " ORDER BY e.norm_name <> %(key)s, length(e.norm_name), e.id LIMIT %(limit)s",
        {
            "ids": list(ids),
            "key": key,
            "suffix": "." + key,
            "n": len(key) + 1,
            "limit": MAX_MATCHES,
        },
    ).fetchall()
    return [_context(conn, row, neighbours) for row in rows]


def _context(conn: Any, row: tuple[Any, ...], neighbours: int) -> dict[str, Any]:
    ent_id, name, typ, description, collection, coll_id = row
    near = conn.execute(
        "SELECT e.name, sum(r.strength), array_agg(DISTINCT r.type ORDER BY r.type) FROM ("
        " SELECT target_id AS other, strength, type FROM kb_graph_relationships WHERE source_id = %(id)s"
        " UNION ALL"
        " SELECT source_id, strength, type FROM kb_graph_relationships WHERE target_id = %(id)s"
        ") r JOIN kb_graph_entities e ON e.id = r.other"
        " GROUP BY e.id, e.name ORDER BY sum(r.strength) DESC, e.name LIMIT %(n)s",
        {"id": ent_id, "n": neighbours},
    ).fetchall()
    community = conn.execute(
        "SELECT level, cardinality(members), summary FROM kb_graph_communities"
        " WHERE collection_id = %s AND %s = ANY(members) ORDER BY level LIMIT 1",
        (coll_id, ent_id),
    ).fetchone()
    chunks = conn.execute(
        "SELECT DISTINCT chunk_id FROM kb_graph_mentions WHERE entity_id = %s ORDER BY 1 LIMIT 5",
        (ent_id,),
    ).fetchall()
    return {
        "name": name,
        "type": typ,
        "description": description,
        "collection": collection,
        "neighbours": [{"name": n, "strength": float(s), "types": list(t)} for n, s, t in near],
        "community": None
        if community is None
        else {"level": community[0], "size": community[1], "summary": community[2]},
        "chunk_ids": [c[0] for c in chunks],
    }
