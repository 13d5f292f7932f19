"""The controller's optional `explore` tool: an entity of the knowledge graph, by name.

Offered when `LoopContext.explore_tool` is on and the run searches a knowledge base;
it looks the entity up through `KnowledgeBase.explore`, limited to the run's
collection scope. A call runs as a LangChain tool (`explore_tool`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from arcana_loop.knowledge import KnowledgeBase, default_knowledge_base
from arcana_loop.tools.base import CustomCall, LoopTool, Offer, Turn

EXPLORE = "explore"
EXPLORE_DESCRIPTION = (
    "Look up one entity of the knowledge graph (a module, class, function or named term): "
    "its description, the entities most often named with it, a summary of its cluster and "
    "the ids of chunks that mention it. Use it to find related names to search for, or to "
    "check how two things relate. It does not return document text: search for that."
)
EXPLORE_ENTITY_DESCRIPTION = "The entity's name, e.g. 'asyncio.wait_for' or 'ThreadPoolExecutor'."
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"entity": {"type": "string", "description": EXPLORE_ENTITY_DESCRIPTION}},
    "required": ["entity"],
}
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
        args_schema=copy.deepcopy(_PARAMETERS),
    )


def _searched_owner(search_fn: Any) -> KnowledgeBase | None:
    """The knowledge base whose `search`/`asearch` is a run's search function, if it is one."""
    owner = getattr(search_fn, "__self__", None)
    return owner if isinstance(owner, KnowledgeBase) else None


class ExploreTool(LoopTool):
    """``explore``: offered by the ``explore_tool`` option, over the knowledge base the run searches."""

    name = EXPLORE
    description = EXPLORE_DESCRIPTION
    default = False

    def parameters(self, scope: Any) -> tuple[dict[str, Any], list[str]]:
        """``entity``, required."""
        return copy.deepcopy(_PARAMETERS["properties"]), ["entity"]

    def offered(self, offer: Offer) -> bool:
        """With ``explore_tool`` on, unless a custom tool takes the name or the run searches no knowledge base.

        That is the default knowledge base, or the one whose `search`/`asearch` is the
        run's search function; any other search function has no entities to explore.
        """
        if offer.ctx is None or not offer.ctx.explore_tool or EXPLORE in offer.custom:
            return False
        return offer.search_fn is None or _searched_owner(offer.search_fn) is not None

    def plan(self, call_id: str, args: dict[str, Any], turn: Turn) -> CustomCall:
        """Run the lookup as a LangChain tool (its errors become tool results)."""
        kb = default_knowledge_base() if turn.search_fn is None else _searched_owner(turn.search_fn)
        return CustomCall(call_id, args, explore_tool(kb, turn.scope.to_value()))


TOOL = ExploreTool()
