"""The controller's optional `explore` tool: an entity of the knowledge graph, by name.

Offered when `LoopContext.explore_tool` is on; it looks the entity up through
`KnowledgeBase.explore`, limited to the run's collection scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from arcana_loop.knowledge import KnowledgeBase, default_knowledge_base
from arcana_loop.tools.descriptions import EXPLORE_DESCRIPTION, EXPLORE_ENTITY_DESCRIPTION

EXPLORE = "explore"
NOT_FOUND = "No entity named {name!r} in the knowledge graph."


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
            lines.append(
                f"Community ({ent['community']['size']} entities): {ent['community']['summary']}"
            )
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
    run's search function; any other search function has no entities to explore (`None`).
    """
    if search_fn is None:
        return explore_tool(default_knowledge_base(), collection)
    owner = getattr(search_fn, "__self__", None)
    return explore_tool(owner, collection) if isinstance(owner, KnowledgeBase) else None
