"""Database schema: created on first use, idempotent, safe under concurrent creators.

Design. Collections, documents and chunks live in three tables. Embeddings live
apart from the chunk text, in one narrow table per dimension
(`kb_embeddings_<dim>`: chunk id, collection id, `vector(<dim>)`), because:

* the dimension differs per embedder (WordLlama 256, OpenAI 1536, ...) and a typed
  `vector(dim)` column gives a plain HNSW index with no casts in queries;
* a narrow row keeps an exact scan (small collections, recall checks) reading
  about 1 kB per chunk instead of text + tsvector + metadata, and
  `STORAGE MAIN` keeps vectors inline rather than TOASTed out of line;
* a text-only search never touches vectors.

Each per-dimension table is list-partitioned by collection
(`kb_embeddings_<dim>_c<collection id>`), and each partition has an HNSW
(`vector_cosine_ops`) index of its own, except above pgvector's 2,000-dimension
HNSW limit, where searches are exact scans. Measured at 1M chunks with a
collection of 10 % beside a larger one (`bench.kb_bench`), one index over every
collection lost recall in the small one (0.92-0.94 against an exact scan: the
graph walk meets the other collection's rows first) and made each load into a
collection grow an index over all of them; a partition's own index searches the
collection as if it were alone, a search over several collections merges their
indexes' orders (Merge Append), a new collection's bulk load builds an index
over its own rows only, and deleting a collection drops its partition.

Vectors written while a collection's HNSW index is live wait outside its graph
(`pending`): each partition's HNSW index is partial (``WHERE NOT pending``), a
search walks the graph and scans the pending rows exactly (found through a
partial b-tree index), and `merge_pending` moves them into the graph, which a
write does itself once a collection holds more than `PENDING_MAX_ROWS` of them.
Inserting into a live graph costs a server backend 1.4 ms a vector at 91k
vectors (more at 900k); a pending write 0.03 ms. The graph insertion still
happens, at the merge (1.3 ms a vector), but not on the path of a sync that
changed a few files, and never for a chunk replaced before it was merged. A load
that leaves many pending vectors beside a graph of comparable size is cheaper
taken in by a new graph over every row, built beside the live one on a table of
its own and swapped in at one commit (`rebuild_hnsw_beside`).

Each collection's partition is itself list-partitioned by `segment`
(`kb_embeddings_<dim>_c<id>_s<n>`), each segment with its own partial HNSW
index: a search walks each graph and merges their orders. A large load into a
collection whose graph is live writes a new segment (`add_segment`) and builds
its graph over its rows only after the last batch, in place (`create_hnsw_index`):
no other graph is touched, and until it is built its rows are sorted exactly in
the same search. Every collection keeps its first segment (`first_segment_name`),
where smaller writes wait pending. `rebuild_hnsw_beside` rebuilds some or all
segments into one (compaction). A unique key of a partitioned table must hold
every partition column, so the parent has none: a chunk-id index serves the
cascaded deletes, and `kb_chunks`' key and the writer keep one vector a chunk.

`kb_chunks.tsv` is a generated `to_tsvector('english', text)` column with a GIN
index. Deleting a collection or document cascades to its chunks and embeddings.
The knowledge-graph tables (`knowledge.entities.schema`) are created by
`ensure_entity_schema`, which the knowledge base runs after `ensure_schema`.

All statements run with the knowledge base's schema first on `search_path`, so
the table names below are never qualified and never built from user text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from arcana_loop.knowledge import lexical, settings
from arcana_loop.knowledge.ddl import run_missing
from arcana_loop.knowledge.entities.schema import create_entity_tables, create_entity_vectors
from arcana_loop.knowledge.sections import context_line, document_title, searchable_text
from arcana_loop.knowledge.types import checked_dimension

logger = logging.getLogger(__name__)

HNSW_MAX_DIMENSION = 2000
_SCHEMA_LOCK_KEY = 0x6B625F736368  # "kb_sch": serialises concurrent schema creation
_INDEX_LOCK_KEY = 0x6B625F696478  # "kb_idx": one builder per index, so two never race on its name
_HNSW_LOCK_CLASS = 0x6B6268  # "kbh": with the index name's hash, one builder per HNSW index
_SEGMENT_LOCK_CLASS = (
    0x6B6273  # "kbs": with the partition name's hash, one segment numbering at a time
)

PENDING_MAX_ROWS: int = settings.PENDING_MAX_ROWS.default
"""Pending vectors a collection may hold before a write merges them into its graph.

