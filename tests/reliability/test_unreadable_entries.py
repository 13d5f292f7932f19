"""One entry a walk cannot use never costs the others, and a sync removes only what is gone.

A folder the user cannot list or search, a file name that is not UTF-8, a loop of
symbolic links, an HTML page holding a NUL byte and a reStructuredText file nested
deeper than its parser recurses are each skipped with their reason in
`skipped_files`; the rest of the folder is ingested. A sync keeps the stored
documents of whatever it could not read: only a file it saw gone is removed.

The tests run as root, whom permission bits do not stop. The syncs that must meet
an unreadable folder therefore run in a child process whose main thread, once its
database connection is open, gives up `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH`
(`capset(2)`): from then on the kernel applies the permission bits to that thread,
and to any thread it starts, as to any user, so the folder is really unreadable to
the code syncing it. The capabilities are per thread, so the connection pool's
workers, started before, can still reach the database's socket in its private data
directory; an ordinary user's process runs the same code without the drop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.errors import IngestError

pytestmark = [pytest.mark.reliability, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
CHILD_SYNC = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from arcana_loop.knowledge import KnowledgeBase
    from arcana_loop.knowledge.errors import IngestError

    def drop_permission_override():
        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]

        libc = ctypes.CDLL(None, use_errno=True)
        header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
        if libc.capget(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capget")
        keep = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        for name in ("effective", "permitted", "inheritable"):
            setattr(data[0], name, getattr(data[0], name) & keep)
        if libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capset")

    folder, schema, probe = sys.argv[1], sys.argv[2], sys.argv[3]
    kb = KnowledgeBase(schema=schema)
    kb.pool()
    kb.embeddings.embed_documents(["warm up"])
    if os.geteuid() == 0:
        drop_permission_override()
    try:
        open(probe).close()
        denied = False
    except PermissionError:
        denied = True
    try:
        result = kb.ingest(folder, collection="port", sync=True).to_dict()
    except IngestError as exc:
        result = {"error": str(exc)}
    print(json.dumps({"denied": denied, **result}))
    """
)


def _tree(docs: Path) -> None:
    (docs / "private").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nAlpha berth is twelve metres deep.")
    (docs / "private" / "b.md").write_text("# B\n\nBravo berth holds two ships.")
    (docs / "private" / "c.md").write_text("# C\n\nCharlie berth closes at dusk.")


