"""Vectors written into a live HNSW index wait outside its graph, are searched exactly, and merge in."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from arcana_loop.knowledge import SEARCH_MODES, KnowledgeBase, settings
from arcana_loop.knowledge import queries as q
from tests.knowledge.corpus import QUESTIONS
from tests.knowledge.helpers import ingest_topic, load_topics

pytestmark = pytest.mark.postgres


def _rows(kb: KnowledgeBase, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with kb.pool().connection() as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def _pending(kb: KnowledgeBase) -> int:
    return int(_rows(kb, "SELECT count(*) FROM kb_embeddings_256 WHERE pending")[0][0])


def _stored(kb: KnowledgeBase) -> int:
    return int(_rows(kb, "SELECT count(*) FROM kb_embeddings_256")[0][0])


def _graph_plan(kb: KnowledgeBase, query: str, **search: Any) -> str:
    """The plan of the statement an index (not exact) search runs."""
    req = q.make_request(
        query,
        collection=search.get("collection"),
        limit=5,
        mode=search.get("mode", "semantic"),
        threshold=None,
        ef_search=None,
        filter=search.get("filter"),
    )
    assert req is not None
    ids = [r[0] for r in _rows(kb, "SELECT id FROM kb_collections")]
    statement, params = q.search_statement(
        req,
        q.ResolvedCollections(ids=ids, dimension=kb.dimension),
        vector=kb._embed(query),
        exact=False,
        ranking=kb.ranking,
    )
    with kb.pool().connection() as conn, conn.transaction():
        # a handful of rows: only the costs of other plans make the indexes win
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        text = statement.as_string(conn)
        rows = conn.execute(f"EXPLAIN {text}", params).fetchall()  # type: ignore[arg-type]
    return "\n".join(r[0] for r in rows)


def _index_predicate(kb: KnowledgeBase) -> list[str | None]:
    rows = _rows(
        kb,
        "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname LIKE 'kb\\_embeddings\\_256\\_c%%hnsw'",
    )
    return [r[0] for r in rows]


def test_writes_into_a_live_index_wait_outside_its_graph_and_are_found(
    kb: KnowledgeBase,
) -> None:
    load_topics(kb, collection="topics")
    assert _pending(kb) == _stored(kb) > 0  # a small load keeps the index live: nothing built
    kb.exact_max_rows = 0  # every search walks the graph, with the pending rows beside it
    for topic, question in QUESTIONS.items():
        for mode in SEARCH_MODES:
            hits = kb.search(question, mode=mode, limit=3)
            assert hits and hits[0]["metadata"]["topic"] == topic, (topic, mode)
    filtered = kb.search(QUESTIONS["tcp"], mode="semantic", filter={"topic": "bread"})
    assert filtered and {h["metadata"]["topic"] for h in filtered} == {"bread"}
    before = {question: kb.search(question, limit=3) for question in QUESTIONS.values()}

    moved = kb.merge_pending()
    assert moved == _stored(kb) and _pending(kb) == 0
    assert kb.merge_pending("topics") == 0  # nothing is left to move
    after = {question: kb.search(question, limit=3) for question in QUESTIONS.values()}
    assert {k: [h["id"] for h in v] for k, v in after.items()} == {
        k: [h["id"] for h in v] for k, v in before.items()
    }


def test_the_graph_side_of_a_search_uses_the_partial_hnsw_index(kb: KnowledgeBase) -> None:
    load_topics(kb, collection="topics")
    kb.merge_pending()
    assert _index_predicate(kb) == ["(NOT pending)"]
    with kb.pool().connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(  # the graph side's condition lets the planner use the partial index
            "EXPLAIN SELECT chunk_id FROM kb_embeddings_256 WHERE NOT pending"
            " ORDER BY embedding <=> (SELECT embedding FROM kb_embeddings_256 LIMIT 1) LIMIT 5"
        ).fetchall()
    assert any("Index Scan using kb_embeddings_256_c1_s0_hnsw" in line for (line,) in plan), plan
    (pending_index,) = _rows(  # the segment's own part of the parent's partial b-tree index
        kb,
        "SELECT c.relname FROM pg_partition_tree('kb_embeddings_256_pending_idx') t"
        " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
    )[0]
    for mode in ("semantic", "hybrid"):
        plan_text = _graph_plan(kb, QUESTIONS["tcp"], mode=mode)
        assert f"Index Scan using {pending_index}" in plan_text, plan_text


def test_a_write_that_leaves_too_many_pending_vectors_merges_them(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.PENDING_MAX_ROWS.env, "3")
    ingest_topic(kb, "chess", collection="games", name="one")
    small = _stored(kb)
    assert 0 < small <= 3 and _pending(kb) == small  # at the limit: still waiting
    load_topics(kb, collection="games")  # one write a topic: each over the limit merges
    assert _pending(kb) <= 3 < _stored(kb)


def test_deleting_a_document_removes_its_pending_vectors(kb: KnowledgeBase) -> None:
    ingest_topic(kb, "chess", collection="games", name="one")
    ingest_topic(kb, "bread", collection="games", name="two")
    waiting = _pending(kb)
    kb.exact_max_rows = 0

    def sources() -> set[str]:
        hits = kb.search(QUESTIONS["bread"], collection="games", mode="semantic", limit=10)
        return {h["metadata"]["source"] for h in hits}

    assert sources() == {"one", "two"}
    assert kb.delete_document(source="two", collection="games") == 1
    assert 0 < _pending(kb) < waiting
    assert sources() == {"one"}


def test_an_index_over_every_row_is_rebuilt_partial_once(
    kb: KnowledgeBase, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    load_topics(kb, collection="topics")
    waiting = _pending(kb)
    with kb.pool().connection() as conn:  # the index an earlier version built
        conn.execute("DROP INDEX kb_embeddings_256_c1_s0_hnsw")
        conn.execute(
            "CREATE INDEX kb_embeddings_256_c1_s0_hnsw ON kb_embeddings_256_c1_s0"
            " USING hnsw (embedding vector_cosine_ops)"
        )
    assert _index_predicate(kb) == [None] and waiting > 0
    caplog.set_level(logging.WARNING, logger="arcana_loop.knowledge.schema")
    reopened = KnowledgeBase(pg_url, schema=kb.schema)
    try:
        reopened.collections()
        assert _index_predicate(reopened) == ["(NOT pending)"]
        assert _pending(reopened) == 0  # a build takes every row into the graph
        assert "rebuilding the HNSW index" in caplog.text
    finally:
        reopened.close()
    caplog.clear()
    again = KnowledgeBase(pg_url, schema=kb.schema)
    try:
        again.collections()
        assert "rebuilding" not in caplog.text
    finally:
        again.close()
