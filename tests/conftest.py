"""Shared test set-up: no real model or network call ever leaves a unit test."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.openai_server",
    "tests.fixtures.langgraph_server",
]

# A suite started in the background inherits SIGINT ignored, and so would every command a test
# interrupts as Ctrl-C does (Python then raises no KeyboardInterrupt in it): the session takes
# SIGINT back, and a handler, unlike an ignored signal, is not passed on to a child process.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's own cache directory (the per-machine MiniLM model), never the user's."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ARCANA_LOOP_CACHE_DIR", str(cache))
        # session and module fixtures make collections too: WordLlama for them as for tests
        # (a search of every collection reads those of the default embedder only)
        mp.setenv("ARCANA_LOOP_EMBEDDINGS", "wordllama")
        # the user's data folder (a warm worker's socket, a default data directory) is the session's
        mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
        yield cache


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep real provider keys and run defaults out of tests (tests set what they need)."""
    for name in list(os.environ):
        if name.startswith("ARCANA_LOOP_") and name not in (
            "ARCANA_LOOP_PGDATA",
            "ARCANA_LOOP_CACHE_DIR",
        ):
            monkeypatch.delenv(name, raising=False)
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "LANGSMITH_TRACING",
        "LANGCHAIN_TRACING_V2",
    ):
        monkeypatch.delenv(name, raising=False)
    # Scripted models answer at once whatever they are asked; the search-first policy has its
    # own tests (tests/unit/test_design_points.py), which delete this to run with the default.
    monkeypatch.setenv("ARCANA_LOOP_REQUIRE_SEARCH", "off")
    # New collections are embedded with WordLlama (thousands of chunks a second); the tests of
    # MiniLM, the default with the onnx extra, choose it (tests/knowledge/test_minilm.py).
    monkeypatch.setenv("ARCANA_LOOP_EMBEDDINGS", "wordllama")
    # Each command a test runs is a process of its own: a warm worker would outlive the test
    # (tests/cli/test_warm_worker.py starts its own, in a folder of its own).
    monkeypatch.setenv("ARCANA_LOOP_WARM_WORKER", "off")
