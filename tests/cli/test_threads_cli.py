"""`ask` stores threads; `trace`, `record` and `replay` read and re-run them."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import cli, env  # noqa: F401  # the env fixture

pytestmark = pytest.mark.postgres


def test_ask_trace_record_and_replay_a_thread(env, tmp_path):  # noqa: F811
    note = tmp_path / "timeouts.md"
    note.write_text(
        "# Timeouts\n\nasyncio.wait_for runs a coroutine with a timeout and cancels it when the time is up.\n"
    )
    assert cli("ingest", str(note), "--collection", "threads-cli", env=env).returncode == 0
    asked = cli(
        "ask",
        "How do I run a coroutine with a timeout?",
        "--collection",
        "threads-cli",
        "--json",
        env=env,
    )
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    thread = result["thread_id"]
    assert thread

    traced = cli("trace", thread, "--json", env=env)
    assert traced.returncode == 0, traced.stderr
    steps = json.loads(traced.stdout)
    assert (
        steps[0]["node"] == "start"
        and steps[1]["node"] == "controller"
        and steps[-2]["node"] == "ground"
        and steps[-1]["node"] == "finish"
    )
    searched = [s for step in steps for s in step["searches"]]
    assert (
        searched
        and searched[0]["returned_chunk_ids"] == result["tool_history"][0]["returned_chunk_ids"]
    )
    table = cli("trace", thread, env=env)
    assert table.returncode == 0 and "search" in table.stdout

    record = tmp_path / "run.json"
    recorded = cli("record", thread, "--out", str(record), env=env)
    assert recorded.returncode == 0, recorded.stderr
    # the record replays with no database at all
    offline_env = {**env, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    replayed = cli("replay", "--record", str(record), "--json", env=offline_env)
    assert replayed.returncode == 0, replayed.stderr
    again = json.loads(replayed.stdout)
    assert again["differences"] == [] and again["answer"] == result["answer"]

    rerun = cli("replay", thread, "--json", env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["thread_id"] != thread

    # a follow-up that names no collection goes on over the thread's, not the demo corpus
    follow = cli("ask", "And when is it cancelled?", "--thread-id", thread, "--json", env=env)
    assert follow.returncode == 0, follow.stderr
    followed = json.loads(follow.stdout)
    assert followed["thread_id"] == thread and followed["chunks"]
    assert {c["collection"] for c in followed["chunks"]} == {"threads-cli"}
    missing = cli("trace", thread, "--question", "5", env=env)
    assert missing.returncode == 1 and "has no question 5; it has 2" in missing.stderr


def test_the_thread_note_names_the_checkpointer_a_follow_up_needs(env, tmp_path):  # noqa: F811
    note = tmp_path / "timeouts.md"
    note.write_text("# Timeouts\n\nasyncio.wait_for cancels the coroutine when the time is up.\n")
    assert cli("ingest", str(note), "--collection", "threads-note", env=env).returncode == 0
    question = ("ask", "How is a coroutine cancelled?", "-c", "threads-note")
    kept = tmp_path / "threads.db"
    said = " ".join(cli(*question, "--checkpointer", f"sqlite:{kept}", env=env).stdout.split())
    thread = said.split("Thread ", 1)[1].split()[0]
    unwrapped = "".join(said.split())  # a long path may wrap anywhere on the terminal
    assert f"arcana-looptrace{thread}--checkpointersqlite:{kept};" in unwrapped
    assert f"--thread-id{thread}--checkpointersqlite:{kept})" in unwrapped
    traced = cli("trace", thread, "--checkpointer", f"sqlite:{kept}", env=env)
    assert traced.returncode == 0, traced.stderr
    in_memory = " ".join(cli(*question, "--checkpointer", "memory", env=env).stdout.split())
    assert "was kept in memory and ends with this command" in in_memory
    dropped = cli(*question, "--checkpointer", "none", "--thread-id", "t-1", env=env)
    assert dropped.returncode == 1 and "--thread-id needs a checkpointer" in dropped.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("trace", "no-such-thread"), "no thread"),
        (("replay",), "needs a thread id"),
        (("replay", "t-1", "--record", "run.json"), "not both"),  # neither is quietly dropped
        (("record", "no-such-thread", "--out", "x.json"), "no thread"),
    ],
)
def test_thread_command_errors_are_one_sentence(env, args, message):  # noqa: F811
    done = cli(*args, env=env)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr


def test_replaying_a_file_that_is_not_a_record_fails_cleanly(env, tmp_path):  # noqa: F811
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    done = cli("replay", "--record", str(bad), env=env)
    assert done.returncode == 1 and "not a replay record" in done.stderr


def test_a_follow_up_on_a_thread_whose_collection_was_deleted_says_so(env, tmp_path):  # noqa: F811
    note = tmp_path / "tides.md"
    note.write_text("# Tides\n\nThe harbour tide tables are printed every Monday at dawn.\n")
    for name in ("tides-gone", "tides-kept"):
        assert cli("ingest", str(note), "--collection", name, env=env).returncode == 0
    question = "When are the tide tables printed?"
    asked = cli("ask", question, "-c", "tides-gone", "--json", env=env)
    assert asked.returncode == 0, asked.stderr
    thread = json.loads(asked.stdout)["thread_id"]
    assert cli("delete", "tides-gone", "--yes", env=env).returncode == 0

    refused = cli("ask", question, "--thread-id", thread, env=env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"thread {thread!r} was asked on 'tides-gone', which was deleted since." in said
    assert "--collection NAME" in said and "tides-kept" in said
    # named, another collection takes the conversation on
    again = cli("ask", question, "--thread-id", thread, "-c", "tides-kept", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert {c["collection"] for c in json.loads(again.stdout)["chunks"]} == {"tides-kept"}

    # a thread on two collections, one deleted: the hint names the other
    both = cli("ask", question, "-c", "tides-kept", "-c", "tides-too", "--json", env=env)
    assert both.returncode == 1  # not made yet: refused, and no thread
    assert cli("ingest", str(note), "--collection", "tides-too", env=env).returncode == 0
    both = cli("ask", question, "-c", "tides-kept", "-c", "tides-too", "--json", env=env)
    assert both.returncode == 0, both.stderr
    two = json.loads(both.stdout)["thread_id"]
    assert cli("delete", "tides-too", "--yes", env=env).returncode == 0
    refused = cli("ask", question, "--thread-id", two, env=env)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and "was asked on 'tides-too', which was deleted since" in said
    assert "go on with the rest: -c tides-kept" in said
