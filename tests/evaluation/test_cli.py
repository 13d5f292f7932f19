import json

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.evaluation.cases import save_cases
from arcana_loop.evaluation.report import save_report
from tests.evaluation.conftest import DOCS, tiny_cases
from tests.fakes import ScriptedChatModel

runner = CliRunner()
COLLECTION = "eval-cli-tiny"


def invoke(*args):
    return runner.invoke(app, ["eval", *args])


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    """Tables as wide as they need, whatever terminal the tests run in."""
    from arcana_loop.cli import common

    monkeypatch.setattr(common.out, "width", 200)
    monkeypatch.setattr(common.err, "width", 200)


def text(result):
    """The output with Rich's line wrapping undone."""
    return " ".join(result.output.split())


def report(correctness):
    return {
        "kind": "loop",
        "name": "set",
        "summary": {"answer_correctness": correctness, "errors": 0},
        "per_case": [],
    }


def test_diff_prints_deltas_as_a_table_and_as_json(tmp_path):
    a, b = (
        save_report(report(0.5), tmp_path / "a.json"),
        save_report(report(0.75), tmp_path / "b.json"),
    )
    shown = invoke("diff", str(a), str(b))
    assert shown.exit_code == 0, shown.output
    assert "summary.answer_correctness" in text(shown) and "+0.250" in text(shown)
    as_json = json.loads(invoke("diff", str(a), str(b), "--json", "--changed-only").stdout)
    assert [r["name"] for r in as_json["metrics"]] == ["summary.answer_correctness"]
    assert as_json["metrics"][0]["delta"] == pytest.approx(0.25)


def test_diff_prints_counts_as_counts(tmp_path):
    before, after = report(0.5), report(0.5)
    before["summary"].update(cases=8, terminated_by={"answered": 6, "gave_up": 2})
    after["summary"].update(cases=8, terminated_by={"answered": 1234, "gave_up": 0})
    a, b = save_report(before, tmp_path / "a.json"), save_report(after, tmp_path / "b.json")
    shown = invoke("diff", str(a), str(b)).output
    cells = {
        row[0]: row[1:]
        for line in shown.splitlines()
        if (row := [c.strip() for c in line.strip("│ ").split("│")]) and len(row) == 4
    }
    assert cells["summary.cases"] == ["8", "8", "0"]
    assert cells["summary.terminated_by.answered"] == ["6", "1234", "+1,228"]
    assert cells["summary.terminated_by.gave_up"] == ["2", "0", "-2"]
    assert cells["summary.answer_correctness"] == ["0.500", "0.500", "0.000"]  # a rate
    as_json = json.loads(invoke("diff", str(a), str(b), "--json").stdout)
    counts = {r["name"]: r for r in as_json["metrics"]}
    assert counts["summary.cases"] == {"name": "summary.cases", "before": 8, "after": 8, "delta": 0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("diff", "missing-a.json", "missing-b.json"), "no report at"),
        (("loop", "--cases", "no-such-cases.json"), "no case file at"),
    ],
)
def test_user_errors_exit_1_with_a_hint(args, message):
    done = invoke(*args)
    assert done.exit_code == 1
    assert message in text(done) and "Hint:" in text(done)