Each search of the collection scans them exactly: at 91k vectors, 5,000 pending
vectors added 1.7 ms to a 3.5 ms HNSW search; none add 0.06 ms."""

_TEXT_INDEXES = {
    "kb_chunks_tsv_idx": "CREATE INDEX IF NOT EXISTS kb_chunks_tsv_idx ON kb_chunks USING gin (tsv)",
    "kb_chunks_lex_keys_idx": "CREATE INDEX IF NOT EXISTS kb_chunks_lex_keys_idx ON kb_chunks USING gin (lex_keys)",
    "kb_chunks_metadata_idx": "CREATE INDEX IF NOT EXISTS kb_chunks_metadata_idx ON kb_chunks USING gin (metadata jsonb_path_ops)",
}
"""The GIN indexes of `kb_chunks`: PostgreSQL full text (operators), BM25 term keys, and
metadata (containment, which a filter's equalities compile to, `knowledge.filters`).
A bulk load drops and rebuilds them together."""
_BASE_DDL = (
    """
    CREATE TABLE IF NOT EXISTS kb_collections (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name text NOT NULL UNIQUE,
        embedding_model text NOT NULL,
        dimension integer NOT NULL CHECK (dimension BETWEEN 1 AND 16000),
        created_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    # false from an ingest's creating the collection until its first document commits: a
    # collection an ingest killed before that left behind is not shown
    "ALTER TABLE kb_collections ADD COLUMN IF NOT EXISTS stored boolean NOT NULL DEFAULT true",
    # the BM25 length normalisation of the collection and the weighting it was computed
    # with (`knowledge.lexical.LEXICAL_VERSION`); NULL until its first chunks are written
    "ALTER TABLE kb_collections ADD COLUMN IF NOT EXISTS lex_avg_len float8",
    "ALTER TABLE kb_collections ADD COLUMN IF NOT EXISTS lex_version text",
    """
    CREATE TABLE IF NOT EXISTS kb_documents (
        id text PRIMARY KEY,
        collection_id bigint NOT NULL REFERENCES kb_collections (id) ON DELETE CASCADE,
        source text NOT NULL,
        content_hash text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
        created_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (collection_id, source)
    )
    """,
    # created_at is rewritten when a document is replaced; ingested_at keeps its first write
    # (documents stored before this column existed get the time of the upgrade)
    "ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS ingested_at timestamptz NOT NULL DEFAULT now()",
    # the map of a Markdown document's blocks (`knowledge.structure.MarkdownMap`): its next
    # version is parsed only where it changed
    "ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS structure bytea",
    """
    CREATE TABLE IF NOT EXISTS kb_chunks (
        id text PRIMARY KEY,
        document_id text NOT NULL REFERENCES kb_documents (id) ON DELETE CASCADE,
        collection_id bigint NOT NULL REFERENCES kb_collections (id) ON DELETE CASCADE,
        position integer NOT NULL,
        text text NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
        metadata jsonb NOT NULL DEFAULT '{}'::jsonb
    )
    """,
    "CREATE INDEX IF NOT EXISTS kb_chunks_document_idx ON kb_chunks (document_id)",
    "CREATE INDEX IF NOT EXISTS kb_chunks_collection_idx ON kb_chunks (collection_id)",
    # how the rows of the chunks an edit kept have moved since they were written: from
    # stored position shift_from[i] on, a row is read shift_position[i] further on and its
    # start_index shift_start[i] further (`knowledge.placed`); NULL: every row is in place
    "ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS shift_from integer[]",
    "ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS shift_position integer[]",
    "ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS shift_start integer[]",
    # a re-embed under way (`knowledge.reembed`): the embedder its staging tables are for
    """
    CREATE TABLE IF NOT EXISTS kb_reembeds (
        collection_id bigint PRIMARY KEY REFERENCES kb_collections (id) ON DELETE CASCADE,
        embedding_model text NOT NULL,
        dimension integer NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    """
    CREATE OR REPLACE FUNCTION kb_chunk_metadata(chunk text, doc text, stored jsonb)
    RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
      SELECT coalesce(
        (SELECT stored || jsonb_build_object('start_index', (stored ->> 'start_index')::integer
                  + coalesce(d.shift_start[width_bucket(c.position, d.shift_from)], 0))
         FROM kb_documents d JOIN kb_chunks c ON c.id = chunk
         WHERE d.id = doc AND d.shift_from IS NOT NULL AND stored ? 'start_index'),
        stored)
    $$
    """,
)

_LEX_COUNT_BODY = """
    BEGIN
      -- a writer that replaces chunks adds the net change of its statements itself
      -- (`count_terms_in_writer` sets this, for its transaction only)
      IF current_setting('arcana_loop.lex_counted_by_writer', true) = 'on' THEN
        RETURN NULL;
      END IF;
      -- an update that changed no row's terms (a chunk moved within its document) counts
      -- nothing; nested, as a DELETE or INSERT has no table of the other side to read
      IF TG_OP = 'UPDATE' THEN
        IF NOT EXISTS (
            SELECT 1 FROM old_rows o FULL JOIN new_rows n ON n.id = o.id
            WHERE o.id IS NULL OR n.id IS NULL OR n.collection_id <> o.collection_id
               OR n.lex_keys IS DISTINCT FROM o.lex_keys) THEN
          RETURN NULL;
        END IF;
      END IF;
      IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE kb_lex_terms t SET df = t.df - d.n
        FROM (SELECT o.collection_id AS c, k, count(*) AS n
              FROM old_rows o, unnest(o.lex_keys) AS k GROUP BY 1, 2) d
        WHERE t.collection_id = d.c AND t.key = d.k;
        UPDATE kb_lex_stats s SET chunks = s.chunks - d.n
        FROM (SELECT collection_id AS c, count(*) AS n FROM old_rows
              WHERE lex_keys IS NOT NULL GROUP BY 1) d
        WHERE s.collection_id = d.c;
      END IF;
      IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO kb_lex_terms AS t (collection_id, key, df)
        SELECT r.collection_id, k, count(*) FROM new_rows r, unnest(r.lex_keys) AS k
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (collection_id, key) DO UPDATE SET df = t.df + excluded.df;
        INSERT INTO kb_lex_stats AS s (collection_id, chunks)
        SELECT collection_id, count(*) FROM new_rows WHERE lex_keys IS NOT NULL
        GROUP BY 1 ORDER BY 1
        ON CONFLICT (collection_id) DO UPDATE SET chunks = s.chunks + excluded.chunks;
      END IF;
      RETURN NULL;
    END
"""
_LEX_COUNT_FUNCTION = (
    "CREATE OR REPLACE FUNCTION kb_lex_count() RETURNS trigger LANGUAGE plpgsql"
    f" AS $${_LEX_COUNT_BODY}$$"
)
"""Keeps the BM25 document frequencies (`kb_lex_terms`, `kb_lex_stats`) in step with `kb_chunks`."""


def count_terms_in_writer(conn: psycopg.Connection[Any]) -> None:
    """Leave the BM25 counts of this transaction's chunk writes to the caller (`add_term_counts`).

    An edit deletes a changed chunk and inserts its new version, which share most of
    their terms: counted by the triggers, a statement each, every term's row was
    updated twice (about 0.6 ms a chunk, most of a 1 % edit's write). The caller sums
    both sides and writes only the terms whose count changed. Transaction-local:
    the setting ends with the transaction, committed or rolled back.
    """
    conn.execute("SELECT set_config('arcana_loop.lex_counted_by_writer', 'on', true)")


def add_term_counts(
    conn: psycopg.Connection[Any], collection_id: int, df: Mapping[int, int], chunks: int
) -> None:
    """Add net changes to a collection's document frequencies and chunk count, in one statement.

    `df` maps a term key to the change of its document frequency (zeros are skipped);
    `chunks` is the change in chunks holding terms. Keys are written in order, as
    the triggers do, so concurrent writers lock `kb_lex_terms` rows alike.
    """
    keys = sorted(k for k, n in df.items() if n)
    if not keys and not chunks:
        return
    conn.execute(
        "WITH terms AS (INSERT INTO kb_lex_terms AS t (collection_id, key, df)"
        " SELECT %(c)s, d.k, d.n FROM unnest(%(k)s::int4[], %(n)s::int4[]) AS d(k, n) ORDER BY d.k"
        " ON CONFLICT (collection_id, key) DO UPDATE SET df = t.df + excluded.df)"
        " INSERT INTO kb_lex_stats AS s (collection_id, chunks) SELECT %(c)s, %(m)s WHERE %(m)s <> 0"
        " ON CONFLICT (collection_id) DO UPDATE SET chunks = s.chunks + excluded.chunks",
        {"c": collection_id, "k": keys, "n": [df[k] for k in keys], "m": chunks},
    )


_LEXICAL_DDL = (
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS lex sparsevec",
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS lex_keys integer[]",
    _TEXT_INDEXES["kb_chunks_lex_keys_idx"],
    # per collection, so no collection's content moves the scores seen in another; no
    # foreign key: a collection's rows are counted down by its chunks' cascade, after it
    """
    CREATE TABLE IF NOT EXISTS kb_lex_terms (
        collection_id bigint NOT NULL,
        key integer NOT NULL,
        df integer NOT NULL,
        PRIMARY KEY (collection_id, key)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kb_lex_stats (
        collection_id bigint PRIMARY KEY,
        chunks bigint NOT NULL DEFAULT 0
    )
    """,
    # Document frequencies follow every insert, update and delete of kb_chunks (cascades
    # from documents and collections included), one statement at a time. Rows are
    # counted in (collection, key) order, so two concurrent writers lock kb_lex_terms
    # rows in the same order and never deadlock.
    _LEX_COUNT_FUNCTION,
    "DROP TRIGGER IF EXISTS kb_lex_count_insert ON kb_chunks",
    "CREATE TRIGGER kb_lex_count_insert AFTER INSERT ON kb_chunks"
    " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kb_lex_count()",
    "DROP TRIGGER IF EXISTS kb_lex_count_update ON kb_chunks",
    "CREATE TRIGGER kb_lex_count_update AFTER UPDATE ON kb_chunks"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT"
    " EXECUTE FUNCTION kb_lex_count()",
    "DROP TRIGGER IF EXISTS kb_lex_count_delete ON kb_chunks",
    "CREATE TRIGGER kb_lex_count_delete AFTER DELETE ON kb_chunks"
    " REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kb_lex_count()",
)
"""The lexical index (`knowledge.lexical`): BM25 weights per chunk and document frequencies."""


def _lexical_per_collection(conn: psycopg.Connection[Any]) -> bool:
    """Whether the lexical statistics exist in their per-collection form."""
    row = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'kb_lex_stats' AND column_name = 'collection_id'"
    ).fetchone()
    return row is not None


def _stored_lex_count(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        "SELECT prosrc FROM pg_proc WHERE proname = 'kb_lex_count'"
        " AND pronamespace = current_schema()::regnamespace"
    ).fetchone()
    return str(row[0]) if row is not None else None


def _migrate_lexical(conn: psycopg.Connection[Any]) -> None:
    """Create the lexical index, or move one whose statistics were shared by all collections.

    The chunks' stored terms stay; the statistics are dropped and counted again per
    collection from them, once, inside the schema's transaction.
    """
    conn.execute(
        sql.SQL("DROP TABLE IF EXISTS {}, {}").format(
            _here(conn, "kb_lex_terms"), _here(conn, "kb_lex_stats")
        )
    )
    for statement in _LEXICAL_DDL:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO kb_lex_terms (collection_id, key, df)"
        " SELECT collection_id, k, count(*) FROM kb_chunks, unnest(lex_keys) AS k GROUP BY 1, 2"
    )
    conn.execute(
        "INSERT INTO kb_lex_stats (collection_id, chunks)"
        " SELECT collection_id, count(*) FROM kb_chunks WHERE lex_keys IS NOT NULL GROUP BY 1"
    )


def refresh_lexical(conn: psycopg.Connection[Any], batch: int = 2000) -> int:
    """Weigh again every collection whose stored BM25 weights are not of `LEXICAL_VERSION`; return its chunks.

    Such a collection was written by an earlier version (other `K1`, `B` or terms, or
    chunks stored before the lexical index existed, or weights normalised per ingest
    call). Its chunks are weighed under their document's title and section path, as
    ingest weighs them, against one average length for the whole collection; their
    embeddings stay. Costs a scan of `kb_chunks` when every collection is current.
    """
    stale = conn.execute(
        "SELECT k.id FROM kb_collections k WHERE (k.lex_version IS DISTINCT FROM %s"
        " AND EXISTS (SELECT 1 FROM kb_chunks c WHERE c.collection_id = k.id))"
        " OR EXISTS (SELECT 1 FROM kb_chunks c WHERE c.collection_id = k.id AND c.lex_keys IS NULL)"
        " ORDER BY k.id",
        (lexical.LEXICAL_VERSION,),
    ).fetchall()
    done = 0
    for (collection_id,) in stale:
        done += _reweigh(conn, collection_id, batch)
    return done


def _searchable_rows(
    conn: psycopg.Connection[Any], collection_id: int, after: str, batch: int
) -> list[tuple[str, list[str]]]:
    rows = conn.execute(
        "SELECT c.id, c.text, d.source, d.metadata, coalesce(c.metadata->>'section', '')"
        " FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
        " WHERE c.collection_id = %s AND c.id > %s ORDER BY c.id LIMIT %s",
        (collection_id, after, batch),
    ).fetchall()
    return [
        (
            chunk_id,
            lexical.terms(
                searchable_text(context_line(document_title(source, meta or {}), section), text)
            ),
        )
        for chunk_id, text, source, meta, section in rows
    ]


def _reweigh(conn: psycopg.Connection[Any], collection_id: int, batch: int) -> int:
    """Weigh one collection's chunks again (two passes: the average length, then the weights)."""
    lengths: list[int] = []
    after = ""
    while rows := _searchable_rows(conn, collection_id, after, batch):
        lengths.extend(len(t) for _, t in rows)
        after = rows[-1][0]
    avg_len = max(1.0, sum(lengths) / len(lengths)) if lengths else 1.0
    logger.info("weighing %d chunks of collection %d again (BM25)", len(lengths), collection_id)
    after = ""
    while rows := _searchable_rows(conn, collection_id, after, batch):
        updates = []
        for chunk_id, chunk_terms in rows:
            weights = lexical.document_vector(chunk_terms, avg_len)
            updates.append((lexical.sparse_vector(weights).to_text(), sorted(weights), chunk_id))
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "UPDATE kb_chunks SET lex = %s::sparsevec, lex_keys = %s WHERE id = %s", updates
            )
        after = rows[-1][0]
    conn.execute(
        "UPDATE kb_collections SET lex_avg_len = %s, lex_version = %s WHERE id = %s",
        (avg_len, lexical.LEXICAL_VERSION, collection_id),
    )
    return len(lengths)


def embeddings_table(dimension: int) -> sql.Identifier:
    """Return the identifier of the embeddings table for `dimension` (an int we validated)."""
    return sql.Identifier(_embeddings_name(dimension))


def _embeddings_name(dimension: int) -> str:
    return f"kb_embeddings_{checked_dimension(dimension)}"


def partition_table(dimension: int, collection_id: int) -> sql.Identifier:
    """Return the identifier of one collection's partition of the embeddings table."""
    return sql.Identifier(_partition_name(dimension, collection_id))


def _on_partition(
    conn: psycopg.Connection[Any],
    dimension: int,
    collection_id: int,
    statement: LiteralString,
    params: Sequence[Any] = (),
) -> psycopg.Cursor[Any]:
    """Execute `statement` with ``{p}`` standing for the collection's partition; return the cursor."""
    query = sql.SQL(statement).format(p=partition_table(dimension, collection_id))
    return conn.execute(query, params)


def _counts(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int, statement: LiteralString
) -> list[tuple[int, ...]]:
    """The rows of a counting `statement` over the collection's partition (``{p}``), as ints."""
    rows = _on_partition(conn, dimension, collection_id, statement).fetchall()
    return [tuple(int(value) for value in row) for row in rows]


def _partition_name(dimension: int, collection_id: int) -> str:
    return f"{_embeddings_name(dimension)}_c{int(collection_id)}"


def _hnsw_index_name(partition: str) -> str:
    return f"{partition}_hnsw"


def ensure_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the schema and base tables if missing, in one transaction."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        run_missing(conn, _BASE_DDL)
        _place_moved_rows(conn)
        if not _lexical_per_collection(conn):
            _migrate_lexical(conn)
        elif _stored_lex_count(conn) != _LEX_COUNT_BODY:
            conn.execute(_LEX_COUNT_FUNCTION)  # an earlier version's counting
        dims = conn.execute("SELECT DISTINCT dimension FROM kb_collections ORDER BY 1").fetchall()
    _tolerate_full_disk(conn, lambda c: create_fulltext_index(c, on_open=True), "full-text")
    for (dim,) in dims:
        ensure_dimension(conn, dim)


def _place_moved_rows(conn: psycopg.Connection[Any]) -> None:
    """Write the rows an earlier version's `moved` map placed where it placed them, then drop it.

    That map held, per moved chunk, its position (where its row's was stale) and its
    offset (none: the chunk has none). Once, when a knowledge base stored with it opens:
    the shift ranges (`knowledge.placed`) start empty, with every row where its chunk is.
    Those documents' stored maps record the rows where they were, so they are dropped
    too: the next edit of each parses it whole.
    """
    row = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'kb_documents' AND column_name = 'moved'"
    ).fetchone()
    if row is None:
        return
    conn.execute(
        "UPDATE kb_chunks c SET"
        " position = coalesce((d.moved -> c.id ->> 'position')::integer, c.position),"
        " metadata = CASE WHEN d.moved -> c.id ? 'start_index'"
        "   THEN c.metadata || jsonb_build_object('start_index', d.moved -> c.id -> 'start_index')"
        "   ELSE c.metadata - 'start_index' END"
        " FROM kb_documents d WHERE d.id = c.document_id AND d.moved ? c.id"
    )
    conn.execute("UPDATE kb_documents SET structure = NULL WHERE moved IS NOT NULL")
    conn.execute("ALTER TABLE kb_documents DROP COLUMN moved")


def ensure_dimension(conn: psycopg.Connection[Any], dimension: int) -> None:
    """Create the embeddings table for `dimension`, a partition per collection, and their indexes.

    A table of the layout before partitions (one table, one index) is moved into
    partitions first, once; its indexes are then built per partition.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        kind = _relation_kind(conn, _embeddings_name(dimension))
        if kind == "r":
            _partition_existing(conn, dimension)
        elif kind is None:
            _create_embeddings_table(conn, dimension)
        _add_pending(conn, dimension)
        _into_segments(conn, dimension)
        ids = conn.execute(
            "SELECT id FROM kb_collections WHERE dimension = %s ORDER BY id", (dimension,)
        ).fetchall()
        for (collection_id,) in ids:
            _create_partition(conn, dimension, collection_id)
        if conn.execute("SELECT to_regclass('kb_graph_entities')").fetchone() != (None,):
            create_entity_vectors(conn, dimension, hnsw=dimension <= HNSW_MAX_DIMENSION)
    _tolerate_full_disk(conn, lambda c: create_hnsw_index(c, dimension, on_open=True), "HNSW")


def drop_partition(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> None:
    """Drop a collection's embeddings partition (in the caller's transaction): its rows and index at once."""
    conn.execute(
        sql.SQL("DROP TABLE IF EXISTS {p}").format(
            p=_here(conn, _partition_name(dimension, collection_id))
        )
    )


def _relation_kind(conn: psycopg.Connection[Any], name: str) -> str | None:
    """``r`` (table), ``p`` (partitioned table)... of `name` in the current schema, or None."""
    row = conn.execute(
        "SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = %s",
        (name,),
    ).fetchone()
    return str(row[0]) if row is not None else None


def _create_embeddings_table(conn: psycopg.Connection[Any], dimension: int) -> None:
    # no key: a unique key of a partitioned table must hold the segment column too
    # (`_into_segments`); a chunk's one vector is written with its row in `kb_chunks`
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " chunk_id text NOT NULL REFERENCES kb_chunks (id) ON DELETE CASCADE,"
            " collection_id bigint NOT NULL,"
            " embedding vector({d}) NOT NULL,"
            " pending boolean NOT NULL DEFAULT false,"
            " segment integer NOT NULL DEFAULT 0) PARTITION BY LIST (collection_id)"
        ).format(t=embeddings_table(dimension), d=sql.Literal(dimension))
    )
    _index_chunk_ids(conn, dimension)


def _index_chunk_ids(conn: psycopg.Connection[Any], dimension: int) -> None:
    """Index the vectors by chunk id on the parent (every segment gets its own): cascaded deletes find them."""
    name = _embeddings_name(dimension)
    conn.execute(
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (chunk_id)").format(
            i=sql.Identifier(f"{name}_chunk_idx"), t=sql.Identifier(name)
        )
    )


def _into_segments(conn: psycopg.Connection[Any], dimension: int) -> None:
    """Move a table of the layout before segments into it, once (a catalog change, and a scan).

    The parent gets its `segment` column (a constant default: no row rewritten), its
    key (chunk id, collection id) becomes a plain chunk-id index, and each
    collection's partition, a plain table, becomes its first segment (`..._s0`, its
    HNSW index renamed with it, not rebuilt) under a partition of the same name
    partitioned by segment.
    """
    name = _embeddings_name(dimension)
    if not _has_column(conn, name, "segment"):
        logger.warning(
            "giving the %s-dimension embeddings one segment per collection (once)", dimension
        )
        conn.execute(
            sql.SQL("ALTER TABLE {t} ADD COLUMN segment integer NOT NULL DEFAULT 0").format(
                t=sql.Identifier(name)
            )
        )
    # each checked in the catalog first: the statements would lock the parent table even
    # with nothing to do, and wait for every open write and rebuild of the dimension
    if _relation_kind(conn, f"{name}_pkey") is not None:
        conn.execute(
            sql.SQL("ALTER TABLE {t} DROP CONSTRAINT IF EXISTS {k}").format(
                t=sql.Identifier(name), k=sql.Identifier(f"{name}_pkey")
            )
        )
    if _relation_kind(conn, f"{name}_chunk_idx") is None:
        _index_chunk_ids(conn, dimension)
    for collection_id, partition in partitions(conn, dimension):
        if _relation_kind(conn, partition) == "r":
            _segment_existing(conn, dimension, collection_id)


def _segment_existing(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> None:
    """Make a collection's plain partition the first segment of a partition partitioned by segment."""
    partition = _partition_name(dimension, collection_id)
    first = _segment_name(partition, 0)
    parent = embeddings_table(dimension)
    conn.execute(
        sql.SQL("ALTER TABLE {t} DETACH PARTITION {p}").format(
            t=parent, p=sql.Identifier(partition)
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {p} RENAME TO {s}").format(
            p=sql.Identifier(partition), s=sql.Identifier(first)
        )
    )
    if _relation_kind(conn, _hnsw_index_name(partition)) is not None:
        conn.execute(
            sql.SQL("ALTER INDEX {i} RENAME TO {n}").format(
                i=_here(conn, _hnsw_index_name(partition)),
                n=sql.Identifier(_hnsw_index_name(first)),
            )
        )
    _create_segmented(conn, dimension, collection_id, attach=False)
    # the rows already hold segment 0 and this collection: each ATTACH checks them (one scan)
    conn.execute(
        sql.SQL("ALTER TABLE {p} ATTACH PARTITION {s} FOR VALUES IN (0)").format(
            p=sql.Identifier(partition), s=sql.Identifier(first)
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {t} ATTACH PARTITION {p} FOR VALUES IN ({c})").format(
            t=parent, p=sql.Identifier(partition), c=sql.Literal(int(collection_id))
        )
    )


