"""The documents of a knowledge base, as a user lists them: through the API and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.knowledge import CollectionNotFound, KnowledgeBase, KnowledgeBaseError


def test_documents_lists_each_with_its_size_and_times(kb: KnowledgeBase, tmp_path: Path) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text("# Guide\n\nBerth seven is twelve metres deep.\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("The crane lifts forty tonnes.")
    kb.ingest(tmp_path, collection="docs")
    kb.ingest("Tides turn at six.", collection="other", name="tides")
    first = {d.source: d for d in kb.documents("docs")}
    assert set(first) == {str(guide.resolve()), str(notes.resolve())}
    doc = first[str(guide.resolve())]
    assert (doc.collection, doc.title, doc.chunks) == ("docs", "Guide", 1)  # its first heading
    assert doc.bytes == len(b"# Guide\n\nBerth seven is twelve metres deep.")
    assert doc.ingested_at == doc.updated_at and len(doc.content_hash) == 64
    guide.write_text("# Guide\n\nBerth seven is now fourteen metres deep.\n")
    kb.ingest(tmp_path, collection="docs")
    replaced = {d.source: d for d in kb.documents("docs")}[str(guide.resolve())]
    assert replaced.ingested_at == doc.ingested_at < replaced.updated_at
    assert replaced.content_hash != doc.content_hash
    assert [(d.collection, d.source) for d in kb.documents()] == sorted(
        [("docs", str(guide.resolve())), ("docs", str(notes.resolve())), ("other", "tides")]
    )
    assert (
        json.loads(json.dumps([d.to_dict() for d in kb.documents("other")]))[0]["title"] == "tides"
    )


def test_documents_of_a_missing_collection_is_a_clear_error(kb: KnowledgeBase) -> None:
    with pytest.raises(CollectionNotFound, match="no collection named 'nope'"):
        kb.documents("nope")


@pytest.mark.postgres
def test_the_cli_lists_documents_in_80_columns_and_as_json(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("COLUMNS", "80")
    base = KnowledgeBase(pg_url)
    long_name = tmp_path / ("a-rather-long-directory-name-" * 3) / "harbor-capacity-guide.md"
    long_name.parent.mkdir()
    long_name.write_text("# Capacity\n\nBerth seven holds two ships.\n")
    try:
        base.ingest(long_name, collection="cli-docs")
        runner = CliRunner()
        listed = runner.invoke(app, ["documents", "-c", "cli-docs"])
        assert listed.exit_code == 0, listed.output
        assert all(len(line) <= 80 for line in listed.stdout.splitlines())
        assert "harbor-capacity-guide.md" in listed.stdout.replace("\n", "").replace(" ", "")
        as_json = runner.invoke(app, ["documents", "-c", "cli-docs", "--json"])
        (entry,) = json.loads(as_json.stdout)
        assert entry["source"] == str(long_name.resolve()) and entry["chunks"] == 1
        missing = runner.invoke(app, ["documents", "-c", "nope"])
        assert missing.exit_code == 1 and "no collection named 'nope'" in missing.stderr
    finally:
        base.delete_collection("cli-docs")
        base.close()


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall the harbor agent.\n")
    (docs / "guides" / "tuning.md").write_text("# Tuning\n\nRaise the berth limit.\n")
    (docs / "capacity.txt").write_text("Berth seven holds two ships.")
    return docs


def test_a_document_is_named_as_the_user_names_it(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _folder(tmp_path)
    kb.ingest(docs, collection="harbor")
    capacity = str((docs / "capacity.txt").resolve())
    assert [d.source for d in kb.find_documents("capacity.txt", collection="harbor")] == [capacity]
    assert [d.source for d in kb.find_documents(capacity, collection="harbor")] == [capacity]
    monkeypatch.chdir(docs / "guides")
    assert [d.source for d in kb.find_documents("../capacity.txt", collection="harbor")] == [
        capacity
    ]
    glob = kb.find_documents("guides/*.md", collection="harbor")
    assert sorted(Path(d.source).name for d in glob) == ["setup.md", "tuning.md"]


def test_a_glob_deletes_what_a_dry_run_listed_and_nothing_else(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = _folder(tmp_path)
    kb.ingest(docs, collection="harbor")
    kb.ingest(docs, collection="elsewhere")
    planned = kb.delete_documents("guides/*.md", collection="harbor", dry_run=True)
    assert len(planned) == 2 and len(kb.documents("harbor")) == 3  # a dry run deletes nothing
    gone = kb.delete_documents("guides/*.md", collection="harbor")
    assert {d.id for d in gone} == {d.id for d in planned}
    assert [Path(d.source).name for d in kb.documents("harbor")] == ["capacity.txt"]
    assert len(kb.documents("elsewhere")) == 3  # another collection is untouched
    found = kb.search("raise the berth limit", collection="harbor", limit=10)
    assert found and not any("Raise the berth limit" in c["text"] for c in found)


def test_no_match_names_the_closest_sources_and_deletes_nothing(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    kb.ingest(_folder(tmp_path), collection="harbor")
    with pytest.raises(
        KnowledgeBaseError,
        match=r"no document of 'harbor' matching 'capacty.txt'; closest: '.*capacity\.txt'",
    ):
        kb.delete_document(source="capacty.txt", collection="harbor")
    with pytest.raises(KnowledgeBaseError, match="matches 2 documents"):
        kb.delete_document(source="guides/*.md", collection="harbor")
    assert len(kb.documents("harbor")) == 3


@pytest.mark.postgres
def test_the_cli_deletes_by_glob_after_a_dry_run(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    base = KnowledgeBase(pg_url)
    docs = _folder(tmp_path)
    try:
        base.ingest(docs, collection="cli-del")
        runner = CliRunner()
        dry = runner.invoke(
            app, ["delete", "-c", "cli-del", "--source", "guides/*.md", "--dry-run"]
        )
        assert dry.exit_code == 0 and "Would delete 2 of 'cli-del'" in dry.stdout
        assert len(base.documents("cli-del")) == 3
        done = runner.invoke(app, ["delete", "-c", "cli-del", "--source", "guides/*.md", "--yes"])
        assert done.exit_code == 0 and "Deleted 2 documents of 'cli-del'" in done.stdout
        missing = runner.invoke(
            app, ["delete", "-c", "cli-del", "--source", "capacty.txt", "--yes"]
        )
        assert missing.exit_code == 1 and "closest:" in missing.stderr
        assert "arcana-loop documents -c cli-del" in missing.stderr
    finally:
        base.delete_collection("cli-del")
        base.close()


def _bracketed(tmp_path: Path) -> Path:
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "[draft] notes.md").write_text("# Draft\n\nThe draft says berth nine.\n")
    (docs / "d notes.md").write_text("# D\n\nBerth four is deep.\n")
    return docs


def test_a_name_that_matches_a_document_exactly_means_that_document(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _bracketed(tmp_path)
    kb.ingest(docs, collection="notes")
    monkeypatch.chdir(tmp_path)  # not the ingested folder: the name is not a path from here
    draft = str((docs / "[draft] notes.md").resolve())
    assert [d.source for d in kb.find_documents("[draft] notes.md", collection="notes")] == [draft]
    # with no exact match, brackets are a glob's character class as before
    assert [Path(d.source).name for d in kb.find_documents("[d] notes.md", collection="notes")] == [
        "d notes.md"
    ]
    assert kb.delete_document(source="[draft] notes.md", collection="notes") == 1
    assert [Path(d.source).name for d in kb.documents("notes")] == ["d notes.md"]


def test_a_name_with_a_decomposed_accent_is_found_by_the_composed_spelling(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cafe\u0301.md").write_text("# Menu\n\nEspresso all day.\n")  # as macOS writes it
    kb.ingest(docs, collection="menu")
    for typed in ("café.md", "docs/café.md", "caf*.md"):
        found = kb.find_documents(typed, collection="menu")
        assert [Path(d.source).name for d in found] == ["cafe\u0301.md"], typed


def test_a_dry_run_of_a_pattern_that_matches_nothing_lists_nothing(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    kb.ingest(_folder(tmp_path) / "capacity.txt", collection="harbor")
    assert kb.delete_documents("guides/*.md", collection="harbor", dry_run=True) == []
    with pytest.raises(KnowledgeBaseError, match="no document of 'harbor' matching"):
        kb.delete_documents("guides/*.md", collection="harbor")  # a real delete still says so
    with pytest.raises(CollectionNotFound):
        kb.delete_documents("guides/*.md", collection="harbour", dry_run=True)
    assert len(kb.documents("harbor")) == 1


@pytest.mark.postgres
def test_the_cli_deletes_the_document_named_and_lists_a_pattern_before_deleting(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    base = KnowledgeBase(pg_url)
    docs = _bracketed(tmp_path)
    (docs / "e notes.md").write_text("# E\n\nBerth five is shallow.\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    runner = CliRunner()
    try:
        base.ingest(docs, collection="cli-brackets")
        named = runner.invoke(
            app, ["delete", "-c", "cli-brackets", "--source", "[draft] notes.md", "--yes"]
        )
        assert named.exit_code == 0, named.output
        left = sorted(Path(d.source).name for d in base.documents("cli-brackets"))
        assert left == ["d notes.md", "e notes.md"]
        # a pattern naming several: listed, then asked; answering no deletes nothing
        asked = runner.invoke(
            app, ["delete", "-c", "cli-brackets", "--source", "[de] notes.md"], input="n\n"
        )
        assert asked.exit_code == 1
        assert "d notes.md" in asked.stdout and "e notes.md" in asked.stdout
        assert len(base.documents("cli-brackets")) == 2
        # with --yes it is not asked, but still says what it deletes
        done = runner.invoke(
            app, ["delete", "-c", "cli-brackets", "--source", "[de] notes.md", "--yes"]
        )
        assert done.exit_code == 0, done.output
        assert "d notes.md" in done.stdout and "e notes.md" in done.stdout
        assert base.documents("cli-brackets") == []
    finally:
        base.delete_collection("cli-brackets")
        base.close()
