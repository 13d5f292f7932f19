"""`arcana-loop documents show` prints a stored document's chunks as search sees them; `documents` still lists."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres

MIXED = Path(__file__).resolve().parents[2] / "evaluation" / "data" / "mixed"
GUIDE = """# Deploying

Deploys go out from the release branch.

## Rolling back

Run `harbor rollback` with the release id; the previous image starts within a minute.

## Checking health

`harbor status` lists every service and its last health check.
"""


@pytest.fixture
def stored(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[KnowledgeBase, str, Path]]:
    """A collection of the default schema (where the CLI reads) holding a guide and a PDF."""
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(GUIDE)
    (docs / "deploy-notes.md").write_text("# Notes\n\nNothing to add.\n")
    shutil.copy(MIXED / "capacity.pdf", docs / "capacity.pdf")
    name = f"show-{uuid.uuid4().hex[:8]}"
    kb = KnowledgeBase(pg_url)
    kb.ingest(docs, collection=name, chunk_size=120, chunk_overlap=0)
    try:
        yield kb, name, docs
    finally:
        kb.delete_collection(name)
        kb.close()


def invoke(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, list(args), terminal_width=120)
    return done.exit_code, done.stdout, done.stderr


def test_show_prints_each_chunk_in_order_with_its_place_and_id(stored) -> None:
    kb, name, docs = stored
    code, printed, errors = invoke("documents", "show", "docs/deploy.md", "-c", name, "--json")
    assert code == 0, errors
    shown = json.loads(printed)
    assert shown["document"]["source"] == str(docs / "deploy.md")
    chunks = shown["chunks"]
    assert [c["position"] for c in chunks] == list(range(len(chunks))) and len(chunks) >= 3
    assert {c["title"] for c in chunks} == {"Deploying"}  # the heading the file opens with
    assert [c["section"] for c in chunks][-2:] == [
        "Deploying > Rolling back",
        "Deploying > Checking health",
    ]
    assert "harbor rollback" in " ".join(c["text"] for c in chunks)
    # the ids are those search returns for the same chunks
    hit = kb.search("harbor rollback release id", collection=name, limit=1, mode="fulltext")[0]
    assert hit["id"] in [c["id"] for c in chunks]

    code, printed, errors = invoke("documents", "show", "docs/deploy.md", "-c", name)
    assert code == 0, errors
    assert f"Deploying (docs/deploy.md) in '{name}': {len(chunks)} chunks" in printed
    assert re.search(rf"{len(chunks) - 1}/{len(chunks)} Deploying > Rolling back", printed)
    assert printed.index("Rolling back") < printed.index("Checking health")
    for chunk in chunks:
        assert f"id {chunk['id']}" in printed


def test_show_gives_a_pdf_chunk_its_pages(stored) -> None:
    _, name, _ = stored
    code, printed, errors = invoke("documents", "show", "capacity.pdf", "--json")  # any collection
    assert code == 0, errors
    pages = [c["pages"] for c in json.loads(printed)["chunks"]]
    assert pages[0] == "1" and all(pages)


def test_documents_still_lists_a_collection(stored) -> None:
    _, name, _ = stored
    code, printed, errors = invoke("documents", "-c", name)
    assert code == 0, errors
    assert "docs/deploy.md" in printed and "docs/capacity.pdf" in printed
    assert "arcana-loop documents show SOURCE" in printed


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("docs/no-such.md", "no-such.md"),
        ("docs/deploy*.md", "names 2 documents"),
    ],
)
def test_show_refuses_what_names_no_single_document(stored, source: str, message: str) -> None:
    _, name, _ = stored
    code, printed, errors = invoke("documents", "show", source, "-c", name)
    assert code == 1 and printed == ""
    assert message in errors and "Hint:" in errors and "Traceback" not in errors
    assert len([line for line in errors.splitlines() if line.startswith("Error:")]) == 1


def test_show_in_a_collection_that_does_not_exist(stored) -> None:
    code, _, errors = invoke("documents", "show", "docs/deploy.md", "-c", "no-such-collection")
    assert code == 1 and "no collection named 'no-such-collection'" in errors
