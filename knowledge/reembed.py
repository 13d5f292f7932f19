"""Re-embed a collection in place with another embedder, from its stored chunks (nothing is parsed again).

What an interruption loses: nothing. The new vectors go into staging tables of the
collection's own (`kb_reembed_c<id>` for chunks, `kb_reembed_e<id>` for its
entities: an id and a vector of the new dimension), a batch per transaction, and
`kb_reembeds` records which embedder they are for. Meanwhile the collection keeps
its embedder and its vectors: searches and ingests go on as before. A run that
ends early leaves the staging tables, and the next run for the same embedder
embeds only what they lack (a run for another embedder starts them again, and one
for the embedder the collection has drops them). A
staging row goes with its chunk or entity (a foreign key), so what an ingest
replaced meanwhile is never swapped in.

When every chunk has its new vector, one transaction swaps them in: it locks the
collection's row (which waits for an ingest's open batch, and holds the next one
off), embeds what was written since, drops the collection's old partition and
entity vectors, fills its partition of the new dimension from the staging tables,
records the new embedder and drops the staging tables. An ingest that still holds
the old embedder stops at its next batch with `EmbeddingMismatch` (its earlier
batches are re-embedded, the rest is ingested again with the new one). Then the
partition's HNSW index is built; a knowledge base that opens and finds it missing
builds it before it answers a search.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings
from psycopg import sql
from psycopg_pool import ConnectionPool

from arcana_loop.knowledge.embeddings import embed_matrix, embedding_model_name
from arcana_loop.knowledge.entities.schema import entity_vectors_table
from arcana_loop.knowledge.entities.store import entity_text
from arcana_loop.knowledge.errors import CollectionNotFound, KnowledgeBaseError
from arcana_loop.knowledge.schema import (
    create_hnsw_index,
    create_partition,
    drop_partition,
    embeddings_table,
    ensure_dimension,
    partition_table,
)
from arcana_loop.knowledge.sections import context_line, document_title, searchable_text
from arcana_loop.knowledge.types import ProgressFn

logger = logging.getLogger(__name__)

DEFAULT_REEMBED_BATCH = 64
"""Chunks embedded and committed per transaction: what an interruption can cost again."""
_REEMBED_LOCK = 0x6B6272  # "kbr": with the collection id, one re-embed of a collection at a time

_CHUNKS = (
    "SELECT c.id, c.text, d.source, d.metadata, coalesce(c.metadata->>'section', '')"
    " FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
    " WHERE c.collection_id = %(c)s AND c.id > %(after)s"
    " AND NOT EXISTS (SELECT 1 FROM {s} s WHERE s.chunk_id = c.id)"
    " ORDER BY c.id LIMIT %(n)s"
)
_ENTITIES = (
    "SELECT e.id, e.name, e.description FROM kb_graph_entities e"
    " WHERE e.collection_id = %(c)s AND e.id > %(after)s"
    " AND NOT EXISTS (SELECT 1 FROM {s} s WHERE s.entity_id = e.id)"
    " ORDER BY e.id LIMIT %(n)s"
)


@dataclass
class ReembedResult:
    """What a re-embed did."""

    collection: str
    embedding_model: str
    """The embedder the collection records now."""
    previous_model: str
    """The one it recorded before."""
    chunks: int = 0
    """Chunks the collection holds, each now with a vector of `embedding_model`."""
    embedded: int = 0
    """Chunks this run embedded."""
    resumed: int = 0
    """Chunks an earlier, interrupted run had embedded already."""
    entities: int = 0
    """Knowledge-graph entities re-embedded."""

    @property
    def model_unchanged(self) -> bool:
        """Whether the collection was embedded with this embedder already (nothing was done)."""
        return self.embedding_model == self.previous_model and not (self.embedded or self.resumed)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON."""
        return asdict(self)


@dataclass(frozen=True)
class _Target:
    collection_id: int
    name: str
    model: str
    dimension: int
    old_model: str
    old_dimension: int

    def staging_name(self, kind: str) -> str:
        return f"kb_reembed_{kind}{self.collection_id}"

    def staging(self, kind: str) -> sql.Identifier:
        return sql.Identifier(self.staging_name(kind))


