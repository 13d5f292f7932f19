"""`KnowledgeBase`: ingest, search and manage collections in PostgreSQL + pgvector."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import difflib
import functools
import inspect
import logging
import os
import re
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar

import psycopg
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from pgvector.psycopg import (  # type: ignore[import-untyped]  # pgvector ships no type hints
    register_vector,
    register_vector_async,
)
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from arcana_loop.knowledge import lexical, whole
from arcana_loop.knowledge import queries as q
from arcana_loop.knowledge.embeddings import (
    default_embedder_name,
    embedding_model_name,
    embeddings_for_record,
    known_record,
    probed_dimension,
    resolve_embeddings,
)
from arcana_loop.knowledge.embeddings_scope import RECORDS_SQL, Record, choose_record
from arcana_loop.knowledge.entities import hooks as entity_hooks
from arcana_loop.knowledge.entities import search as es
from arcana_loop.knowledge.entities import store as entity_store
from arcana_loop.knowledge.entities.search import EntitySearchOptions
from arcana_loop.knowledge.entities.types import EntityBuildResult, Extractor
from arcana_loop.knowledge.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    IngestError,
    IngestInterrupted,
    KnowledgeBaseError,
)
from arcana_loop.knowledge.filters import check_filter
from arcana_loop.knowledge.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_BYTES,
    SkipFn,
    SourceDoc,
    check_chunking,
    glob_patterns,
    globs_keep,
    is_documents,
    is_path_source,
    langchain_documents,
    path_text,
    read_file,
    read_files,
    text_document,
    walk_directory,
)
from arcana_loop.knowledge.names import (
    composed,
    created_collection_name,
    normalize_collection_name,
)
from arcana_loop.knowledge.pools import (
    AsyncFailFastPool,
    FailFastPool,
    autocommitted,
    check_async_connection,
    check_connection,
    connection_lost,
    unavailable,
)
from arcana_loop.knowledge.reembed import (
    DEFAULT_REEMBED_BATCH,
    ReembedResult,
    reembed_collection,
)
from arcana_loop.knowledge.schema import (
    drop_partition,
    ensure_dimension,
    ensure_entity_schema,
    ensure_schema,
    refresh_lexical,
)
from arcana_loop.knowledge.sections import document_title
from arcana_loop.knowledge.server import database_url, ensure_pgvector, normalize_url
from arcana_loop.knowledge.steps import Guarded, Steps, read_async, read_sync, together
from arcana_loop.knowledge.tuning import log_notice
from arcana_loop.knowledge.types import (
    SEARCH_MODES,
    Chunk,
    CollectionInfo,
    DocumentInfo,
    IngestResult,
    ProgressFn,
    SearchResults,
)
from arcana_loop.knowledge.versions import ChunkVersions, read_versions
from arcana_loop.knowledge.writer import (
    DEFAULT_BATCH_SIZE,
    CollectionRef,
    check_metadata,
    merge_pending,
    write_documents,
)

if TYPE_CHECKING:
    from arcana_loop.knowledge.retriever import KnowledgeBaseRetriever

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a pooled connection: pgvector's types, and the server's notices logged."""
    register_vector(conn)
    conn.add_notice_handler(log_notice)


async def _configure_async(conn: psycopg.AsyncConnection[Any]) -> None:
    await register_vector_async(conn)
    conn.add_notice_handler(log_notice)


Source = str | os.PathLike[str]
CollectionScope = str | Sequence[str] | None


def _scope_embedder(
    search: Callable[Concatenate[KnowledgeBase, P], list[Chunk]],
) -> Callable[Concatenate[KnowledgeBase, P], list[Chunk]]:
    """Run `search`, for a knowledge base opened without an embedder, on a view with its scope's.

    The scope's collections are read once more if one was re-embedded between that
    read and the search (which then finds another embedder recorded).
    """

    def run(kb: KnowledgeBase, /, *args: P.args, **kwargs: P.kwargs) -> list[Chunk]:
        if not kb._per_collection:
            return search(kb, *args, **kwargs)
        names, mode = _scope_of(kwargs)
        try:
            return search(kb._scope_view(kb._scope_rows(names), names, mode), *args, **kwargs)
        except EmbeddingMismatch:
            return search(kb._scope_view(kb._scope_rows(names), names, mode), *args, **kwargs)

    functools.update_wrapper(run, search)
    return run


def _ascope_embedder(
    search: Callable[Concatenate[KnowledgeBase, P], Awaitable[list[Chunk]]],
) -> Callable[Concatenate[KnowledgeBase, P], Awaitable[list[Chunk]]]:
    """`_scope_embedder` for `asearch`."""

    async def run(kb: KnowledgeBase, /, *args: P.args, **kwargs: P.kwargs) -> list[Chunk]:
        if not kb._per_collection:
            return await search(kb, *args, **kwargs)
        names, mode = _scope_of(kwargs)
        try:
            view = kb._scope_view(await kb._ascope_rows(names), names, mode)
            return await search(view, *args, **kwargs)
        except EmbeddingMismatch:
            view = kb._scope_view(await kb._ascope_rows(names), names, mode)
            return await search(view, *args, **kwargs)

    functools.update_wrapper(run, search)
    return run


