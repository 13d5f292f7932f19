"""Write documents into the knowledge base: embed in batches, bulk-insert, count.

Each batch (about `batch_size` chunks, whole documents only) is one transaction:
for every document it re-checks the stored content hash under a row lock, deletes
the old chunks of a changed document, then binary-`COPY`s the new chunks and
their embeddings. A failure anywhere in a batch rolls the whole batch back, so a
document is never half-written and a replaced document keeps its old chunks.
Embedding batch *n + 1* overlaps with writing batch *n* (one writer thread).

Large loads (at least `BULK_MIN_CHUNKS` new chunks, and at least a fifth of the
rows already in the dimension's table) drop the HNSW index first and rebuild it
once at the end: inserting into a live HNSW index is about 6x slower per row
than building it, and searches stay correct meanwhile (exact scans). A load
that at least doubles `kb_chunks` does the same with its full-text GIN index
(searches meanwhile scan the table). Every other ingest ends by merging the GIN
index's pending list, which each full-text search would otherwise scan
linearly (2.5 ms a query with a full 4 MB list).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from knowledge.errors import EmbeddingMismatch
from knowledge.loading import CHUNK_ID_CHARS, ChunkRow, SourceDoc, document_id, split_document
from knowledge.schema import (
    create_fulltext_index,
    create_hnsw_index,
    drop_fulltext_index,
    drop_hnsw_index,
    embeddings_table,
    merge_fulltext_pending,
)
from knowledge.types import IngestResult, ProgressFn

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1000
BULK_MIN_CHUNKS = 5000
REBUILD_FRACTION = 5
"""Rebuild the HNSW index when the new chunks are at least 1/REBUILD_FRACTION of the stored ones."""


@dataclass(frozen=True)
class CollectionRef:
    """A resolved collection: database id, name and embedding dimension."""

    id: int
    name: str
    dimension: int


@dataclass
class _Planned:
    doc: SourceDoc
    doc_id: str
    chunks: list[ChunkRow]


@dataclass
class _Batch:
    items: list[_Planned] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(item.chunks) for item in self.items)

    def texts(self) -> list[str]:
        return [c.text for item in self.items for c in item.chunks]


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Return a copy of `metadata`, or raise `ValueError` if it is not JSON-serialisable."""
    data = dict(metadata or {})
    try:
        json.dumps(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be JSON-serialisable: {exc}") from exc
    return data


def embed_matrix(embeddings: Embeddings, texts: list[str], dimension: int) -> np.ndarray[Any, Any]:
    """Embed `texts` into a float32 matrix, checking the dimension.

    Raises:
        EmbeddingMismatch: if the embedder returns vectors of another dimension.
    """
    embed_array = getattr(embeddings, "embed_array", None)
    if callable(embed_array):
        matrix = np.asarray(embed_array(texts), dtype=np.float32)
    else:
        matrix = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise EmbeddingMismatch(
            f"embedder returned vectors of shape {matrix.shape}, collection expects {dimension}"
        )
    return matrix


def write_documents(
    pool: ConnectionPool[Any],
    embeddings: Embeddings,
    coll: CollectionRef,
    docs: Sequence[SourceDoc],
    *,
    chunk_size: int,
    chunk_overlap: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: ProgressFn | None = None,
    result: IngestResult,
) -> IngestResult:
    """Embed and store `docs` in `coll`, updating and returning `result`."""
    pending = _drop_unchanged(pool, coll, docs, result)
    planned = [
        _Planned(
            d,
            document_id(coll.name, d.source),
            split_document(
                d, collection=coll.name, chunk_size=chunk_size, chunk_overlap=chunk_overlap
            ),
        )
        for d in pending
    ]
    batches = _batches(planned, batch_size)
    total = sum(b.size for b in batches)
    if progress is not None:
        progress(0, total)
    bulk = _bulk_load(pool, coll, total)
    try:
        _run_pipeline(pool, embeddings, coll, batches, total, progress, result)
    finally:
        if total:
            _after_load(pool, coll, bulk)
    return result


def _after_load(pool: ConnectionPool[Any], coll: CollectionRef, bulk: _Bulk) -> None:
    """Rebuild what a bulk load dropped, refresh statistics, merge the GIN pending list."""
    with pool.connection() as conn:
        if bulk.fulltext:
            create_fulltext_index(conn)
        else:
            merge_fulltext_pending(conn)
        if bulk.hnsw:
            create_hnsw_index(conn, coll.dimension)
        if bulk.hnsw or bulk.fulltext:
            # fresh statistics for the exact-versus-HNSW choice in search, and
            # the word frequencies the full-text OR fallback reads
            conn.execute(sql.SQL("ANALYZE {t}").format(t=embeddings_table(coll.dimension)))
            conn.execute("ANALYZE kb_chunks")


def _drop_unchanged(
    pool: ConnectionPool[Any], coll: CollectionRef, docs: Sequence[SourceDoc], result: IngestResult
) -> list[SourceDoc]:
    """Skip documents whose source and content hash are already stored (no embedding)."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT source, content_hash FROM kb_documents"
            " WHERE collection_id = %s AND source = ANY(%s)",
            (coll.id, [d.source for d in docs]),
        ).fetchall()
    stored = dict(rows)
    pending: dict[str, SourceDoc] = {}
    for doc in docs:
        if stored.get(doc.source) == doc.content_hash or doc.source in pending:
            result.documents_skipped += 1  # unchanged, or the same source twice in one call
        else:
            pending[doc.source] = doc
    return list(pending.values())


def _batches(planned: list[_Planned], batch_size: int) -> list[_Batch]:
    batches = [_Batch()]
    for item in planned:
        if batches[-1].items and batches[-1].size + len(item.chunks) > batch_size:
            batches.append(_Batch())
        batches[-1].items.append(item)
    return [b for b in batches if b.items]


@dataclass(frozen=True)
class _Bulk:
    """Which indexes a load dropped, to rebuild once at its end."""

    hnsw: bool = False
    fulltext: bool = False


def _bulk_load(pool: ConnectionPool[Any], coll: CollectionRef, total: int) -> _Bulk:
    """Drop the indexes a load of `total` chunks is worth rebuilding; say which.

    Measured at 88k rows (256 dimensions, 2 cores): building the HNSW index
    costs 0.31 ms a row, inserting into the live index 1.96 ms a row; the live
    inserts overlap with embedding, but a rebuild also covers the rows already
    there, so it wins once the new rows are about a fifth of the stored ones
    (`REBUILD_FRACTION`). The GIN index costs 36 us a row live and 12 us a row to
    build, cheap enough live that it is only dropped when the load at least
    doubles the table (an empty table, typically).
    """
    if total < BULK_MIN_CHUNKS:
        return _Bulk()
    with pool.connection() as conn:
        row = conn.execute(
            sql.SQL("SELECT (SELECT count(*) FROM {t}), (SELECT count(*) FROM kb_chunks)").format(
                t=embeddings_table(coll.dimension)
            )
        ).fetchone()
        vectors, chunks = row if row is not None else (0, 0)
        bulk = _Bulk(hnsw=total * REBUILD_FRACTION >= vectors, fulltext=total >= chunks)
        if bulk.hnsw:
            drop_hnsw_index(conn, coll.dimension)
        if bulk.fulltext:
            drop_fulltext_index(conn)
    if bulk.hnsw or bulk.fulltext:
        logger.info("bulk load of %d chunks: rebuilding %s after the load", total, bulk)
    return bulk


def _run_pipeline(
    pool: ConnectionPool[Any],
    embeddings: Embeddings,
    coll: CollectionRef,
    batches: list[_Batch],
    total: int,
    progress: ProgressFn | None,
    result: IngestResult,
) -> None:
    """Embed batch n+1 while batch n is written; apply counts only after each commit."""
    done = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-writer") as writer:
        inflight: Future[IngestResult] | None = None
        for batch in batches:
            matrix = embed_matrix(embeddings, batch.texts(), coll.dimension)
            if inflight is not None:
                done += _merge(result, inflight.result())
                _report(progress, done, total)
            inflight = writer.submit(_write_batch, pool, coll, batch, matrix)
        if inflight is not None:
            done += _merge(result, inflight.result())
            _report(progress, done, total)


def _merge(result: IngestResult, delta: IngestResult) -> int:
    result.documents_added += delta.documents_added
    result.documents_replaced += delta.documents_replaced
    result.documents_skipped += delta.documents_skipped
    result.chunks_added += delta.chunks_added
    result.chunks_removed += delta.chunks_removed
    return delta.chunks_added


def _report(progress: ProgressFn | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def _write_batch(
    pool: ConnectionPool[Any], coll: CollectionRef, batch: _Batch, matrix: np.ndarray[Any, Any]
) -> IngestResult:
    """Write one batch in one transaction and return its counts."""
    delta = IngestResult()
    parts = _split_rows(matrix, batch)
    with pool.connection() as conn, conn.transaction():
        keep = _upsert_documents(conn, coll, batch.items, delta)
        kept = [
            (item, part)
            for item, part, ok in zip(batch.items, parts, keep, strict=True)
            if ok
        ]
        _copy_chunks(conn, coll, kept)
        delta.chunks_added = sum(len(item.chunks) for item, _ in kept)
    return delta


def _split_rows(matrix: np.ndarray[Any, Any], batch: _Batch) -> list[np.ndarray[Any, Any]]:
    bounds = np.cumsum([len(item.chunks) for item in batch.items])[:-1]
    return list(np.split(matrix, bounds))


def _upsert_documents(
    conn: psycopg.Connection[Any], coll: CollectionRef, items: list[_Planned], delta: IngestResult
) -> list[bool]:
    """Insert or replace the batch's document rows; return, per item, whether to write it.

    One locking read and one insert for the whole batch (a statement per document
    cost two round trips each). Rows are locked in id order, so two writers with
    overlapping batches wait for each other instead of deadlocking.
    """
    stored = dict(
        conn.execute(
            "SELECT id, content_hash FROM kb_documents WHERE id = ANY(%s) ORDER BY id FOR UPDATE",
            ([item.doc_id for item in items],),
        ).fetchall()
    )
    keep = []
    new: list[_Planned] = []
    for item in items:
        known = stored.get(item.doc_id)
        if known == item.doc.content_hash:
            delta.documents_skipped += 1  # another writer stored the same content meanwhile
            keep.append(False)
            continue
        keep.append(True)
        if known is None:
            new.append(item)
        else:
            _replace_document(conn, item, delta)
    if new:
        conn.execute(
            "INSERT INTO kb_documents (id, collection_id, source, content_hash, metadata)"
            " SELECT d.id, %s, d.source, d.hash, d.meta"
            " FROM unnest(%s::text[], %s::text[], %s::text[], %s::jsonb[]) AS d(id, source, hash, meta)",
            (
                coll.id,
                [item.doc_id for item in new],
                [item.doc.source for item in new],
                [item.doc.content_hash for item in new],
                [Jsonb(item.doc.metadata) for item in new],
            ),
        )
        delta.documents_added += len(new)
    return keep


def _replace_document(conn: psycopg.Connection[Any], item: _Planned, delta: IngestResult) -> None:
    """Drop a changed document's old chunks and record its new hash and metadata."""
    removed = conn.execute("DELETE FROM kb_chunks WHERE document_id = %s", (item.doc_id,))
    delta.chunks_removed += removed.rowcount
    conn.execute(
        "UPDATE kb_documents SET content_hash = %s, metadata = %s, created_at = now()"
        " WHERE id = %s",
        (item.doc.content_hash, Jsonb(item.doc.metadata), item.doc_id),
    )
    delta.documents_replaced += 1


def _copy_chunks(
    conn: psycopg.Connection[Any],
    coll: CollectionRef,
    kept: list[tuple[_Planned, np.ndarray[Any, Any]]],
) -> None:
    """Binary-COPY the chunk rows of a batch, then their embeddings."""
    if not kept:
        return
    with conn.cursor() as cur:
        with cur.copy(
            "COPY kb_chunks (id, document_id, collection_id, position, text, metadata)"
            " FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "int8", "int4", "text", "jsonb"])
            for item, _ in kept:
                for row in item.chunks:
                    copy.write_row(
                        (row.id, item.doc_id, coll.id, row.position, row.text, Jsonb(row.metadata))
                    )
        statement = sql.SQL(
            "COPY {t} (chunk_id, collection_id, embedding) FROM STDIN (FORMAT BINARY)"
        ).format(t=embeddings_table(coll.dimension))
        ids = [row.id for item, _ in kept for row in item.chunks]
        vectors = np.concatenate([vectors for _, vectors in kept])
        with cur.copy(statement) as copy:
            if all(len(i) == CHUNK_ID_CHARS and i.isascii() for i in ids):
                copy.write(_binary_embedding_rows(ids, coll.id, vectors))
            else:  # not our ids: let psycopg adapt row by row
                copy.set_types(["text", "int8", "vector"])
                for chunk, vector in zip(ids, vectors, strict=True):
                    copy.write_row((chunk, coll.id, vector))


_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, extension length
_COPY_TRAILER = b"\xff\xff"


def _binary_embedding_rows(ids: list[str], collection_id: int, vectors: np.ndarray[Any, Any]) -> bytes:
    """Encode embedding rows as one binary-COPY stream, built by numpy in one pass.

    Each row is three fields: the chunk id (always `CHUNK_ID_CHARS` ASCII
    characters), the collection id (int8) and pgvector's binary `vector` (int16
    dimension, int16 zero, big-endian float32s). Adapting 1,000 rows one by one
    through psycopg took several milliseconds of the writer thread per batch,
    holding the GIL the embedder also needs.
    """
    dim = vectors.shape[1]
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", f"S{CHUNK_ID_CHARS}"),
            ("coll_len", ">i4"),
            ("coll", ">i8"),
            ("vec_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("vec", ">f4", (dim,)),
        ]
    )
    rows = np.zeros(len(ids), dtype=row)
    rows["fields"] = 3
    rows["id_len"] = CHUNK_ID_CHARS
    rows["id"] = ids
    rows["coll_len"] = 8
    rows["coll"] = collection_id
    rows["vec_len"] = 4 + 4 * dim
    rows["dim"] = dim
    rows["vec"] = vectors
    return _COPY_SIGNATURE + rows.tobytes() + _COPY_TRAILER