def reembed_collection(
    pool: ConnectionPool[Any],
    name: str,
    embeddings: Embeddings,
    dimension: int,
    *,
    batch_size: int = DEFAULT_REEMBED_BATCH,
    progress: ProgressFn | None = None,
) -> ReembedResult:
    """Give every chunk (and entity) of collection `name` a vector of `embeddings`; see the module.

    Raises:
        CollectionNotFound: if there is no such collection (or it was deleted meanwhile).
        KnowledgeBaseError: if another process is re-embedding it now.
    """
    model = embedding_model_name(embeddings)
    with pool.connection() as held:
        held.autocommit = True
        target = _target(held, name, model, dimension)
        result = ReembedResult(name, model, target.old_model)
        if (target.old_model, target.old_dimension) == (model, dimension):
            # already embedded with it: what an interrupted re-embed into another staged goes
            if _under_way(held, target):
                with held.transaction():
                    _drop_staging(held, target)
                    held.execute(
                        "DELETE FROM kb_reembeds WHERE collection_id = %s", (target.collection_id,)
                    )
            result.chunks = _count(held, target)
            return result
        locked = held.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (_REEMBED_LOCK, target.collection_id % 2**31)
        ).fetchone()
        if locked != (True,):
            raise KnowledgeBaseError(
                f"collection {name!r} is being re-embedded by another process now; let it finish"
            )
        try:
            ensure_dimension(held, dimension)  # the new dimension's tables, before any staging
            result.resumed = _stage(held, target)
            total = _count(held, target)
            if progress:
                progress(result.resumed, total)
            result.embedded = _embed_missing(
                held, target, embeddings, "c", batch_size, result.resumed, total, progress
            )
            if _has_entities(held):
                result.entities = _embed_missing(held, target, embeddings, "e", batch_size)
            result.chunks, more, extra = _swap(held, target, embeddings)
            result.embedded += more
            result.entities += extra
            create_hnsw_index(held, dimension, target.collection_id)
            held.execute(
                sql.SQL("ANALYZE {}").format(partition_table(dimension, target.collection_id))
            )
        finally:
            if not held.closed:
                held.execute(
                    "SELECT pg_advisory_unlock(%s, %s)",
                    (_REEMBED_LOCK, target.collection_id % 2**31),
                )
    return result


def _target(conn: psycopg.Connection[Any], name: str, model: str, dimension: int) -> _Target:
    row = conn.execute(
        "SELECT id, embedding_model, dimension FROM kb_collections WHERE name = %s", (name,)
    ).fetchone()
    if row is None:
        raise CollectionNotFound(f"no collection named {name!r}")
    return _Target(row[0], name, model, dimension, row[1], row[2])


def _under_way(conn: psycopg.Connection[Any], target: _Target) -> bool:
    row = conn.execute(
        "SELECT 1 FROM kb_reembeds WHERE collection_id = %s", (target.collection_id,)
    ).fetchone()
    return row is not None


def _stage(conn: psycopg.Connection[Any], target: _Target) -> int:
    """Create the staging tables, or keep those of an interrupted run for the same embedder; return the chunks they hold."""
    with conn.transaction():
        row = conn.execute(
            "SELECT embedding_model, dimension FROM kb_reembeds WHERE collection_id = %s",
            (target.collection_id,),
        ).fetchone()
        if row is not None and (row[0], row[1]) == (target.model, target.dimension):
            counted = conn.execute(
                sql.SQL("SELECT count(*) FROM {s}").format(s=target.staging("c"))
            ).fetchone()
            return int(counted[0]) if counted else 0
        if row is not None:
            logger.warning(
                "an interrupted re-embed of %r was for %s; starting again for %s",
                target.name,
                row[0],
                target.model,
            )
        _drop_staging(conn, target)
        conn.execute(
            "INSERT INTO kb_reembeds (collection_id, embedding_model, dimension) VALUES (%s, %s, %s)"
            " ON CONFLICT (collection_id) DO UPDATE SET embedding_model = EXCLUDED.embedding_model,"
            " dimension = EXCLUDED.dimension, started_at = now()",
            (target.collection_id, target.model, target.dimension),
        )
        vector = sql.SQL("vector({})").format(sql.Literal(target.dimension))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {s} (chunk_id text PRIMARY KEY REFERENCES kb_chunks (id)"
                " ON DELETE CASCADE, embedding {v} NOT NULL)"
            ).format(s=target.staging("c"), v=vector)
        )
        if _has_entities(conn):
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {s} (entity_id bigint PRIMARY KEY REFERENCES kb_graph_entities"
                    " (id) ON DELETE CASCADE, embedding {v} NOT NULL)"
                ).format(s=target.staging("e"), v=vector)
            )
    return 0


def _drop_staging(conn: psycopg.Connection[Any], target: _Target) -> None:
    schema = conn.execute("SELECT current_schema()").fetchone()
    for kind in ("c", "e"):  # qualified: a bare name could resolve to public's namesake
        conn.execute(
            sql.SQL("DROP TABLE IF EXISTS {}").format(
                sql.Identifier(str(schema[0]) if schema else "public", target.staging_name(kind))
            )
        )


