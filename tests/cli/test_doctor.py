"""`arcana-loop doctor` says what is normal and what to fix; `--fix` merges the pending vectors."""

from __future__ import annotations

import gc
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg_pool import ConnectionPool
from typer.testing import CliRunner

from arcana_loop.cli.doctor import _print_report
from arcana_loop.cli.main import app
from arcana_loop.knowledge import KnowledgeBase


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), terminal_width=200)


@pytest.fixture
def waiting(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A collection of the default schema whose second write waits outside its live HNSW graph."""
    monkeypatch.setenv("DATABASE_URL", pg_url)
    name = f"doctor-{uuid.uuid4().hex[:6]}"
    kb = KnowledgeBase(pg_url)
    kb.ingest("Cranes lift containers off the ships.", collection=name, name="cranes")
    kb.ingest("Tugs push the ships to the quay.", collection=name, name="tugs")
    try:
        yield name
    finally:
        kb.delete_collection(name)
        kb.close()


@pytest.mark.postgres
def test_pending_vectors_below_the_threshold_are_normal_and_fix_merges_them(waiting: str) -> None:
    before = json.loads(invoke("doctor", "--json").stdout)
    assert before["pending_vectors"][waiting] >= 1
    shown = invoke("doctor")
    assert shown.exit_code == 0, shown.output
    words = " ".join(shown.stdout.split())
    assert f"vectors of {waiting} wait outside its HNSW graph: normal below 10,000" in words
    assert "arcana-loop doctor --fix now" in words
    assert "merge-pending" not in shown.stdout

    fixed = invoke("doctor", "--fix", "--json")
    assert fixed.exit_code == 0, fixed.output
    moved = re.search(r"Merged ([\d,]+) pending vectors", fixed.stderr)
    assert moved is not None and int(moved.group(1).replace(",", "")) >= 1
    assert waiting not in json.loads(fixed.stdout)["pending_vectors"]  # the report is after the fix


@pytest.mark.postgres
def _open_pools() -> list[ConnectionPool[Any]]:
    """Every connection pool not closed, garbage not yet collected included."""
    return [p for p in gc.get_objects() if isinstance(p, ConnectionPool) and not p.closed]


def test_merge_pending_is_a_hidden_alias_that_still_merges(waiting: str) -> None:
    assert "merge-pending" not in invoke("--help").stdout
    gc.disable()  # a pool the command left behind stays findable until it is collected
    try:
        before = len(_open_pools())
        merged = invoke("merge-pending", "-c", waiting)
        left = len(_open_pools()) - before
    finally:
        gc.enable()
    assert merged.exit_code == 0, merged.output
    assert re.search(r"Merged [1-9][\d,]* pending vectors", merged.stdout)
    assert "doctor --fix" in merged.stderr
    assert left == 0  # the command closed the knowledge base it opened


def report(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "server": {"kind": "embedded", "where": "/data", "postgresql": "18", "pgvector": "0.8"},
        "settings": [
            {
                "name": "work_mem",
                "now": "4MB",
                "chosen": "8MB",
                "from": "host",
                "pending_restart": False,
            }
        ],
        "indexes": [
            {"index": "kb_chunks_tsv_idx", "table": "kb_chunks", "valid": True, "size": "8 kB"}
        ],
        "missing_indexes": [],
        "pending_vectors": {},
        "collections": [{"name": "docs", "chunks": 12}],
    }
    return {**base, **changes}


def test_a_healthy_report_ends_with_nothing_to_fix(capsys: pytest.CaptureFixture[str]) -> None:
    _print_report(report(pending_vectors={"docs": 12}))
    printed = capsys.readouterr().out
    assert "12 vectors of docs wait outside its HNSW graph: normal below 10,000" in printed
    assert printed.rstrip().endswith("Nothing to fix.")


def test_what_needs_fixing_is_counted_and_says_how(capsys: pytest.CaptureFixture[str]) -> None:
    settings = [{**report()["settings"][0], "pending_restart": True}]
    _print_report(
        report(
            pending_vectors={"docs": 12_000},
            missing_indexes=["kb_chunks_tsv_idx"],
            settings=settings,
        )
    )
    printed = " ".join(capsys.readouterr().out.split())
    assert "12,000 vectors of docs wait outside its HNSW graph: more than the 10,000" in printed
    assert "arcana-loop doctor --fix merges them" in printed
    assert "pending restart applies when the server next starts (normal after a change" in printed
    assert printed.endswith("2 thing(s) to fix, above.")
