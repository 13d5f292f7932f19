"""Write documents into the knowledge base: embed in batches, bulk-insert, count.

Each batch (about `batch_size` chunks, whole documents only) is one transaction:
for every document it re-checks the stored content hash under a row lock; of a
changed document it keeps the chunks whose id (its text under its title and
section, `loading.chunk_id`) is still among the new ones, deletes the rest, and
binary-`COPY`s only the new chunks with their embeddings. Only new chunks are
embedded: the stored chunk ids of each changed document are read before
embedding, so an edit costs about what it changed; a kept chunk the edit only
moved keeps its row too (the document's row says how its rows have shifted,
`placed.PLACED_CHUNK_SQL`). A Markdown document's unchanged runs are not even
chunked again: their chunks are carried over from the stored map
(`loading.Chunked.carried`), which also records where each chunk's row places it
(`loading.RowsAt`), so its edit reads no chunk row (`_replace_from_map`). A failure anywhere in a batch rolls the whole batch back, so a document is never half-written and a replaced
document keeps its old chunks. Embedding batch *n + 1* overlaps with writing
batch *n*: one writer thread, or `LIVE_INDEX_WRITERS` while the collection's HNSW
index is live (each batch still its own transaction; batches hold different documents).

A load of at least `BULK_MIN_CHUNKS` chunks into a collection holding fewer
drops the collection's HNSW index first (each collection has its own, on its
partition: `knowledge.schema`) and builds it once at the end, with the memory
and parallel workers the server allows: inserting into a live HNSW index costs
several times a row's share of a build. A load into a collection that already
holds rows writes its vectors pending, outside the live graph, searched exactly
beside it (`knowledge.schema`), unless it is large (`_own_segment`): then it writes a
segment of its own, whose graph is built over its rows only after the last batch, and a
collection left with more than `MAX_SEGMENTS` is compacted (`compact_segments`). When it leaves more than `PENDING_MAX_ROWS` of
them, they are taken into the graph the cheaper way (`settle_pending`): merged
into it one by one (`merge_pending`), or, once they are `REBUILD_MIN_SHARE` of the
graph's size or more, by a new graph over every row built beside the live one and
swapped in (`schema.rebuild_hnsw_beside`). A rebuild grows with the whole
collection (26 s over the first 100k chunks, 300 s at 961k), so a sync that adds
a few files never pays for one; a load that doubles a collection does, and runs
about twice as fast as it would merging (bench/README.md, `--growth`). The full-text GIN indexes, shared by
all collections, are dropped and built afterwards likewise only while `kb_chunks`
holds fewer than `BULK_MIN_CHUNKS` rows (searches meanwhile scan the table). Every other ingest
of `FULLTEXT_MERGE_MIN_CHUNKS` new chunks or more ends by merging the GIN index's pending
list, which each full-text search would otherwise scan linearly (2.5 ms a query with a
full 4 MB list); a smaller one (an edit) leaves its few entries there.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from arcana_loop.knowledge import lexical, settings
from arcana_loop.knowledge.embeddings import embed_matrix, embeds_in_process
from arcana_loop.knowledge.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    IngestError,
    StorageFull,
)
from arcana_loop.knowledge.loading import (
    CHUNK_ID_CHARS,
    Chunked,
    ChunkRow,
    SkipFn,
    SourceDoc,
    chunk_document,
    document_id,
)
from arcana_loop.knowledge.names import check_text
from arcana_loop.knowledge.placed import MOVED_KEY, NO_START, Placing, Shifts, shifted_rows
from arcana_loop.knowledge.pools import autocommitted
from arcana_loop.knowledge.schema import (
    HNSW_MAX_DIMENSION,
    add_segment,
    add_term_counts,
    count_terms_in_writer,
    create_fulltext_index,
    create_hnsw_index,
    drop_fulltext_index,
    drop_hnsw_index,
    first_segment_name,
    merge_fulltext_pending,
    merge_pending_batch,
    missing_indexes,
    partition_table,
    pending_and_stored,
    pending_vectors,
    rebuild_hnsw_beside,
    segment_sizes,
    segments,
)
from arcana_loop.knowledge.types import IngestResult, ProgressFn

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1000
BULK_MIN_CHUNKS = 5000
"""A load of this many chunks into an index holding fewer rows builds that index after it."""
FULLTEXT_MERGE_MIN_CHUNKS = 32
"""A load of fewer new chunks leaves them in the full-text indexes' pending lists (`_after_load`).