def _has_column(conn: psycopg.Connection[Any], table: str, column: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = %s AND a.attname = %s"
        " AND NOT a.attisdropped",
        (table, column),
    ).fetchone()
    return row is not None


def _add_pending(conn: psycopg.Connection[Any], dimension: int) -> None:
    """Give the embeddings table its `pending` column and the partial index that finds those rows.

    A table made before pending vectors gets the column (a catalog change: no
    row is rewritten); its partitions' HNSW indexes, over every row, are
    rebuilt partial by `create_hnsw_index`.
    """
    name = _embeddings_name(dimension)
    if not _has_column(conn, name, "pending"):
        conn.execute(
            sql.SQL(
                "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS pending boolean NOT NULL DEFAULT false"
            ).format(t=sql.Identifier(name))
        )
    index = f"{name}_pending_idx"
    if not _usable(conn, index):
        # on the parent: every partition, present and future, gets its own
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (collection_id) WHERE pending").format(
                i=sql.Identifier(index), t=sql.Identifier(name)
            )
        )


def create_partition(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> None:
    """Create a collection's partition of the `dimension` embeddings table, if missing (no index yet)."""
    _create_partition(conn, dimension, collection_id)


def _create_partition(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> None:
    if _relation_kind(conn, _partition_name(dimension, collection_id)) is not None:
        return  # checked first: IF NOT EXISTS would still lock the parent table, and say so
    _create_segmented(conn, dimension, collection_id, attach=True)
    first = _segment_name(_partition_name(dimension, collection_id), 0)
    conn.execute(
        sql.SQL("CREATE TABLE {s} PARTITION OF {p} FOR VALUES IN (0)").format(
            s=sql.Identifier(first), p=partition_table(dimension, collection_id)
        )
    )
    _store_inline(conn, first)


def _create_segmented(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int, *, attach: bool
) -> None:
    """Create a collection's partition, itself partitioned by segment (no segment yet)."""
    partition = partition_table(dimension, collection_id)
    if attach:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {p} PARTITION OF {t} FOR VALUES IN ({c}) PARTITION BY LIST (segment)"
            ).format(p=partition, t=embeddings_table(dimension), c=sql.Literal(int(collection_id)))
        )
    else:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {p} (LIKE {t} INCLUDING DEFAULTS) PARTITION BY LIST (segment)"
            ).format(p=partition, t=embeddings_table(dimension))
        )


