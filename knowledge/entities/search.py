"""Entity-enhanced retrieval: query -> entities -> neighbours -> chunks, fused with text search.

1. **Match.** The query vector is compared with the entity vectors of the
   searched collections (HNSW, cosine); the best `entity_limit` entities at or
   above `entity_threshold` are the seeds, each weighted by its similarity.
2. **Expand.** For `depth` hops, each entity reached passes
   `weight * decay * strength / strongest` to at most `fanout` of its strongest
   neighbours (relationships summed over the chunks that evidence them, either
   direction); an entity keeps the best weight any path gave it. Depth 0 is the
   seeds alone.
3. **Score chunks.** A chunk scores the sum, over the reached entities it
   mentions, of `weight * log(1 + N / df)`, where `df` is the number of chunks
   that mention the entity and `N` the number that mention any of them: an
   entity named everywhere says little about any one chunk.
4. **Fuse.** The text ranking (the search's own mode, widened to the candidate
   pool) and the entity ranking are combined by reciprocal-rank fusion,
   `1 / (k + rank_text) + entity_weight / (k + rank_entities)`, k = 60, and cut to
   `limit`. The fused value becomes each chunk's `score`.

Every statement filters on the scope's collection ids, so `[]`, one collection
or a list is enforced in SQL on this path as on the text path. When the scope
has no entities or no entity reaches the threshold, the caller runs the plain
search exactly as without entities.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

from psycopg import sql

from arcana_loop.knowledge.entities.schema import entity_vectors_table
from arcana_loop.knowledge.placed import PLACED_CHUNK_SQL
from arcana_loop.knowledge.steps import Steps
from arcana_loop.knowledge.types import Chunk

Statement = tuple[sql.Composable, dict[str, Any]]
RRF_K = 60
MAX_CHUNK_ENTITIES_SHOWN = 5
MAX_DEPTH = 4
"""Most relationship hops from the seeds (`EntitySearchOptions.depth`, a search's ``entity_depth``)."""


def _ranged(default: float, low: float, high: float | None = None) -> Any:
    """A field of `EntitySearchOptions`: its default and the range it must lie in (``high`` ``None``: no top).

    A field annotated ``int`` takes whole numbers only.
    """
    return field(default=default, metadata={"range": (low, high)})


@dataclass(frozen=True)
class EntitySearchOptions:
    """How entity-enhanced search matches, expands and fuses (defaults measured on python-docs)."""

    entity_threshold: float = _ranged(0.6, -1.0, 1)
    """Lowest cosine similarity between the query and an entity for it to be a seed."""
    entity_limit: int = _ranged(8, 1)
    """Most seed entities per query."""
    depth: int = _ranged(1, 0, MAX_DEPTH)
    """Hops through relationships from the seeds (0: the seeds only)."""
    decay: float = _ranged(0.5, 0.0, 1)
    """Weight kept per hop (times the relationship's share of its strongest edge)."""
    fanout: int = _ranged(10, 1)
    """Most neighbours an entity passes weight to per hop (its strongest)."""
    pool: int = _ranged(40, 1)
    """Chunks each side ranks before fusion."""
    entity_weight: float = _ranged(1.0, 0)
    """Weight of the entity ranking in the fusion (1.0: equal to the text ranking)."""

    def __post_init__(self) -> None:
        """Reject values that would make the entity path meaningless: any outside its field's range."""
        for option in fields(self):
            low, high = option.metadata["range"]
            # postponed annotations: the type is its text
            whole = option.type in (int, "int")
            _check_range(option.name, getattr(self, option.name), low, high, whole=whole)


def check_depth(depth: object) -> int:
    """Return `depth` if it is an int in 0..MAX_DEPTH, else raise `ValueError`."""
    _check_range("entity_depth", depth, 0, MAX_DEPTH, whole=True)
    return cast(int, depth)


def _check_range(name: str, value: object, low: float, high: float | None, *, whole: bool) -> None:
    """Raise `ValueError` unless `value` is a number (an int when `whole`) in ``low..high``."""
    if not _in_range(value, low, high, whole=whole):
        noun = "an int" if whole else "a number"
        if high is not None:
            expected = f"{noun} in {low}..{high}"
        else:
            expected = "a positive int" if whole and low == 1 else f"{noun} >= {low}"
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def _in_range(value: object, low: float, high: float | None, *, whole: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if whole and not isinstance(value, int):
        return False
    return low <= value and (high is None or value <= high)  # NaN is in no range


@dataclass
class EntityPlan:
    """What the entity side found for one query, before fusion."""

    seeds: dict[int, float]
    """Matched entity id -> similarity."""
    names: dict[int, str]
    weights: dict[int, float] = field(default_factory=dict)
    """Every reached entity id -> weight (seeds included)."""
    ranked: list[tuple[str, float, list[int]]] = field(default_factory=list)
    """`(chunk_id, entity score, entity ids it mentions, heaviest first)`, best first."""


# -- statements ------------------------------------------------------------------


def settings_statement(opts: EntitySearchOptions) -> Statement:
    """Transaction-local HNSW settings so the collection filter still yields `entity_limit` rows."""
    return (
        sql.SQL(
            "SELECT set_config('hnsw.ef_search', %(ef)s, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        ),
        {"ef": str(max(40, 4 * opts.entity_limit))},
    )


def match_statement(
    ids: Sequence[int], dimension: int, vector: Any, opts: EntitySearchOptions
) -> Statement:
    """The entities nearest to the query vector, at or above the threshold."""
    query = sql.SQL(
        "SELECT e.id, e.name, m.sim FROM ("
        " SELECT v.entity_id, 1 - (v.embedding <=> %(q)s) AS sim FROM {t} v"
        " WHERE v.collection_id = ANY(%(ids)s) ORDER BY v.embedding <=> %(q)s LIMIT %(n)s"
        ") m JOIN kb_graph_entities e ON e.id = m.entity_id"
        " WHERE m.sim >= %(threshold)s ORDER BY m.sim DESC, e.id"
    ).format(t=entity_vectors_table(dimension))
    return query, {
        "q": vector,
        "ids": list(ids),
        "n": opts.entity_limit,
        "threshold": opts.entity_threshold,
    }


def edges_statement(ids: Sequence[int], frontier: Sequence[int]) -> Statement:
    """Relationships touching the frontier, summed per (entity, neighbour), either direction."""
    query = sql.SQL(
        "SELECT r.source_id, r.target_id, sum(r.strength) FROM kb_graph_relationships r"
        " WHERE r.collection_id = ANY(%(ids)s)"
        " AND (r.source_id = ANY(%(f)s) OR r.target_id = ANY(%(f)s))"
        " GROUP BY 1, 2"
    )
    return query, {"ids": list(ids), "f": list(frontier)}


def mentions_statement(ids: Sequence[int], entity_ids: Sequence[int]) -> Statement:
    """Per (chunk, entity) of the reached entities, with the entity's chunk frequency."""
    query = sql.SQL(
        "WITH m AS (SELECT DISTINCT m.chunk_id, m.entity_id FROM kb_graph_mentions m"
        " JOIN kb_chunks c ON c.id = m.chunk_id"
        " WHERE m.entity_id = ANY(%(e)s) AND c.collection_id = ANY(%(ids)s))"
        " SELECT chunk_id, entity_id, count(*) OVER (PARTITION BY entity_id) FROM m"
    )
    return query, {"ids": list(ids), "e": list(entity_ids)}


def names_statement(entity_ids: Sequence[int]) -> Statement:
    """Names of entities reached through relationships."""
    return (
        sql.SQL("SELECT id, name FROM kb_graph_entities WHERE id = ANY(%(e)s)"),
        {"e": list(entity_ids)},
    )


def chunks_statement(ids: Sequence[int], chunk_ids: Sequence[str]) -> Statement:
    """The rows of entity-found chunks, shaped like the text search's rows (score 0)."""
    query = sql.SQL(
        "SELECT c.id, c.text, 0::float8, k.name, c.document_id, {placed}"
        " FROM kb_chunks c JOIN kb_collections k ON k.id = c.collection_id"
        " JOIN kb_documents d ON d.id = c.document_id"
        " WHERE c.id = ANY(%(c)s) AND c.collection_id = ANY(%(ids)s)"
    ).format(placed=PLACED_CHUNK_SQL)
    return query, {"ids": list(ids), "c": list(chunk_ids)}


# -- pure functions --------------------------------------------------------------


def expand_step(
    weights: Mapping[int, float],
    frontier: Sequence[int],
    edges: Sequence[tuple[int, int, float]],
    *,
    decay: float,
    fanout: int,
) -> tuple[dict[int, float], list[int]]:
    """One hop: return the new weights and the entities whose weight rose (the next frontier)."""
    neighbours: dict[int, dict[int, float]] = {}
    for a, b, strength in edges:
        for node, other in ((a, b), (b, a)):
            if node in frontier:
                bucket = neighbours.setdefault(node, {})
                bucket[other] = bucket.get(other, 0.0) + float(strength)
    out = dict(weights)
    rose: list[int] = []
    for node in frontier:
        edges_of = neighbours.get(node)
        if not edges_of:
            continue
        strongest = max(edges_of.values())
        best = sorted(edges_of.items(), key=lambda kv: (-kv[1], kv[0]))[:fanout]
        for other, strength in best:
            value = weights[node] * decay * strength / strongest
            if value > out.get(other, 0.0):
                out[other] = value
                if other not in rose:
                    rose.append(other)
    return out, rose


def rank_chunks(
    weights: Mapping[int, float], rows: Sequence[tuple[str, int, int]], pool: int
) -> list[tuple[str, float, list[int]]]:
    """Score chunks from `(chunk_id, entity_id, df)` rows; best `pool` first (ties by id)."""
    total = len({r[0] for r in rows}) or 1
    scores: dict[str, float] = {}
    entities: dict[str, list[tuple[float, int]]] = {}
    for chunk_id, entity_id, df in rows:
        part = weights.get(entity_id, 0.0) * math.log(1 + total / max(int(df), 1))
        scores[chunk_id] = scores.get(chunk_id, 0.0) + part
        entities.setdefault(chunk_id, []).append((part, entity_id))
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:pool]
    return [
        (cid, score, [e for _, e in sorted(entities[cid], key=lambda pe: (-pe[0], pe[1]))])
        for cid, score in ranked
    ]


def fuse(
    text: Sequence[Chunk],
    plan: EntityPlan,
    entity_chunks: Mapping[str, Chunk],
    *,
    limit: int,
    entity_weight: float,
) -> list[Chunk]:
    """Reciprocal-rank fusion of the text and entity rankings, marked with the path that found each."""
    fused: dict[str, float] = {}
    by_id: dict[str, Chunk] = {}
    for rank, chunk in enumerate(text, start=1):
        fused[chunk["id"]] = 1.0 / (RRF_K + rank)
        by_id[chunk["id"]] = chunk
    entity_rank: dict[str, tuple[int, list[int]]] = {}
    for rank, (chunk_id, _, ents) in enumerate(plan.ranked, start=1):
        if chunk_id not in by_id and chunk_id not in entity_chunks:
            continue  # outside the scope, or deleted since the mentions were read
        entity_rank[chunk_id] = (rank, ents)
        fused[chunk_id] = fused.get(chunk_id, 0.0) + entity_weight / (RRF_K + rank)
        by_id.setdefault(chunk_id, entity_chunks.get(chunk_id) or by_id.get(chunk_id))  # type: ignore[arg-type]
    text_ids = {c["id"] for c in text}
    order = sorted(fused, key=lambda cid: (-fused[cid], cid))[:limit]
    out = []
    for chunk_id in order:
        chunk = by_id[chunk_id]
        found_by = (["text"] if chunk_id in text_ids else []) + (
            ["entities"] if chunk_id in entity_rank else []
        )
        ents = entity_rank.get(chunk_id, (0, []))[1][:MAX_CHUNK_ENTITIES_SHOWN]
        metadata = {
            **chunk["metadata"],
            "entity_enhanced": chunk_id in entity_rank,
            "entity_names": [plan.names.get(e, str(e)) for e in ents],
            "matched_entities": len(plan.seeds),
            "found_by": found_by,
        }
        out.append(Chunk(**{**chunk, "score": fused[chunk_id], "metadata": metadata}))
    return out


# -- steps (run on a sync or an async connection by `knowledge.steps`) ----------


def _seed_plan(rows: Sequence[tuple[Any, ...]]) -> EntityPlan | None:
    if not rows:
        return None
    seeds = {int(r[0]): float(r[2]) for r in rows}
    return EntityPlan(seeds=seeds, names={int(r[0]): r[1] for r in rows}, weights=dict(seeds))


def plan_steps(
    ids: Sequence[int], dimension: int, vector: Any, opts: EntitySearchOptions, depth: int
) -> Steps[EntityPlan | None]:
    """Match, expand and score (steps for `knowledge.steps`); `None` when no entity matches."""
    yield settings_statement(opts)
    plan = _seed_plan((yield match_statement(ids, dimension, vector, opts)))
    if plan is None:
        return None
    frontier = list(plan.seeds)
    for _ in range(depth):
        if not frontier:
            break
        edges = yield edges_statement(ids, frontier)
        plan.weights, frontier = expand_step(
            plan.weights, frontier, edges, decay=opts.decay, fanout=opts.fanout
        )
    rows = yield mentions_statement(ids, list(plan.weights))
    plan.ranked = rank_chunks(plan.weights, rows, opts.pool)
    missing = {e for _, _, ents in plan.ranked for e in ents[:MAX_CHUNK_ENTITIES_SHOWN]}
    missing -= set(plan.names)
    if missing:
        plan.names.update(dict((yield names_statement(sorted(missing)))))
    return plan


def entity_only_ids(text: Sequence[Chunk], plan: EntityPlan) -> list[str]:
    """Ids the entity side ranked that the text ranking did not return (their rows must be read)."""
    have = {c["id"] for c in text}
    return [cid for cid, _, _ in plan.ranked if cid not in have]