def test_an_invalid_case_file_is_reported(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": "a", "question": ""}]')
    done = invoke("retrieval", "--cases", str(bad))
    assert done.exit_code == 1 and "question must be a non-empty string" in text(done)


@pytest.fixture
def cli_kb(pg_url, monkeypatch):
    from arcana_loop.knowledge import KnowledgeBase

    monkeypatch.setenv("DATABASE_URL", pg_url)
    kb = KnowledgeBase(pg_url)
    if COLLECTION in {c.name for c in kb.collections()}:
        kb.delete_collection(COLLECTION)
    for source, text in DOCS.items():
        kb.ingest(text, collection=COLLECTION, name=source)
    yield kb
    kb.close()


@pytest.fixture
def cases_file(tmp_path):
    cases = tiny_cases()
    cases.collection = COLLECTION
    return save_cases(cases, tmp_path / "cases.json")


@pytest.mark.postgres
def test_retrieval_and_loop_commands_write_reports(cli_kb, cases_file, tmp_path):
    retrieval = invoke(
        "retrieval",
        "--cases",
        str(cases_file),
        "--mode",
        "semantic",
        "--mode",
        "fulltext",
        "--k",
        "1",
        "--k",
        "3",
        "--json",
    )
    assert retrieval.exit_code == 0, retrieval.output
    data = json.loads(retrieval.stdout)
    assert (
        data["ks"] == [1, 3]
        and set(data["modes"]) == {"semantic", "fulltext"}
        and data["cases"] == 3
    )

    out = tmp_path / "loop.json"
    loop = invoke(
        "loop",
        "--cases",
        str(cases_file),
        "--no-budget-ledger",
        "--option",
        "chunk_cap=5",
        "--out",
        str(out),
    )
    assert loop.exit_code == 0, loop.output
    assert "answer correctness" in text(
        loop
    ) and "controller input tokens / question (estimated)" in text(loop)
    saved = json.loads(out.read_text())
    assert (
        saved["options"] == {"chunk_cap": 5, "budget_ledger": False}
        and saved["summary"]["cases"] == 4
    )

    bad = invoke("loop", "--cases", str(cases_file), "--max-parallel-searches", "0")
    assert bad.exit_code == 1 and "max_parallel_searches must be at least 1" in text(bad)
    unknown = invoke("loop", "--cases", str(cases_file), "--collection", "no-such-collection")
    assert unknown.exit_code == 1 and "no collection named" in text(unknown)


@pytest.mark.postgres
def test_compare_options_command(cli_kb, cases_file):
    done = invoke("loop", "--cases", str(cases_file), "--compare-options", "--limit", "2", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["kind"] == "options" and data["cases"] == 2
    assert {r["option"] for r in data["rows"]} == {
        "duplicate_guard",
        "show_chunks_once",
        "budget_ledger",
        "parallel searches",
        "min_support",
    }
    mixed = invoke("loop", "--cases", str(cases_file), "--compare-options", "--no-duplicate-guard")
    assert mixed.exit_code == 1 and "sets the compared options itself" in text(mixed)


@pytest.mark.postgres
def test_generate_command_writes_a_case_file(cli_kb, tmp_path, monkeypatch):
    import arcana_loop.evaluation.generate as generate
    from arcana_loop.nodes.models import resolve_model

    replies = [
        '{"question": "What does json.loads parse?", "key_facts": ["JSON document"]}',
        "junk",
        "junk",
        "junk",
    ]
    scripted = ScriptedChatModel(responses=replies)
    monkeypatch.setattr(
        generate,
        "resolve_model",
        lambda spec: resolve_model(scripted) if spec == "scripted:model" else resolve_model(spec),
    )
    out = tmp_path / "generated.json"
    done = invoke(
        "generate",
        "--collection",
        COLLECTION,
        "--model",
        "scripted:model",
        "--n",
        "4",
        "--out",
        str(out),
    )
    assert done.exit_code == 0, done.output
    assert "Wrote 1 cases" in text(done) and "3 chunks skipped" in text(done)
    written = json.loads(out.read_text())
    assert written["collection"] == COLLECTION and written["cases"][0]["relevant_ids"]
    bad = invoke("generate", "--collection", COLLECTION, "--model", "gpt4", "--out", str(out))
    assert bad.exit_code == 1 and "provider:model" in text(bad)


def test_eval_picks_a_shipped_set_and_split_and_refuses_unknown_ones():
    from typer.testing import CliRunner

    from arcana_loop.cli.main import app

    runner = CliRunner()
    bad = runner.invoke(app, ["eval", "retrieval", "--set", "nosuch"])
    assert bad.exit_code != 0 and "--set must be one of lookup, realistic" in bad.output
    bad_split = runner.invoke(app, ["eval", "loop", "--split", "half"])
    assert bad_split.exit_code != 0 and "--split must be one of tune, test" in bad_split.output
