"""The embedded server set to its host, the server's notices logged, and no window without an index."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.tuning import (
    Chosen,
    apply_settings,
    current_settings,
    host_settings,
)

GB = 2**30


def test_settings_follow_the_hosts_memory_and_cores() -> None:
    small = {c.name: c.value for c in host_settings(4 * GB, 8, env={}).values()}
    large = {c.name: c.value for c in host_settings(24 * GB, 2, env={}).values()}
    huge = {c.name: c.value for c in host_settings(512 * GB, 64, env={}).values()}
    assert small == {
        "shared_buffers": "512MB",
        "effective_cache_size": "2048MB",
        "maintenance_work_mem": "512MB",
        "max_parallel_maintenance_workers": "4",
        "work_mem": "8MB",
        "max_wal_size": "1024MB",
    }
    assert large["shared_buffers"] == "3072MB" and large["maintenance_work_mem"] == "3072MB"
    assert large["max_parallel_maintenance_workers"] == "1" and large["work_mem"] == "48MB"
    # bounded above: a big host does not give a tool's server all its memory
    assert huge["shared_buffers"] == "4096MB" and huge["max_wal_size"] == "8192MB"


def test_an_environment_variable_overrides_one_setting_and_says_so() -> None:
    chosen = host_settings(8 * GB, 2, env={"ARCANA_LOOP_PG_SHARED_BUFFERS": " 256MB "})
    assert chosen["shared_buffers"] == Chosen(
        "shared_buffers", "256MB", "ARCANA_LOOP_PG_SHARED_BUFFERS"
    )
    assert chosen["work_mem"].source == "host"
    # a blank variable is unset, as every setting's; a second line would reach the server's file
    assert (
        host_settings(8 * GB, 2, env={"ARCANA_LOOP_PG_WORK_MEM": "  "})["work_mem"].source == "host"
    )
    with pytest.raises(ValueError, match="ARCANA_LOOP_PG_WORK_MEM must be one PostgreSQL value"):
        host_settings(8 * GB, 2, env={"ARCANA_LOOP_PG_WORK_MEM": "64MB\nfsync = off"})


@pytest.mark.postgres
def test_settings_are_written_once_reloaded_and_a_restart_one_shown_pending(pg_url: str) -> None:
    wanted = {
        "work_mem": Chosen("work_mem", "48MB", "host"),
        "shared_buffers": Chosen("shared_buffers", "144MB", "host"),
    }
    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            assert sorted(apply_settings(conn, wanted)) == ["shared_buffers", "work_mem"]
            assert apply_settings(conn, wanted) == []  # written already: nothing to do
            # a new session reads the reloaded configuration
            with psycopg.connect(pg_url, autocommit=True) as fresh:
                now = current_settings(fresh)
            assert now["work_mem"].value == "48MB" and not now["work_mem"].pending_restart
            assert now["shared_buffers"].pending_restart  # applies at the next start
            bad = {"work_mem": Chosen("work_mem", "lots", "ARCANA_LOOP_PG_WORK_MEM")}
            with pytest.raises(ValueError, match="ARCANA_LOOP_PG_WORK_MEM gives work_mem"):
                apply_settings(conn, bad)
        finally:
            conn.execute("ALTER SYSTEM RESET work_mem")
            conn.execute("ALTER SYSTEM RESET shared_buffers")
            conn.execute("SELECT pg_reload_conf()")


@pytest.mark.postgres
def test_the_servers_notices_are_logged(
    kb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="arcana_loop.knowledge.tuning")
    with kb.pool().connection() as conn:
        conn.execute("DO $$ BEGIN RAISE WARNING 'an index build ran short of memory'; END $$")
    assert any(
        r.levelno == logging.WARNING and "an index build ran short of memory" in r.getMessage()
        for r in caplog.records
    )


def _port_index(conn: psycopg.Connection, collection: str = "port") -> str:
    """The name of the HNSW index of a collection (on its own partition)."""
    row = conn.execute("SELECT id FROM kb_collections WHERE name = %s", (collection,)).fetchone()
    assert row is not None
    return f"kb_embeddings_256_c{row[0]}_s0_hnsw"


def _hnsw_state(conn: psycopg.Connection) -> tuple[bool, bool] | None:
    row = conn.execute(
        "SELECT i.indisvalid, i.indisready FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = %s",
        (_port_index(conn),),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _uses_hnsw(kb: KnowledgeBase, collection: str = "port") -> bool:
    """Whether a nearest-neighbour query's plan goes through the HNSW index (scans disfavoured)."""
    with kb.pool().connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT chunk_id FROM kb_embeddings_256 WHERE NOT pending ORDER BY embedding <=>"
            " (SELECT embedding FROM kb_embeddings_256 LIMIT 1) LIMIT 5"
        ).fetchall()
        index = _port_index(conn, collection)
    return any(f"Index Scan using {index}" in line for (line,) in plan)


