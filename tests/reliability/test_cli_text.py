"""Text a user types or stores reaches the terminal as text: markup, escapes and odd ids.

Every string the CLI prints that it did not write itself (a question, a collection
name, a path, a thread id, an answer, a section) can hold Rich markup (`[/]`) or a
terminal escape sequence; thread ids can be of any length; a chat line can be refused.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.core.text import MAX_THREAD_ID_CHARS
from arcana_loop.graph import run
from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres

MARKUP = "[/]"
ESCAPE = "\x1b[2J\x1b]0;owned\x07"  # clear the screen, set the window title


@pytest.fixture
def runner(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


@pytest.fixture
def markup_collection(pg_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A collection named with markup, holding a file whose directory, title and text hold markup."""
    name = f"t{MARKUP}{uuid.uuid4().hex[:6]}"
    folder = tmp_path / "d[b]"
    folder.mkdir()
    (folder / "n[b].md").write_text(
        "# Zorblat [b] guide\n\nThe zorblat [/] reactor is cooled by [bold]helium.\n"
    )
    yield name, folder
    kb = KnowledgeBase(pg_url)
    try:
        if name in {c.name for c in kb.collections()}:
            kb.delete_collection(name)
    finally:
        kb.close()


@pytest.fixture
def kb(pg_url: str) -> Iterator[KnowledgeBase]:
    """The default schema, the one the CLI reads; the collections these tests make are dropped."""
    base = KnowledgeBase(pg_url)
    before = {c.name for c in base.collections()}
    yield base
    for info in base.collections():
        if info.name not in before:
            base.delete_collection(info.name)
    base.close()


def _clean(result: object) -> None:
    assert "MarkupError" not in repr(getattr(result, "exception", None))
    assert "Traceback" not in getattr(result, "output", "")


def test_markup_in_every_user_string_is_printed_as_text(
    runner: CliRunner, markup_collection: tuple[str, Path]
) -> None:
    name, folder = markup_collection
    ingested = runner.invoke(app, ["ingest", str(folder), "-c", name])
    _clean(ingested)
    assert ingested.exit_code == 0, ingested.output
    assert repr(name) in ingested.stdout and folder.name in ingested.stdout

    listed = runner.invoke(app, ["collections"])
    _clean(listed)
    assert listed.exit_code == 0 and name in listed.stdout

    thread = f"t{MARKUP}1-{uuid.uuid4().hex[:6]}"
    asked = runner.invoke(
        app,
        [
            "ask",
            "-c",
            name,
            "--thread-id",
            thread,
            "--model",
            "offline",
            f"what is {MARKUP} zorblat?",
        ],
    )
    _clean(asked)
    assert asked.exit_code == 0, asked.output
    assert f"Thread {thread}" in asked.stdout
    assert "Zorblat [b] guide" in asked.stdout  # the section, in the sources, as written

    traced = runner.invoke(app, ["trace", thread])
    _clean(traced)
    assert traced.exit_code == 0 and "controller" in traced.stdout

    source = folder / "n[b].md"
    deleted = runner.invoke(app, ["delete", name, "--source", str(source), "--yes"])
    _clean(deleted)
    assert deleted.exit_code == 0 and f"{str(source)!r}" in deleted.stdout
    dropped = runner.invoke(app, ["delete", name, "--yes"])
    _clean(dropped)
    assert dropped.exit_code == 0 and f"collection {name!r}" in dropped.stdout


def test_a_missing_collection_with_markup_is_one_line(runner: CliRunner) -> None:
    done = runner.invoke(app, ["ask", "-c", MARKUP, "--model", "offline", "what is it?"])
    _clean(done)
    assert done.exit_code == 1
    assert f"no collection named {MARKUP!r}" in done.stderr
    # the hint keeps the name, escaped for Rich and quoted for a shell
    assert f"--collection {shlex.quote(MARKUP)}" in done.stderr


@pytest.mark.parametrize("name", ["a\x1b[2Jb", "title\x1b]0;x\x07", "two\nlines", "rtl\u202eexe"])
def test_a_collection_name_with_a_control_character_is_refused_before_anything_is_written(
    kb: KnowledgeBase, runner: CliRunner, tmp_path: Path, name: str
) -> None:
    with pytest.raises(ValueError, match="control characters"):
        kb.ingest("A zorblat note.", collection=name)
    assert name not in {c.name for c in kb.collections()}
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA zorblat note.\n")
    done = runner.invoke(app, ["ingest", str(note), "-c", name])
    assert done.exit_code == 1 and "\x1b" not in done.stderr
    assert done.stderr.startswith("Error: collection names must not contain control characters")
    assert name not in {c.name for c in kb.collections()}


