"""What `KnowledgeBase.search` calls to put the entities in a search, and to fall back cleanly.

`plan_steps` returns `None` whenever the plain search should run
unchanged: `entities=False`, no collection of the scope has entities, no entity
reaches the threshold, or the entity side failed (logged; its statements run
guarded, `steps.Guarded`, so the text search on the same connection is unaffected).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from arcana_loop.knowledge.entities import search as es
from arcana_loop.knowledge.steps import EMBED, Guarded, Steps
from arcana_loop.knowledge.types import Chunk

logger = logging.getLogger(__name__)


def entity_collection_ids(
    rows: Sequence[tuple[Any, ...]], scope_ids: Sequence[int], model: str, dimension: int
) -> list[int]:
    """Collections of the scope that have entities whose vectors this embedder can query.

    `rows` are `queries.scope_statement`'s: id, name, model, dimension, has entities.
    """
    allowed = set(scope_ids)
    return [r[0] for r in rows if r[0] in allowed and (r[2], r[3]) == (model, dimension) and r[4]]


def _wanted(entities: bool | None, depth: int | None, opts: es.EntitySearchOptions) -> int | None:
    value: object = entities
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"entities must be True, False or None, got {entities!r}")
    resolved = opts.depth if depth is None else es.check_depth(depth)
    return None if entities is False else resolved


def plan_steps(
    *,
    ids: Sequence[int],
    dimension: int,
    vector: Any,
    opts: es.EntitySearchOptions,
    entities: bool | None,
    depth: int | None,
) -> Steps[es.EntityPlan | None]:
    """The entity side of a search (steps for `knowledge.steps`), or `None` for the plain search.

    `vector` is the query vector, or `None` when the text search needed none: it
    is then asked for (`EMBED`) only if a collection of the scope has entities.
    """
    resolved = _wanted(entities, depth, opts)
    if resolved is None:
        return None
    if not ids:
        if entities is True:
            logger.info("entities=True but no searched collection has entities; plain search used")
        return None
    try:
        plan: es.EntityPlan | None = yield Guarded(
            _guarded_plan(ids, dimension, vector, opts, resolved)
        )
    except Exception as exc:  # entities are an enhancement: never fail the search for them
        logger.warning("entity search failed, plain search used: %s: %s", type(exc).__name__, exc)
        return None
    return plan


def _guarded_plan(
    ids: Sequence[int],
    dimension: int,
    vector: Any,
    opts: es.EntitySearchOptions,
    depth: int,
) -> Steps[es.EntityPlan | None]:
    # run guarded (a transaction, or a savepoint inside one), so a failure here leaves the
    # text search's connection usable
    query_vector = vector if vector is not None else (yield EMBED)
    plan = yield from es.plan_steps(ids, dimension, query_vector, opts, depth)
    if plan is None:
        logger.debug("no entity matched the query; plain search used")
    return plan


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