Merging the lists cost a 1 % edit of a 659-chunk document 1.6-2.5 ms (the lifecycle
bench's stage medians), a fixed cost whatever the edit; a full 4 MB list cost a full-text
search 2.5 ms at 100k chunks, and a small load adds a small part of that until merged."""
PIPELINE_MAX_CHUNKS = 64
"""An edit batch of at most this many new chunks sends its statements in pipeline mode.

After the collection row, its reads go in one flush (`_BatchReads`), the deletes' terms
are read once the new rows are sent, and the writes (the document row, the chunks and
their vectors as one INSERT each instead of a COPY, the BM25 counts) go with the commit:
an edit's write sends 7 flush or sync requests, each a wait for the server, instead of
11. On two shared cores each wait is for the server's process to be scheduled."""
LIVE_INDEX_WRITERS = 2
"""Batches written at once into a collection whose HNSW index is live (one writer otherwise)."""
MERGE_BATCH_ROWS = 500
"""Pending vectors moved into an HNSW graph per transaction (`merge_pending`)."""
REBUILD_MIN_SHARE: float = settings.REBUILD_MIN_SHARE.default
"""A load that leaves at least this many pending vectors per vector in the graph rebuilds it.

Below, its vectors are merged into the live graph (`merge_pending`). Merging p vectors into
a graph of g costs p * m, rebuilding (g + p) * b, so a rebuild is cheaper from p / g =
b / (m - b). Measured at 100k (`bench.kb_bench --growth`, 2 shared cores, WordLlama's 256
dimensions; m from 10,195 vectors merged on two connections, b from 220k rows copied and
built): m = 4.4, 3.5, 2.1, 1.8, 2.2 ms and b = 0.86, 0.49, 0.34, 0.39, 0.39 ms in five runs
as the machine's load fell from 10 to 3, so 0.24, 0.16, 0.19, 0.28, 0.22; the quiet machine's figures
(bench/README.md, 2026-12-05: m = 0.66 ms, b = 0.13 ms for 91k rows built alone) give 0.25.
Near the crossing the two cost about the same, so the choice matters little there."""


SEGMENT_MIN_SHARE = 0.05
"""A load gets a segment of its own only if it adds at least this share of its collection's vectors.

Below, it waits pending in the first segment and is merged there: a segment costs every
later search a graph walk, and a compaction (`compact_segments`) a build of its rows again,
which many small segments would make grow with the whole collection."""
MAX_SEGMENTS = 3
"""Segments a collection may hold after a load; past it, some are rebuilt into one (`compact_segments`).

Each segment is walked by every search of its collection: at 220k vectors, two segments of
110k at ``ef_search`` 300 cost 1.7-2.2x one graph's p50, four of 55k 5x (bench/README.md,
Segments); a 10 % segment beside a large one 1.0-1.2x."""


@dataclass(frozen=True)
class Upkeep:
    """When a load takes its pending vectors into the graph, and how."""

    pending_max_rows: int
    """Pending vectors a collection may keep after a load (`knowledge.schema.PENDING_MAX_ROWS`)."""
    rebuild_min_share: float
    """Pending vectors per graph vector from which the graph is rebuilt, not merged into."""
    segment_min_rows: int = settings.SEGMENT_MIN_ROWS.default
    """New chunks from which a load into a live graph gets a segment of its own."""

    @classmethod
    def from_env(cls) -> Upkeep:
        """The defaults, or what the environment says (`knowledge.settings`; tests lower them).

        Raises:
            SettingError: naming the variable, for a value that is not a number of the right kind.
        """
        return cls(
            pending_max_rows=settings.PENDING_MAX_ROWS.read(),
            rebuild_min_share=float(settings.REBUILD_MIN_SHARE.read()),
            segment_min_rows=settings.SEGMENT_MIN_ROWS.read(),
        )

    def rebuild_due(self, pending: int, stored: int) -> bool:
        """Whether `pending` of a partition's `stored` vectors are cheaper rebuilt than merged."""
        graph = stored - pending
        return pending > self.pending_max_rows and pending >= self.rebuild_min_share * graph


@dataclass(frozen=True)
class CollectionRef:
    """A resolved collection: database id, name and embedding dimension."""

    id: int
    name: str
    dimension: int
    model: str | None = None
    """The embedder the collection recorded when the write began (checked at each batch)."""


@dataclass
class _Planned:
    doc: SourceDoc
    doc_id: str
    chunked: Chunked
    """Its chunks: built in full, or carried unchanged from the stored version (`loading.Chunked`)."""
    rechunk: Callable[[], Chunked]
    """Chunks it whole, without the stored version: for when that changed since planning."""
    base: str | None = None
    """The content hash of the stored version it was chunked against, if any."""
    base_row: str | None = None
    """That version's document row (its ``xmin``): the same text stored again by another
    writer since has a row, and rows, of its own."""
    stored: frozenset[str] = frozenset()
    """Ids of its built chunks already stored when it was planned (a changed document's unchanged chunks)."""
    offset: int = 0
    """Added to the position of each row it writes, once its write placed them (`placed.shifted_rows`)."""

    @property
    def placed_by_map(self) -> bool:
        """Whether the stored map it was chunked against says where every stored chunk's row is.

        Then its write reads no chunk row (`_replace_from_map`), as long as the stored
        version is still the one it was chunked against: the writer stores a document's
        chunk rows and its map together, so the map lists exactly its rows.
        """
        return self.chunked.rows_at is not None

    @property
    def rows(self) -> list[ChunkRow]:
        """The chunks built in full."""
        return self.chunked.rows

    @property
    def fresh(self) -> list[ChunkRow]:
        """The chunks to embed: those not already stored."""
        return [c for c in self.rows if c.id not in self.stored]


@dataclass
class _Batch:
    items: list[_Planned] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Chunks to embed and write."""
        return sum(len(item.fresh) for item in self.items)

    def texts(self) -> list[str]:
        """What is embedded: each new chunk with its context (title and section path)."""
        return [c.searchable for item in self.items for c in item.fresh]

    @property
    def replaces(self) -> bool:
        """Whether it replaces a stored version of a document (an edit), so deletes chunks."""
        return any(item.base is not None for item in self.items)


@dataclass
class _TermCounts:
    """A batch's net change to its collection's BM25 counts, when it adds them itself.

    Only a batch that replaces documents counts (`schema.count_terms_in_writer`):
    a deleted chunk and its edited version share most terms, which then cost nothing.
    """

    df: Counter[int] = field(default_factory=Counter)
    """Term key to the change of its document frequency."""
    chunks: int = 0
    """The change in chunks holding terms."""

    def add(self, keys: Sequence[int] | None, sign: int) -> None:
        """Count one chunk's term keys in (`sign` 1) or out (-1); a chunk without keys is not counted."""
        if keys is None:
            return
        self.df.update(dict.fromkeys(keys, sign))
        self.chunks += sign


RESERVED_METADATA_KEYS = frozenset(
    {"start_index", "entity_enhanced", "entity_names", "matched_entities", "found_by"}
    | {"hit_start", "hit_end", "section_chunks", "merged_hits", "section_complete"}
)
"""Keys the knowledge base writes into chunk metadata itself (at ingest, in entity search,
or when a search reads a hit's whole section, `knowledge.whole`).

`source` is not among them: callers have long passed it, and it is replaced by
the document's source name, as documented for ingest.
"""
MAX_METADATA_DEPTH = 32
"""Deepest nesting of lists and dicts accepted in metadata (PostgreSQL parses jsonb recursively)."""


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Return a copy of `metadata` after checking PostgreSQL can store all of it as jsonb.

    Checked before anything is written, so a refused ingest stores nothing: keys
    are strings and none is reserved (`RESERVED_METADATA_KEYS`, which ingest or
    search set and a caller's value would be confused with or overwrite); no
    string, key or value, holds NUL or a lone surrogate; no number is NaN or
    infinite (JSON has neither); nesting is at most `MAX_METADATA_DEPTH` deep.

    Raises:
        TypeError: if `metadata` is not a dict.
        ValueError: naming the offending key path, for anything listed above or a
            value that is not JSON-serialisable.
    """
    value: object = metadata
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"metadata must be a dict, got {type(value).__name__}")
    data = dict(metadata or {})
    reserved = sorted(k for k in RESERVED_METADATA_KEYS if k in data)
    if reserved:
        raise ValueError(
            f"metadata key {reserved[0]!r} is reserved (set by the knowledge base);"
            f" reserved keys: {', '.join(sorted(RESERVED_METADATA_KEYS))}"
        )
    _check_json_tree(data)
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"metadata must be JSON-serialisable: {exc}") from exc
    return data


def _check_json_tree(data: dict[str, Any]) -> None:
    """Walk `data` without recursion, raising `ValueError` at the first value jsonb cannot hold."""
    stack: list[tuple[str, object, int]] = [("metadata", data, 0)]
    while stack:
        where, node, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise ValueError(
                f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep at {where}"
            )
        if isinstance(node, str):
            check_text(node, f"the string at {where}")
        elif isinstance(node, float) and not math.isfinite(node):
            raise ValueError(f"{where} is {node!r}: JSON has no NaN or infinity")
        elif isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise ValueError(f"metadata keys must be strings, got {key!r} in {where}")
                check_text(key, f"a key in {where}")
                stack.append((f"{where}[{key!r}]", item, depth + 1))
        elif isinstance(node, list | tuple):
            stack.extend((f"{where}[{i}]", item, depth + 1) for i, item in enumerate(node))


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
    skip: SkipFn | None = None,
) -> IngestResult:
    """Embed and store `docs` in `coll`, updating and returning `result`.

    Every document is chunked before the first write. One that cannot be (nested
    deeper than its parser recurses) is told to `skip` and left out, its stored
    version kept; without `skip` it fails the call, with nothing written.

    Raises:
        IngestError: for a document that cannot be chunked, when no `skip` is given.
        StorageFull: if the database's disk filled up; what was committed stays,
            and every index a bulk load dropped has been rebuilt if it could be.
        CollectionNotFound: if the collection was deleted during the write.
    """
    pending, stored = _changed_documents(pool, coll, docs, result)
    doc_ids = [document_id(coll.name, d.source) for d in pending]
    read_ids = functools.partial(_stored_chunk_ids, pool)
    planned = []
    for doc, doc_id in zip(pending, doc_ids, strict=True):
        try:
            item = _plan(doc, doc_id, stored.get(doc_id), coll, chunk_size, chunk_overlap, read_ids)
        except IngestError as exc:
            if skip is None:
                raise
            skip(Path(doc.source), str(exc).removeprefix(f"{doc.source}: "))
            continue
        planned.append(item)
    batches = _batches(planned, batch_size)
    total = sum(b.size for b in batches)
    upkeep = Upkeep.from_env()  # before the first write: a bad setting stores nothing
    if progress is not None:
        progress(0, total)
    try:
        _load(_Load(pool, embeddings, coll, batches, total, progress, result, upkeep=upkeep))
    except psycopg.errors.DiskFull as exc:
        raise StorageFull(_disk_full_message(pool, coll, result, exc)) from exc
    return result


def _plan(
    doc: SourceDoc,
    doc_id: str,
    version: _Stored | None,
    coll: CollectionRef,
    chunk_size: int,
    chunk_overlap: int,
    read_ids: Callable[[str], frozenset[str]],
) -> _Planned:
    """Chunk a document, against its stored version when there is one.

    The stored structure is used only when the document's metadata is the same as
    stored (a carried chunk keeps its stored metadata). A map that records its rows
    lists the stored chunks; else their ids are those `_changed_documents` read, or
    `read_ids` reads them (a map stored before maps recorded rows), and the carried
    chunks are kept only if they are all stored (else the document is chunked whole).
    """
    rechunk = functools.partial(
        chunk_document,
        doc,
        collection=coll.name,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
    )
    if version is None:
        return _Planned(doc, doc_id, rechunk(), rechunk)
    same_metadata = version.metadata == doc.metadata
    chunked = rechunk(previous=version.structure if same_metadata else None)
    if chunked.rows_at is not None:
        # a chunk the map lists is kept, unless it gained or lost an offset (then written anew)
        stored = chunked.rows_at.found
    else:
        ids = version.chunk_ids if version.chunk_ids is not None else read_ids(doc_id)
        if any(c.id not in ids for c in chunked.carried):
            chunked = rechunk()
        stored = frozenset(c.id for c in chunked.rows) & ids
    return _Planned(
        doc,
        doc_id,
        chunked,
        rechunk,
        base=version.content_hash,
        base_row=version.row,
        stored=stored,
    )


def _stored_chunk_ids(pool: ConnectionPool[Any], doc_id: str) -> frozenset[str]:
    """The ids of a stored document's chunks."""
    with autocommitted(pool) as conn:
        rows = conn.execute("SELECT id FROM kb_chunks WHERE document_id = %s", (doc_id,))
        return frozenset(row[0] for row in rows.fetchall())


@dataclass(frozen=True)
class _Load:
    """One ingest's batches, where they go, and what to tell of them."""

    pool: ConnectionPool[Any]
    embeddings: Embeddings
    coll: CollectionRef
    batches: list[_Batch]
    total: int
    """Chunks in `batches`."""
    progress: ProgressFn | None
    result: IngestResult
    """Updated as each batch commits."""
    pending: bool = False
    """Write the vectors pending: outside the live HNSW graph until merged (`merge_pending`)."""
    upkeep: Upkeep | None = None
    """When the pending vectors are taken into the graph (`settle_pending`); None: the defaults."""
    pending_seen: list[int] = field(default_factory=list)
    """The collection's pending vectors as each batch found them (written by the batches)."""
    segment: str | None = None
    """The new segment the load writes into (`_own_segment`); None: the collection's first."""


def _load(load: _Load) -> None:
    """Write the batches; whatever happens, put back the indexes a bulk load dropped."""
    bulk = _bulk_load(load.pool, load.coll, load.total)
    upkeep = load.upkeep or Upkeep.from_env()
    segment = _own_segment(load, bulk, upkeep)
    # into a live index, vectors wait outside its graph until merged (`knowledge.schema`);
    # into a segment of their own, they are its graph's rows, built after the last batch
    load = replace(
        load,
        pending=not bulk.hnsw and segment is None and load.coll.dimension <= HNSW_MAX_DIMENSION,
        segment=segment,
    )
    if segment is not None:
        bulk = replace(bulk, hnsw=True, segment=segment)
    # with the vectors pending, one writer or two made no clear difference (0.66-0.80
    # against 0.71 ms a chunk into 91k); two were worth it while writes inserted into the graph
    writers = 1 if bulk.hnsw else min(LIVE_INDEX_WRITERS, load.pool.max_size)
    try:
        _run_pipeline(load, writers)
    except BaseException:
        # the load's own error is the one to report; a failed rebuild is only logged
        try:
            _after_load(load.pool, load.coll, bulk)
        except psycopg.Error as exc:
            logger.warning("could not rebuild the indexes after a failed load: %s", exc)
        raise
    if load.total:
        _after_load(load.pool, load.coll, bulk, added=load.total)
        if segment is not None:
            compact_segments(load.pool, load.coll)
            return
        # the batches counted what was pending: a load that cannot have crossed the limit
        # (an edit, mostly) does not count again (a concurrent load may, slightly: the next settles)
        seen = max(load.pending_seen, default=upkeep.pending_max_rows)
        if load.pending and seen + load.total > upkeep.pending_max_rows:
            settle_pending(load.pool, load.coll, upkeep)


def _own_segment(load: _Load, bulk: _Bulk, upkeep: Upkeep) -> str | None:
    """Give a large load into a collection whose graph is live a new segment; return its table.

    A segment's graph is built over its own rows after the last batch (`schema.add_segment`):
    a build costs 0.3-0.8 ms a row here, a merge into the live graph 1.8-4.4 ms, a rebuild of
    the whole graph a build of every row (bench/README.md, Segments). Only a load of at least
    `Upkeep.segment_min_rows` chunks and `SEGMENT_MIN_SHARE` of the collection gets one, into
    a collection of at least `Upkeep.segment_min_rows` vectors.
    """
    if (
        bulk.hnsw
        or load.coll.dimension > HNSW_MAX_DIMENSION
        or load.total < upkeep.segment_min_rows
    ):
        return None
    with load.pool.connection() as conn:
        # a graph of some size already (a bounded count), which the load is a share of
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {p} LIMIT %s) v").format(
                p=partition_table(load.coll.dimension, load.coll.id)
            ),
            (upkeep.segment_min_rows,),
        ).fetchone()
        if (row[0] if row else 0) < upkeep.segment_min_rows or (
            load.total < SEGMENT_MIN_SHARE * _estimated_vectors(conn, load.coll)
        ):
            return None
        name = add_segment(conn, load.coll.dimension, load.coll.id)
    logger.info(
        "load of %d chunks into %r: a segment of its own (%s), its graph built after the load",
        load.total,
        load.coll.name,
        name,
    )
    return name


