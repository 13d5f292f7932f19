"""What `KnowledgeBase.search` calls to put the graph in a search, and to fall back cleanly.

`plan_sync`/`plan_async` return `None` whenever the plain search should run
unchanged: `graph=False`, no collection of the scope has a graph, no entity
reaches the threshold, or the graph side failed (logged; its statements run
under a savepoint, so the text search on the same connection is unaffected).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from arcana_loop.knowledge.graph import search as gs
from arcana_loop.knowledge.types import Chunk

logger = logging.getLogger(__name__)


def graph_ids(rows: Sequence[tuple[Any, ...]], scope_ids: Sequence[int], model: str, dimension: int) -> list[int]:
    """Collections of the scope whose entity vectors this embedder can query."""
    allowed = set(scope_ids)
    return [r[0] for r in rows if r[0] in allowed and (r[2], r[3]) == (model, dimension)]


def _wanted(graph: bool | None, depth: int | None, opts: gs.GraphSearchOptions) -> int | None:
    value: object = graph
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"graph must be True, False or None, got {graph!r}")
    resolved = opts.depth if depth is None else gs.check_depth(depth)
    return None if graph is False else resolved


def plan_sync(
    conn: Any,
    *,
    ids: Sequence[int],
    dimension: int,
    vector: Callable[[], Any],
    opts: gs.GraphSearchOptions,
    graph: bool | None,
    depth: int | None,
) -> gs.GraphPlan | None:
    """The graph side of a search on a sync connection, or `None` for the plain search."""
    resolved = _wanted(graph, depth, opts)
    if resolved is None or not ids:
        return None
    try:
        with conn.transaction():
            row = conn.execute(*gs.has_graph_statement(ids)).fetchone()
            if not (row and row[0]):
                _no_graph(graph)
                return None
            plan = gs.plan_sync(conn, ids, dimension, vector(), opts, resolved)
    except Exception as exc:  # the graph is an enhancement: never fail the search for it
        logger.warning("graph search failed, plain search used: %s: %s", type(exc).__name__, exc)
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
    opts: gs.GraphSearchOptions,
    graph: bool | None,
    depth: int | None,
) -> gs.GraphPlan | None:
    """`plan_sync` on an async connection (the query vector is awaited only when needed)."""
    resolved = _wanted(graph, depth, opts)
    if resolved is None or not ids:
        return None
    try:
        async with conn.transaction():
            cur = await conn.execute(*gs.has_graph_statement(ids))
            row = await cur.fetchone()
            if not (row and row[0]):
                _no_graph(graph)
                return None
            plan = await gs.plan_async(conn, ids, dimension, await vector(), opts, resolved)
    except Exception as exc:  # as in plan_sync
        logger.warning("graph search failed, plain search used: %s: %s", type(exc).__name__, exc)
        return None
    if plan is None:
        logger.debug("no entity matched the query; plain search used")
    return plan


def _no_graph(graph: bool | None) -> None:
    if graph is True:
        logger.info("graph=True but no searched collection has a graph; plain search used")


def text_limit(limit: int, plan: gs.GraphPlan | None, opts: gs.GraphSearchOptions) -> int | None:
    """How many text results to fetch: the pool when fusing, else the caller's limit (`None`)."""
    return None if plan is None else max(limit, opts.pool)


def fuse_rows(
    text: list[Chunk],
    plan: gs.GraphPlan | None,
    extra: Sequence[Chunk],
    *,
    limit: int,
    opts: gs.GraphSearchOptions,
) -> list[Chunk]:
    """Fuse when there is a plan; otherwise the text results as they are."""
    if plan is None:
        return text
    return gs.fuse(
        text, plan, {c["id"]: c for c in extra}, limit=limit, graph_weight=opts.graph_weight
    )
