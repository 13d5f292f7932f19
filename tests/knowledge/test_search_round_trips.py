"""A search sends few statements: its scope, its plan inputs and itself, with settings in its transaction."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge import queries as q
from arcana_loop.knowledge.steps import Guarded, read_sync, together
from tests.knowledge.corpus import QUESTIONS
from tests.knowledge.helpers import load_topics

pytestmark = pytest.mark.postgres


class _Counting:
    """A connection that records each statement it runs and each transaction it opens."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.statements: list[str] = []
        self.transactions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    @property
    def autocommit(self) -> bool:
        return bool(self._conn.autocommit)

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self._conn.autocommit = value

    def execute(self, query: Any, params: Any = None) -> Any:
        text = query.as_string(self._conn) if isinstance(query, sql.Composable) else str(query)
        self.statements.append(" ".join(text.split()))
        return self._conn.execute(query, params)

    def transaction(self) -> Any:
        self.transactions += 1
        return self._conn.transaction()


def _search(kb: KnowledgeBase, conn: _Counting, query: str, mode: str) -> list[Any]:
    req = q.make_request(query, collection=None, limit=3, mode=mode, threshold=None, ef_search=None)
    assert req is not None
    vector = None if mode == "fulltext" else kb._embed(query)
    steps = kb._search_steps(req, vector, None, None)
    return read_sync(conn, steps, lambda: kb._embed(query))


@pytest.mark.parametrize("mode", ["fulltext", "semantic", "hybrid"])
def test_a_search_of_a_small_collection_is_two_statements_and_no_transaction(
    kb: KnowledgeBase, mode: str
) -> None:
    load_topics(kb, collection="topics")
    with kb.pool().connection() as raw:
        conn = _Counting(raw)
        hits = _search(kb, conn, QUESTIONS["tcp"], mode)
        assert hits and hits[0]["metadata"]["topic"] == "tcp"
        # the scope (with its graph and size), then the search: an exact scan needs no settings
        assert len(conn.statements) == 2 and conn.transactions == 0, conn.statements
        assert raw.autocommit is False  # the pooled connection is handed back as it came
        assert raw.info.transaction_status.name == "IDLE"


def test_an_index_search_sets_its_settings_in_its_own_transaction(kb: KnowledgeBase) -> None:
    load_topics(kb, collection="topics")
    kb.exact_max_rows = 0  # the HNSW path, which sets ef_search for itself
    with kb.pool().connection() as raw:
        conn = _Counting(raw)
        hits = _search(kb, conn, QUESTIONS["tcp"], "semantic")
        assert hits and hits[0]["metadata"]["topic"] == "tcp"
        assert conn.transactions == 1 and len(conn.statements) == 3
        assert "hnsw.ef_search" in conn.statements[1]
        # transaction-local: nothing is left on the connection for the next user
        left = raw.execute("SELECT current_setting('hnsw.ef_search')").fetchone()
        assert left is not None and left[0] != str(q.DEFAULT_EF_SEARCH)


def test_settings_run_together_reach_the_statement_after_them(kb: KnowledgeBase) -> None:
    def steps() -> Any:
        inside = yield Guarded(
            together(
                (sql.SQL("SELECT set_config('hnsw.ef_search', '123', true)"), {}),
                (sql.SQL("SELECT current_setting('hnsw.ef_search')"), {}),
            )
        )
        after = yield (sql.SQL("SELECT current_setting('hnsw.ef_search')"), {})
        return inside[0][0], after[0][0]

    with kb.pool().connection() as conn:
        inside, after = read_sync(conn, steps(), lambda: None)
    assert inside == "123" and after != "123"


def test_the_scope_estimates_each_collection_s_vectors(kb: KnowledgeBase) -> None:
    load_topics(kb, collection="topics")
    req = q.make_request(
        "x", collection="topics", limit=1, mode="semantic", threshold=None, ef_search=None
    )
    assert req is not None
    with kb.pool().connection() as conn:
        stored = conn.execute("SELECT count(*) FROM kb_embeddings_256").fetchone()[0]
        before = q.resolve_collections(
            req, conn.execute(*q.scope_statement(req)).fetchall(), kb.model_name, kb.dimension
        )
        conn.execute("ANALYZE kb_embeddings_256")
        after = q.resolve_collections(
            req, conn.execute(*q.scope_statement(req)).fetchall(), kb.model_name, kb.dimension
        )
    assert before.vectors >= 1  # before any statistics: what fits the pages it has
    assert after.vectors == stored  # the statistics' density times the same pages