def _store_inline(conn: psycopg.Connection[Any], table: str) -> None:
    # vectors inline, not TOASTed out of line: an exact scan reads them in place
    conn.execute(
        sql.SQL("ALTER TABLE {p} ALTER COLUMN embedding SET STORAGE MAIN").format(
            p=sql.Identifier(table)
        )
    )


def _segment_name(partition: str, segment: int) -> str:
    return f"{partition}_s{int(segment)}"


def segments(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int
) -> list[tuple[int, str]]:
    """The ``(segment number, table name)`` of each segment of a collection, oldest first."""
    partition = _partition_name(dimension, collection_id)
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace"
        " WHERE n.nspname = current_schema() AND p.relname = %s",
        (partition,),
    ).fetchall()
    prefix = f"{partition}_s"
    found = [
        (int(name.removeprefix(prefix)), name)
        for (name,) in rows
        if name.startswith(prefix) and name.removeprefix(prefix).isdigit()
    ]
    return sorted(found)


def first_segment_name(dimension: int, collection_id: int) -> str:
    """The table of a collection's first segment, which it always has: where small writes go.

    Created with the collection's partition, and kept by every compaction, which
    names what it builds after the oldest segment it replaces (`rebuild_hnsw_beside`).
    """
    return _segment_name(_partition_name(dimension, collection_id), 0)


