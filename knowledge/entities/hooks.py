"""What `KnowledgeBase.search` calls to put the entities in a search, and to fall back cleanly.

`plan_sync`/`plan_async` return `None` whenever the plain search should run
unchanged: `entities=False`, no collection of the scope has entities, no entity
reaches the threshold, or the entity side failed (logged; its statements run
under a savepoint, so the text search on the same connection is unaffected).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from arcana_loop.knowledge.entities import search as es
from arcana_loop.knowledge.types import Chunk

logger = logging.getLogger(__name__)


def entity_collection_ids(rows: Sequence[tuple[Any, ...]], scope_ids: Sequence[int], model: str, dimension: int) -> list[int]:
    """Collections of the scope whose entity vectors this embedder can query."""
    allowed = set(scope_ids)
    return [r[0] for r in rows if r[0] in allowed and (r[2], r[3]) == (model, dimension)]


def _wanted(entities: bool | None, depth: int | None, opts: es.EntitySearchOptions) -> int | None:
    value: object = entities
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"entities must be True, False or None, got {entities!r}")
    resolved = opts.depth if depth is None else es.check_depth(depth)
    return None if entities is False else resolved


def plan_sync(
    conn: Any,
    *,
    ids: Sequence[int],
    dimension: int,
    vector: Callable[[], Any],
    opts: es.EntitySearchOptions,
    entities: bool | None,
    depth: int | None,
) -> es.EntityPlan | None:
    """The entity side of a search on a sync connection, or `None` for the plain search."""
    resolved = _wanted(entities, depth, opts)
    if resolved is None or not ids:
        return None
    try:
        with conn.transaction():
            row = conn.execute(*es.has_entities_statement(ids)).fetchone()
            if not (row and row[0]):
                _no_entities(entities)
                return None
            plan = es.plan_sync(conn, ids, dimension, vector(), opts, resolved)
    except Exception as exc:  # entities are an enhancement: never fail the search for them
        logger.warning("entity search failed, plain search used: %s: %s", type(exc).__name__, exc)
        return None
    if plan is None:
        logger.debug("no entity matched the query; plain search used")
    return plan


async def plan_async(
    conn: Any,
    *,
    ids: Sequence[int],
    dimension: int,
    vector: Callable[[], Awaitable[Any]],
    opts: es.EntitySearchOptions,
    entities: bool | None,
    depth: int | None,
) -> es.EntityPlan | None:
    """`plan_sync` on an async connection (the query vector is awaited only when needed)."""
    resolved = _wanted(entities, depth, opts)
    if resolved is None or not ids:
        return None
    try:
        async with conn.transaction():
            cur = await conn.execute(*es.has_entities_statement(ids))
            row = await cur.fetchone()
            if not (row and row[0]):
                _no_entities(entities)
                return None
            plan = await es.plan_async(conn, ids, dimension, await vector(), opts, resolved)
    except Exception as exc:  # as in plan_sync
        logger.warning("entity search failed, plain search used: %s: %s", type(exc).__name__, exc)
        return None
    if plan is None:
        logger.debug("no entity matched the query; plain search used")
    return plan


def _no_entities(entities: bool | None) -> None:
    if entities is True:
        logger.info("entities=True but no searched collection has entities; plain search used")


def text_limit(limit: int, plan: es.EntityPlan | None, opts: es.EntitySearchOptions) -> int | None:
    """How many text results to fetch: the pool when fusing, else the caller's limit (`None`)."""
    return None if plan is None else max(limit, opts.pool)


def fuse_rows(
    text: list[Chunk],
    plan: es.EntityPlan | None,
    extra: Sequence[Chunk],
    *,
    limit: int,
    opts: es.EntitySearchOptions,
) -> list[Chunk]:
    """Fuse when there is a plan; otherwise the text results as they are."""
    if plan is None:
        return text
    return es.fuse(
        text, plan, {c["id"]: c for c in extra}, limit=limit, entity_weight=opts.entity_weight
    )
