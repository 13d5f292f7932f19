"""On a terminal, `ask` and `chat` print the answer as the model streams it, and only once.

The CLI runs in a pseudo-terminal with the real OpenAI client against the scripted server
on loopback, which holds the last piece of the answer until the test has seen the first
ones on the terminal: the tokens arrive before the run ends.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cli.test_cli_sources import ANSI, _base_env, cli

ANSWER_TEXT = "Use asyncio.wait_for: it cancels the coroutine once the timeout has passed."
SEARCH = {"tool_calls": [{"name": "search", "arguments": {"query": "coroutine timeout"}}]}


class Terminal:
    """A CLI process on a pseudo-terminal, its output collected as it comes."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        primary, secondary = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "arcana_loop.cli.main", *args],
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            env=env,
            cwd=cwd,
            close_fds=True,
        )
        os.close(secondary)
        self.primary = primary
        self.output = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.primary, 4096)
            except OSError:  # the process closed the terminal
                return
            if not data:
                return
            self.output += data

    def text(self) -> str:
        return ANSI.sub("", self.output.decode("utf-8", "replace")).replace("\r", "")

    def wait_for(self, pattern: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"never saw {pattern!r} in:\n{self.text()}")
            time.sleep(0.05)

    def type(self, line: str) -> None:
        os.write(self.primary, (line + "\n").encode())

    def finish(self, timeout: float = 120) -> str:
        self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        os.close(self.primary)
        return self.text()


@pytest.fixture
def streaming_env(pg_url: str, openai_server, tmp_path: Path) -> dict[str, str]:
    env = {
        **_base_env(),
        "DATABASE_URL": pg_url,
        "COLUMNS": "200",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": openai_server.base_url,
    }
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "timeouts.md").write_text(
        "# asyncio\n\n## Timeouts\n\nasyncio.wait_for runs a coroutine with a timeout and "
        "cancels it once the timeout has passed.\n"
    )
    ingested = cli("ingest", "docs", "--collection", "streamed", env=env, cwd=tmp_path)
    assert ingested.returncode == 0, ingested.stderr
    return env


def _held_answer(openai_server) -> threading.Event:
    held = threading.Event()
    answer = {"tool_calls": [{"name": "answer", "arguments": {"text": ANSWER_TEXT}}]}
    openai_server.enqueue(SEARCH, {"hold": held, "then": answer})
    return held


@pytest.mark.postgres
@pytest.mark.slow
def test_ask_prints_the_answer_as_it_streams_and_once(streaming_env, openai_server, tmp_path):
    held = _held_answer(openai_server)
    terminal = Terminal(
        [
            "ask",
            "How do I time out a coroutine?",
            "-c",
            "streamed",
            "--model",
            "openai:gpt-4o-mini",
        ],
        streaming_env,
        tmp_path,
    )
    terminal.wait_for(r"Answer[\s─]*\n\s*Use asyncio")  # the first pieces, while the reply is held
    assert ANSWER_TEXT not in terminal.text()
    held.set()
    shown = terminal.finish()
    assert terminal.process.returncode == 0, shown
    assert shown.count(ANSWER_TEXT) == 1  # streamed, not printed again
    assert "Sources" in shown and "Ended: answered" in shown
    assert "draft" not in shown


@pytest.mark.postgres
@pytest.mark.slow
def test_ask_under_a_pipe_prints_the_answer_whole(streaming_env, openai_server, tmp_path):
    openai_server.enqueue(
        SEARCH, {"tool_calls": [{"name": "answer", "arguments": {"text": ANSWER_TEXT}}]}
    )
    done = cli(
        "ask",
        "How do I time out a coroutine?",
        "-c",
        "streamed",
        "--model",
        "openai:gpt-4o-mini",
        env=streaming_env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(ANSWER_TEXT) == 1
    assert not any(body.get("stream") for body in openai_server.requests)  # nothing asked to stream


@pytest.mark.postgres
@pytest.mark.slow
def test_chat_streams_each_answer_and_goes_on(streaming_env, openai_server, tmp_path):
    held = _held_answer(openai_server)
    terminal = Terminal(
        [
            "chat",
            "-c",
            "streamed",
            "--model",
            "openai:gpt-4o-mini",
            "--checkpointer",
            "memory",
        ],
        streaming_env,
        tmp_path,
    )
    terminal.wait_for(r"You> ")
    terminal.type("How do I time out a coroutine?")
    terminal.wait_for(r"\n\s*Use asyncio")
    assert ANSWER_TEXT not in terminal.text()
    held.set()
    terminal.wait_for(r"Sources[\s\S]*You> ")
    openai_server.enqueue("It raises TimeoutError.")
    terminal.type("And then?")
    terminal.wait_for(r"It raises TimeoutError\.[\s\S]*You> ")
    terminal.type("/exit")
    shown = terminal.finish()
    assert terminal.process.returncode == 0, shown
    assert shown.count(ANSWER_TEXT) == 1 and shown.count("It raises TimeoutError.") == 1
