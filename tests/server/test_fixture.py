"""The `langgraph dev` fixture reports a server that cannot start, with its log."""

from __future__ import annotations

import pytest

from tests.fixtures.langgraph_server import server_env, start_langgraph_server

pytestmark = pytest.mark.server


def test_a_server_that_exits_at_start_raises_with_its_log() -> None:
    with pytest.raises(
        RuntimeError, match=r"(?s)exited with status \d+ before it was ready.*no-such-option"
    ):
        with start_langgraph_server(database_url=None, args=("--no-such-option",)):
            pass


def test_server_env_keeps_keys_and_tracing_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2-real")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    monkeypatch.setenv("ARCANA_LOOP_MAX_ITERATIONS", "3")
    env = server_env(database_url="postgresql://db/kb", extra={"ARCANA_LOOP_CHUNK_CAP": "7"})
    assert "LANGSMITH_API_KEY" not in env and "OPENAI_API_KEY" not in env
    assert "ARCANA_LOOP_MAX_ITERATIONS" not in env
    assert env["LANGSMITH_TRACING"] == "false" and env["LANGGRAPH_CLI_NO_ANALYTICS"] == "1"
    assert env["DATABASE_URL"] == "postgresql://db/kb"
    assert env["ARCANA_LOOP_CONTROLLER_MODEL"] == "offline" and env["ARCANA_LOOP_CHUNK_CAP"] == "7"
