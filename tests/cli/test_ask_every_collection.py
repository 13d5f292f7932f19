"""`ask -c all` searches every collection, and never suggests ingesting into the reserved name."""

from __future__ import annotations

import json
import uuid

import pytest
import typer
from typer.testing import CliRunner

from arcana_loop.cli.common import check_scope
from arcana_loop.cli.main import app
from arcana_loop.knowledge import KnowledgeBase


@pytest.mark.parametrize(
    ("names", "chunks", "message"),
    [
        (["all"], {}, "the knowledge base is empty"),
        (["all"], {"docs": 0}, "the knowledge base is empty"),
        (["all", "docs"], {"docs": 3}, "'all' means every collection: give it alone"),
    ],
)
def test_all_is_refused_only_for_what_it_cannot_search(
    names: list[str], chunks: dict[str, int], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit):
        check_scope(names, chunks)
    said = " ".join(capsys.readouterr().err.split())
    assert message in said
    assert "--collection all" not in said


def test_all_over_a_knowledge_base_that_holds_something_passes() -> None:
    check_scope(["all"], {"docs": 3, "empty": 0})


@pytest.mark.postgres
def test_ask_all_answers_from_any_collection(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    name = f"every-{uuid.uuid4().hex[:6]}"
    kb = KnowledgeBase(pg_url)
    kb.ingest("The quay crane zorbulator lifts forty tonnes.", collection=name, name="crane")
    try:
        done = CliRunner().invoke(
            app,
            [
                "ask",
                "What does the zorbulator lift?",
                "-c",
                "all",
                "--json",
                "--checkpointer",
                "none",
            ],
        )
    finally:
        kb.delete_collection(name)
        kb.close()
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["terminated_by"] == "answered" and "forty tonnes" in result["answer"]
    assert {c["collection"] for c in result["chunks"]} >= {name}
