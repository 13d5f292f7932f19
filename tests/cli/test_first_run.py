"""A first run says what it does: the embedded server's start, and the demo corpus's embedding."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from rich.console import Console

from arcana_loop.cli import common
from arcana_loop.knowledge import KnowledgeBase, stdlib_docs
from arcana_loop.knowledge.stdlib_docs import Section


def test_the_server_start_is_said_when_it_is_about_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, session_pgdata: Path
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("ARCANA_LOOP_PGDATA", str(tmp_path / "pgdata"))  # nothing runs there
    assert not isinstance(common._server_start_shown(), contextlib.nullcontext)
    monkeypatch.setenv("ARCANA_LOOP_PGDATA", str(session_pgdata))  # the session's, running
    assert isinstance(common._server_start_shown(), contextlib.nullcontext)
    monkeypatch.setenv("DATABASE_URL", pg_url)  # a server of the user's: nothing to start
    assert isinstance(common._server_start_shown(), contextlib.nullcontext)


def test_the_demo_corpus_is_embedded_with_a_progress_bar_of_its_modules(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules = [
        ("asyncio", [Section("asyncio", "asyncio.wait_for", "wait_for(aw, timeout)\nTime out.")]),
        ("math", [Section("math", "math.log2", "log2(x)\nThe base-2 logarithm of x.")]),
    ]
    monkeypatch.setattr(stdlib_docs, "stdlib_sections", lambda: iter(modules))
    screen = Console(record=True, force_terminal=True, width=120)
    monkeypatch.setattr(common, "err", screen)
    common.ensure_demo_corpus(kb)
    shown = screen.export_text()
    assert "Embedding the Python standard library docs (first run only)" in shown
    assert "2/2 modules" in shown
    assert [(c.name, c.documents) for c in kb.collections()] == [("python-docs", 2)]