def segment_sizes(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int
) -> dict[int, int]:
    """Count the vectors of each segment of a collection (one scan of its partition)."""
    counted = _counts(
        conn, dimension, collection_id, "SELECT segment, count(*) FROM {p} GROUP BY segment"
    )
    sizes = {number: 0 for number, _ in segments(conn, dimension, collection_id)}
    sizes.update({number: count for number, count in counted})
    return sizes


def add_segment(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> str:
    """Attach a new, empty segment to a collection, with no HNSW graph yet; return its table name.

    Created beside and attached (`SHARE UPDATE EXCLUSIVE` on the collection's
    partition: searches and writes go on), it is searched exactly until its graph is
    built in place (`create_hnsw_index`). Its `segment` default is its number, so a
    write into it names no segment.
    """
    partition = _partition_name(dimension, collection_id)
    with conn.transaction():
        # one numbering at a time per collection
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SEGMENT_LOCK_CLASS, partition)
        )
        number = max((n for n, _ in segments(conn, dimension, collection_id)), default=-1) + 1
        name = _segment_name(partition, number)
        conn.execute(
            sql.SQL("CREATE TABLE {s} (LIKE {p} INCLUDING DEFAULTS)").format(
                s=sql.Identifier(name), p=sql.Identifier(partition)
            )
        )
        conn.execute(
            sql.SQL("ALTER TABLE {s} ALTER COLUMN segment SET DEFAULT {n}").format(
                s=sql.Identifier(name), n=sql.Literal(number)
            )
        )
        _store_inline(conn, name)
        conn.execute(
            sql.SQL("ALTER TABLE {p} ATTACH PARTITION {s} FOR VALUES IN ({n})").format(
                p=sql.Identifier(partition), s=sql.Identifier(name), n=sql.Literal(number)
            )
        )
    return name


def _partition_existing(conn: psycopg.Connection[Any], dimension: int) -> None:
    """Move an unpartitioned embeddings table (the earlier layout) into per-collection partitions."""
    name = _embeddings_name(dimension)
    old = sql.Identifier(f"{name}_unpartitioned")
    logger.warning(
        "moving the %s-dimension embeddings into one partition per collection (once);"
        " their HNSW indexes are built next",
        dimension,
    )
    conn.execute(sql.SQL("ALTER TABLE {t} RENAME TO {o}").format(t=sql.Identifier(name), o=old))
    # the old table's index and key names are the ones the new layout uses
    for index in (f"{name}_hnsw", f"{name}_collection_idx"):
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(_here(conn, index)))
    conn.execute(
        sql.SQL("ALTER TABLE {o} DROP CONSTRAINT IF EXISTS {k}").format(
            o=old, k=sql.Identifier(f"{name}_pkey")
        )
    )
    _create_embeddings_table(conn, dimension)
    kept = conn.execute(sql.SQL("SELECT DISTINCT collection_id FROM {o}").format(o=old)).fetchall()
    for (collection_id,) in kept:
        _create_partition(conn, dimension, collection_id)
    conn.execute(
        sql.SQL(
            "INSERT INTO {t} (chunk_id, collection_id, embedding)"
            " SELECT chunk_id, collection_id, embedding FROM {o}"
        ).format(t=embeddings_table(dimension), o=old)
    )
    conn.execute(sql.SQL("DROP TABLE {o}").format(o=old))