def _estimated_vectors(conn: psycopg.Connection[Any], coll: CollectionRef) -> int:
    """The collection's vectors as its segments' statistics estimate them (no scan)."""
    row = conn.execute(
        "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = ANY(%s)",
        ([name for _, name in segments(conn, coll.dimension, coll.id)],),
    ).fetchone()
    return int(row[0]) if row is not None else 0


def compact_segments(pool: ConnectionPool[Any], coll: CollectionRef) -> str | None:
    """Rebuild some of a collection's segments into one when it holds more than `MAX_SEGMENTS`.

    The segments other than the largest, when together they hold fewer rows than it
    (one graph over them: a build of their rows only); else all of them. Built
    beside and swapped in as a rebuild is (`schema.rebuild_hnsw_beside`). Returns
    what it did, or None.
    """
    with pool.connection() as conn:
        sizes = segment_sizes(conn, coll.dimension, coll.id)
    if len(sizes) <= MAX_SEGMENTS:
        return None
    largest = max(sizes, key=lambda n: sizes[n])
    rest = [n for n in sizes if n != largest]
    only = rest if sum(sizes[n] for n in rest) < sizes[largest] else list(sizes)
    logger.info(
        "compacting %d of the %d segments of %r (%d vectors) into one",
        len(only),
        len(sizes),
        coll.name,
        sum(sizes[n] for n in only),
    )
    try:
        with pool.connection() as conn:
            rebuilt = rebuild_hnsw_beside(conn, coll.dimension, coll.id, only=only)
    except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
        logger.warning(
            "could not swap in the compacted segments of %r (%s): they stay as they are",
            coll.name,
            str(exc).strip().splitlines()[0],
        )
        return None
    return None if rebuilt is None else "compacted"


def settle_pending(pool: ConnectionPool[Any], coll: CollectionRef, upkeep: Upkeep) -> str | None:
    """Take the collection's pending vectors into its graph if it holds too many: by rebuilding or merging.

    Nothing happens while it holds at most `upkeep.pending_max_rows`. Past that,
    the cheaper way is taken. Merging costs a live graph insertion per pending
    vector; rebuilding (`schema.rebuild_hnsw_beside`: a new graph over every
    vector, built beside the live one and swapped in) costs a build per vector of
    the collection. Measured at 100k (`bench.kb_bench --growth`, 2 cores): see
    `REBUILD_MIN_SHARE` and bench/README.md. Returns ``"rebuilt"``, ``"merged"``
    or None (nothing was due).
    """
    if coll.dimension > HNSW_MAX_DIMENSION:
        return None
    with pool.connection() as conn:
        # counted through the pending rows' index first: an edit does not scan the partition
        if pending_vectors(conn, coll.dimension, coll.id) <= upkeep.pending_max_rows:
            return None
        waiting, stored = pending_and_stored(conn, coll.dimension, coll.id)
    if waiting <= upkeep.pending_max_rows:
        return None
    if upkeep.rebuild_due(waiting, stored):
        logger.info(
            "rebuilding the HNSW graph of %r over its %d vectors (%d of them pending)",
            coll.name,
            stored,
            waiting,
        )
        try:
            with pool.connection() as conn:
                # counted again under the build lock: another load may have rebuilt it meanwhile
                rebuilt = rebuild_hnsw_beside(conn, coll.dimension, coll.id, due=upkeep.rebuild_due)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
            # what the load wrote is stored and found; failing it now would say otherwise
            logger.warning(
                "could not swap in the new HNSW graph of %r (%s): its %d pending vectors stay"
                " searched exactly beside the old one, until the next load or merge_pending",
                coll.name,
                str(exc).strip().splitlines()[0],
                waiting,
            )
            return None
        if rebuilt is not None:
            logger.info(
                "rebuilt the HNSW graph of %r: %d vectors, copied in %.1f s, built in %.1f s,"
                " swapped in %.2f s (searches waited %.2f s)",
                coll.name,
                rebuilt.rows,
                rebuilt.copy_s,
                rebuilt.build_s,
                rebuilt.swap_s,
                rebuilt.blocked_s,
            )
            return "rebuilt"
    return "merged" if merge_pending(pool, coll, above=upkeep.pending_max_rows) else None


