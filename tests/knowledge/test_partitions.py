"""Each collection's embeddings on a partition of their own: searched alone, dropped whole, moved in once."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres


def _rows(kb: KnowledgeBase, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with kb.pool().connection() as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def _partitions(kb: KnowledgeBase) -> dict[str, int]:
    """Each embeddings table of the schema that holds rows (a collection's segment) and its rows."""
    rows = _rows(
        kb,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY 1",
    )
    return {name: _rows(kb, f'SELECT count(*) FROM "{name}"')[0][0] for (name,) in rows}


def _hnsw_indexes(kb: KnowledgeBase) -> set[str]:
    rows = _rows(kb, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    return {r[0] for r in rows if r[0].startswith("kb_embeddings_256_c")}


def _ids(kb: KnowledgeBase) -> dict[str, int]:
    return dict(_rows(kb, "SELECT name, id FROM kb_collections"))


def _plan(kb: KnowledgeBase, collection: str) -> str:
    """The plan of the nearest-neighbour query a semantic search runs, scoped to `collection`."""
    with kb.pool().connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute(
            "EXPLAIN SELECT chunk_id FROM kb_embeddings_256 WHERE collection_id = ANY(%s)"
            " ORDER BY embedding <=> %s::vector LIMIT 5",
            ([_ids(kb)[collection]], str(kb.embeddings.embed_query("rook"))),
        ).fetchall()
    return "\n".join(r[0] for r in rows)


def test_a_collection_is_searched_on_its_own_partition_and_deleted_with_it(
    kb: KnowledgeBase,
) -> None:
    kb.ingest("Tugs pull the tanker off the quay.", collection="harbour")
    kb.ingest("Rooks move along ranks and files.", collection="chess")
    ids = _ids(kb)
    assert _partitions(kb) == {
        f"kb_embeddings_256_c{ids['harbour']}_s0": 1,
        f"kb_embeddings_256_c{ids['chess']}_s0": 1,
    }
    plan = _plan(kb, "chess")
    assert f"kb_embeddings_256_c{ids['chess']}" in plan
    assert f"_c{ids['harbour']}" not in plan  # the other collection's rows are not read
    indexes = {
        r[0]
        for r in _rows(kb, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    }
    assert {f"kb_embeddings_256_c{i}_s0_hnsw" for i in ids.values()} <= indexes
    assert [h["collection"] for h in kb.search("rook", collection="chess")] == ["chess"]
    assert {h["collection"] for h in kb.search("rook tug", limit=5)} == {"chess", "harbour"}
    kb.delete_collection("chess")
    assert _partitions(kb) == {f"kb_embeddings_256_c{ids['harbour']}_s0": 1}


def _back_to_one_table(kb: KnowledgeBase) -> None:
    """Rewrite the embeddings as the layout before partitions stored them: one table, one index."""
    with kb.pool().connection() as conn:
        conn.execute(
            "CREATE TABLE old_layout AS SELECT chunk_id, collection_id, embedding"
            " FROM kb_embeddings_256"
        )
        conn.execute("DROP TABLE kb_embeddings_256")
        conn.execute("ALTER TABLE old_layout RENAME TO kb_embeddings_256")
        conn.execute("ALTER TABLE kb_embeddings_256 ALTER COLUMN embedding TYPE vector(256)")
        conn.execute(
            "ALTER TABLE kb_embeddings_256 ADD PRIMARY KEY (chunk_id),"
            " ADD FOREIGN KEY (chunk_id) REFERENCES kb_chunks (id) ON DELETE CASCADE"
        )
        conn.execute(
            "CREATE INDEX kb_embeddings_256_hnsw ON kb_embeddings_256"
            " USING hnsw (embedding vector_cosine_ops)"
        )
        conn.execute(
            "CREATE INDEX kb_embeddings_256_collection_idx ON kb_embeddings_256 (collection_id)"
        )


def test_embeddings_stored_in_one_table_are_moved_into_partitions_once(
    kb: KnowledgeBase, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    kb.ingest("Tugs pull the tanker off the quay.", collection="harbour")
    kb.ingest("Rooks move along ranks and files.", collection="chess")
    before = _rook_hits(kb)
    _back_to_one_table(kb)
    assert _partitions(kb) == {}
    caplog.set_level(logging.WARNING, logger="arcana_loop.knowledge.schema")
    upgraded = KnowledgeBase(pg_url, schema=kb.schema)
    try:
        assert _rook_hits(upgraded) == before
        assert sorted(_partitions(upgraded).values()) == [1, 1]
        assert "one partition per collection" in caplog.text
        assert f"_c{_ids(upgraded)['chess']}" in _plan(upgraded, "chess")
        assert len([n for n in _hnsw_indexes(upgraded) if n.endswith("_hnsw")]) == 2
    finally:
        upgraded.close()
    _moves_nothing_again(pg_url, kb.schema, caplog, "one partition per collection")
    with psycopg.connect(pg_url, options=f"-c search_path={kb.schema},public") as conn:
        assert conn.execute("SELECT to_regclass('kb_embeddings_256_unpartitioned')").fetchone() == (
            None,
        )


def _rook_hits(kb: KnowledgeBase) -> dict[str, list[str]]:
    """The chunks a search for "rook" finds in each of the two collections."""
    return {c: [h["id"] for h in kb.search("rook", collection=c)] for c in ("chess", "harbour")}


def _moves_nothing_again(
    pg_url: str, schema: str, caplog: pytest.LogCaptureFixture, warning: str
) -> None:
    """A move of the layout happens once: the next opening says nothing of it."""
    caplog.clear()
    again = KnowledgeBase(pg_url, schema=schema)
    try:
        again.collections()
        assert warning not in caplog.text
    finally:
        again.close()


def _index_oids(pg_url: str, schema: str) -> dict[str, int]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.oid::bigint FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'i'",
            (schema,),
        ).fetchall()
    return dict(rows)


def test_a_new_schema_leaves_the_public_schemas_indexes_and_partitions_alone(
    pg_url: str,
) -> None:
    public = KnowledgeBase(pg_url)  # the default schema, last on every search path
    name = f"kept-{uuid.uuid4().hex[:8]}"
    schema = f"fresh_{uuid.uuid4().hex[:8]}"
    try:
        public.ingest("Tugs pull the tanker off the quay.", collection=name)
        before = _index_oids(pg_url, "public")
        fresh = KnowledgeBase(pg_url, schema=schema)  # its indexes do not exist yet
        try:
            fresh.ingest("Rooks move along ranks and files.", collection="chess")
            fresh.delete_collection("chess")
        finally:
            fresh.close()
        assert _index_oids(pg_url, "public") == before  # nothing dropped, nothing rebuilt
        assert [h["text"] for h in public.search("tugs", collection=name)] == [
            "Tugs pull the tanker off the quay."
        ]
    finally:
        public.delete_collection(name)
        public.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _back_to_collection_partitions(kb: KnowledgeBase) -> None:
    """Rewrite the embeddings as the layout before segments stored them.

    A key on (chunk id, collection id), and each collection's partition a plain table
    with its partial HNSW index and its part of the parent's pending-rows index.
    """
    with kb.pool().connection() as conn:
        ids = [i for (i,) in conn.execute("SELECT id FROM kb_collections ORDER BY id").fetchall()]
        conn.execute(
            "CREATE TABLE old_rows AS SELECT chunk_id, collection_id, embedding, pending"
            " FROM kb_embeddings_256"
        )
        conn.execute("DROP TABLE kb_embeddings_256")
        conn.execute(
            "CREATE TABLE kb_embeddings_256 ("
            " chunk_id text NOT NULL REFERENCES kb_chunks (id) ON DELETE CASCADE,"
            " collection_id bigint NOT NULL, embedding vector(256) NOT NULL,"
            " pending boolean NOT NULL DEFAULT false, PRIMARY KEY (chunk_id, collection_id))"
            " PARTITION BY LIST (collection_id)"
        )
        conn.execute(
            "CREATE INDEX kb_embeddings_256_pending_idx ON kb_embeddings_256 (collection_id)"
            " WHERE pending"
        )
        for i in ids:
            conn.execute(
                f"CREATE TABLE kb_embeddings_256_c{i} PARTITION OF kb_embeddings_256"
                f" FOR VALUES IN ({i})"
            )
        conn.execute("INSERT INTO kb_embeddings_256 SELECT * FROM old_rows")
        conn.execute("DROP TABLE old_rows")
        for i in ids:
            conn.execute(
                f"CREATE INDEX kb_embeddings_256_c{i}_hnsw ON kb_embeddings_256_c{i}"
                " USING hnsw (embedding vector_cosine_ops) WHERE NOT pending"
            )


def test_collections_of_the_layout_before_segments_become_their_first_segment_once(
    kb: KnowledgeBase, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    kb.ingest("Tugs pull the tanker off the quay.", collection="harbour", name="tugs")
    kb.ingest("The pilot boards the ship at the buoy.", collection="harbour", name="pilot")
    kb.ingest("Rooks move along ranks and files.", collection="chess")
    before = _rook_hits(kb)
    _back_to_collection_partitions(kb)
    ids = _ids(kb)
    graph = {
        name: _rows(kb, "SELECT %s::regclass::oid", f"kb_embeddings_256_c{i}_hnsw")[0][0]
        for name, i in ids.items()
    }
    caplog.set_level(logging.WARNING, logger="arcana_loop.knowledge.schema")
    upgraded = KnowledgeBase(pg_url, schema=kb.schema)
    try:
        assert _rook_hits(upgraded) == before
        assert "one segment per collection" in caplog.text
        assert _partitions(upgraded) == {
            f"kb_embeddings_256_c{ids['harbour']}_s0": 2,
            f"kb_embeddings_256_c{ids['chess']}_s0": 1,
        }
        for name, i in ids.items():  # each graph renamed with its table, not built again
            oid = _rows(upgraded, "SELECT %s::regclass::oid", f"kb_embeddings_256_c{i}_s0_hnsw")
            assert oid[0][0] == graph[name]
        assert f"kb_embeddings_256_c{ids['chess']}_s0" in _plan(upgraded, "chess")
        assert _rows(upgraded, "SELECT to_regclass('kb_embeddings_256_pkey')") == [(None,)]
        # deletes cascade through the chunk-id index; writes go into the first segment
        assert upgraded.delete_document(source="tugs", collection="harbour") == 1
        upgraded.ingest("The harbour master logs every berth.", collection="harbour", name="berths")
        assert _partitions(upgraded)[f"kb_embeddings_256_c{ids['harbour']}_s0"] == 2
        upgraded.delete_collection("chess")
        assert set(_partitions(upgraded)) == {f"kb_embeddings_256_c{ids['harbour']}_s0"}
    finally:
        upgraded.close()
    _moves_nothing_again(pg_url, kb.schema, caplog, "one segment per collection")


def test_opening_waits_for_no_write_under_way(kb: KnowledgeBase) -> None:
    # every table a write or a collection's delete writes is held as they hold it: an
    # opening that locked them to look for its indexes and columns waited for the write
    # (and, beside a delete, deadlocked); one that reads the catalog opens at once
    kb.ingest("Tugs wait at the outer buoy.", collection="held", name="tugs")
    with kb.pool().connection() as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND c.relname LIKE 'kb%%'",
                (kb.schema,),
            ).fetchall()
        ]
    assert {"kb_collections", "kb_chunks", "kb_graph_relationships"} <= set(tables)
    opened = KnowledgeBase(kb.url, schema=kb.schema)
    done = threading.Event()
    with psycopg.connect(kb.url) as holder:
        for table in tables:
            holder.execute(
                sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(
                    sql.Identifier(kb.schema, table)
                )
            )
        opening = threading.Thread(target=lambda: (opened.pool(), done.set()), daemon=True)
        opening.start()
        opening.join(timeout=20)
        opened_while_held = done.is_set()
        holder.rollback()  # a waiting opening goes on now
    opening.join(timeout=20)
    try:
        assert opened_while_held
        assert [c.name for c in opened.collections()] == ["held"]
    finally:
        opened.close()