def partitions(conn: psycopg.Connection[Any], dimension: int) -> list[tuple[int, str]]:
    """The ``(collection id, partition name)`` of each partition of the `dimension` table."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace"
        " WHERE n.nspname = current_schema() AND p.relname = %s ORDER BY c.relname",
        (_embeddings_name(dimension),),
    ).fetchall()
    prefix = f"{_embeddings_name(dimension)}_c"
    return [
        (int(name.removeprefix(prefix)), name)
        for (name,) in rows
        if name.startswith(prefix) and name.removeprefix(prefix).isdigit()
    ]


def _tolerate_full_disk(
    conn: psycopg.Connection[Any], build: Callable[[psycopg.Connection[Any]], None], name: str
) -> None:
    """Build a missing index, but let the knowledge base open if the server lacks the room.

    Only a bulk load that failed leaves an index missing. Every search stays
    correct without it (a scan instead), so a full disk must not make the
    knowledge base unusable: the build is retried at the next opening.
    """
    try:
        build(conn)
    except (psycopg.errors.DiskFull, psycopg.errors.OutOfMemory) as exc:
        logger.warning("the %s index is missing and could not be built now: %s", name, exc)


def ensure_entity_schema(conn: psycopg.Connection[Any]) -> None:
    """Create the knowledge-graph tables, and their entity vectors per known dimension."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        create_entity_tables(conn)
        for (dim,) in conn.execute("SELECT DISTINCT dimension FROM kb_collections").fetchall():
            create_entity_vectors(conn, dim, hnsw=dim <= HNSW_MAX_DIMENSION)


def create_hnsw_index(
    conn: psycopg.Connection[Any],
    dimension: int,
    collection_id: int | None = None,
    *,
    on_open: bool = False,
    segment: str | None = None,
) -> None:
    """Build the HNSW index of each segment (or of one collection's) that lacks a valid one.

    ``segment``: that segment's only (a load's own, after its last batch), not
    another load's still being written.

    After a bulk load into an empty collection, or at startup. ``on_open``: the knowledge
    base is opening, so a missing index was left so by an ingest that ended during its
    index phase (or by the move into partitions); that is said before the build, which
    searches wait for (they would otherwise scan every vector of the collection).
    """
    if dimension > HNSW_MAX_DIMENSION:
        return
    collections = (
        [collection_id]
        if collection_id is not None
        else [c for c, _ in partitions(conn, dimension)]
    )
    for collection in collections:
        for _, name in segments(conn, dimension, collection):
            if segment in (None, name) and not _usable(conn, _hnsw_index_name(name), partial=True):
                _build_hnsw(conn, name, on_open=on_open)


def _build_hnsw(conn: psycopg.Connection[Any], segment: str, *, on_open: bool) -> None:
    """Build one segment's graph in place: `SHARE` on that segment only, searches go on.

    An interruption (the client killed, the server stopped) rolls the build back:
    the segment's rows stay searched exactly and the other segments' graphs were
    never touched; the next opening builds it (``on_open``).
    """
    index = _hnsw_index_name(segment)
    with conn.transaction():
        # one builder per index; builds of different segments' indexes do not wait for each other
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_HNSW_LOCK_CLASS, index))
        if _usable(conn, index, partial=True) or _relation_kind(conn, segment) is None:
            return  # another process built it while this one waited, or the collection is gone
        if _usable(conn, index):
            logger.warning(
                "rebuilding the HNSW index of %s once, to keep fresh writes out of its graph"
                " (an index over every row, from before pending vectors)",
                segment,
            )
        elif on_open:
            _say_rebuilding(conn, "HNSW", segment)
        _end_with_the_client(conn)
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {i}").format(i=_here(conn, index)))
        # a build takes every row into the graph: 0.3 ms a row, against 1.3 to merge one
        conn.execute(
            sql.SQL("UPDATE {p} SET pending = false WHERE pending").format(
                p=sql.Identifier(segment)
            )
        )
        # at least 1 GB keeps a 100k-row build in memory (149 s spilling at 64 MB, 58 s at
        # 1 GB); a server tuned to its host (`knowledge.tuning`) may give it more
        _build_memory(conn)
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {i} ON {p} USING hnsw (embedding vector_cosine_ops)"
                " WHERE NOT pending"
            ).format(i=sql.Identifier(index), p=sql.Identifier(segment))
        )


def _end_with_the_client(conn: psycopg.Connection[Any]) -> None:
    """A client that dies mid-build ends its backend's build within a second, not at its end."""
    conn.execute(  # PostgreSQL 14 and later
        "SELECT set_config(name, '1s', true) FROM pg_settings"
        " WHERE name = 'client_connection_check_interval'"
    )


def _build_memory(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "SELECT set_config('maintenance_work_mem', '1GB', true)"
        " WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes('1GB')"
    )