def merge_pending(pool: ConnectionPool[Any], coll: CollectionRef, *, above: int = 0) -> int:
    """Move the collection's pending vectors into its HNSW graph if it holds more than `above`.

    Batches of `MERGE_BATCH_ROWS` commit one by one, so an interrupted merge keeps
    what it moved; `LIVE_INDEX_WRITERS` connections merge at once (a graph insert is a
    server backend's work: 1.4 ms a vector on one connection at 91k vectors, 0.8 on two).
    Returns the vectors moved.
    """
    if coll.dimension > HNSW_MAX_DIMENSION:
        return 0
    with pool.connection() as conn:
        waiting = pending_vectors(conn, coll.dimension, coll.id)
    if waiting <= above:
        return 0
    logger.info("merging %d pending vectors of %r into its HNSW graph", waiting, coll.name)

    def merge_some() -> int:
        moved = 0
        while True:
            with pool.connection() as conn, conn.transaction():
                step = merge_pending_batch(conn, coll.dimension, coll.id, MERGE_BATCH_ROWS)
            moved += step
            if step == 0:
                return moved

    writers = max(1, min(LIVE_INDEX_WRITERS, pool.max_size))
    with ThreadPoolExecutor(max_workers=writers, thread_name_prefix="kb-merge") as workers:
        return sum(workers.map(lambda _: merge_some(), range(writers)))


def _disk_full_message(
    pool: ConnectionPool[Any], coll: CollectionRef, result: IngestResult, exc: Exception
) -> str:
    try:
        with pool.connection() as conn:
            missing = missing_indexes(conn, coll.dimension)
    except psycopg.Error:  # the message must not hide the disk-full error behind another
        missing = ["full-text or HNSW"]
    indexes = (
        f"the {' and '.join(missing)} index could not be rebuilt yet (searches stay correct,"
        " scanning instead; it is rebuilt when the knowledge base is next opened)"
        if missing
        else "every index is in place"
    )
    return (
        f"the database disk is full ({str(exc).strip().splitlines()[0]}):"
        f" {result.documents_added + result.documents_replaced} document(s) of this ingest"
        f" into {coll.name!r} were stored, {indexes}; free disk space, then re-run the"
        " ingest (what was stored is skipped)"
    )


def _after_load(
    pool: ConnectionPool[Any], coll: CollectionRef, bulk: _Bulk, *, added: int = 0
) -> None:
    """Rebuild what a bulk load dropped, refresh statistics, merge the GIN pending list.

    The pending list is merged after a load of `FULLTEXT_MERGE_MIN_CHUNKS` chunks or
    more (`added`). A smaller load (an edit) leaves its few entries in the list, which
    full-text searches scan beside the index: the next larger load merges them, and
    PostgreSQL merges a list that reaches `gin_pending_list_limit` (4 MB) by itself.

    Each dropped index is rebuilt even if the other one fails, and a failed build
    is tried once more: its partial files are freed when it fails, and an index
    left missing would slow every search. The first failure is raised after
    both attempts, so the caller learns of it (a full disk, typically).
    """
    failure: psycopg.Error | None = None
    if bulk.fulltext:
        failure = _rebuild(pool, lambda conn: create_fulltext_index(conn)) or failure
    if bulk.hnsw:
        failure = (
            _rebuild(
                pool,
                lambda conn: create_hnsw_index(conn, coll.dimension, coll.id, segment=bulk.segment),
            )
            or failure
        )
    merge = not bulk.fulltext and added >= FULLTEXT_MERGE_MIN_CHUNKS
    if not (merge or bulk.hnsw or bulk.fulltext):
        return  # an edit: nothing to build, merge or count
    with pool.connection() as conn:
        if merge:
            merge_fulltext_pending(conn)
        if bulk.hnsw or bulk.fulltext:
            # fresh statistics for the exact-versus-HNSW choice in search, and
            # the word frequencies the full-text OR fallback reads
            conn.execute(sql.SQL("ANALYZE {p}").format(p=partition_table(coll.dimension, coll.id)))
            conn.execute("ANALYZE kb_chunks")
    if failure is not None:
        raise failure


def _rebuild(
    pool: ConnectionPool[Any], build: Callable[[psycopg.Connection[Any]], None]
) -> psycopg.Error | None:
    """Run one index build, twice if it fails; return the first failure, if any."""
    first: psycopg.Error | None = None
    for _ in range(2):
        try:
            with pool.connection() as conn:
                build(conn)
            return first
        except psycopg.Error as exc:
            logger.warning("rebuilding an index failed: %s", exc)
            first = first or exc
    return first


@dataclass(frozen=True)
class _Stored:
    """What a changed document is chunked against: its stored version."""

    chunk_ids: frozenset[str] | None
    """Its chunks' ids; None where its map lists them (it is used: same metadata)."""
    structure: bytes | None
    metadata: dict[str, Any]
    content_hash: str
    row: str
    """Its document row's version (``xmin``)."""


def _changed_documents(
    pool: ConnectionPool[Any], coll: CollectionRef, docs: Sequence[SourceDoc], result: IngestResult
) -> tuple[list[SourceDoc], dict[str, _Stored]]:
    """Skip documents whose source, content hash and metadata are already stored (no embedding).

    Returns the others, and the stored version of each changed one by document id
    (its structure map, metadata, hash and row version, and its chunks' ids unless the
    map lists them), read in the same statement. New metadata for unchanged text
    changes a document too: its chunks carry it, and filters read it there.
    """
    with autocommitted(pool) as conn:
        rows = conn.execute(
            # an unchanged document's structure and chunks are not read (a sync skips thousands),
            # nor the chunks of one whose map is used (it lists them)
            "SELECT d.source, d.content_hash, d.id, c.changed,"
            " CASE WHEN c.changed THEN d.structure END, CASE WHEN c.changed THEN d.metadata END,"
            " CASE WHEN c.changed AND (d.structure IS NULL OR d.metadata <> n.metadata)"
            "   THEN ARRAY(SELECT k.id FROM kb_chunks k WHERE k.document_id = d.id) END,"
            " d.xmin::text"
            " FROM kb_documents d"
            " JOIN unnest(%s::text[], %s::text[], %s::jsonb[]) AS n(source, hash, metadata)"
            " ON n.source = d.source,"
            " LATERAL (SELECT d.content_hash <> n.hash OR d.metadata <> n.metadata AS changed) c"
            " WHERE d.collection_id = %s",
            (
                [d.source for d in docs],
                [d.content_hash for d in docs],
                [Jsonb(d.metadata) for d in docs],
                coll.id,
            ),
            binary=True,  # the maps as bytes: as text (hex) they were twice the size, and parsed
        ).fetchall()
    unchanged = {row[0] for row in rows if not row[3]}
    versions = {
        doc_id: _Stored(
            None if ids is None else frozenset(ids), structure, metadata, content_hash, row
        )
        for _, content_hash, doc_id, changed, structure, metadata, ids, row in rows
        if changed
    }
    pending: dict[str, SourceDoc] = {}
    for doc in docs:
        if doc.source in unchanged or doc.source in pending:
            result.documents_skipped += 1  # unchanged, or the same source twice in one call
        else:
            pending[doc.source] = doc
    return list(pending.values()), versions


