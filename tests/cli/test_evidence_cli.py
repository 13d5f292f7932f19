"""`arcana-loop stale`, `diff`, and what a sync says of the answers it made stale, in a subprocess."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid

import pytest

from tests.fixtures.processes import clean_env
from tests.fixtures.processes import run_cli as cli

pytestmark = pytest.mark.postgres

DEPLOY = """# Deploy

## Rollout

A release rolls out to the canary hosts first, then to every region after one hour.
"""


def test_a_sync_counts_the_answers_it_made_stale_and_stale_lists_them(pg_url, tmp_path):
    env = {**clean_env(), "DATABASE_URL": pg_url}
    name = f"stale-{uuid.uuid4().hex[:8]}"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(DEPLOY)
    assert cli("ingest", str(docs), "-c", name, env=env).returncode == 0
    asked = cli("ask", "How does a release roll out to the hosts?", "-c", name, "--json", env=env)
    assert asked.returncode == 0, asked.stderr
    thread = json.loads(asked.stdout)["thread_id"]
    assert json.loads(asked.stdout)["evidence"]

    (docs / "deploy.md").write_text(DEPLOY.replace("one hour", "two hours"))
    synced = cli("ingest", str(docs), "-c", name, "--sync", env=env)
    assert synced.returncode == 0, synced.stderr
    assert "Made 1 past answer stale: it rests on text this ingest changed" in " ".join(
        synced.stdout.split()
    )

    listed = cli("stale", "-c", name, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [stale] = json.loads(listed.stdout)
    assert stale["thread_id"] == thread and stale["deleted"] == []
    assert [c["source"] for c in stale["changed"]] == ["deploy.md"]
    shown = cli("stale", "-c", name, env=env)
    assert f"Thread {thread}:" in shown.stdout and "changed: " in shown.stdout

    again = cli("ask", "When does every region get it?", "-c", name, "--thread-id", thread, env=env)
    assert again.returncode == 0, again.stderr
    assert "Earlier evidence has changed" in again.stderr and "deploy.md" in again.stderr
    assert "Earlier evidence" not in again.stdout  # said once, as the run started

    record = tmp_path / "run.json"
    assert cli("record", thread, "-o", str(record), env=env).returncode == 0
    compared = cli("diff", thread, str(record), "--json", env=env)
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["same"] is True

    # once the collection is deleted, its answers are still found by its name
    assert cli("delete", name, "--yes", env=env).returncode == 0
    gone = cli("stale", "-c", name, "--json", env=env)
    assert gone.returncode == 0, gone.stderr
    assert [s["thread_id"] for s in json.loads(gone.stdout)] == [thread]
    assert json.loads(gone.stdout)[0]["deleted"]
    typo = cli("stale", "-c", f"{name}-typo", env=env)
    assert typo.returncode == 1 and "no collection named" in typo.stderr


def test_diff_of_two_record_files_needs_no_database(tmp_path):
    from arcana_loop.graph.replay import Record

    def record(found, question="Q?"):
        return Record(
            question=question,
            collection="all",
            options={},
            controller_replies=[],
            searches=[{"query": "crane", "collection": None, "result": found, "error": None}],
            expected={"answer": "A crane lifts containers."},
        )

    crane = {"id": "c1", "text": "The crane lifts containers.", "score": 1.0}
    record([crane]).save(tmp_path / "a.json")
    record([]).save(tmp_path / "b.json")
    env = {**clean_env(), "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    shown = cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), env=env)
    assert shown.returncode == 0, shown.stderr
    assert "Search 'crane' found other chunks: only in A c1" in shown.stdout
    missing = cli("diff", str(tmp_path / "a.json"), str(tmp_path / "nothing.json"), env=env)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    record([crane], question="Q2?").save(tmp_path / "c.json")
    asked = cli("diff", str(tmp_path / "a.json"), str(tmp_path / "c.json"), env=env).stdout
    assert '  question A: "Q?"\n  question B: "Q2?"\n' in asked  # the two lines alike


def test_the_chat_says_before_the_steps_that_earlier_evidence_changed():
    from arcana_loop.cli.chat import _step_line

    stale = {"note": "Earlier evidence has changed: ...", "changed": [], "deleted": []}
    assert "Earlier evidence has changed" in _step_line(
        {"event": "loop_start", "stale_evidence": stale}
    )
    assert _step_line({"event": "loop_start"}) is None


@pytest.mark.parametrize(
    "command",
    [("stale",), ("diff", "t1", "t2"), ("trace", "t1"), ("record", "t1", "--out", "r.json")],
)
def test_a_read_of_a_sqlite_file_that_is_not_there_says_so_and_creates_nothing(command, tmp_path):
    store = tmp_path / "threads.sqlite"
    env = {**clean_env(), "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = cli(*command, "--checkpointer", f"sqlite:{store}", env=env, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"no checkpoint database at {store}." in done.stderr.replace("\n", "")
    assert not store.exists() and not (tmp_path / "r.json").exists()


def test_stale_with_a_blank_collection_says_what_is_wrong_with_it(tmp_path):
    env = {**clean_env(), "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = cli("stale", "-c", "   ", env=env, cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1 and "must not be empty or blank" in said
    assert "--checkpointer" not in said  # the hint is about the name


@pytest.mark.parametrize("command", [("stale",), ("diff", "t1", "t2"), ("trace", "t1")])
@pytest.mark.parametrize("kind", ["empty", "other tables", "no database"])
def test_a_read_of_a_file_that_holds_no_checkpoints_changes_nothing(command, kind, tmp_path):
    store = tmp_path / "threads.sqlite"
    if kind == "empty":
        store.write_bytes(b"")
    elif kind == "other tables":
        with contextlib.closing(sqlite3.connect(store)) as db:
            db.execute("CREATE TABLE mine (x)")
            db.commit()
    else:
        store.write_text('{"question": "a record file, not a database"}' * 40)
    before = store.read_bytes()
    env = {**clean_env(), "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = cli(*command, "--checkpointer", f"sqlite:{store}", env=env, cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "checkpoint database" in said and said.count("Error:") == 1
    assert store.read_bytes() == before  # no table written into it


def test_an_emptied_file_keeps_its_stored_version_unless_synced_and_the_summary_says_so(
    pg_url, tmp_path
):
    env = {**clean_env(), "DATABASE_URL": pg_url}
    name = f"emptied-{uuid.uuid4().hex[:8]}"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(DEPLOY)
    assert cli("ingest", str(docs), "-c", name, env=env).returncode == 0
    (docs / "deploy.md").write_text("")

    kept = cli("ingest", str(docs), "-c", name, env=env)
    said = " ".join(kept.stderr.split())
    assert kept.returncode == 0 and "deploy.md: file is empty" in said
    assert "one stored before keeps its stored version until ingest --sync removes it." in said
    listed = cli("documents", "-c", name, "--json", env=env)
    assert [d["source"] for d in json.loads(listed.stdout)] == [str((docs / "deploy.md").resolve())]

    synced = cli("ingest", str(docs), "-c", name, "--sync", env=env)
    assert synced.returncode == 0 and "--sync removes it" not in synced.stderr
    assert json.loads(cli("documents", "-c", name, "--json", env=env).stdout) == []
