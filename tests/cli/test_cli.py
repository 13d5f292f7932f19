"""The CLI end to end in a subprocess, against the embedded PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest

from tests.fixtures.processes import clean_env
from tests.fixtures.processes import run_cli as cli

pytestmark = pytest.mark.postgres


@pytest.fixture
def env(pg_url, tmp_path):
    return {**clean_env(), "DATABASE_URL": pg_url}


def test_ingest_ask_json_and_collections(env, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "timeouts.md").write_text(
        "# Timeouts\n\nasyncio.wait_for runs a coroutine with a timeout and cancels it when the time is up.\n"
    )
    (docs / "blob.bin").write_bytes(b"\x00\x01binary")
    ingested = cli("ingest", str(docs), "--collection", "cli-test", env=env)
    assert ingested.returncode == 0, ingested.stderr
    assert "blob.bin" in ingested.stderr
    asked = cli(
        "ask",
        "How do I run a coroutine with a timeout?",
        "--collection",
        "cli-test",
        "--json",
        env=env,
    )
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    assert result["terminated_by"] == "answered" and "wait_for" in result["answer"]
    assert result["grounding"]["score"] > 0.5
    assert "offline controller" in asked.stderr
    listed = cli("collections", env=env)
    assert "cli-test" in listed.stdout
    # the file was written beside the collection's live index: its vector waits outside the graph
    merged = cli("merge-pending", "-c", "cli-test", env=env)
    assert merged.returncode == 0, merged.stderr
    count = re.search(r"Merged ([\d,]+) pending vectors", merged.stdout)
    assert count is not None and int(count.group(1).replace(",", "")) >= 1, merged.stdout
    again = cli("merge-pending", "-c", "cli-test", env=env)
    assert again.returncode == 0 and "Merged 0 pending vectors" in again.stdout
    unknown = cli("merge-pending", "-c", "no-such-collection", env=env)
    assert unknown.returncode == 1 and "no collection named" in unknown.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ask", "   ", "--collection", "x"), "question is empty"),
        (("ask", "Q?", "--collection", "no-such-collection"), "no collection named"),
        (("ask", "Q?", "--collection", "cli-test", "--model", "gpt4"), "provider:model"),
        (("ingest", "/no/such/path"), "does not exist"),
        (("delete", "no-such-collection", "--dry-run"), "no collection named"),
        (("stale", "-c", "no-such-collection"), "no collection named"),
    ],
)
def test_user_errors_exit_non_zero_with_one_sentence(env, args, message, tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("some text about timeouts")
    assert cli("ingest", str(note), "--collection", "cli-test", env=env).returncode == 0
    done = cli(*args, env=env)
    assert done.returncode == 1
    assert message in done.stderr and "Hint:" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_ingest_that_matches_no_file_says_so_and_stores_nothing(env, tmp_path):
    (tmp_path / "note.md").write_text("some text about timeouts")
    done = cli("ingest", str(tmp_path), "--include", "*.xyz", "-c", "matched-none", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no file under" in done.stderr and "--include '*.xyz'" in done.stderr
    listed = cli("collections", env=env)
    assert "matched-none" not in listed.stdout


@pytest.mark.parametrize(
    ("globs", "said"),
    [
        (("--include", "*.md"), "does not match --include '*.md'"),
        (
            ("--include", "*.md", "--include", "*.rst"),
            "does not match --include '*.md' or --include '*.rst'",
        ),
        (("--include", "*.txt", "--exclude", "note*"), "matches --exclude 'note*'"),
    ],
)
def test_a_file_named_that_the_globs_leave_out_is_an_error(env, tmp_path, globs, said):
    note = tmp_path / "note.txt"
    note.write_text("some text about timeouts")
    done = cli("ingest", str(note), *globs, "-c", "named-left-out", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"Error: {note} {said}: nothing was ingested." in done.stderr, done.stderr
    assert "named-left-out" not in cli("collections", env=env).stdout


def test_a_later_path_that_holds_no_file_fails_before_anything_is_written(env, tmp_path):
    good, empty = tmp_path / "good", tmp_path / "empty"
    good.mkdir()
    empty.mkdir()
    (good / "note.md").write_text("some text about timeouts")
    done = cli("ingest", str(good), str(empty), "-c", "later-path-empty", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"no file under {empty}" in done.stderr and "nothing was ingested" in done.stderr
    assert "later-path-empty" not in cli("collections", env=env).stdout


def test_a_later_path_that_cannot_be_read_says_what_was_stored_before_it(env, tmp_path):
    good, empty = tmp_path / "good", tmp_path / "empty.md"
    good.mkdir()
    (good / "note.md").write_text("some text about timeouts")
    empty.write_text("")
    done = cli("ingest", str(good), str(empty), "-c", "later-path-unread", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"could not ingest {empty} ({good} stored before it, and kept)" in done.stderr
    listed = cli("documents", "-c", "later-path-unread", env=env)
    assert listed.returncode == 0 and "note.md" in listed.stdout


@pytest.mark.parametrize("command", ["ingest", "reembed"])
def test_a_provider_embedder_without_its_key_is_one_line(env, tmp_path, command):
    note = tmp_path / "note.md"
    note.write_text("some text about timeouts")
    assert cli("ingest", str(note), "-c", "provider-key", env=env).returncode == 0
    given = [str(note), "-c", "provider-key-new"] if command == "ingest" else ["provider-key"]
    done = cli(command, *given, "--embeddings", "openai:text-embedding-3-small", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "Error: embedding model 'openai:text-embedding-3-small' could not be made: OpenAIError:"
    )
    assert "provider-key-new" not in cli("collections", env=env).stdout


def test_a_key_given_twice_to_where_must_hold_twice():
    from arcana_loop.cli.common import where_filter

    assert where_filter(["team=ops", "year=2026"]) == {"team": "ops", "year": 2026}
    assert where_filter(["team=ops", "team=dev"]) == {"$and": [{"team": "ops"}, {"team": "dev"}]}


def test_unreachable_database_is_a_clear_error(env):
    done = cli("collections", env={**env, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    assert done.returncode == 1 and "unreachable" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("blob.bin", b"\x00\x01binary", "supported: .md"),
        ("notes.docx", b"PK\x03\x04damaged", "not a readable Word document"),
    ],
)
def test_an_unreadable_file_is_one_line_naming_it_once(env, tmp_path, name, content, message):
    bad = tmp_path / name
    bad.write_bytes(content)
    done = cli("ingest", str(bad), "--collection", "cli-test", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert message in done.stderr, done.stderr
    # the message says what is wrong and what is read: a hint to the help would add nothing
    assert done.stderr.count(str(bad)) == 1 and "Hint:" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ARCANA_LOOP_PGDATA", "~no-such-user-here/data", "ARCANA_LOOP_PGDATA must be a path"),
        ("ARCANA_LOOP_EMBEDDINGS", "minilm\nx", "ARCANA_LOOP_EMBEDDINGS must be one line"),
    ],
)
def test_a_bad_knowledge_setting_is_one_line_naming_its_variable(env, variable, value, message):
    # without DATABASE_URL, the embedded server's data directory is read first
    setting = {k: v for k, v in env.items() if k != "DATABASE_URL"}
    done = cli("collections", env={**setting, variable: value})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr and "Hint:" not in done.stderr, done.stderr