def _batches(planned: list[_Planned], batch_size: int) -> list[_Batch]:
    batches = [_Batch()]
    for item in planned:
        if batches[-1].items and batches[-1].size + len(item.rows) > batch_size:
            batches.append(_Batch())
        batches[-1].items.append(item)
    return [b for b in batches if b.items]


@dataclass(frozen=True)
class _Bulk:
    """Which indexes a load dropped, to rebuild once at its end."""

    hnsw: bool = False
    fulltext: bool = False
    segment: str | None = None
    """The load's own segment, whose graph alone is built after it (`_own_segment`)."""


def _bulk_load(pool: ConnectionPool[Any], coll: CollectionRef, total: int) -> _Bulk:
    """Drop the indexes a load of `total` chunks is worth building after it; say which.

    Only an index over (almost) nothing: the collection's HNSW index while its
    partition holds fewer than `BULK_MIN_CHUNKS` vectors, the GIN indexes while
    `kb_chunks` holds fewer than that many rows. Measured at 88k rows (256
    dimensions, 2 cores, stock settings): building the HNSW index costs 0.31 ms a
    row, inserting into the live index 1.96 ms a row; the GIN index 12 us a row to
    build, 36 us live.
    """
    if total < BULK_MIN_CHUNKS:
        return _Bulk()
    with pool.connection() as conn:
        # bounded counts: whether a table holds `BULK_MIN_CHUNKS` rows, not how many
        row = conn.execute(
            sql.SQL(
                "SELECT (SELECT count(*) FROM (SELECT 1 FROM {p} LIMIT %(n)s) v),"
                " (SELECT count(*) FROM (SELECT 1 FROM kb_chunks LIMIT %(n)s) c)"
            ).format(p=partition_table(coll.dimension, coll.id)),
            {"n": BULK_MIN_CHUNKS},
        ).fetchone()
        vectors, chunks = row if row is not None else (0, 0)
        bulk = _Bulk(hnsw=vectors < BULK_MIN_CHUNKS, fulltext=chunks < BULK_MIN_CHUNKS)
        if bulk.hnsw:
            drop_hnsw_index(conn, coll.dimension, coll.id)
        if bulk.fulltext:
            drop_fulltext_index(conn)
    if bulk.hnsw or bulk.fulltext:
        logger.info("bulk load of %d chunks: building %s after the load", total, bulk)
    return bulk


def _run_pipeline(load: _Load, writers: int) -> None:
    """Embed the next batch while up to `writers` batches are written; apply counts after each commit.

    On a failure or a Ctrl-C, the writes under way are finished before the error is
    raised, so `load.result` tells what is stored: each writer thread counts its
    batch as it commits, where a `KeyboardInterrupt` (raised in the main thread
    only) cannot fall between the commit and the count. A single batch (an edit)
    is written here, without a writer thread to start and hand over to, and embedded
    inside its transaction while the server runs its first statements (`_write_batch`),
    when the embedder runs in this process: a service is called before it begins.
    """
    if len(load.batches) == 1:
        (batch,) = load.batches
        embed = functools.partial(embed_matrix, load.embeddings, batch.texts(), load.coll.dimension)
        vectors = embed if embeds_in_process(load.embeddings) else embed()
        _report(load.progress, _merge(load.result, _write_batch(load, batch, vectors)), load.total)
        return
    done = 0
    inflight: deque[Future[int]] = deque()
    counting = threading.Lock()

    def write(batch: _Batch, matrix: np.ndarray[Any, Any]) -> int:
        """Write a batch, count it into `load.result`; its new chunks."""
        delta = _write_batch(load, batch, matrix)
        with counting:
            return _merge(load.result, delta)

    def settle(keep: int) -> None:
        """Wait for the oldest writes until at most `keep` are under way."""
        nonlocal done
        while len(inflight) > keep:
            done += inflight.popleft().result()
            _report(load.progress, done, load.total)

    # leaving the block waits for the writes under way, whatever ends it
    with ThreadPoolExecutor(max_workers=writers, thread_name_prefix="kb-writer") as pool:
        for batch in load.batches:
            matrix = embed_matrix(load.embeddings, batch.texts(), load.coll.dimension)
            settle(writers - 1)
            inflight.append(pool.submit(write, batch, matrix))
        settle(0)


def _merge(result: IngestResult, delta: IngestResult) -> int:
    result.documents_added += delta.documents_added
    result.documents_replaced += delta.documents_replaced
    result.documents_skipped += delta.documents_skipped
    result.chunks_added += delta.chunks_added
    result.chunks_removed += delta.chunks_removed
    result.chunks_reused += delta.chunks_reused
    return delta.chunks_added


