"""Explore one entity: its description, strongest neighbours, community summary and chunks.

`explore` backs `KnowledgeBase.explore` and the controller's optional `explore`
tool (`LoopContext.explore_tool`). Names are matched normalised, first exactly,
then as the last dotted parts of an entity (`wait_for` finds `asyncio.wait_for`),
and only in the collections of the scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from knowledge.graph.prompts import EXPLORE_DESCRIPTION, EXPLORE_ENTITY_DESCRIPTION
from knowledge.graph.types import normalize_name

EXPLORE = "explore"
MAX_MATCHES = 3
NOT_FOUND = "No entity named {name!r} in the knowledge graph."


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
        {"ids": list(ids), "key": key, "suffix": "." + key, "n": len(key) + 1, "limit": MAX_MATCHES},
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


def format_entities(name: str, found: Sequence[dict[str, Any]]) -> str:
    """Render `explore` results as the controller reads them."""
    if not found:
        return NOT_FOUND.format(name=name)
    parts = []
    for ent in found:
        lines = [f"{ent['name']} ({ent['type'] or 'entity'}, collection {ent['collection']})"]
        if ent["description"]:
            lines.append(f"Description: {ent['description']}")
        if ent["neighbours"]:
            lines.append("Related: " + ", ".join(n["name"] for n in ent["neighbours"]))
        if ent["community"] is not None:
            lines.append(f"Community ({ent['community']['size']} entities): {ent['community']['summary']}")
        if ent["chunk_ids"]:
            lines.append("Mentioned in chunks: " + ", ".join(ent["chunk_ids"]))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def explore_tool(kb: Any, collection: str | list[str] | None) -> BaseTool:
    """Return the controller's `explore` tool over `kb`, limited to `collection`."""

    def run(entity: str) -> str:
        return format_entities(entity, kb.explore(entity, collection=collection))

    return StructuredTool.from_function(
        func=run,
        name=EXPLORE,
        description=EXPLORE_DESCRIPTION,
        args_schema={
            "type": "object",
            "properties": {"entity": {"type": "string", "description": EXPLORE_ENTITY_DESCRIPTION}},
            "required": ["entity"],
        },
    )


def loop_explore_tool(search_fn: Any, collection: str | list[str] | None) -> BaseTool | None:
    """The `explore` tool for a loop run: over the knowledge base the run searches.

    That is the default knowledge base, or the one whose `search`/`asearch` is the
    run's search function; any other search function has no graph to explore (`None`).
    """
    from knowledge.base import KnowledgeBase

    if search_fn is None:
        from knowledge import default_knowledge_base

        return explore_tool(default_knowledge_base(), collection)
    owner = getattr(search_fn, "__self__", None)
    return explore_tool(owner, collection) if isinstance(owner, KnowledgeBase) else None