@pytest.mark.parametrize("name", [" docs", "docs ", "docs\u3000"])
def test_a_collection_name_with_a_space_at_either_end_is_refused_before_anything_is_written(
    kb: KnowledgeBase, runner: CliRunner, tmp_path: Path, name: str
) -> None:
    # ' docs' beside 'docs' would read alike in every list and hint
    with pytest.raises(ValueError, match="must not start or end with a space"):
        kb.ingest("A zorblat note.", collection=name)
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA zorblat note.\n")
    done = runner.invoke(app, ["ingest", str(note), "-c", name])
    assert done.exit_code == 1 and "Traceback" not in done.stderr
    assert "must not start or end with a space" in done.stderr and "'docs'" in done.stderr
    assert name not in {c.name for c in kb.collections()}


@pytest.mark.parametrize(
    "args",
    [
        ["documents", "-c", "  "],
        ["documents", "show", "note.md", "-c", ""],
        ["delete", "   ", "--yes"],
        ["delete", "-c", "x" * 300, "--yes"],
        ["entities", "build", " "],
        ["reembed", "", "--embeddings", "wordllama"],
        ["ask", "How?", "-c", "docs", "-c", " "],
    ],
)
def test_a_name_no_collection_can_have_is_one_line_in_every_command(
    runner: CliRunner, args: list[str]
) -> None:
    done = runner.invoke(app, args)
    assert done.exit_code == 1
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("Error: Invalid value for") and "collection name" in first


def test_all_in_another_case_is_said_reserved_not_missing(
    kb: KnowledgeBase, runner: CliRunner
) -> None:
    kb.ingest("A zorblat note.", collection="notes")
    done = runner.invoke(app, ["ask", "What is a zorblat?", "-c", "ALL"])
    assert done.exit_code == 1
    assert done.stderr.startswith("Error: no collection is named 'ALL': it is reserved.")


def test_a_stored_name_holding_an_escape_is_listed_escaped(
    kb: KnowledgeBase, runner: CliRunner
) -> None:
    # a name stored before names were checked (or written by another program)
    name = f"old{ESCAPE}{uuid.uuid4().hex[:6]}"
    # a neighbour with a long model name crowds the table, as a busy knowledge base does
    crowd = f"crowd-{uuid.uuid4().hex[:6]}"
    with kb.pool().connection() as conn:
        for stored, model in ((name, "m"), (crowd, "an/embedding-model-" + "x" * 50)):
            conn.execute(
                "INSERT INTO kb_collections (name, embedding_model, dimension) VALUES (%s, %s, 4)",
                (stored, model),
            )
    try:
        listed = runner.invoke(app, ["collections"])
        assert listed.exit_code == 0
        assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
        assert "old\\x1b[2J\\x1b]0;owned\\x07" in listed.stdout
    finally:
        kb.delete_collection(crowd)
        kb.delete_collection(name)  # lookups still find it, so it can be removed
    assert name not in {c.name for c in kb.collections()}


def test_an_overlong_or_control_thread_id_is_refused_before_the_model_is_called(
    kb: KnowledgeBase, runner: CliRunner
) -> None:
    kb.ingest("A zorblat reactor is cooled by helium.", collection="cli-text-threads")
    calls: list[object] = []
    for bad, message in (
        ("x" * 9000, f"at most {MAX_THREAD_ID_CHARS} characters, got 9000"),
        ("a\nb", "control characters"),
        ("", "must not be empty"),
    ):
        with pytest.raises(ValueError, match=message):
            run(
                "What cools a zorblat reactor?",
                collection="cli-text-threads",
                controller_llm="offline",
                search_fn=lambda **kw: calls.append(kw) or [],
                checkpointer="memory",
                thread_id=bad,
            )
    assert calls == []  # refused before the first search
    done = runner.invoke(
        app,
        ["ask", "-c", "cli-text-threads", "--thread-id", "x" * 9000, "--model", "offline", "hi?"],
    )
    assert done.exit_code == 1
    assert "thread_id is at most 256 characters, got 9000" in done.stderr
    assert "x" * 300 not in done.stderr and "unreachable" not in done.stderr
    traced = runner.invoke(app, ["trace", "x" * 9000])
    assert traced.exit_code == 1 and "at most 256" in traced.stderr