def _report(progress: ProgressFn | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def _write_batch(
    load: _Load,
    batch: _Batch,
    vectors: np.ndarray[Any, Any] | Callable[[], np.ndarray[Any, Any]],
) -> IngestResult:
    """Write one batch in one transaction and return its counts.

    A batch that replaces documents counts its BM25 terms itself (`_TermCounts`);
    one of at most `PIPELINE_MAX_CHUNKS` new chunks (an edit) runs in pipeline mode.
    `vectors`: the batch's (`_Batch.texts`), or what embeds them. In pipeline mode that
    is called once the document rows are written and the chunk rows sent: the server
    then deletes, writes the map and inserts the rows while the client embeds, where
    each used to wait for the other (bench/README.md, Edits). Otherwise it is called
    before the transaction begins: its statements wait for their results, and there
    would be nothing to overlap, only locks held longer.
    """
    coll = load.coll
    delta = IngestResult()
    counts = _TermCounts() if batch.replaces else None
    pipelined = counts is not None and batch.size <= PIPELINE_MAX_CHUNKS
    # the chunks `vectors` are of: a replace may chunk its document again (`_replace_document`)
    planned = [[c.id for c in item.fresh] for item in batch.items]
    if callable(vectors) and not pipelined:
        vectors = vectors()
    with (
        load.pool.connection() as conn,
        conn.pipeline() if pipelined else contextlib.nullcontext(),
        _prepared_at_first_use(conn) if pipelined else contextlib.nullcontext(),
        # in pipeline mode `conn.transaction()` waits for the server twice more (a sync
        # after BEGIN and before COMMIT); the connection's own transaction commits below
        contextlib.nullcontext() if pipelined else conn.transaction(),
    ):
        reads = _BatchReads.send(conn, coll, batch.items, count_pending=load.pending)
        if counts is not None:
            count_terms_in_writer(conn)
        held = reads.held()
        if held.pending is not None:
            load.pending_seen.append(held.pending)
        gone: list[psycopg.Cursor[Any]] = []
        kept_ids = _upsert_documents(conn, coll, batch.items, delta, reads, gone)
        writes = [
            _Write(item.doc_id, [c for c in item.rows if c.id not in kept], item.offset)
            for item, kept in zip(batch.items, kept_ids, strict=True)
            if kept is not None
        ]
        rows = _chunk_rows(conn, coll, writes, held.average_length, counts)
        if pipelined:
            _insert_chunk_rows(conn, coll, rows)
        new_vectors = _new_vectors(
            load, batch, planned, kept_ids, vectors() if callable(vectors) else vectors
        )
        # into the segment directly: no routing of each row through the parents
        partition = sql.Identifier(load.segment or first_segment_name(coll.dimension, coll.id))
        if pipelined:
            _insert_embeddings(conn, coll, rows, partition, new_vectors, load.pending)
        else:
            _copy_chunks(conn, coll, rows, partition, new_vectors, load.pending)
        if counts is not None:
            # the deletes' terms are read only now: their results came while the rows were sent
            for cursor in gone:
                for (keys,) in cursor.fetchall():
                    counts.add(keys, -1)
            add_term_counts(conn, coll.id, counts.df, counts.chunks)
        if pipelined:
            conn.commit()  # sent with the writes: one round trip for both
        delta.chunks_added = sum(len(w.chunks) for w in writes)
    return delta


class _Held(NamedTuple):
    """What a batch reads of its collection as it locks it."""

    average_length: float | None
    """Its BM25 average chunk length, once its first batch set it."""
    pending: int | None
    """Its pending vectors before this batch, when counted."""


_StoredChunks = dict[str, tuple[int, int | None, dict[str, Any] | None]]
"""A document's stored chunks by id: position, `start_index`, and metadata if built again."""


@dataclass
class _BatchReads:
    """A batch's reads before it writes: the collection row, then the others sent together.

    The collection row is read first (locked against its deletion: a deleted
    collection has no partition to count pending vectors in). Its pending vectors,
    the batch's stored document rows (locked) and the stored chunks of each document
    planned against a stored version are then all sent before the first is read:
    on a connection in pipeline mode they cost one round trip, not one each. The
    server runs them in that order, so the chunks are read once their document is
    locked, as when read one by one.
    """

    conn: psycopg.Connection[Any]
    average_length: float | None
    """The collection's BM25 average chunk length, once its first batch set it."""
    pending: psycopg.Cursor[Any] | None
    documents: psycopg.Cursor[Any]
    chunks: dict[str, psycopg.Cursor[Any]]

    @classmethod
    def send(
        cls,
        conn: psycopg.Connection[Any],
        coll: CollectionRef,
        items: list[_Planned],
        *,
        count_pending: bool,
    ) -> _BatchReads:
        """Read (and lock) the collection row, then send the other reads (not read yet).

        Raises:
            CollectionNotFound: if the collection was deleted since the ingest began.
            EmbeddingMismatch: if it was re-embedded with another model meanwhile.
        """
        average_length = _hold_collection(conn, coll)
        pending = (
            conn.execute(
                sql.SQL("SELECT count(*) FROM {p} WHERE pending").format(
                    p=partition_table(coll.dimension, coll.id)
                )
            )
            if count_pending
            else None
        )
        documents = _send_lock(conn, [item.doc_id for item in items])
        chunks = {
            item.doc_id: _send_stored_chunks(conn, item)
            for item in items
            if item.base is not None and not item.placed_by_map
        }
        return cls(conn, average_length, pending, documents, chunks)

    def held(self) -> _Held:
        """The collection's average chunk length and, when counted, its pending vectors."""
        counted = self.pending.fetchone() if self.pending is not None else None
        return _Held(self.average_length, None if counted is None else int(counted[0]))

    def stored_chunks(self, item: _Planned) -> _StoredChunks:
        """The stored chunks of `item`'s document: read with the batch the first time, then anew.

        Read anew, they are asked for `item`'s chunks as they are now (chunked again).
        """
        sent = self.chunks.pop(item.doc_id, None)
        if sent is None:
            sent = _send_stored_chunks(self.conn, item)
        return _read_stored_chunks(sent)


def _hold_collection(conn: psycopg.Connection[Any], coll: CollectionRef) -> float | None:
    """Keep the collection from being deleted until this transaction ends; return its BM25 average length.

    `delete_collection` locks the row FOR UPDATE, which waits for this KEY SHARE
    lock; a delete that committed first leaves no row, which is reported here
    rather than as a foreign-key violation from the inserts below.

    Raises:
        CollectionNotFound: if the collection was deleted since the ingest began.
        EmbeddingMismatch: if it was re-embedded with another model meanwhile.
    """
    row = conn.execute(
        "SELECT embedding_model, dimension, stored, lex_avg_len FROM kb_collections"
        " WHERE id = %s FOR KEY SHARE",
        (coll.id,),
    ).fetchone()
    if row is None:
        raise CollectionNotFound(
            f"collection {coll.name!r} was deleted while this ingest was writing to it"
        )
    if coll.model is not None and (row[0], row[1]) != (coll.model, coll.dimension):
        raise EmbeddingMismatch(  # `knowledge.reembed` swapped its vectors meanwhile
            f"collection {coll.name!r} was re-embedded with {row[0]!r} while this ingest was"
            f" writing with {coll.model!r}; ingest again (what was written is kept)"
        )
    if not row[2]:
        conn.execute(
            "UPDATE kb_collections SET stored = true WHERE id = %s AND NOT stored", (coll.id,)
        )
    return None if row[3] is None else float(row[3])


@contextlib.contextmanager
def _prepared_at_first_use(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Prepare each statement sent inside on its first use, not its sixth (psycopg's default).

    For a connection in pipeline mode only: there a statement is prepared in the same
    round trip as it runs. An edit's statements are the same from one edit to the next,
    and the server then skips parsing them (0.3 ms of a 1 % edit's write, from a process's
    second edit on). The checkpointers prepare every statement too (`graph.checkpoints`).
    """
    before = conn.prepare_threshold
    conn.prepare_threshold = 0
    try:
        yield
    finally:
        conn.prepare_threshold = before


def _upsert_documents(
    conn: psycopg.Connection[Any],
    coll: CollectionRef,
    items: list[_Planned],
    delta: IngestResult,
    reads: _BatchReads,
    gone: list[psycopg.Cursor[Any]],
) -> list[frozenset[str] | None]:
    """Insert or replace the batch's document rows; return, per item, what to keep of it.

    ``None``: nothing to write (the same content is stored); else the ids of its
    chunks that stay stored (none for a new document), so only the others are written.
    `reads` holds the stored rows, locked; `gone` gets each delete, its terms to read.

    One locking read and one insert for the whole batch (a statement per document
    cost two round trips each). Rows are locked and inserted in id order, so two
    writers with overlapping batches wait for each other instead of deadlocking.
    A document another writer inserted since the read (two processes ingesting
    the same files) is not inserted twice: the insert skips it, and it is then
    handled like any stored document, locked and compared by content hash.
    """
    known = _locked(reads.documents)
    new = sorted((item for item in items if item.doc_id not in known), key=lambda i: i.doc_id)
    inserted = _insert_documents(conn, coll, new)
    delta.documents_added += len(inserted)
    raced = [item.doc_id for item in new if item.doc_id not in inserted]
    if raced:
        known.update(_locked(_send_lock(conn, raced)))
    keep: list[frozenset[str] | None] = []
    for item in items:
        stored = known.get(item.doc_id)
        if item.doc_id in inserted:
            keep.append(frozenset())
        elif stored is not None and stored[0] == item.doc.content_hash != item.base:
            delta.documents_skipped += 1  # another writer stored the same content meanwhile
            keep.append(None)
        elif stored is not None:
            keep.append(_replace_document(conn, item, stored, delta, reads, gone))
        else:  # inserted by another writer, then deleted before this one could lock it
            raise CollectionNotFound(
                f"document {item.doc.source!r} of collection {coll.name!r} was deleted"
                " while this ingest was writing it"
            )
    return keep


def _send_lock(conn: psycopg.Connection[Any], ids: list[str]) -> psycopg.Cursor[Any]:
    """Lock the stored rows among document `ids` (in id order); the cursor gives id, content hash, row version."""
    return conn.execute(
        "SELECT id, content_hash, xmin::text FROM kb_documents WHERE id = ANY(%s)"
        " ORDER BY id FOR UPDATE",
        (ids,),
    )


def _locked(cursor: psycopg.Cursor[Any]) -> dict[str, tuple[str, str]]:
    """The rows `_send_lock` locked: content hash and row version by document id."""
    return {doc_id: (content_hash, row) for doc_id, content_hash, row in cursor.fetchall()}


def _insert_documents(
    conn: psycopg.Connection[Any], coll: CollectionRef, new: list[_Planned]
) -> set[str]:
    """Insert document rows not yet stored; return the ids this transaction inserted."""
    if not new:
        return set()
    rows = conn.execute(
        "INSERT INTO kb_documents (id, collection_id, source, content_hash, metadata, structure)"
        " SELECT d.id, %s, d.source, d.hash, d.meta, d.structure"
        " FROM unnest(%s::text[], %s::text[], %s::text[], %s::jsonb[], %b::bytea[])"
        " AS d(id, source, hash, meta, structure)"
        " ON CONFLICT DO NOTHING RETURNING id",
        (
            coll.id,
            [item.doc_id for item in new],
            [item.doc.source for item in new],
            [item.doc.content_hash for item in new],
            [Jsonb(item.doc.metadata) for item in new],
            [item.chunked.structure for item in new],
        ),
    ).fetchall()
    return {row[0] for row in rows}


def _replace_document(
    conn: psycopg.Connection[Any],
    item: _Planned,
    version: tuple[str, str],
    delta: IngestResult,
    reads: _BatchReads,
    gone: list[psycopg.Cursor[Any]],
) -> frozenset[str]:
    """Keep a changed document's unchanged chunks, drop the others, record its new hash and metadata.

    `version`: the stored document's content hash and row version, as locked.

    A kept chunk may have moved (text added before it): its row stays, and the
    document row's shift ranges place it (`knowledge.placed`), so a move costs no
    chunk row. A kept chunk whose other metadata changed (the document's own, a page),
    or that gained or lost an offset, is rewritten; a carried chunk's cannot have (it
    was chunked against this stored version, with the same metadata). A document
    another writer replaced since it was planned is chunked whole again. The delete's
    cursor goes to `gone` (its rows: the deleted chunks' term keys). Returns the kept
    chunks' ids.
    """
    if version == (item.base, item.base_row) and item.placed_by_map:
        return _replace_from_map(conn, item, delta, gone)
    stored = reads.stored_chunks(item)
    if item.chunked.carried and (
        version[0] != item.base
        or any(c.id not in stored or stored[c.id][1] is None for c in item.chunked.carried)
    ):
        item.chunked = item.rechunk()
        stored = reads.stored_chunks(item)
    chunks = sorted(
        [(c.position, c.id, c.metadata.get(MOVED_KEY)) for c in item.rows]
        + [(c.position, c.id, c.start) for c in item.chunked.carried]
    )
    ids = {i for _, i, _ in chunks}
    _delete_stale(conn, sorted(stored.keys() - ids), delta, gone)
    rewritten = [c for c in item.rows if c.id in stored and _rewritten(stored[c.id], c.metadata)]
    moving = {c.id for c in rewritten}
    staying = [i in stored and i not in moving for _, i, _ in chunks]
    now = np.array([(p, NO_START if s is None else s) for p, _, s in chunks], dtype=np.int64)
    rows = np.array(
        [
            (stored[i][0], NO_START if stored[i][1] is None else stored[i][1]) if kept else (0, 0)
            for (_, i, _), kept in zip(chunks, staying, strict=True)
        ],
        dtype=np.int64,
    )
    placing = shifted_rows(now, rows, np.array(staying, dtype=bool))
    if placing is None:  # no free positions left: every kept row is written where its chunk is
        placing = Placing(now, 0, None)
        _place_rows(
            conn, [(i, p, s) for (p, i, s), kept in zip(chunks, staying, strict=True) if kept]
        )
    if rewritten:
        conn.execute(
            "UPDATE kb_chunks AS c SET position = u.position, metadata = u.meta"
            " FROM unnest(%s::text[], %s::int4[], %s::jsonb[]) AS u(id, position, meta)"
            " WHERE c.id = u.id",
            (
                [c.id for c in rewritten],
                [c.position + placing.offset for c in rewritten],
                [Jsonb(c.metadata) for c in rewritten],
            ),
        )
    kept = stored.keys() & ids
    delta.chunks_reused += len(kept)
    item.offset = placing.offset
    structure = item.chunked.placing_rows(placing.rows.tolist())
    _record_document(conn, item, structure, placing.shifts)
    delta.documents_replaced += 1
    return frozenset(kept)


def _rewritten(
    stored: tuple[int, int | None, dict[str, Any] | None], metadata: dict[str, Any]
) -> bool:
    """Whether a kept chunk's row is written again: its metadata changed other than by a move."""
    _, start, stored_metadata = stored
    gains_or_loses_offset = (start is None) != (metadata.get(MOVED_KEY) is None)
    return gains_or_loses_offset or _unplaced(stored_metadata or {}) != _unplaced(metadata)


def _place_rows(conn: psycopg.Connection[Any], places: list[tuple[str, int, int | None]]) -> None:
    """Write kept chunks' rows where their chunks are: (id, position, offset or None) each."""
    if places:
        conn.execute(
            "UPDATE kb_chunks AS c SET position = u.position, metadata = CASE"
            " WHEN u.start IS NULL THEN c.metadata - 'start_index'"
            " ELSE c.metadata || jsonb_build_object('start_index', u.start) END"
            " FROM unnest(%s::text[], %s::int4[], %s::int4[]) AS u(id, position, start)"
            " WHERE c.id = u.id",
            ([i for i, _, _ in places], [p for _, p, _ in places], [s for _, _, s in places]),
        )


def _replace_from_map(
    conn: psycopg.Connection[Any],
    item: _Planned,
    delta: IngestResult,
    gone: list[psycopg.Cursor[Any]],
) -> frozenset[str]:
    """`_replace_document` for a document whose stored map says where its chunks' rows are.

    No chunk row is read: the map lists the stored chunks (what the new version lacks is
    deleted) and where each row is (the shift ranges that place the kept ones were
    worked out with the chunks). A kept chunk's metadata is the stored one, as its
    document's is.
    """
    rows_at = item.chunked.rows_at
    assert rows_at is not None  # `placed_by_map`
    item.offset = rows_at.placing.offset
    # the map (tens of KB) first: sent behind the delete, it waited for the server to
    # finish the delete before the client could go on
    _record_document(conn, item, item.chunked.structure, rows_at.placing.shifts)
    _delete_stale(conn, rows_at.stale, delta, gone)
    delta.chunks_reused += rows_at.listed - len(rows_at.stale)
    delta.documents_replaced += 1
    return rows_at.found  # the built chunks it keeps (the carried ones are not written)


def _delete_stale(
    conn: psycopg.Connection[Any],
    stale: list[str],
    delta: IngestResult,
    gone: list[psycopg.Cursor[Any]],
) -> None:
    """Delete a replaced document's chunks its new version lacks; their cursor (term keys) goes to `gone`."""
    if stale:
        gone.append(
            conn.execute("DELETE FROM kb_chunks WHERE id = ANY(%s) RETURNING lex_keys", (stale,))
        )
    delta.chunks_removed += len(stale)


def _record_document(
    conn: psycopg.Connection[Any],
    item: _Planned,
    structure: bytes | None,
    shifts: Shifts | None,
) -> None:
    """Write a replaced document's row: its hash, metadata, map and shift ranges."""
    ranges = shifts or Shifts([], [], [])
    conn.execute(
        "UPDATE kb_documents SET content_hash = %s, metadata = %s, structure = %b,"
        " shift_from = nullif(%s::int4[], '{}'), shift_position = nullif(%s::int4[], '{}'),"
        " shift_start = nullif(%s::int4[], '{}'), created_at = now() WHERE id = %s",
        (
            item.doc.content_hash,
            Jsonb(item.doc.metadata),
            structure,
            *ranges,
            item.doc_id,
        ),
    )


def _send_stored_chunks(conn: psycopg.Connection[Any], item: _Planned) -> psycopg.Cursor[Any]:
    """Read the document's stored chunks (see `_read_stored_chunks`); nothing is read yet.

    Only a chunk built again may have new metadata to compare; a carried one's is not read.
    """
    return conn.execute(
        "SELECT id, position, (metadata ->> 'start_index')::integer,"
        " CASE WHEN id = ANY(%s) THEN metadata END FROM kb_chunks WHERE document_id = %s",
        ([c.id for c in item.rows], item.doc_id),
    )


def _read_stored_chunks(cursor: psycopg.Cursor[Any]) -> _StoredChunks:
    """The stored chunks `_send_stored_chunks` asked for, by id."""
    return {row[0]: (row[1], row[2], row[3]) for row in cursor.fetchall()}


def _unplaced(metadata: dict[str, Any]) -> dict[str, Any]:
    """A chunk's metadata without its offset: what a move leaves as it was."""
    return {k: v for k, v in metadata.items() if k != MOVED_KEY}


class _Write(NamedTuple):
    """A document's new chunk rows in a batch."""

    doc_id: str
    chunks: list[ChunkRow]
    offset: int = 0
    """Added to each row's position (`_Planned.offset`)."""


def _new_vectors(
    load: _Load,
    batch: _Batch,
    planned: list[list[str]],
    kept_ids: list[frozenset[str] | None],
    matrix: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """The vectors of the chunks a batch writes, in order: from `matrix` (of the `planned` chunks, by item), or embedded now."""
    dimension = load.coll.dimension
    out = [np.zeros((0, dimension), dtype=np.float32)]
    bounds = np.cumsum([len(ids) for ids in planned])[:-1]
    parts = np.split(matrix, bounds)
    for item, ids, vectors, kept in zip(batch.items, planned, parts, kept_ids, strict=True):
        if kept is None:
            continue
        new = [c for c in item.rows if c.id not in kept]
        by_id = dict(zip(ids, vectors, strict=True))
        missing = [c for c in new if c.id not in by_id]
        if missing:  # another writer changed the document since it was planned: rare
            more = embed_matrix(load.embeddings, [c.searchable for c in missing], dimension)
            by_id.update(zip((c.id for c in missing), more, strict=True))
        out.append(np.array([by_id[c.id] for c in new], dtype=np.float32).reshape(-1, dimension))
    return np.concatenate(out)


def _copy_chunks(
    conn: psycopg.Connection[Any],
    coll: CollectionRef,
    rows: list[_ChunkColumns],
    partition: sql.Identifier,
    vectors: np.ndarray[Any, Any],
    pending: bool,
) -> None:
    """Write a batch's new chunk rows, then their embeddings (`vectors`, in order) into `partition`, by binary COPY.

    ``pending``: the embeddings wait outside the collection's live HNSW graph.
    ``partition``: the new segment of a large load; else the collection's first,
    which every collection has. (A connection in pipeline mode cannot COPY: an
    edit's few rows go by `_insert_chunk_rows` and `_insert_embeddings`.)
    """
    if not rows:
        return
    ids = [row[0] for row in rows]
    with conn.cursor() as cur:
        with cur.copy(
            "COPY kb_chunks (id, document_id, collection_id, position, text, metadata, lex, lex_keys)"
            " FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "int8", "int4", "text", "jsonb", "sparsevec", "int4[]"])
            for row in rows:
                copy.write_row(row)
        statement = sql.SQL(
            "COPY {p} (chunk_id, collection_id, embedding, pending) FROM STDIN (FORMAT BINARY)"
        ).format(p=partition)
        with cur.copy(statement) as copy:
            if all(len(i) == CHUNK_ID_CHARS and i.isascii() for i in ids):
                copy.write(_binary_embedding_rows(ids, coll.id, vectors, pending))
            else:  # not our ids: let psycopg adapt row by row
                copy.set_types(["text", "int8", "vector", "bool"])
                for chunk, vector in zip(ids, vectors, strict=True):
                    copy.write_row((chunk, coll.id, vector, pending))


_ChunkColumns = tuple[str, str, int, int, str, Jsonb, Any, list[int]]
"""A `kb_chunks` row as written: id, document id, collection id, position, text, metadata, lex, lex_keys."""


def _chunk_rows(
    conn: psycopg.Connection[Any],
    coll: CollectionRef,
    writes: list[_Write],
    average_length: float | None,
    counts: _TermCounts | None,
) -> list[_ChunkColumns]:
    """The `kb_chunks` rows of a batch's new chunks, their BM25 weights computed (and counted into `counts`)."""
    found = [(w, row, lexical.terms(row.searchable)) for w in writes for row in w.chunks]
    if not found:  # nothing to weigh: a collection's first average length is set by chunks
        return []
    avg_len = average_length or _collection_average_length(
        conn, coll, lexical.average_length(t for _, _, t in found)
    )
    rows: list[_ChunkColumns] = []
    for write, row, terms in found:
        weights = lexical.document_vector(terms, avg_len)
        keys = sorted(weights)
        if counts is not None:
            counts.add(keys, 1)
        rows.append(
            (
                row.id,
                write.doc_id,
                coll.id,
                row.position + write.offset,
                row.text,
                Jsonb(row.metadata),
                lexical.sparse_vector(weights),
                keys,
            )
        )
    return rows


def _insert_chunk_rows(
    conn: psycopg.Connection[Any], coll: CollectionRef, rows: list[_ChunkColumns]
) -> None:
    """Insert chunk rows in one statement (pipeline mode, where COPY is not allowed)."""
    if not rows:
        return
    ids, doc_ids, _, positions, texts, metadata, lex, keys = (
        list(c) for c in zip(*rows, strict=True)
    )
    conn.execute(
        "INSERT INTO kb_chunks (id, document_id, collection_id, position, text, metadata, lex, lex_keys)"
        " SELECT u.id, u.doc, %s, u.pos, u.text, u.meta, u.lex, u.keys::int4[]"
        " FROM unnest(%s::text[], %s::text[], %s::int4[], %s::text[], %s::jsonb[], %b::sparsevec[],"
        " %s::text[]) AS u(id, doc, pos, text, meta, lex, keys)",
        (
            coll.id,
            ids,
            doc_ids,
            positions,
            texts,
            metadata,
            lex,
            ["{" + ",".join(map(str, k)) + "}" for k in keys],  # a ragged int4[][] cannot be passed
        ),
    )


def _insert_embeddings(
    conn: psycopg.Connection[Any],
    coll: CollectionRef,
    rows: list[_ChunkColumns],
    partition: sql.Identifier,
    vectors: np.ndarray[Any, Any],
    pending: bool,
) -> None:
    """Insert the embeddings of `rows` (`vectors`, in order) in one statement (pipeline mode).

    Vectors go in binary (``%b``), as COPY sends them: the same float32 values, and
    psycopg's text form of a vector cost 0.5 ms each.
    """
    if not rows:
        return
    conn.execute(
        sql.SQL(
            "INSERT INTO {p} (chunk_id, collection_id, embedding, pending)"
            " SELECT u.id, %s, u.e, %s FROM unnest(%s::text[], %b::vector[]) AS u(id, e)"
        ).format(p=partition),
        (coll.id, pending, [row[0] for row in rows], list(vectors)),
    )


def _collection_average_length(
    conn: psycopg.Connection[Any], coll: CollectionRef, this_batch: float
) -> float:
    """The average chunk length BM25 normalises by in `coll`: set by its first batch, then kept.

    Kept, not recomputed per call, so every chunk of the collection is weighed alike; two
    first writers racing agree on the one that commits first (the row lock orders them).
    """
    row = conn.execute(
        "SELECT lex_avg_len FROM kb_collections WHERE id = %s", (coll.id,)
    ).fetchone()
    if row is not None and row[0] is not None:
        return float(row[0])
    row = conn.execute(
        "UPDATE kb_collections SET lex_avg_len = coalesce(lex_avg_len, %s),"
        " lex_version = coalesce(lex_version, %s) WHERE id = %s RETURNING lex_avg_len",
        (this_batch, lexical.LEXICAL_VERSION, coll.id),
    ).fetchone()
    return float(row[0]) if row is not None else this_batch


_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, extension length
_COPY_TRAILER = b"\xff\xff"


def _binary_embedding_rows(
    ids: list[str], collection_id: int, vectors: np.ndarray[Any, Any], pending: bool
) -> bytes:
    """Encode embedding rows as one binary-COPY stream, built by numpy in one pass.

    Each row is four fields: the chunk id (always `CHUNK_ID_CHARS` ASCII
    characters), the collection id (int8), pgvector's binary `vector` (int16
    dimension, int16 zero, big-endian float32s) and `pending` (one byte). Adapting 1,000 rows one by one
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
            ("pending_len", ">i4"),
            ("pending", "u1"),
        ]
    )
    rows = np.zeros(len(ids), dtype=row)
    rows["fields"] = 4
    rows["id_len"] = CHUNK_ID_CHARS
    rows["id"] = ids
    rows["coll_len"] = 8
    rows["coll"] = collection_id
    rows["vec_len"] = 4 + 4 * dim
    rows["dim"] = dim
    rows["vec"] = vectors
    rows["pending_len"] = 1
    rows["pending"] = pending
    return _COPY_SIGNATURE + rows.tobytes() + _COPY_TRAILER
