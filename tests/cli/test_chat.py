"""``arcana-loop chat`` and ``ask --thread-id``: conversations from the command line."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres

DOCS = {
    "deadline": (
        "zentrofy.deadline_call runs a zentrofy coroutine with a deadline in seconds. "
        "When the deadline passes the zentrofy coroutine is cancelled and ZentrofyDeadlineError is raised."
    ),
    "parse": "zentrofy.parse_blob parses a zentrofy blob from bytes and returns a ZentrofyRecord.",
}
FIRST = "How do I run a zentrofy coroutine with a deadline?"
FOLLOW_UP = "What is raised when it passes?"
OTHER = "How do I parse a zentrofy blob from bytes?"


@pytest.fixture(scope="module")
def collection(pg_url: str) -> Iterator[str]:
    name = f"cli-chat-{uuid.uuid4().hex[:8]}"
    kb = KnowledgeBase(pg_url)
    try:
        for text in DOCS.values():
            kb.ingest(text, collection=name)
        yield name
    finally:
        kb.delete_collection(name)
        kb.close()


@pytest.fixture
def runner(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    return CliRunner()


def _threads(output: str) -> list[str]:
    return re.findall(r"[Tt]hread ([0-9a-f-]{36})", output)


def test_chat_answers_follow_ups_on_one_thread_and_new_starts_a_fresh_one(
    runner: CliRunner, collection: str
) -> None:
    typed = "\n".join([FIRST, FOLLOW_UP, "/new", FOLLOW_UP, "/exit", OTHER]) + "\n"
    done = runner.invoke(
        app,
        [
            "chat",
            "-c",
            collection,
            "--model",
            "offline",
            "--checkpointer",
            "memory",
            "--ground",
            "local",
        ],
        input=typed,
    )
    assert done.exit_code == 0, done.output
    out = done.output
    assert "zentrofy.deadline_call" in out
    assert out.count("ZentrofyDeadlineError") >= 1
    # the steps, as they happen: the follow-up searched with the first question's subject
    assert "search 'run a zentrofy coroutine with a deadline raised when it passes'" in out
    first, fresh = _threads(out)
    assert first != fresh
    # on the fresh thread the follow-up has nothing to refer back to: it is searched as asked
    assert "search 'raised when it passes'" in out
    assert "zentrofy.parse_blob" not in out  # /exit ended the chat before the last line


def test_chat_refuses_to_run_without_a_checkpointer(runner: CliRunner, collection: str) -> None:
    done = runner.invoke(
        app,
        ["chat", "-c", collection, "--model", "offline", "--checkpointer", "none"],
        input=FIRST + "\n",
    )
    assert done.exit_code == 1
    assert "needs a checkpointer" in done.output and "Traceback" not in done.output


def test_ask_with_thread_id_continues_the_conversation(
    runner: CliRunner, collection: str, tmp_path
) -> None:
    store = f"sqlite:{tmp_path / 'threads.sqlite'}"
    base = ["-c", collection, "--model", "offline", "--checkpointer", store, "--json"]
    first = runner.invoke(app, ["ask", FIRST, *base])
    assert first.exit_code == 0, first.output
    thread = json.loads(first.stdout)["thread_id"]
    second = runner.invoke(app, ["ask", FOLLOW_UP, *base, "--thread-id", thread])
    assert second.exit_code == 0, second.output
    result = json.loads(second.stdout)
    assert (result["question"], result["question_index"], result["terminated_by"]) == (
        FOLLOW_UP,
        1,
        "answered",
    )
    assert "ZentrofyDeadlineError" in result["answer"]
    assert [e["tool"] for e in result["tool_history"]] == [
        "search",
        "search",
        "search",
        "answer",
    ]  # its parts with the earlier subject, their key terms, its own words; then the answer


def test_trace_and_record_one_question_of_a_conversation(
    runner: CliRunner, collection: str, tmp_path
) -> None:
    store = f"sqlite:{tmp_path / 'threads.sqlite'}"
    base = ["-c", collection, "--model", "offline", "--checkpointer", store, "--json"]
    thread = json.loads(runner.invoke(app, ["ask", FIRST, *base]).stdout)["thread_id"]
    assert runner.invoke(app, ["ask", OTHER, *base, "--thread-id", thread]).exit_code == 0
    traced = runner.invoke(
        app, ["trace", thread, "--checkpointer", store, "--json", "--question", "0"]
    )
    assert traced.exit_code == 0, traced.output
    queries = [s["query"] for row in json.loads(traced.stdout) for s in row["searches"]]
    assert queries == [
        "run a zentrofy coroutine with a deadline",
        "coroutine deadline run zentrofy",
    ]
    table = runner.invoke(app, ["trace", thread, "--checkpointer", store])
    assert "q1.1" in table.output  # each step says its question, and its turn from 1
    saved = tmp_path / "second.json"
    recorded = runner.invoke(app, ["record", thread, "--checkpointer", store, "--out", str(saved)])
    assert recorded.exit_code == 0, recorded.output
    record = json.loads(saved.read_text())
    assert (record["question"], record["question_index"]) == (OTHER, 1)
    replayed = runner.invoke(app, ["replay", "--record", str(saved), "--json"])
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["differences"] == []


def _checkpoints(table: str) -> list[tuple[str, str, str]]:
    """(step, turn, checkpoint) of each row of trace's table, read at its header's columns."""
    lines = table.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["step", "node"])
    names = ("step", "node", "turn", "ms", "checkpoint", "what")
    starts = {name: header.index(name) for name in names}

    def at(line: str, name: str, until: str) -> str:
        return line[starts[name] : starts[until]].strip()

    return [
        (at(line, "step", "node"), at(line, "turn", "ms"), at(line, "checkpoint", "what"))
        for line in lines[lines.index(header) + 1 :]
        if at(line, "step", "node").isdigit()  # a step's first line; what happened wraps below
    ]


def test_trace_counts_turns_from_1_and_shows_checkpoints_that_replay_takes(
    runner: CliRunner, collection: str, tmp_path
) -> None:
    store = f"sqlite:{tmp_path / 'threads.sqlite'}"
    base = ["-c", collection, "--model", "offline", "--checkpointer", store]
    asked = runner.invoke(app, ["ask", FIRST, *base])
    assert asked.exit_code == 0, asked.output
    assert "1 search" in asked.stdout and "2 answer" in asked.stdout  # ask's turns
    thread = _threads(asked.stdout)[0]
    table = runner.invoke(app, ["trace", thread, "--checkpointer", store])
    assert table.exit_code == 0, table.output
    rows = _checkpoints(table.stdout)
    # the question opens (start) in turn 1, the first search is turn 1 and the answer turn 2,
    # as ask printed them
    assert [(step, turn) for step, turn, _ in rows][:4] == [
        ("1", "1"),
        ("2", "1"),
        ("3", "1"),
        ("4", "2"),
    ]
    full = [
        s["checkpoint_id"]
        for s in json.loads(
            runner.invoke(app, ["trace", thread, "--checkpointer", store, "--json"]).stdout
        )
    ]
    shown = [checkpoint for _, _, checkpoint in rows]
    assert len(set(shown)) == len(shown) == len(full)  # whole on one line, and unique
    assert all(f.startswith(s) and len(s) < len(f) for s, f in zip(shown, full, strict=True))
    replayed = runner.invoke(
        app, ["replay", thread, "--checkpointer", store, "--from", shown[1], "--json"]
    )
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["terminated_by"] == "answered"
    ambiguous = runner.invoke(
        app, ["replay", thread, "--checkpointer", store, "--from", shown[0][:4]]
    )
    assert ambiguous.exit_code == 1 and "is ambiguous" in ambiguous.stderr
    unknown = runner.invoke(app, ["replay", thread, "--checkpointer", store, "--from", "zz"])
    assert unknown.exit_code == 1 and "no checkpoint 'zz'" in unknown.stderr


@pytest.mark.parametrize(
    ("options", "message", "hint"),
    [
        (["--ground", "bogus"], "unknown grounder 'bogus'", "Hint: see arcana-loop chat --help"),
        (["--max-iterations", "-3"], "max_iterations must be at least 0", "chat --help"),
        (["--answer-model", "nonsense"], "is not of the form 'provider:model'", "--answer-model"),
    ],
)
def test_chat_refuses_bad_options_before_the_first_question(
    runner: CliRunner, collection: str, options: list[str], message: str, hint: str
) -> None:
    done = runner.invoke(
        app,
        ["chat", "-c", collection, "--checkpointer", "memory", *options],
        input=FIRST + "\n" + OTHER + "\n",
    )
    assert done.exit_code == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and message in lines[0] and hint in lines[1], done.stderr
    # said once, before any question: no prompt, no offline-controller note, no search
    assert "You>" not in done.stdout and "No model configured" not in done.output