def test_a_thread_id_at_the_limit_works(kb: KnowledgeBase) -> None:
    kb.ingest("A zorblat reactor is cooled by helium.", collection="cli-text-threads")
    thread = "é" * MAX_THREAD_ID_CHARS  # non-ASCII: 512 bytes, still well inside the index
    result = run(
        "What cools a zorblat reactor?",
        collection="cli-text-threads",
        controller_llm="offline",
        search_fn=kb.search,
        checkpointer="postgres",
        thread_id=thread,
    )
    assert result.terminated_by == "answered" and result.thread_id == thread


def test_chat_survives_a_refused_line_and_never_sends_a_command(
    kb: KnowledgeBase, runner: CliRunner
) -> None:
    kb.ingest("A zorblat reactor is cooled by helium.", collection="cli-text-chat")
    typed = "\n".join(
        [
            "/help",
            "/frobnicate now",
            "x" * 40_000,  # over the question limit: refused, the chat goes on
            "What cools a zorblat reactor?",
            "//zorblat reactor cooling?",
            "/exit",
        ]
    )
    done = runner.invoke(
        app,
        ["chat", "-c", "cli-text-chat", "--model", "offline", "--checkpointer", "memory"],
        input=typed + "\n",
    )
    assert done.exit_code == 0, done.output
    assert "Commands: /new starts a fresh thread" in done.stdout
    assert "unknown command '/frobnicate'" in done.stderr
    assert "search '/frobnicate" not in done.stderr  # never sent as a question
    assert "question" in done.stderr and "40000" in done.stderr.replace(",", "")
    assert done.stdout.count("helium") >= 2  # both real questions were answered
    assert "search '/zorblat reactor cooling" in done.stderr  # // sends one /


def test_a_collection_flag_that_took_the_next_option_is_refused_before_anything_is_written(
    kb: KnowledgeBase, runner: CliRunner, tmp_path: Path
) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA zorblat note.\n")
    done = runner.invoke(app, ["ingest", str(note), "-c", "--sync"])
    assert done.exit_code == 1 and "Traceback" not in done.stderr
    assert "reads as an option" in done.stderr.splitlines()[0]
    assert "--sync" not in {c.name for c in kb.collections()}


def test_a_collection_asked_with_a_space_too_many_is_named_as_meant(
    kb: KnowledgeBase, runner: CliRunner
) -> None:
    kb.ingest("A zorblat note.", collection="team")
    kb.ingest("Another note.", collection="x" * 200)
    done = runner.invoke(app, ["ask", "What is a zorblat?", "-c", " team"])
    assert done.exit_code == 1 and "Traceback" not in done.stderr
    assert "did you mean 'team'?" in done.stderr
    assert "--collection team" in done.stderr and "--collection ' team'" not in done.stderr
    assert "x" * 200 not in done.stderr and "x" * 37 + "..." in done.stderr


def test_deleting_a_collection_that_is_not_there_asks_nothing_and_says_so(
    kb: KnowledgeBase, runner: CliRunner
) -> None:
    kb.ingest("A zorblat note.", collection="team")
    done = runner.invoke(app, ["delete", "-c", "nosuch"], input="y\n")
    assert done.exit_code == 1 and "Delete collection" not in done.stdout
    assert done.stderr.startswith("Error: no collection named 'nosuch'.")
    names = {c.name for c in kb.collections()}
    assert "team" in names and "nosuch" not in names


def test_collections_at_80_columns_keeps_its_counts_beside_a_long_name_and_prints_json(
    kb: KnowledgeBase, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    kb.ingest("A zorblat note.", collection="team")
    kb.ingest("Another note.", collection="x" * 200)
    monkeypatch.setenv("COLUMNS", "80")
    shown = runner.invoke(app, ["collections"])
    assert shown.exit_code == 0
    header = next(line for line in shown.stdout.splitlines() if "name" in line)
    assert "documents" in header and "chunks" in header  # the counts keep their columns
    team_row = next(line for line in shown.stdout.splitlines() if " team " in line)
    assert " 1 " in team_row
    listed = json.loads(runner.invoke(app, ["collections", "--json"]).stdout)
    by_name = {c["name"]: c for c in listed}
    assert by_name["team"]["documents"] == 1 and by_name["x" * 200]["chunks"] == 1
    assert set(by_name["team"]) == {"name", "documents", "chunks", "embedding_model", "dimension"}