def pending_vectors(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> int:
    """Count the collection's vectors waiting outside its HNSW graph (through the partial index)."""
    return _counts(conn, dimension, collection_id, "SELECT count(*) FROM {p} WHERE pending")[0][0]


def pending_and_stored(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int
) -> tuple[int, int]:
    """Count the collection's pending vectors and all its vectors (one scan of its partition)."""
    statement = "SELECT count(*) FILTER (WHERE pending), count(*) FROM {p}"
    pending, stored = _counts(conn, dimension, collection_id, statement)[0]
    return pending, stored


def merge_pending_batch(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int, rows: int
) -> int:
    """Move up to `rows` pending vectors into the collection's HNSW graph; return how many moved.

    Rows another merger holds are skipped, so several connections merge at once
    (a graph insert is a server backend's work).
    """
    cur = _on_partition(
        conn,
        dimension,
        collection_id,
        "WITH picked AS (SELECT chunk_id FROM {p} WHERE pending LIMIT %s FOR UPDATE SKIP LOCKED)"
        " UPDATE {p} e SET pending = false FROM picked"
        " WHERE e.chunk_id = picked.chunk_id AND e.pending",
        (rows,),
    )
    return max(cur.rowcount, 0)


SWAP_ATTEMPTS = 5
"""Tries of a rebuild's swap that a deadlock or a lock wait cut short (each rolled back to its savepoint)."""
SWAP_LOCK_TIMEOUT = "10s"
"""How long the swap waits for the writes it must hold off (in-flight batches take about a second)."""


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild (`rebuild_hnsw_beside`) took in, and how long each part of it took."""

    rows: int
    """Vectors in the new graph."""
    copy_s: float
    """Copying the partition's rows into the new table."""
    build_s: float
    """Building its graph, key and pending-rows index."""
    swap_s: float
    """The swap, from asking for its lock on `kb_chunks` to the commit (waits and retries included)."""
    blocked_s: float
    """From dropping the old partition to the commit: what searches of the dimension waited."""


def rebuild_hnsw_beside(
    conn: psycopg.Connection[Any],
    dimension: int,
    collection_id: int,
    *,
    due: Callable[[int, int], bool] | None = None,
    only: Sequence[int] | None = None,
) -> Rebuilt | None:
    """Build a new HNSW graph over all of a collection's vectors beside its live one, then swap it in.

    ``only``: the segments to rebuild into one (a compaction, `knowledge.writer`);
    None: all of them. The new table takes the oldest one's name and number.

    Returns what it did, or None when nothing was done: the
    collection or its segments are gone, or `due` (given the pending
    and the stored vectors, counted once this builder holds the partition's build
    lock) says a rebuild is not due any more (another builder just did one).

    Taking many pending vectors into a live graph costs a graph insertion each
    (`merge_pending_batch`); building a graph over every row costs less per row
    and grows with all of them, so a load that adds a large share of a collection
    is cheaper rebuilt (`knowledge.writer.REBUILD_MIN_SHARE`). The new graph is
    built on a table of its own, never on the live partition: clearing the
    pending flag of a row is an update, and an update inserts the row into every
    graph of its table again, which is the cost avoided. So, in one transaction:
    the segments' rows are copied, all with ``pending = false``, into a new
    table; its HNSW index (partial, as the live one), chunk-id and pending
    indexes are built; then the swap, under a savepoint: `kb_chunks` is locked against writes
    (which waits for open ingest batches and holds off the next), rows written
    or deleted since the copy are brought over (new ones pending: scanned
    exactly, merged later), and the old segments are dropped and the new table
    attached in their place. Until the commit every search reads the old
    segments (their graphs and an exact scan of their pending rows); from
    the commit on, the new one. An interruption anywhere (the client killed, the
    server stopped) rolls the whole transaction back: the new table never
    existed, and the old segments and their graphs are as they were. A swap that
    deadlocks with another writer (one deleting a collection) is rolled back to
    its savepoint and tried again, `SWAP_ATTEMPTS` times.
    """
    if dimension > HNSW_MAX_DIMENSION:
        return None
    partition = _partition_name(dimension, collection_id)
    with conn.transaction():
        # KEY SHARE, as an ingest batch holds it: a delete of the collection waits for this build
        if (
            conn.execute(
                "SELECT 1 FROM kb_collections WHERE id = %s FOR KEY SHARE", (collection_id,)
            ).fetchone()
            is None
            or _relation_kind(conn, partition) != "p"
        ):
            return None
        # the lock every rebuild of this collection takes: never two at once
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            (_HNSW_LOCK_CLASS, _hnsw_index_name(partition)),
        )
        present = dict(segments(conn, dimension, collection_id))
        sources = sorted(present if only is None else set(only) & set(present))
        if not sources or (
            due is not None and not due(*pending_and_stored(conn, dimension, collection_id))
        ):
            return None
        names = _RebuildNames(partition, sources)
        _end_with_the_client(conn)
        _build_memory(conn)
        start = time.perf_counter()
        rows = _copy_beside(conn, dimension, collection_id, names)
        copied = time.perf_counter()
        _build_beside(conn, names)
        built = time.perf_counter()
        for attempt in range(1, SWAP_ATTEMPTS + 1):
            try:
                with conn.transaction():
                    dropping = _swap_in(conn, dimension, collection_id, names)
                break
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable) as exc:
                if attempt == SWAP_ATTEMPTS:
                    raise
                logger.info("swapping in the new HNSW graph of %s: %s; again", partition, exc)
    done = time.perf_counter()
    return Rebuilt(rows, copied - start, built - copied, done - built, done - dropping)


class _RebuildNames:
    """The segments being rebuilt into one, the table built beside them, and their names.

    The new table takes the name and number of the oldest segment it replaces, so a
    collection rebuilt whole keeps its first segment's names.
    """

    def __init__(self, partition: str, sources: list[int]) -> None:
        self.partition, self.sources = partition, sources
        self.number = sources[0]
        self.segment = _segment_name(partition, self.number)
        self.shadow = f"{partition}_rebuild"
        # (the new table's index, the name the segment's index has): HNSW, chunk ids, pending rows
        self.indexes = (
            (f"{self.shadow}_hnsw", _hnsw_index_name(self.segment)),
            (f"{self.shadow}_chunk", f"{self.segment}_chunk_id_idx"),
            (f"{self.shadow}_pending", f"{self.segment}_collection_id_idx"),
        )
        self.check = f"{self.shadow}_bound"


def _copy_beside(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int, names: _RebuildNames
) -> int:
    """Create the table beside the segments and copy their rows into it, none pending; return them."""
    shadow, partition = sql.Identifier(names.shadow), sql.Identifier(names.partition)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_here(conn, names.shadow)))
    # the CHECK lets ATTACH PARTITION skip scanning the rows for the bounds
    conn.execute(
        sql.SQL(
            "CREATE TABLE {s} (LIKE {t} INCLUDING DEFAULTS,"
            " CONSTRAINT {c} CHECK (collection_id = {i} AND segment = {n}))"
        ).format(
            s=shadow,
            t=embeddings_table(dimension),
            c=sql.Identifier(names.check),
            i=sql.Literal(int(collection_id)),
            n=sql.Literal(names.number),
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {s} ALTER COLUMN segment SET DEFAULT {n}").format(
            s=shadow, n=sql.Literal(names.number)
        )
    )
    _store_inline(conn, names.shadow)
    cur = conn.execute(
        sql.SQL(
            "INSERT INTO {s} (chunk_id, collection_id, embedding, pending)"
            " SELECT chunk_id, collection_id, embedding, false FROM {p}"
            " WHERE segment = ANY(%s)"
        ).format(s=shadow, p=partition),
        (names.sources,),
    )
    return max(cur.rowcount, 0)


def _build_beside(conn: psycopg.Connection[Any], names: _RebuildNames) -> None:
    """Build the new table's graph, chunk-id and pending-rows indexes; gather its statistics."""
    shadow = sql.Identifier(names.shadow)
    (hnsw, _), (chunks, _), (waiting, _) = names.indexes
    conn.execute(
        sql.SQL(
            "CREATE INDEX {i} ON {s} USING hnsw (embedding vector_cosine_ops) WHERE NOT pending"
        ).format(i=sql.Identifier(hnsw), s=shadow)
    )
    # the indexes the parent's indexes match when the table is attached
    conn.execute(
        sql.SQL("CREATE INDEX {i} ON {s} (chunk_id)").format(i=sql.Identifier(chunks), s=shadow)
    )
    conn.execute(
        sql.SQL("CREATE INDEX {i} ON {s} (collection_id) WHERE pending").format(
            i=sql.Identifier(waiting), s=shadow
        )
    )
    conn.execute(sql.SQL("ANALYZE {s}").format(s=shadow))