def _parameters_of(
    sync: Callable[Concatenate[KnowledgeBase, P], R],
) -> Callable[[Callable[..., Awaitable[R]]], Callable[Concatenate[KnowledgeBase, P], Awaitable[R]]]:
    """Give a coroutine method the parameters of its sync twin, declared once, on the twin.

    Whoever reads the coroutine's signature (``help``, `inspect.signature`, a type checker)
    sees the twin's; the coroutine is called with every parameter by name, defaults
    applied. A call that does not fit them raises `TypeError` when awaited.
    """
    signature = inspect.signature(sync)

    def decorate(
        body: Callable[..., Awaitable[R]],
    ) -> Callable[Concatenate[KnowledgeBase, P], Awaitable[R]]:
        async def twin(kb: KnowledgeBase, /, *args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(kb, *args, **kwargs)
            bound.apply_defaults()
            return await body(**bound.arguments)

        functools.update_wrapper(twin, body)
        twin.__signature__ = signature  # type: ignore[attr-defined]  # read by inspect.signature
        return twin

    return decorate


def _scope_of(options: Mapping[str, Any]) -> tuple[list[str] | None, str]:
    """The collection names (`None`: all) and the mode of a search's keyword arguments."""
    check_filter(options.get("filter"))  # a bad filter fails before the scope is read
    return q.scope_names(options.get("collection")), str(options.get("mode", "hybrid"))


class KnowledgeBase:
    """A knowledge base stored in one PostgreSQL schema.

    Args:
        url: A PostgreSQL URL (`postgresql://`, also `postgresql+psycopg://`) or libpq
            keyword string. Default: `DATABASE_URL`, else the embedded server.
        embeddings: An `Embeddings` instance or spec (see `resolve_embeddings`).
            Default: each collection uses the embedder it records, and a new one the
            default (`default_embedder_name`: MiniLM with the ``onnx`` extra, else
            WordLlama). Given one, a collection recording another is an
            `EmbeddingMismatch`.
        schema: The PostgreSQL schema holding the tables (created if missing).
        pool_size: Maximum connections in each pool (sync and async).
        exact_max_rows: Searches whose scope holds at most this many vectors (planner
            estimate) use an exact scan instead of HNSW (recall 1.0, fast at that size).
        hybrid_min_similarity: Cosine floor for semantic-only hybrid candidates
            (used when `ranking` is not given).
        fulltext_or_budget: Rows the lexical side scores at most: the chunks holding
            the query's rarest terms, as many terms as stay under this many rows
            (at least one term). Higher scores more rows, slower (used when
            `ranking` is not given).
        ranking: The lexical ranking (BM25 by default) and the hybrid fusion
            (`knowledge.queries.Ranking`).
        entity_options: How entity-enhanced search matches, expands and fuses
            (`knowledge.entities.EntitySearchOptions`).

    Raises:
        InvalidDatabaseURL: for a URL without a scheme, of another database, or
            malformed (the message masks its password); nothing is sent.
    """

    def __init__(
        self,
        url: str | None = None,
        embeddings: Embeddings | str | None = None,
        *,
        schema: str = "public",
        pool_size: int = 4,
        exact_max_rows: int = q.DEFAULT_EXACT_MAX_ROWS,
        hybrid_min_similarity: float = q.DEFAULT_HYBRID_MIN_SIMILARITY,
        fulltext_or_budget: int = q.DEFAULT_OR_BUDGET,
        entity_options: EntitySearchOptions | None = None,
        ranking: q.Ranking | None = None,
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema must match {_SCHEMA_NAME.pattern}, got {schema!r}")
        self.url = normalize_url(url) if url else database_url()
        self._per_collection = embeddings is None
        self._embeddings = None if embeddings is None else resolve_embeddings(embeddings)
        self._default_spec = default_embedder_name()
        """The embedder new collections get when none is given, read once when opened."""
        self._record: Record | None = None
        """A view's collection record (model, dimension): known before its embedder loads."""
        self._parent: KnowledgeBase | None = None
        """The knowledge base a view (`_view`) shares its pools with."""
        self._partitions_ready: set[tuple[int, int]] = set()
        """(dimension, collection id) whose tables and indexes this open knowledge base has
        ensured (`ensure_dimension`): an ingest checks them once, not at every call (about 10
        catalog round trips, 2.5 ms). Shared with views; emptied when the pool closes."""
        self.schema = schema
        self.exact_max_rows = exact_max_rows
        self.ranking = ranking or q.Ranking(
            hybrid_min_similarity=hybrid_min_similarity, or_budget=fulltext_or_budget
        )
        self.entity_options = entity_options or EntitySearchOptions()
        size: object = pool_size  # callers may pass anything at runtime
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"pool_size must be a positive int, got {pool_size!r}")
        self._pool_size = pool_size
        # custom plans only: a plan for any array of collection ids would keep every
        # collection's partition (pruning needs the ids), and search them all
        self._options = f"-c search_path={schema},public -c plan_cache_mode=force_custom_plan"
        self._dimension: int | None = None
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._apool: AsyncConnectionPool[Any] | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None

    # -- connections ---------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings:
        """The embedder: the one given, else the one new collections use (loaded on first use)."""
        if self._embeddings is None:
            self._embeddings = (
                resolve_embeddings(self._default_spec)
                if self._record is None
                else embeddings_for_record(self._record[0])
            )
        return self._embeddings

    @embeddings.setter
    def embeddings(self, value: Embeddings) -> None:
        """Swap in an embedder of the same model (a wrapper, say): name and dimension stay as they were."""
        record = (self.model_name, self.dimension)
        self._embeddings, self._per_collection = value, False
        self._record, self._dimension = record, record[1]

    @property
    def model_name(self) -> str:
        """The name collections record for `embeddings` (known without loading it when it ships here)."""
        known = self._known_record()
        return known[0] if known is not None else embedding_model_name(self.embeddings)

    def _known_record(self) -> Record | None:
        if self._record is not None or self._embeddings is not None:
            return self._record
        return known_record(self._default_spec)

    @property
    def dimension(self) -> int:
        """Return the embedder's dimension (probed once if the embedder does not say)."""
        if self._dimension is None and (known := self._known_record()) is not None:
            self._dimension = known[1]
        if self._dimension is None:
            declared = getattr(self.embeddings, "dimension", None)
            self._dimension = (
                declared if isinstance(declared, int) else probed_dimension(self.embeddings)
            )
        return self._dimension

    def pool(self) -> ConnectionPool[Any]:
        """Return the sync pool, creating the schema on first use.

        Raises:
            DatabaseUnavailable: if the server cannot be reached or lacks pgvector.
        """
        if self._parent is not None:
            return self._parent.pool()
        with self._lock:
            if self._pool is None:
                self._prepare_database()
                # fails fast with DatabaseUnavailable once the server is gone, not after 30 s
                pool: ConnectionPool[Any] = FailFastPool(
                    self.url,
                    configure=_configure,
                    # a connection the server dropped (restart, failover, idle kill) is replaced, not handed to a search
                    check=check_connection,
                    **self._pool_settings(),
                )
                pool.open(wait=True, timeout=30)
                self._pool = pool
            return self._pool

    def _pool_settings(self) -> dict[str, Any]:
        """What the sync and the async pool share: their size and connection options, opened by the caller."""
        return {
            "min_size": 1,
            "max_size": self._pool_size,
            "kwargs": {"options": self._options},
            "open": False,
        }

    def _prepare_database(self) -> None:
        try:
            with psycopg.connect(self.url, options=self._options, autocommit=True) as conn:
                ensure_pgvector(conn)
                ensure_schema(conn, self.schema)
                ensure_entity_schema(conn)
                refresh_lexical(conn)
        except psycopg.OperationalError as exc:
            raise unavailable(exc, self.url) from None  # the original may repeat the password

    async def apool(self) -> AsyncConnectionPool[Any]:
        """Return the async pool bound to the running event loop."""
        if self._parent is not None:
            return await self._parent.apool()
        loop = asyncio.get_running_loop()
        if self._apool is None or self._apool_loop is not loop:
            await asyncio.to_thread(self.pool)  # schema and extension, once
            apool: AsyncConnectionPool[Any] = AsyncFailFastPool(
                self.url,
                configure=_configure_async,
                check=check_async_connection,
                **self._pool_settings(),
            )
            await apool.open(wait=True, timeout=30)
            self._apool, self._apool_loop = apool, loop
        return self._apool

    @contextlib.contextmanager
    def _server_errors(self) -> Iterator[None]:
        """Turn a connection lost mid-statement (server shut down or killed) into `DatabaseUnavailable`."""
        try:
            yield
        except psycopg.Error as exc:
            if not connection_lost(exc):
                raise
            raise unavailable(exc, self.url) from None

    @contextlib.asynccontextmanager
    async def _aserver_errors(self) -> AsyncIterator[None]:
        """`_server_errors` for `async with`."""
        with self._server_errors():
            yield

    def _read(self, read: Callable[[psycopg.Connection[Any]], R]) -> R:
        """Run `read` (statements that only read) on a pooled connection, once more if that one was dead.

        The pool asks the server about a connection only when its socket has news
        (`pools.check_connection`): a server that ended its connections (a restart,
        ``pg_terminate_backend``) may not have closed a socket yet when it is handed
        out. What only reads runs again on another connection; the pool drops the
        closed one. A server that is down is said as `DatabaseUnavailable`.
        """
        with self._server_errors():
            handed: psycopg.Connection[Any] | None = None
            try:
                with self.pool().connection() as handed:
                    return read(handed)
            except psycopg.Error as exc:
                if handed is None or not (connection_lost(exc) and handed.closed):
                    raise
            with self.pool().connection() as conn:
                return read(conn)

    async def _aread(self, read: Callable[[psycopg.AsyncConnection[Any]], Awaitable[R]]) -> R:
        """`_read` on the async pool."""
        pool = await self.apool()
        async with self._aserver_errors():
            handed: psycopg.AsyncConnection[Any] | None = None
            try:
                async with pool.connection() as handed:
                    return await read(handed)
            except psycopg.Error as exc:
                if handed is None or not (connection_lost(exc) and handed.closed):
                    raise
            async with pool.connection() as conn:
                return await read(conn)

    def close(self) -> None:
        """Close the sync pool (the async pool is closed by `aclose`)."""
        if self._parent is not None:
            return  # a view's pools are its parent's
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            self._partitions_ready.clear()

    async def aclose(self) -> None:
        """Close both pools."""
        if self._parent is not None:
            return
        if self._apool is not None:
            await self._apool.close()
            self._apool = None
        self.close()

    # -- the embedder of each collection (`knowledge.embeddings_scope`) ----------------

    def _view(self, record: Record) -> KnowledgeBase:
        """This knowledge base with the embedder `record` names: the same pools, schema and options.

        Made for each call (a shallow copy), so it sees the options as they are now.
        """
        root = self._parent or self
        view = copy.copy(root)
        view._per_collection, view._parent = False, root
        view._record, view._dimension = record, record[1]
        if root._embeddings is not None and root.model_name != record[0]:
            view._embeddings = None  # loaded when it embeds (`embeddings_for_record`)
        return view

    def _for_collection(self, name: str) -> KnowledgeBase:
        """Who reads and writes collection `name` (an existing one with the embedder it records).

        This knowledge base if it was given an embedder; else a view with the one
        the collection records, or for a new collection the default.
        """
        if not self._per_collection:
            return self
        names = [normalize_collection_name(name)]
        return self._view(
            choose_record(self._records(names), names, "hybrid", default=self._default())
        )

    def _default(self) -> Record:
        return self.model_name, self.dimension

    def _scope_view(
        self, rows: list[tuple[str, str, int]], names: list[str] | None, mode: str
    ) -> KnowledgeBase:
        return self._view(choose_record(rows, names, mode, default=self._default()))

    def _scope_rows(self, names: list[str] | None) -> list[tuple[str, str, int]]:
        return [] if names == [] else self._records(names)  # [] matches nothing: no statement

    async def _ascope_rows(self, names: list[str] | None) -> list[tuple[str, str, int]]:
        return [] if names == [] else await self._arecords(names)

    def _records(self, names: list[str] | None) -> list[tuple[str, str, int]]:
        rows = self._read(lambda conn: conn.execute(RECORDS_SQL, {"n": names}).fetchall())
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    async def _arecords(self, names: list[str] | None) -> list[tuple[str, str, int]]:
        async def read(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
            return await (await conn.execute(RECORDS_SQL, {"n": names})).fetchall()

        rows = await self._aread(read)
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    # -- collections ---------------------------------------------------------------

    def _collection(self, name: str, *, create: bool) -> CollectionRef:
        """Resolve (or create) a collection, checking it was built with this embedder.

        Raises:
            EmbeddingMismatch: if the collection uses another model or dimension.
            CollectionNotFound: if it does not exist and `create` is false.
            TypeError, ValueError: for a name `normalize_collection_name` refuses
                (or, with `create`, the reserved `"all"`).
        """
        coll, _ = self._resolve_collection(name, create=create)
        return coll

    def _resolve_collection(self, name: str, *, create: bool) -> tuple[CollectionRef, bool]:
        """Return the collection and whether this call created it."""
        name = created_collection_name(name) if create else normalize_collection_name(name)
        created = False
        find = "SELECT id, embedding_model, dimension FROM kb_collections WHERE name = %s"
        with autocommitted(self.pool()) as conn:  # each statement stands alone
            row = conn.execute(find, (name,)).fetchone()
            if row is None and create:  # looked up first: an existing one costs one statement
                created = (
                    conn.execute(
                        "INSERT INTO kb_collections (name, embedding_model, dimension, stored)"
                        " VALUES (%s, %s, %s, false) ON CONFLICT (name) DO NOTHING RETURNING id",
                        (name, self.model_name, self.dimension),
                    ).fetchone()
                    is not None
                )
                row = conn.execute(find, (name,)).fetchone()
        if row is None:
            raise CollectionNotFound(f"no collection named {name!r}")
        if (row[1], row[2]) != (self.model_name, self.dimension):
            raise EmbeddingMismatch(
                f"collection {name!r} was embedded with {row[1]!r} ({row[2]} dims); "
                f"this knowledge base uses {self.model_name!r} ({self.dimension} dims)"
            )
        if (row[2], row[0]) not in self._partitions_ready:
            with self.pool().connection() as conn:
                ensure_dimension(conn, row[2])
            self._partitions_ready.add((row[2], row[0]))
        return CollectionRef(id=row[0], name=name, dimension=row[2], model=row[1]), created

    def _drop_if_empty(self, coll: CollectionRef) -> None:
        """Delete a collection an ingest created, if that ingest failed before storing anything.

        The row lock waits for any other writer's open batch (they hold KEY SHARE on
        it), and the document count is read after it, so a collection another
        process has meanwhile written to is kept.
        """
        try:
            with self.pool().connection() as conn, conn.transaction():
                locked = conn.execute(
                    "SELECT 1 FROM kb_collections WHERE id = %s FOR UPDATE", (coll.id,)
                ).fetchone()
                used = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM kb_documents WHERE collection_id = %s)",
                    (coll.id,),
                ).fetchone()
                if locked is not None and used == (False,):
                    drop_partition(conn, coll.dimension, coll.id)
                    conn.execute("DELETE FROM kb_collections WHERE id = %s", (coll.id,))
        except psycopg.Error as exc:  # the ingest's own error is the one to report
            logger.warning("could not remove the empty collection %r: %s", coll.name, exc)

    def collections(self) -> list[CollectionInfo]:
        """List collections with document and chunk counts, by name.

        A collection whose creating ingest has not committed a document yet is not
        listed: it is what an ingest killed before its first commit leaves (removing
        it here could race one still under way). The next ingest of that name uses
        it, and `delete_collection` still removes it. A collection emptied by
        deleting its documents is listed.
        """
        rows = self._read(
            lambda conn: conn.execute(
                "SELECT k.name,"
                " (SELECT count(*) FROM kb_documents d WHERE d.collection_id = k.id),"
                " (SELECT count(*) FROM kb_chunks c WHERE c.collection_id = k.id),"
                " k.embedding_model, k.dimension"
                " FROM kb_collections k WHERE k.stored ORDER BY k.name"
            ).fetchall()
        )
        return [CollectionInfo(r[0], int(r[1]), int(r[2]), r[3], int(r[4])) for r in rows]

    def documents(self, collection: str | None = None) -> list[DocumentInfo]:
        """List the stored documents, of one collection or of all, by collection and source.

        Raises:
            CollectionNotFound: if `collection` names no collection.
        """
        name = None if collection is None else normalize_collection_name(collection)
        with self._server_errors(), self.pool().connection() as conn:
            if name is not None and not conn.execute(_COLLECTION_EXISTS, (name,)).fetchone():
                raise CollectionNotFound(f"no collection named {name!r}")
            rows = conn.execute(_DOCUMENTS, {"name": name}).fetchall()
        return [
            DocumentInfo(
                id=r[0],
                collection=r[1],
                source=r[2],
                title=document_title(r[2], r[3] or {}),
                chunks=int(r[4]),
                bytes=int(r[5]),
                content_hash=r[6],
                ingested_at=r[7],
                updated_at=r[8],
                metadata=dict(r[3] or {}),
            )
            for r in rows
        ]

    def delete_collection(self, name: str) -> None:
        """Delete a collection with its documents, chunks and embeddings.

        A delete waits for the batch an ingest into the collection is writing;
        that ingest then stops with `CollectionNotFound` at its next batch.

        Raises:
            CollectionNotFound: if no collection has this name.
        """
        name = normalize_collection_name(name)
        with self.pool().connection() as conn, conn.transaction():
            # FOR UPDATE waits for writers' KEY SHARE locks, so no insert races the cascade
            row = conn.execute(
                "SELECT id, dimension FROM kb_collections WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is not None:
                drop_partition(conn, row[1], row[0])  # its embeddings at once, not row by row
                conn.execute("DELETE FROM kb_collections WHERE id = %s", (row[0],))
                self._partitions_ready.discard((row[1], row[0]))
        if row is None:
            raise CollectionNotFound(f"no collection named {name!r}")

    def delete_document(
        self,
        *,
        document_id: str | None = None,
        source: str | os.PathLike[str] | None = None,
        collection: str = "default",
    ) -> int:
        """Delete one document by id, or by source within `collection`; return documents removed.

        `source` is read as `find_documents` reads it; it must name exactly one
        document (use `delete_documents` for a pattern).

        Raises:
            ValueError: unless exactly one of `document_id` and `source` is given.
            KnowledgeBaseError: if no document matches (the message names the closest
                sources), or if `source` matches several.
        """
        if (document_id is None) == (source is None):
            raise ValueError("give exactly one of document_id= or source=")
        if source is not None:
            matches = self.find_documents(source, collection=collection)
            if len(matches) > 1:
                raise KnowledgeBaseError(
                    f"{os.fspath(source)!r} matches {len(matches)} documents of {collection!r}"
                    f" ({', '.join(repr(d.source) for d in matches[:3])}...): name one, or"
                    " use delete_documents for them all"
                )
            document_id = matches[0].id
        with self.pool().connection() as conn:
            row = conn.execute(_DELETE_BY_ID, (document_id,)).fetchone()
            if row is not None and row[0]:
                entity_store.after_chunks_removed(conn, row[1])
        if row is None or row[0] == 0:
            raise KnowledgeBaseError(f"no document matching {document_id!r}")
        return int(row[0])

    def delete_documents(
        self, source: str | os.PathLike[str], *, collection: str = "default", dry_run: bool = False
    ) -> list[DocumentInfo]:
        """Delete every document of `collection` that `source` names (a glob may name many).

        `source` is read as `find_documents` reads it: a name matching a stored
        document exactly means that document, even when it holds glob characters.

        Returns:
            The documents deleted, or with `dry_run` the ones that would be (an
            empty list when none matches).

        Raises:
            CollectionNotFound: if `collection` names no collection.
            KnowledgeBaseError: if none matches, unless `dry_run` (the message names
                the closest sources).
        """
        docs = self.documents(collection)
        matches = _matching(os.fspath(source), docs)
        if dry_run:
            return matches
        if not matches:
            raise _no_match(os.fspath(source), collection, docs)
        with self.pool().connection() as conn, conn.transaction():
            row = conn.execute(_DELETE_BY_IDS, ([d.id for d in matches],)).fetchone()
            if row is not None and row[0]:
                entity_store.after_chunks_removed(conn, row[1])
        return matches

    def chunk_versions(
        self, chunk_ids: Sequence[str], document_ids: Sequence[str] = ()
    ) -> ChunkVersions:
        """The current text hash of each of these chunks and content hash of each of these documents.

        An id the knowledge base does not hold (a chunk an edit changed or a delete
        removed) is left out of the result.
        """
        return self._read(lambda conn: read_versions(conn, chunk_ids, document_ids))

    def find_documents(
        self, source: str | os.PathLike[str], *, collection: str = "default"
    ) -> list[DocumentInfo]:
        """The documents of `collection` that `source` names, as a user would name them.

        Tried in order, the first that matches wins: the source exactly as stored;
        a path resolved as ingest resolves it (relative to the working directory,
        ``~`` expanded); a path relative to an ingested directory
        (``guides/setup.md`` names ``/home/me/docs/guides/setup.md``); and only
        then a glob (``guides/*.md``, matched from the right of the stored path, so
        relative to any ingested directory). A name is thus never read as a
        pattern when a document has it: ``[draft] notes.md`` names that file, not
        ``d notes.md``.

        Raises:
            CollectionNotFound: if `collection` names no collection.
            KnowledgeBaseError: if nothing matches; the message names the closest sources.
        """
        text = os.fspath(source)
        docs = self.documents(collection)
        found = _matching(text, docs)
        if not found:
            raise _no_match(text, collection, docs)
        return found

    # -- ingest --------------------------------------------------------------------

    def ingest(
        self,
        source: Source | Document | Sequence[Document],
        *,
        collection: str = "default",
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        include: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        batch_size: int = DEFAULT_BATCH_SIZE,
        progress: ProgressFn | None = None,
        entities: bool | None = None,
        entity_extractor: Extractor | Any = None,
        sync: bool = False,
    ) -> IngestResult:
        """Ingest text, a file, a directory or LangChain `Document`s into `collection` (created if missing).

        Every argument, the collection name, the metadata and the text are checked
        before anything is written: a refused ingest stores nothing, not even an
        empty collection. A directory is walked without recursion (any depth),
        and symbolic links never lead out of it: a link to a file inside the
        directory is read (stored under the file's real path), a link to anything
        outside it is skipped with its reason in `skipped_files`, and links to
        directories are not descended. Two processes may ingest the same files at
        once: each document is stored once, the slower process counts it skipped.

        Args:
            source: Text, or a path to a file or directory. A `Path` is always a
                path; a `str` is one if it names an existing one or looks like one
                (``docs/``, ``./notes``: `loading.is_path_source`). PDF and
                HTML files need the `pdf` and `html` extras (`knowledge.loaders`).
                Or a LangChain `Document`, or a list of them: each is named by its
                `source` metadata (see `knowledge.loading.langchain_documents`)
                and keeps its metadata.
            collection: Collection name, stored in Unicode NFC (so NFC and NFD
                spellings are one collection), at most `MAX_COLLECTION_NAME_CHARS`
                characters; `"all"` is reserved (it means every collection).
            metadata: JSON metadata stored on each document and chunk: string keys,
                none of `knowledge.writer.RESERVED_METADATA_KEYS`, no NaN or infinity,
                no NUL or lone surrogate in any string. A `source` key is replaced
                by the document's source name; a `title` key titles the document,
                and a `section` key places all its chunks in that section (its text
                is then not read for headings).
            name: Source name for text input or a single `Document` (default
                `text:<hash>`); re-ingesting changed text under the same name
                replaces it.
            chunk_size: Maximum characters per chunk.
            chunk_overlap: Characters shared by consecutive chunks.
            include: Globs a directory walk keeps (default: every non-hidden file);
                a single string is one glob. A file named directly is matched by its
                path as given (`loading.globs_keep`); one they leave out is not read,
                and the result counts nothing, as for a directory that matches no file.
            exclude: Globs a directory walk drops, and a file named directly if it
                matches one; a single string is one glob.
            max_bytes: Largest file accepted, in bytes read (not only in the size a
                file reports). Only regular files are read: a FIFO, a device or a
                socket named directly is an `IngestError`, and skipped in a walk.
            batch_size: Chunks embedded and written per transaction.
            progress: Called as `progress(done_chunks, total_chunks)`.
            entities: Extract the entities of the new chunks (`True`), or not
                (`False`). `None`: only if the collection already has entities,
                so its knowledge graph stays complete.
            entity_extractor: An `Extractor`, a chat model (LLM extraction) or
                `None` (the offline extractor).
            sync: Make the collection's documents under the directory `source`
                match it: new files added, changed ones updated, and the documents
                whose file no longer exists removed (`documents_removed`). Only
                documents stored under that directory are ever removed, and only
                when the sync saw their file gone: a file left out (by
                `include`/`exclude`, or hidden) keeps its stored document, and so
                does one the sync could not read (skipped, under a folder it could
                not list, or behind a path it may not search), counted in
                `documents_kept`. Each document is written or removed in a
                transaction of its own batch, so an interrupted sync leaves each
                document old or new, and running it again completes it.

        Returns:
            The counts; see `IngestResult`.

        Raises:
            EntityBuildError: if the entity step failed; the documents are stored,
                the chunks without entities stay pending for `build_entities`.
            IngestError: for an unusable explicit input (empty, binary, undecodable,
                missing, too large, not a regular file, NUL or a lone surrogate in
                the text or its name, a file name that is not UTF-8, a document
                nested deeper than its parser recurses, a PDF or HTML file whose
                extra is missing), or a directory that cannot be listed; inside a
                directory walk these are skipped, each with its reason in
                `skipped_files`, as are folders it cannot list and links it cannot use.
            TypeError, ValueError: for a bad option, collection name or metadata.
            EmbeddingMismatch: if the collection was built with another embedder.
            StorageFull: if the database's disk filled up; the message says what
                was stored (re-running the ingest skips it).
            IngestInterrupted: a `KeyboardInterrupt` (Ctrl-C) that came once the
                writing began; its `result` counts what was stored (the batches
                being written are finished first; re-running the ingest skips them).
            CollectionNotFound: if the collection was deleted during the ingest.
        """
        # everything is checked before the first write, so a refused ingest stores nothing
        check_chunking(chunk_size, chunk_overlap)
        _check_ingest_options(
            entities=entities, name=name, max_bytes=max_bytes, batch_size=batch_size
        )
        collection = created_collection_name(collection)
        meta = check_metadata(metadata)
        root = _sync_root(source) if sync else None
        result = IngestResult()

        def skip(file: Path, reason: str) -> None:
            # reported once, by the caller, from skipped_files; a warning too would say it twice
            logger.debug("skipping %s: %s", path_text(file), reason)
            result.skipped_files.append((path_text(file), reason))

        docs, walked = self._load(
            source,
            name=name,
            metadata=meta,
            include=glob_patterns(include, "include"),
            exclude=glob_patterns(exclude, "exclude"),
            max_bytes=max_bytes,
            skip=skip,
        )
        if not docs:
            if root is not None:
                self._prune(collection, root, set(), result)
            return result
        kb = self._for_collection(collection)
        coll, created = kb._resolve_collection(collection, create=True)
        with _interrupt_keeps(result):
            try:
                write_documents(
                    self.pool(),
                    kb.embeddings,
                    coll,
                    docs,
                    chunk_size=chunk_size,
                    chunk_overlap=chunk_overlap,
                    batch_size=batch_size,
                    progress=progress,
                    result=result,
                    skip=skip if walked else None,  # a file named directly fails instead
                )
            except BaseException:
                # checked again by the next ingest: a failed load may have left an index to rebuild
                self._partitions_ready.discard((coll.dimension, coll.id))
                if created and not (result.documents_added or result.documents_replaced):
                    self._drop_if_empty(coll)
                raise
            if root is not None:
                self._prune(collection, root, {d.source for d in docs}, result)
            kb._ingest_entities(coll, result, entities, entity_extractor)
        return result

    def _prune(self, collection: str, root: Path, read: set[str], result: IngestResult) -> None:
        """Remove the documents of `collection` under `root` whose file is gone (a sync's last step).

        Gone means seen gone: the file's path names nothing, or a directory. A
        document whose file the walk skipped, or lies under a folder it could not
        list, or whose path cannot be looked at (no search permission, a loop of
        links) is kept and counted in `documents_kept`.
        """
        prefix = str(root).rstrip(os.sep) + os.sep
        skipped = {path for path, _ in result.skipped_files}
        with self.pool().connection() as conn, conn.transaction():
            rows = conn.execute(_DOCUMENTS_UNDER, (collection, prefix)).fetchall()
            gone = []
            for doc_id, source, chunks in rows:  # the query kept those under root
                if source in read and source not in skipped:  # read, but skipped when chunked
                    continue
                fate = _file_fate(source, skipped)
                if fate == "gone":
                    gone.append((doc_id, chunks))
                elif fate == "unread":
                    result.documents_kept += 1
            if not gone:
                return
            row = conn.execute(_DELETE_BY_IDS, ([doc_id for doc_id, _ in gone],)).fetchone()
            if row is not None and row[0]:
                entity_store.after_chunks_removed(conn, row[1])
        result.documents_removed += len(gone)
        result.chunks_removed += sum(chunks for _, chunks in gone)

    def _ingest_entities(
        self, coll: CollectionRef, result: IngestResult, entities: bool | None, extractor: Any
    ) -> None:
        with autocommitted(self.pool()) as conn:
            exists = entity_store.has_entities(conn, coll.id)
        if (entities is True or (entities is None and exists)) and (
            result.chunks_added or not exists
        ):
            self._build_entities(coll, extractor, communities=False)  # it prunes what was replaced
        elif exists and result.chunks_removed:
            with self.pool().connection() as conn:
                entity_store.after_chunks_removed(conn, [coll.id])

    def merge_pending(self, collection: str | None = None) -> int:
        """Move vectors waiting outside the HNSW graph into it, for one collection or all.

        A write into a collection whose index is live leaves its vectors pending:
        searched exactly beside the graph, and merged by the write that leaves more
        than `PENDING_MAX_ROWS` of them (see `knowledge.schema`). Merging them when
        the knowledge base is idle keeps searches from scanning them.

        Returns:
            The vectors moved into a graph.

        Raises:
            CollectionNotFound: if `collection` names no collection.
            EmbeddingMismatch: if it was embedded with another model.
        """
        with self._server_errors():
            if collection is not None:
                colls = [self._for_collection(collection)._collection(collection, create=False)]
            else:
                # opened without an embedder, every collection is read with its own
                with self.pool().connection() as conn:
                    rows = conn.execute(
                        "SELECT id, name, dimension FROM kb_collections"
                        " WHERE %s OR (embedding_model = %s AND dimension = %s) ORDER BY name",
                        (
                            self._per_collection,
                            None if self._per_collection else self.model_name,
                            None if self._per_collection else self.dimension,
                        ),
                    ).fetchall()
                colls = [CollectionRef(id=r[0], name=r[1], dimension=r[2]) for r in rows]
            return sum(merge_pending(self.pool(), coll) for coll in colls)

    def reembed(
        self,
        collection: str,
        embeddings: Embeddings | str,
        *,
        batch_size: int = DEFAULT_REEMBED_BATCH,
        progress: ProgressFn | None = None,
    ) -> ReembedResult:
        """Re-embed a collection in place with another embedder, from its stored chunks.

        Its chunks are not parsed again; its knowledge graph's entities are re-embedded
        too. Interrupted, it loses nothing: the collection keeps its embedder until
        every vector is ready, and the next call resumes (`knowledge.reembed`).

        Args:
            collection: The collection name.
            embeddings: The embedder to use from now on (a spec or an instance, as the
                constructor takes).
            batch_size: Chunks embedded and committed per transaction.
            progress: Called as `progress(done_chunks, total_chunks)`.

        Raises:
            CollectionNotFound: if there is no such collection.
            EmbedderUnavailable: if that embedder cannot be loaded here.
            KnowledgeBaseError: if another process is re-embedding it now.
        """
        target = resolve_embeddings(embeddings)
        value: object = batch_size
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        dimension = self._using_embeddings(target).dimension
        with self._server_errors():
            return reembed_collection(
                self.pool(),
                normalize_collection_name(collection),
                target,
                dimension,
                batch_size=batch_size,
                progress=progress,
            )

    def _using_embeddings(self, embeddings: Embeddings) -> KnowledgeBase:
        view = self._view((embedding_model_name(embeddings), 0))
        view._embeddings, view._record, view._dimension = embeddings, None, None  # probed
        return view

    # -- entities (the knowledge graph) -------------------------------------------

    def build_entities(
        self,
        collection: str,
        extractor: Extractor | Any = None,
        *,
        rebuild: bool = False,
        summary_model: Any = None,
    ) -> EntityBuildResult:
        """Build (or complete) the knowledge graph of an ingested collection.

        Args:
            collection: The collection name.
            extractor: An `Extractor`, a chat model (LLM extraction) or `None`
                (the offline extractor).
            rebuild: Extract every chunk again, not only those not extracted yet.
            summary_model: A chat model that writes community summaries
                (default: extractive summaries).

        Raises:
            CollectionNotFound: if there is no such collection.
            EntityBuildError: if extraction failed (what was written stays consistent).
        """
        kb = self._for_collection(collection)
        coll = kb._collection(collection, create=False)
        return kb._build_entities(coll, extractor, rebuild=rebuild, summary_model=summary_model)

    def _build_entities(
        self,
        coll: CollectionRef,
        extractor: Any,
        *,
        rebuild: bool = False,
        communities: bool = True,
        summary_model: Any = None,
    ) -> EntityBuildResult:
        from arcana_loop.knowledge.entities.build import (
            build_collection,
            llm_summarizer,
            resolve_extractor,
        )

        return build_collection(
            self.pool(),
            self.embeddings,
            collection_id=coll.id,
            collection=coll.name,
            dimension=coll.dimension,
            extractor=resolve_extractor(extractor),
            rebuild=rebuild,
            communities=communities,
            summarizer=None if summary_model is None else llm_summarizer(summary_model),
        )

    def explore(
        self, entity: str, *, collection: CollectionScope = None, neighbours: int = 10
    ) -> list[dict[str, Any]]:
        """Look an entity up in the knowledge graphs of `collection` (scoped like `search`).

        Returns:
            Up to three matches (exact name first, then dotted suffixes), each with
            `name`, `type`, `description`, `collection`, `neighbours` (name,
            strength, types), `community` (level, size, summary, or `None`) and
            `chunk_ids`.
        """
        from arcana_loop.knowledge.entities.explore import explore

        value: object = entity
        if not isinstance(value, str) or not entity.strip():
            raise ValueError("entity must be a non-blank string")
        names = q.scope_names(collection)
        if names == []:
            return []
        with self.pool().connection() as conn:
            rows = conn.execute(
                "SELECT id FROM kb_collections WHERE %(n)s::text[] IS NULL OR name = ANY(%(n)s)",
                {"n": names},
            ).fetchall()
            ids = [r[0] for r in rows]
            return explore(conn, ids, entity, neighbours=neighbours)

    def update_communities(
        self, collection: str | None = None, *, summary_model: Any = None
    ) -> dict[str, int]:
        """Recompute communities of the collections whose entities changed; return counts by name."""
        from arcana_loop.knowledge.entities.build import llm_summarizer
        from arcana_loop.knowledge.entities.communities import update_dirty

        ids = (
            None
            if collection is None
            else [self._for_collection(collection)._collection(collection, create=False).id]
        )
        summarizer = None if summary_model is None else llm_summarizer(summary_model)
        with self.pool().connection() as conn:
            done = update_dirty(conn, ids, summarizer=summarizer)
            names = dict(conn.execute("SELECT id, name FROM kb_collections").fetchall())
        return {names[k]: v for k, v in done.items() if k in names}

    async def aingest(
        self, source: Source | Document | Sequence[Document], **kwargs: Any
    ) -> IngestResult:
        """Run `ingest` in a worker thread (same arguments)."""
        return await asyncio.to_thread(self.ingest, source, **kwargs)

    def _load(
        self,
        source: Source | Document | Sequence[Document],
        *,
        name: str | None,
        metadata: dict[str, Any],
        include: Sequence[str],
        exclude: Sequence[str],
        max_bytes: int,
        skip: SkipFn,
    ) -> tuple[list[SourceDoc], bool]:
        """The documents `source` holds, and whether they come from a directory walk.

        A walk tells `skip` of each entry it leaves out; any other input that
        cannot be read raises.
        """
        value: object = source  # callers may pass anything at runtime
        if is_documents(value):
            docs = langchain_documents(
                value, name=name, metadata=metadata, check_metadata=check_metadata
            )
            return docs, False
        if not isinstance(value, str | os.PathLike):
            raise TypeError(
                f"source must be text, a path or LangChain Documents, got {type(source).__name__}"
            )
        if not is_path_source(value):
            return [text_document(str(value), name=name, metadata=metadata)], False
        path = Path(value).expanduser()
        if not path.exists():
            raise IngestError(f"{path_text(path)}: no such file or directory")
        if not path.is_dir():
            if not globs_keep(PurePosixPath(path.as_posix()), include, exclude):
                return [], False  # left out, as a walk leaves out the files they do not keep
            return [read_file(path, max_bytes=max_bytes, metadata=metadata)], False
        files = walk_directory(path, include=include, exclude=exclude, skip=skip)
        return read_files(files, max_bytes=max_bytes, metadata=metadata, skip=skip), True

    # -- search --------------------------------------------------------------------

    @_scope_embedder
    def search(
        self,
        query: str,
        *,
        collection: CollectionScope = None,
        limit: int = 5,
        mode: str = "hybrid",
        threshold: float | None = None,
        ef_search: int | None = None,
        entities: bool | None = None,
        entity_depth: int | None = None,
        filter: Mapping[str, Any] | None = None,
        whole_sections: bool = True,
        section_chars: int | None = None,
    ) -> SearchResults:
        """Search chunks.

        Args:
            query: The query text (cut to `MAX_QUERY_CHARS`).
            collection: `None` or `"all"` (every collection), a name, or a list of
                names; `[]` matches nothing. Unknown names match nothing.
            limit: Maximum chunks returned.
            mode: `"semantic"`, `"fulltext"` or `"hybrid"`.
            threshold: Minimum score in the mode's own scale (cosine, ts_rank_cd, RRF).
            ef_search: HNSW candidate list size (default `DEFAULT_EF_SEARCH`, 300).
            entities: `None` (default): fuse in the knowledge graph when a searched
                collection has one; `True`: the same, logging when none has;
                `False`: text search only. See `knowledge.entities.search`.
            entity_depth: Relationship hops from the matched entities (default
                `entity_options.depth`).
            filter: Only chunks whose metadata matches, e.g. ``{"source": {"$like":
                "%/guides/%"}, "page": {"$gte": 3}}`` (the operators are those of
                langchain-postgres; see `knowledge.filters`). It narrows the scope,
                never widens it; a filtered search does not fuse in the knowledge
                graph (its entities' chunks would bypass the filter).
            whole_sections: Read each hit as the section it belongs to (its
                document's chunks under the same section path and page, `knowledge.whole`):
                one result per section, at its best hit's rank, keeping that hit's
                id, score and position; `False`: each hit is its chunk alone.
            section_chars: Most characters of a whole-section result (default
                `whole.DEFAULT_SECTION_CHARS`); a longer section keeps its hits,
                its first chunk and the chunks nearest the hit.

        Returns:
            Chunks, best first, in a list (`SearchResults`) whose `unmatched` holds
            the query's words no chunk of the scope holds. A whole-section result's metadata also holds
            `hit_start` and `hit_end` (the hit's span in its text),
            `section_chunks`, `merged_hits` and `section_complete`
            (`knowledge.whole`). Entity-fused results carry an RRF score and, in
            their metadata, `entity_enhanced`, `entity_names`,
            `matched_entities` and `found_by` (`"text"`, `"entities"`).

        Raises:
            ValueError: for a blank query, an unknown mode, a limit outside
                1..`queries.MAX_SEARCH_LIMIT`, a non-finite threshold, a `section_chars`
                outside 1..`whole.MAX_SECTION_CHARS`, or a filter that cannot
                be read (`FilterError`, naming the operator or key).
            TypeError: for a threshold that is not a number (`bool` included), or a
                `whole_sections` that is not a bool.
            EmbeddingMismatch: if a named collection uses another embedder.
            DatabaseUnavailable: if the server is down or went away mid-search.
        """
        req = q.make_request(
            query,
            collection=collection,
            limit=limit,
            mode=mode,
            threshold=threshold,
            ef_search=ef_search,
            filter=filter,
            whole_sections=whole_sections,
            section_chars=section_chars,
        )
        if req is None:
            return SearchResults()
        vector = self._query_vector(req)
        return self._read(
            lambda conn: read_sync(
                conn,
                self._search_steps(req, vector, entities, entity_depth),
                lambda: self._embed(req.query),
            )
        )

    @_ascope_embedder
    @_parameters_of(search)
    async def asearch(
        self, query: str, entities: bool | None, entity_depth: int | None, **request: Any
    ) -> SearchResults:
        """Search like `search`, with its parameters, on an async connection (never blocks the event loop)."""
        req = q.make_request(query, **request)
        if req is None:
            return SearchResults()
        vector = await self._aquery_vector(req)
        return await self._aread(
            lambda conn: read_async(
                conn,
                self._search_steps(req, vector, entities, entity_depth),
                lambda: self._aembed(req.query),
            )
        )

    def _search_steps(
        self, req: q.SearchRequest, vector: Any, entities: bool | None, depth: int | None
    ) -> Steps[SearchResults]:
        """The one search `search` and `asearch` run (see `knowledge.steps`)."""
        scope_rows = yield q.scope_statement(req)
        resolved = q.resolve_collections(req, scope_rows, self.model_name, self.dimension)
        unmatched = lexical.unmatched_words(req.query, resolved.present_word_keys)
        chunks = yield from self._ranked_steps(req, scope_rows, resolved, vector, entities, depth)
        return SearchResults(chunks, unmatched)

    def _ranked_steps(
        self,
        req: q.SearchRequest,
        scope_rows: Sequence[tuple[Any, ...]],
        resolved: q.ResolvedCollections,
        vector: Any,
        entities: bool | None,
        depth: int | None,
    ) -> Steps[list[Chunk]]:
        """The search's chunks, ranked, each read as its whole section unless asked not to."""
        if not resolved.ids:
            return []
        opts = self.entity_options
        plan = yield from entity_hooks.plan_steps(
            ids=entity_hooks.entity_collection_ids(
                scope_rows, resolved.ids, self.model_name, self.dimension
            ),
            dimension=self.dimension,
            vector=vector,
            opts=opts,
            entities=False if req.filter else entities,
            depth=depth,
        )
        exact, settings = False, None
        if req.mode != "fulltext":
            exact, settings = self._scan(req, resolved.vectors)
        # a whole-section search ranks more chunks than it returns: several may share a section
        ranked = req.limit if req.section_chars is None else whole.rows_to_fetch(req.limit)
        text_rows = entity_hooks.text_limit(req.limit, plan, opts)
        statement = q.search_statement(
            req,
            resolved,
            vector=vector,
            exact=exact,
            ranking=self.ranking,
            rows_limit=max(ranked, text_rows or 0) if ranked > req.limit else text_rows,
        )
        # transaction-local settings share the search's transaction
        rows = yield (statement if settings is None else Guarded(together(settings, statement)))
        text = q.to_chunks(rows)
        extra: list[Chunk] = []
        if plan is not None and (missing := es.entity_only_ids(text, plan)):
            extra = q.to_chunks((yield es.chunks_statement(resolved.ids, missing)))
        hits = entity_hooks.fuse_rows(text, plan, extra, limit=ranked, opts=opts)
        if req.section_chars is None:
            return hits
        sections = q.sections_of(rows)
        if unread := whole.unread(hits, sections, req.limit):
            sections |= q.sections_of((yield q.sections_statement(req, unread)))
        return whole.read_whole(hits, sections, limit=req.limit, budget=req.section_chars)

    def as_retriever(
        self,
        *,
        collection: CollectionScope = None,
        mode: str = "hybrid",
        k: int = 4,
        threshold: float | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> KnowledgeBaseRetriever:
        """Return this knowledge base as a LangChain retriever (`invoke` and `ainvoke`).

        Each `Document` holds a chunk's text, with `id`, `score`, `collection`,
        `source` and `section` in its metadata (`knowledge.retriever`).

        Args:
            collection: `None` or `"all"` (every collection), a name, or a list of names.
            mode: `"semantic"`, `"fulltext"` or `"hybrid"`.
            k: Most documents each query returns (1..`queries.MAX_SEARCH_LIMIT`).
            threshold: Minimum score, in the mode's own scale (see `search`).
            filter: A metadata filter for every query (see `search`).

        Raises:
            ValueError: for an unknown mode, a `k` outside 1..`queries.MAX_SEARCH_LIMIT` or
                a non-finite threshold; nothing is sent.
            TypeError: for a threshold that is not a number, or collection names
                that are not strings.
        """
        from arcana_loop.knowledge.retriever import KnowledgeBaseRetriever, scope_list

        # checked here, so a bad retriever fails where it is built, not in the middle of a chain
        if mode not in SEARCH_MODES:
            raise ValueError(
                f"invalid search mode {mode!r}: expected one of {', '.join(SEARCH_MODES)}"
            )
        count: object = k  # callers may pass anything at runtime
        if (
            isinstance(count, bool)
            or not isinstance(count, int)
            or not 1 <= count <= q.MAX_SEARCH_LIMIT
        ):
            raise ValueError(f"k must be an int in 1..{q.MAX_SEARCH_LIMIT}, got {k!r}")
        q.check_limit_and_threshold(k, threshold)
        q.scope_names(collection)
        checked = check_filter(filter)
        return KnowledgeBaseRetriever(
            knowledge_base=self,
            collection=scope_list(collection),
            mode=mode,
            k=k,
            threshold=threshold,
            filter=checked,
        )

    def _scan(self, req: q.SearchRequest, rows: int) -> tuple[bool, q.Statement | None]:
        """Choose exact scan or HNSW from the planner's row estimate; return it with its settings."""
        exact = rows <= self.exact_max_rows
        return exact, q.scan_settings(req, exact=exact, rows=rows)

    def _query_vector(self, req: q.SearchRequest) -> Any:
        if req.mode == "fulltext":
            return None
        return self._embed(req.query)

    def _embed(self, text: str) -> Any:
        import numpy as np

        return np.asarray(self.embeddings.embed_query(text), dtype=np.float32)

    async def _aquery_vector(self, req: q.SearchRequest) -> Any:
        if req.mode == "fulltext":
            return None
        return await self._aembed(req.query)

    async def _aembed(self, text: str) -> Any:
        """Embed `text` without blocking the event loop."""
        import numpy as np

        return np.asarray(await self.embeddings.aembed_query(text), dtype=np.float32)


_DELETE_BY_ID = (
    "WITH gone AS (DELETE FROM kb_documents WHERE id = %s RETURNING id, collection_id)"
    " SELECT count(*), array_agg(DISTINCT collection_id) FROM gone"
)
_DELETE_BY_IDS = (
    "WITH gone AS (DELETE FROM kb_documents WHERE id = ANY(%s) RETURNING id, collection_id)"
    " SELECT count(*), array_agg(DISTINCT collection_id) FROM gone"
)
_DOCUMENTS_UNDER = (
    "SELECT d.id, d.source, (SELECT count(*) FROM kb_chunks c WHERE c.document_id = d.id)"
    " FROM kb_documents d JOIN kb_collections k ON k.id = d.collection_id"
    " WHERE k.name = %s AND starts_with(d.source, %s) FOR UPDATE OF d"
)
_GLOB_CHARS = re.compile(r"[*?\[]")
_COLLECTION_EXISTS = "SELECT 1 FROM kb_collections WHERE name = %s AND stored"
_DOCUMENTS = (
    "SELECT d.id, k.name, d.source, d.metadata, count(c.id),"
    " coalesce(sum(octet_length(c.text)), 0), d.content_hash, d.ingested_at, d.created_at"
    " FROM kb_documents d JOIN kb_collections k ON k.id = d.collection_id"
    " LEFT JOIN kb_chunks c ON c.document_id = d.id"
    " WHERE k.stored AND (%(name)s::text IS NULL OR k.name = %(name)s)"
    " GROUP BY d.id, k.name ORDER BY k.name, d.source"
)


@contextlib.contextmanager
def _interrupt_keeps(result: IngestResult) -> Iterator[None]:
    """Turn a Ctrl-C inside the block into `IngestInterrupted`, which says what `result` stored."""
    try:
        yield
    except IngestInterrupted:
        raise
    except KeyboardInterrupt as exc:
        raise IngestInterrupted(result) from exc


LOOP_SET_SEARCH_ARGUMENTS = ("query", "collection", "limit")
"""What the loop gives every search call itself: no search option may set them."""


@functools.cache
def _search_options() -> list[str]:
    """The keyword options `KnowledgeBase.search` takes beside what its caller sets per call."""
    import inspect

    return [
        name
        for name in inspect.signature(KnowledgeBase.search).parameters
        if name not in ("self", *LOOP_SET_SEARCH_ARGUMENTS)
    ]


def check_search_options(options: Mapping[str, Any]) -> None:
    """Raise what `KnowledgeBase.search` would raise for these keyword options, before any search.

    For the loop's ``search_opts``: every search of a run passes them, so a misspelt
    mode or an unknown key would fail each search of the run, and the run would give up
    for want of evidence instead of saying what was wrong.

    Raises:
        TypeError: for a key `search` takes as no option (``query``, ``collection`` and
            ``limit`` are its arguments, given per call).
        ValueError: for a value `search` refuses (an unknown mode, a threshold out of range...).
    """
    taken = _search_options()
    unknown = sorted(set(options) - set(taken))
    if unknown:
        raise TypeError(
            f"unknown search option{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}:"
            f" the knowledge base's search takes {', '.join(taken)}"
        )
    request = {k: v for k, v in options.items() if k not in ("entities", "entity_depth")}
    request.setdefault("mode", "hybrid")
    request.setdefault("threshold", None)
    request.setdefault("ef_search", None)
    q.make_request("probe", collection=None, limit=1, **request)
    entities = options.get("entities")
    if entities is not None and not isinstance(entities, bool):
        raise TypeError(f"entities must be True, False or None, got {entities!r}")
    if options.get("entity_depth") is not None:
        es.check_depth(options["entity_depth"])


def _check_ingest_options(
    *, entities: object, name: object, max_bytes: object, batch_size: object
) -> None:
    """Raise `TypeError`/`ValueError` for an ingest option of the wrong type or range."""
    if entities is not None and not isinstance(entities, bool):
        raise TypeError(f"entities must be True, False or None, got {entities!r}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    for label, value in (("max_bytes", max_bytes), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")


def _sync_root(source: object) -> Path:
    """The directory a sync makes the collection match, resolved as ingest resolves its files."""
    if not isinstance(source, str | os.PathLike) or not is_path_source(source):
        raise ValueError("sync=True needs a directory to sync with, not text or documents")
    path = Path(source).expanduser()
    if not path.is_dir():
        raise ValueError(f"sync=True needs a directory; {os.fspath(source)!r} is not one")
    return path.resolve()


def _file_fate(source: str, skipped: set[str]) -> Literal["gone", "unread", "present"]:
    """What a sync knows of a stored document's file that its walk did not read.

    "gone" only when looking at the path says so: nothing there (`ENOENT`,
    `ENOTDIR`), a directory, or a file emptied (skipped as empty: the document's
    text is gone from it). A permission error or a loop of links says nothing
    about the file, so the document is "unread" and kept, as is one whose file or
    folder the walk skipped. "present": a file left out by the globs or as hidden.
    """
    if source in skipped and _blank_file(source):
        return "gone"  # emptied: read, and nothing is left of it to keep
    path = source
    while True:  # the file, or a folder holding it, skipped by the walk
        if path in skipped:
            return "unread"
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        info = os.stat(source)
    except (FileNotFoundError, NotADirectoryError):
        return "gone"
    except OSError:
        return "unread"
    return "present" if stat.S_ISREG(info.st_mode) else "gone"


_BLANK_FILE_BYTES = 4096
"""Past this size a file is taken as holding text (it is never read to find out)."""


def _blank_file(path: str) -> bool:
    """Whether `path` is a file holding nothing but whitespace (an ingest skips it as empty)."""
    try:
        if os.path.getsize(path) > _BLANK_FILE_BYTES:
            return False
        with open(path, "rb") as file:
            return not file.read().decode("utf-8-sig", "replace").strip()
    except OSError:
        return False


def _matching(text: str, docs: list[DocumentInfo]) -> list[DocumentInfo]:
    """The documents `text` names, tried as `KnowledgeBase.find_documents` says; `[]` for none.

    Names are compared in Unicode NFC: a file named ``café.md`` with a decomposed
    accent (as macOS writes names) is found by the name typed with the composed one.
    """
    named = [(composed(d.source), d) for d in docs]
    by_source = dict(named)
    for candidate in (composed(text), composed(_resolved(text))):
        if candidate in by_source:
            return [by_source[candidate]]
    # literal before glob: brackets, "*" and "?" are legal in file names, and a name
    # read as a pattern first would pick another document ("[draft]" matches "d")
    tail = composed("/" + PurePosixPath(text).as_posix().removeprefix("./"))
    found = [d for source, d in named if source.endswith(tail)]
    if not found and _GLOB_CHARS.search(text):
        pattern = composed(text)
        found = [d for source, d in named if PurePosixPath(source).match(pattern)]
    return found


def _no_match(text: str, collection: str, docs: list[DocumentInfo]) -> KnowledgeBaseError:
    """The error for `text` naming no document of `collection`, with the closest sources."""
    names = {*(d.source for d in docs), *(PurePosixPath(d.source).name for d in docs)}
    close = difflib.get_close_matches(text, sorted(names), n=3, cutoff=0.4)
    closest = [
        d.source for name in close for d in docs if name in (d.source, PurePosixPath(d.source).name)
    ]
    hint = (
        f"; closest: {', '.join(repr(c) for c in dict.fromkeys(closest))}"
        if closest
        else f"; it holds {len(docs)} documents"
    )
    return KnowledgeBaseError(f"no document of {collection!r} matching {text!r}{hint}")


def _resolved(source: str) -> str:
    try:
        return str(Path(source).expanduser().resolve())
    except (OSError, RuntimeError):
        return source
