from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import psycopg
import pytest

from arcana_loop.knowledge import DatabaseUnavailable, KnowledgeBase, database_url
from arcana_loop.knowledge.schema import ensure_schema
from arcana_loop.knowledge.server import PGDATA_ENV, ensure_pgvector, pgdata_dir

pytestmark = pytest.mark.postgres

_CHILD = """
import sys, psycopg
from arcana_loop.knowledge.server import database_url
url = database_url()
with psycopg.connect(url) as conn:
    conn.execute("SELECT 1")
print(url)
"""


def test_database_url_prefers_env_and_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://someone@db.invalid/kb")
    monkeypatch.setenv(PGDATA_ENV, "/nonexistent/never/created")
    assert database_url() == "postgresql://someone@db.invalid/kb"
    assert not Path("/nonexistent/never/created").exists()


def test_pgdata_dir_default_and_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(PGDATA_ENV, raising=False)
    assert pgdata_dir().parts[-2:] == ("arcana-loop", "pgdata")
    monkeypatch.setenv(PGDATA_ENV, str(tmp_path / "x"))
    assert pgdata_dir() == tmp_path / "x"


def test_embedded_server_is_shared_and_outlives_other_processes(pg_url: str) -> None:
    if os.environ.get("DATABASE_URL"):
        pytest.skip("DATABASE_URL set: the embedded server is not in use")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PYTHONPATH"] = os.getcwd()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == pg_url  # joined, did not start another
    with psycopg.connect(pg_url) as conn:  # the child's exit stopped nothing we use
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert database_url() == pg_url


def test_schema_creation_is_idempotent(pg_url: str) -> None:
    options = "-c search_path=kb_idem,public"
    with psycopg.connect(pg_url, autocommit=True, options=options) as conn:
        for _ in range(3):
            ensure_pgvector(conn)
            ensure_schema(conn, "kb_idem")
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'kb_idem'"
        ).fetchone()
    kb = KnowledgeBase(pg_url, schema="kb_idem")
    kb.ingest("Idempotent schemas are created once.", collection="c")
    kb.close()
    kb2 = KnowledgeBase(pg_url, schema="kb_idem")
    assert [c.name for c in kb2.collections()] == ["c"]
    kb2.close()
    assert (
        tables is not None and tables[0] == 6
    )  # collections, documents, chunks, lexical terms, stats and re-embeds in progress


def test_bad_schema_name_rejected(pg_url: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        KnowledgeBase(pg_url, schema="x; DROP TABLE y")


class _NoVectorConn:
    def execute(self, *_: object) -> _NoVectorConn:
        return self

    def fetchone(self) -> None:
        return None


def test_missing_pgvector_is_a_clear_error() -> None:
    with pytest.raises(DatabaseUnavailable, match="pgvector"):
        ensure_pgvector(_NoVectorConn())  # type: ignore[arg-type]


def test_unreachable_server_is_database_unavailable(tmp_path: Path) -> None:
    kb = KnowledgeBase(f"postgresql://postgres@/postgres?host={tmp_path}&connect_timeout=2")
    with pytest.raises(DatabaseUnavailable):
        kb.collections()


def _terminate(url: str, pid: int) -> None:
    """End backend `pid` and wait until it is gone (`pg_terminate_backend` only signals it)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def _terminate_pooled(kb: KnowledgeBase) -> None:
    """End the server side of the connection the knowledge base's pool hands out next."""
    with kb.pool().connection() as conn:
        mine = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert mine is not None
    _terminate(kb.url, mine[0])


def test_a_connection_the_server_ended_is_replaced_before_it_is_handed_out(
    kb: KnowledgeBase,
) -> None:
    kb.ingest("Berth 4 takes ships of 52 metres.", collection="harbour")
    for _ in range(3):
        _terminate_pooled(kb)
        hits = kb.search("berth ships", collection="harbour")
        assert hits and "Berth 4" in hits[0]["text"]


async def test_the_async_pool_replaces_a_connection_the_server_ended(kb: KnowledgeBase) -> None:
    kb.ingest("Berth 4 takes ships of 52 metres.", collection="harbour")
    assert await kb.asearch("berth ships", collection="harbour")
    async with (await kb.apool()).connection() as conn:
        mine = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert mine is not None
    _terminate(kb.url, mine[0])
    hits = await kb.asearch("berth ships", collection="harbour")
    assert hits and "Berth 4" in hits[0]["text"]


def test_status_of_a_server_still_writing_its_pid_file_says_it_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # another command started the server this moment: its postmaster.pid has its first lines only
    from arcana_loop.knowledge import server

    cluster = tmp_path / "pgdata"
    cluster.mkdir()
    (cluster / "postmaster.pid").write_text(f"{os.getpid()}\n{cluster}\n1796653580\n5432\n\n\n")
    monkeypatch.setattr(server, "postmaster", lambda _cluster: psutil.Process())
    status = server.embedded_server_status(cluster)
    assert status.running and status.postmaster_pid == os.getpid()
    assert status.started_at is None and status.socket_dir is None