KILLED_IN_INDEX_PHASE = textwrap.dedent(
    """
    import os, signal, sys
    from langchain_core.documents import Document
    from arcana_loop.knowledge import KnowledgeBase, writer

    # a bulk load into a new collection: its HNSW index is dropped, then built after it
    writer.BULK_MIN_CHUNKS = 1

    def killed(*args, **kwargs):  # the load is written, its index phase begins: killed here
        os.kill(os.getpid(), signal.SIGKILL)

    writer.create_hnsw_index = killed
    kb = KnowledgeBase(sys.argv[1], schema=sys.argv[2])
    notes = [
        Document(page_content=f"Harbour note {n}: crane {n} lifts {n} tonnes.", metadata={"source": f"n{n}"})
        for n in range(300)
    ]
    kb.ingest(notes, collection="port")
    """
)


@pytest.mark.postgres
@pytest.mark.reliability
def test_an_ingest_killed_in_its_index_phase_leaves_no_search_without_the_index(
    kb: KnowledgeBase, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    kb.ingest("A first note about cranes.", collection="harbour")
    assert _uses_hnsw(kb, "harbour")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_INDEX_PHASE, pg_url, kb.schema],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with kb.pool().connection() as conn:
        assert _hnsw_state(conn) is None  # dropped for the load, never built again

    caplog.set_level(logging.WARNING, logger="arcana_loop.knowledge.schema")
    later = KnowledgeBase(pg_url, schema=kb.schema)  # the next process to open it
    try:
        hits = later.search("crane 42", collection="port", limit=3)
        assert hits and "crane 42 " in hits[0]["text"]
        with later.pool().connection() as conn:
            assert _hnsw_state(conn) == (True, True)
        assert _uses_hnsw(later)
        assert any("HNSW index was missing" in r.getMessage() for r in caplog.records)
    finally:
        later.close()


@pytest.mark.postgres
def test_an_invalid_index_counts_as_missing_and_is_built_again_on_opening(
    kb: KnowledgeBase, pg_url: str
) -> None:
    kb.ingest("A note about tides.", collection="port")
    with psycopg.connect(pg_url, autocommit=True, options=f"-c search_path={kb.schema}") as conn:
        # what an interrupted CREATE INDEX CONCURRENTLY leaves: the index, marked not valid
        conn.execute(
            "UPDATE pg_index SET indisvalid = false"
            " WHERE indexrelid = to_regclass(current_schema() || '.' || %s)",
            (_port_index(conn),),
        )
        assert _hnsw_state(conn) == (False, True)
    later = KnowledgeBase(pg_url, schema=kb.schema)
    try:
        later.collections()  # opening it
        with later.pool().connection() as conn:
            assert _hnsw_state(conn) == (True, True)
    finally:
        later.close()


@pytest.mark.postgres
def test_doctor_reports_server_settings_indexes_and_changes_no_server_it_does_not_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from arcana_loop.cli.main import app

    public = KnowledgeBase(pg_url)  # the schema the CLI opens
    public.ingest("A note about cranes for the doctor.", collection="doctor-port")
    public.close()
    monkeypatch.setenv("DATABASE_URL", pg_url)
    with psycopg.connect(pg_url) as conn:
        before = current_settings(conn)
    shown = CliRunner().invoke(app, ["doctor", "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert report["server"]["kind"].startswith("DATABASE_URL (advice only")
    assert [s["name"] for s in report["settings"]] == list(host_settings())
    hnsw = next(i for i in report["indexes"] if i["index"].endswith("_hnsw"))
    assert hnsw["table"].startswith("kb_embeddings_256_c")  # the collection's partition
    assert hnsw["valid"] is True and report["missing_indexes"] == []
    assert report["pending_vectors"]["doctor-port"] >= 1  # written beside a live index
    with psycopg.connect(pg_url) as conn:
        assert current_settings(conn) == before  # advice only
    table = CliRunner().invoke(app, ["doctor"], terminal_width=80)
    assert table.exit_code == 0 and "maintenance_work_mem" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