def _swap_in(
    conn: psycopg.Connection[Any], dimension: int, collection_id: int, names: _RebuildNames
) -> float:
    """Bring over what changed since the copy, then put the new table in the segments' place.

    Returns when (`time.perf_counter`) it began to hold the collection's partition.
    """
    shadow, partition = sql.Identifier(names.shadow), sql.Identifier(names.partition)
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (SWAP_LOCK_TIMEOUT,))
    # every write of a vector writes its chunk first, in the same transaction, and every
    # delete cascades from a chunk: with kb_chunks held, the segments hold still. Taken
    # before the partition's lock (the DROP below), the order ATTACH would take them in.
    conn.execute("LOCK TABLE kb_chunks IN SHARE ROW EXCLUSIVE MODE")
    conn.execute(
        sql.SQL(
            "INSERT INTO {s} (chunk_id, collection_id, embedding, pending)"
            " SELECT o.chunk_id, o.collection_id, o.embedding, true FROM {p} o"
            " WHERE o.segment = ANY(%(g)s)"
            " AND NOT EXISTS (SELECT 1 FROM {s} n WHERE n.chunk_id = o.chunk_id)"
        ).format(s=shadow, p=partition),
        {"g": names.sources},
    )
    conn.execute(
        sql.SQL(
            "DELETE FROM {s} n WHERE NOT EXISTS (SELECT 1 FROM {p} o"
            " WHERE o.chunk_id = n.chunk_id AND o.segment = ANY(%(g)s))"
        ).format(s=shadow, p=partition),
        {"g": names.sources},
    )
    # from here to the commit, searches of this collection wait (its partition is locked)
    dropping = time.perf_counter()
    for number in names.sources:
        conn.execute(
            sql.SQL("DROP TABLE IF EXISTS {t}").format(
                t=_here(conn, _segment_name(names.partition, number))
            )
        )
    conn.execute(
        sql.SQL("ALTER TABLE {s} RENAME TO {g}").format(s=shadow, g=sql.Identifier(names.segment))
    )
    conn.execute(
        sql.SQL("ALTER TABLE {p} ATTACH PARTITION {g} FOR VALUES IN ({n})").format(
            p=partition, g=sql.Identifier(names.segment), n=sql.Literal(names.number)
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {g} DROP CONSTRAINT {c}").format(
            g=sql.Identifier(names.segment), c=sql.Identifier(names.check)
        )
    )
    for built, kept in names.indexes:
        conn.execute(
            sql.SQL("ALTER INDEX {b} RENAME TO {k}").format(
                b=_here(conn, built), k=sql.Identifier(kept)
            )
        )
    return dropping


def drop_hnsw_index(conn: psycopg.Connection[Any], dimension: int, collection_id: int) -> None:
    """Drop one collection's HNSW indexes before its bulk load; searches stay correct (exact)."""
    with conn.transaction():
        for _, segment in segments(conn, dimension, collection_id):
            conn.execute(
                sql.SQL("DROP INDEX IF EXISTS {i}").format(i=_here(conn, _hnsw_index_name(segment)))
            )


def merge_fulltext_pending(conn: psycopg.Connection[Any]) -> None:
    """Merge the GIN pending lists of the lexical indexes into the indexes proper.

    Inserts go to an unsorted pending list (up to `gin_pending_list_limit`, 4 MB)
    that every full-text search scans; after a load that left it full, an AND
    query took 3.0 ms instead of 0.5 ms at 100k chunks. Autovacuum would merge
    it too, but only later.
    """
    # to_regclass: NULL (nothing to do) while a bulk load has the index dropped; one
    # statement for all of them
    conn.execute(
        "SELECT gin_clean_pending_list(to_regclass(name)) FROM unnest(%s::text[]) AS name",
        (list(_TEXT_INDEXES),),
    )


def create_fulltext_index(conn: psycopg.Connection[Any], *, on_open: bool = False) -> None:
    """Build the lexical GIN indexes (full text and BM25 term keys) that are missing or invalid."""
    for name, ddl in _TEXT_INDEXES.items():
        if _usable(conn, name):
            continue
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INDEX_LOCK_KEY,))
            if _usable(conn, name):
                continue
            if on_open:
                _say_rebuilding(conn, name, "kb_chunks")
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(_here(conn, name)))
            conn.execute(
                "SELECT set_config('maintenance_work_mem', '256MB', true) WHERE"
                " pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes('256MB')"
            )
            conn.execute(ddl)


def drop_fulltext_index(conn: psycopg.Connection[Any]) -> None:
    """Drop the lexical GIN indexes before a bulk load; searches stay correct (scans)."""
    with conn.transaction():
        for name in _TEXT_INDEXES:
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(_here(conn, name)))


def missing_indexes(conn: psycopg.Connection[Any], dimension: int) -> list[str]:
    """Name the search indexes (`"full-text"`, `"HNSW"`) that are not usable right now."""
    missing = [] if all(_usable(conn, name) for name in _TEXT_INDEXES) else ["full-text"]
    if dimension <= HNSW_MAX_DIMENSION and not all(
        _usable(conn, _hnsw_index_name(segment), partial=True)
        for collection, _ in partitions(conn, dimension)
        for _, segment in segments(conn, dimension, collection)
    ):
        missing.append("HNSW")
    return missing


def _here(conn: psycopg.Connection[Any], name: str) -> sql.Identifier:
    """`name` qualified with this knowledge base's schema, for a statement that drops it.

    A bare name is looked up along the search path, which ends in `public`: dropping
    an index or table a new schema does not have yet would drop `public`'s namesake.
    """
    row = conn.execute("SELECT current_schema()").fetchone()
    return sql.Identifier(str(row[0]) if row is not None else "public", name)


def _usable(conn: psycopg.Connection[Any], index: str, *, partial: bool = False) -> bool:
    """Tell whether `index` exists in this knowledge base's schema, valid and ready (no table lock taken).

    ``partial``: only an index with a ``WHERE`` clause counts (an HNSW index that
    leaves pending vectors out of its graph).

    An index an interrupted ``CREATE INDEX CONCURRENTLY`` (or a failed ``REINDEX``) left
    behind exists but is not valid: the planner never uses it, so it counts as missing and
    is built again. `CREATE INDEX IF NOT EXISTS` would lock the table first, waiting for
    every open write, and `to_regclass` searches the whole `search_path`, finding a
    namesake in `public`.
    """
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_index i ON i.indexrelid = c.oid"
        " WHERE n.nspname = current_schema() AND c.relname = %s AND i.indisvalid AND i.indisready"
        " AND (i.indpred IS NOT NULL OR NOT %s))",
        (index, partial),
    ).fetchone()
    return row == (True,)


def _say_rebuilding(conn: psycopg.Connection[Any], index: str, table: str) -> None:
    """Log that an index found missing on opening is built now, and over how many rows."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {t} LIMIT 1) x").format(
            t=sql.Identifier(table)
        )
    ).fetchone()
    if row is None or not row[0]:
        return  # an empty table: nothing was lost, nothing to say
    estimate = conn.execute(
        "SELECT reltuples::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = %s",
        (table,),
    ).fetchone()
    rows = max(int(estimate[0]), 1) if estimate else 1
    logger.warning(
        "the %s index was missing or invalid (an ingest ended during its index phase?);"
        " building it now over about %s rows, before any search",
        index,
        f"{rows:,}",
    )


def truncate_all(conn: psycopg.Connection[Any]) -> None:
    """Empty every knowledge-base table in the current schema (tests use this).

    Collections' embedding partitions are dropped, as deleting each collection would:
    ids start again from 1, and a new collection must not find an old partition.
    """
    with conn.transaction():
        leftover = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
            " AND c.relname LIKE 'kb\\_embeddings\\_%'"
        ).fetchall()
        for (name,) in leftover:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_here(conn, name)))
        conn.execute("TRUNCATE kb_collections, kb_documents, kb_chunks RESTART IDENTITY CASCADE")
        conn.execute("TRUNCATE kb_lex_terms, kb_lex_stats")