def _embed_missing(
    conn: psycopg.Connection[Any],
    target: _Target,
    embeddings: Embeddings,
    kind: str,
    batch_size: int,
    done: int = 0,
    total: int = 0,
    progress: ProgressFn | None = None,
) -> int:
    """Embed the chunks (``c``) or entities (``e``) the staging table lacks, a committed batch at a time."""
    embedded, after = 0, ""
    while rows := _missing(
        conn, target, kind, after if kind == "c" else int(after or 0), batch_size
    ):
        ids, texts = zip(*rows, strict=True)
        vectors = embed_matrix(embeddings, list(texts), target.dimension)
        with conn.transaction():
            _write_staged(conn, target, kind, list(ids), vectors)
        embedded += len(ids)
        after = ids[-1]
        if progress:
            progress(done + embedded, max(total, done + embedded))
    return embedded


def _missing(
    conn: psycopg.Connection[Any], target: _Target, kind: str, after: Any, limit: int
) -> list[tuple[Any, str]]:
    """The next chunks or entities without a staged vector, with the text each is embedded from."""
    query = _CHUNKS if kind == "c" else _ENTITIES
    rows = conn.execute(
        sql.SQL(query).format(s=target.staging(kind)),
        {"c": target.collection_id, "after": after, "n": limit},
    ).fetchall()
    if kind == "e":
        return [(r[0], entity_text(r[1], r[2])) for r in rows]
    return [
        (chunk_id, searchable_text(context_line(document_title(source, meta or {}), section), text))
        for chunk_id, text, source, meta, section in rows
    ]


def _write_staged(
    conn: psycopg.Connection[Any],
    target: _Target,
    kind: str,
    ids: list[Any],
    vectors: np.ndarray[Any, Any],
) -> None:
    column = "chunk_id" if kind == "c" else "entity_id"
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "INSERT INTO {s} ({k}, embedding) VALUES (%s, %s) ON CONFLICT DO NOTHING"
            ).format(s=target.staging(kind), k=sql.Identifier(column)),
            list(zip(ids, vectors, strict=True)),
        )


def _swap(
    conn: psycopg.Connection[Any], target: _Target, embeddings: Embeddings
) -> tuple[int, int, int]:
    """Put the staged vectors in place of the old ones, in one transaction; return (chunks, embedded here, entities here)."""
    entities = _has_entities(conn)
    with conn.transaction():
        row = conn.execute(
            "SELECT embedding_model, dimension FROM kb_collections WHERE id = %s FOR UPDATE",
            (target.collection_id,),
        ).fetchone()
        if row is None:
            raise CollectionNotFound(f"collection {target.name!r} was deleted during the re-embed")
        # written since the last batch (an ingest's batch that committed meanwhile)
        late = _embed_missing(conn, target, embeddings, "c", 1000)
        late_entities = _embed_missing(conn, target, embeddings, "e", 1000) if entities else 0
        drop_partition(conn, row[1], target.collection_id)
        if entities:
            conn.execute(
                sql.SQL("DELETE FROM {t} WHERE collection_id = %s").format(
                    t=entity_vectors_table(row[1])
                ),
                (target.collection_id,),
            )
        create_partition(conn, target.dimension, target.collection_id)
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} (chunk_id, collection_id, embedding, pending)"
                " SELECT chunk_id, %s, embedding, false FROM {s}"
            ).format(t=embeddings_table(target.dimension), s=target.staging("c")),
            (target.collection_id,),
        )
        if entities:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {t} (entity_id, collection_id, embedding)"
                    " SELECT entity_id, %s, embedding FROM {s}"
                ).format(t=entity_vectors_table(target.dimension), s=target.staging("e")),
                (target.collection_id,),
            )
        conn.execute(
            "UPDATE kb_collections SET embedding_model = %s, dimension = %s WHERE id = %s",
            (target.model, target.dimension, target.collection_id),
        )
        conn.execute("DELETE FROM kb_reembeds WHERE collection_id = %s", (target.collection_id,))
        chunks = _count(conn, target)
        _drop_staging(conn, target)
    return chunks, late, late_entities


def _count(conn: psycopg.Connection[Any], target: _Target) -> int:
    row = conn.execute(
        "SELECT count(*) FROM kb_chunks WHERE collection_id = %s", (target.collection_id,)
    ).fetchone()
    return int(row[0]) if row else 0


def _has_entities(conn: psycopg.Connection[Any]) -> bool:
    return conn.execute("SELECT to_regclass('kb_graph_entities')").fetchone() != (None,)