def _sync_without_root_powers(
    kb: KnowledgeBase, pg_url: str, docs: Path, probe: Path
) -> dict[str, Any]:
    """Sync `docs` into 'port' from a process the permission bits apply to (`probe` must be unreadable to it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": pg_url}
    done = subprocess.run(
        [sys.executable, "-c", CHILD_SYNC, str(docs), kb.schema, str(probe)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    assert result.pop("denied"), "the child could still read the folder the test made unreadable"
    return result


def _names(kb: KnowledgeBase) -> list[str]:
    return sorted(Path(d.source).name for d in kb.documents("port"))


def _skipped(result: dict[str, Any]) -> dict[str, str]:
    return {Path(path).name: reason for path, reason in result["skipped_files"]}


@pytest.mark.parametrize(
    ("mode", "why"),
    [(0o000, "cannot list"), (0o444, "Permission denied")],
    ids=["unreadable folder", "folder without search permission"],
)
def test_a_sync_keeps_the_documents_of_a_folder_it_cannot_read(
    kb: KnowledgeBase, pg_url: str, tmp_path: Path, mode: int, why: str
) -> None:
    docs = tmp_path / "docs"
    _tree(docs)
    kb.ingest(docs, collection="port", sync=True)
    (docs / "new.md").write_text("# New\n\nDelta berth opens in spring.")
    (docs / "private").chmod(mode)
    try:
        result = _sync_without_root_powers(kb, pg_url, docs, docs / "private" / "b.md")
    finally:
        (docs / "private").chmod(0o755)
    assert "error" not in result, result
    assert (result["documents_added"], result["documents_removed"]) == (1, 0)
    assert _names(kb) == ["a.md", "b.md", "c.md", "new.md"]
    # the report names what could not be read, and says the stored documents stay
    assert any(why in reason for reason in _skipped(result).values()), result["skipped_files"]
    assert result["documents_kept"] == 2


def test_a_sync_of_a_directory_it_cannot_list_is_refused_and_removes_nothing(
    kb: KnowledgeBase, pg_url: str, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    _tree(docs)
    kb.ingest(docs, collection="port", sync=True)
    docs.chmod(0o000)
    try:
        result = _sync_without_root_powers(kb, pg_url, docs, docs / "a.md")
    finally:
        docs.chmod(0o755)
    assert "cannot list the directory (Permission denied)" in result["error"]
    assert _names(kb) == ["a.md", "b.md", "c.md"]


def test_a_directory_that_cannot_be_listed_is_a_clear_error(tmp_path: Path) -> None:
    """The same refusal without a database: the walk itself raises, naming the directory."""
    from arcana_loop.knowledge.loading import walk_directory

    with pytest.raises(IngestError, match="no-such-dir: cannot list the directory"):
        walk_directory(tmp_path / "no-such-dir", include=None, exclude=None)


# -- odd entries: each skipped with its reason, the rest ingested ------------------------

DEEP_RST = "Title\n=====\n\n" + "".join("    " * i + "quote\n\n" for i in range(300))


def _odd_folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nThe harbour master signs every berth permit.")
    (docs / "page.html").write_bytes(b"<html><body><p>Tug fleet\x00 of four.</p></body></html>")
    (docs / "deep.rst").write_text(DEEP_RST)
    (docs / "loop").symlink_to(docs / "loop")
    (docs / "ring-a.md").symlink_to(docs / "ring-b.md")
    (docs / "ring-b.md").symlink_to(docs / "ring-a.md")
    with open(os.path.join(os.fsencode(docs), b"caf\xe9.md"), "w") as bad_name:
        bad_name.write("# Cafe\n\nA latin-1 name.")
    return docs


def test_odd_entries_are_skipped_with_their_reason_and_the_rest_is_ingested(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = _odd_folder(tmp_path)
    result = kb.ingest(docs, collection="port")
    assert _names(kb) == ["good.md"] and result.documents_added == 1
    reasons = {Path(path).name: reason for path, reason in result.skipped_files}
    assert set(reasons) == {
        "page.html",
        "deep.rst",
        "loop",
        "ring-a.md",
        "ring-b.md",
        "caf\\xe9.md",
    }
    assert "NUL" in reasons["page.html"]
    assert "nested too deeply" in reasons["deep.rst"]
    assert "symbolic link" in reasons["loop"] and "symbolic link" in reasons["ring-a.md"]
    assert "not valid UTF-8" in reasons["caf\\xe9.md"]
    # the report is storable and printable text: no lone surrogate from the name's bytes
    json.dumps(result.to_dict()).encode("utf-8")


def test_odd_entries_named_directly_are_clear_errors(kb: KnowledgeBase, tmp_path: Path) -> None:
    docs = _odd_folder(tmp_path)
    for name, message in [
        ("page.html", "NUL"),
        ("deep.rst", "nested too deeply"),
        (os.fsdecode(b"caf\xe9.md"), "not valid UTF-8"),
    ]:
        with pytest.raises(IngestError, match=message):
            kb.ingest(docs / name, collection="port")
    assert kb.collections() == []


def test_a_sync_keeps_a_stored_document_whose_file_turned_odd(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.html").write_text("<html><body><p>Tug fleet of four.</p></body></html>")
    (docs / "notes.md").write_text("# Notes\n\nPilots board at the outer buoy.")
    (docs / "gone.md").write_text("# Gone\n\nThe old ferry berth.")
    (docs / "deep.rst").write_text("Title\n=====\n\nA flat page.")
    kb.ingest(docs, collection="port", sync=True)
    (docs / "page.html").write_bytes(b"<html><body><p>Tug fleet\x00 of five.</p></body></html>")
    (docs / "deep.rst").write_text(DEEP_RST)
    (docs / "notes.md").unlink()
    (docs / "notes.md").symlink_to(docs / "notes.md")  # the file became a loop of links
    (docs / "gone.md").unlink()
    result = kb.ingest(docs, collection="port", sync=True)
    assert result.documents_removed == 1  # gone.md only
    assert _names(kb) == ["deep.rst", "notes.md", "page.html"]
    skipped = {Path(p).name for p, _ in result.skipped_files}
    assert skipped == {"page.html", "notes.md", "deep.rst"}
    assert result.documents_kept == 3
    # kept as they were stored: the flat page, not a half-read new version
    assert kb.search("flat page", collection="port", mode="fulltext")


def test_the_cli_says_which_entries_it_skipped_and_how_many_documents_it_kept(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from arcana_loop.cli.main import app

    monkeypatch.setenv("DATABASE_URL", pg_url)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("# Notes\n\nPilots board at the outer buoy.")
    (docs / "tides.md").write_text("# Tides\n\nHigh tide is at six.")
    base = KnowledgeBase(pg_url)
    runner = CliRunner()
    try:
        first = runner.invoke(app, ["ingest", str(docs), "-c", "cli-kept", "--sync"])
        assert first.exit_code == 0, first.output
        (docs / "notes.md").unlink()
        (docs / "notes.md").symlink_to(docs / "notes.md")
        again = runner.invoke(app, ["ingest", str(docs), "-c", "cli-kept", "--sync"])
        assert again.exit_code == 0, again.output
        said = " ".join(again.stderr.split())  # as wrapped to the terminal's width
        assert "notes.md: symbolic link loop" in said
        assert "Kept 1 stored document whose file could not be read" in said
        assert len(base.documents("cli-kept")) == 2
    finally:
        base.delete_collection("cli-kept")
        base.close()


@pytest.mark.parametrize("emptied", ["", "  \n\n"])
def test_a_sync_removes_a_document_whose_file_was_emptied(
    kb: KnowledgeBase, tmp_path: Path, emptied: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "widget.md").write_text("# Widget\n\nThe widget number 5 is blue.")
    (docs / "other.md").write_text("# Other\n\nThe other widget is green.")
    kb.ingest(docs, collection="port", sync=True)
    (docs / "widget.md").write_text(emptied)
    result = kb.ingest(docs, collection="port", sync=True)
    assert (result.documents_removed, result.documents_kept) == (1, 0)
    assert {Path(p).name for p, _ in result.skipped_files} == {"widget.md"}  # said, as before
    assert _names(kb) == ["other.md"]
    found = kb.search("widget number 5 blue", collection="port", mode="fulltext")
    assert not any("blue" in c["text"] for c in found)
