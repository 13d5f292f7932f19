"""Ingest refuses what it cannot store before writing anything, and never leaves the base worse off.

Globs and symbolic links keep a walk inside what was asked for; FIFOs, devices
and files larger than `max_bytes` are refused while reading; any nesting depth
is walked; bad metadata, names and text are refused before the first write;
two processes may ingest the same files at once; a full disk is a clear error
and leaves every index in place; collection names are one NFC spelling of at
most 200 characters, never "all"; deleting a collection mid-ingest is a clear
error in the ingest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import unicodedata
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from arcana_loop.knowledge import KnowledgeBase, writer
from arcana_loop.knowledge import schema as kb_schema_module
from arcana_loop.knowledge.errors import CollectionNotFound, IngestError, StorageFull
from arcana_loop.knowledge.names import MAX_COLLECTION_NAME_CHARS
from arcana_loop.knowledge.schema import create_fulltext_index, create_hnsw_index

pytestmark = [pytest.mark.reliability, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Otters hold hands while they sleep so that they do not drift apart."


def _rows(kb: KnowledgeBase, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(kb.url, options=f"-c search_path={kb.schema},public") as conn:
        return conn.execute(statement).fetchall()


def _stored(kb: KnowledgeBase) -> tuple[int, int, int]:
    (row,) = _rows(
        kb,
        "SELECT (SELECT count(*) FROM kb_collections), (SELECT count(*) FROM kb_documents),"
        " (SELECT count(*) FROM kb_chunks)",
    )
    return int(row[0]), int(row[1]), int(row[2])  # type: ignore[call-overload]


def _sources(kb: KnowledgeBase) -> list[str]:
    return sorted(str(r[0]) for r in _rows(kb, "SELECT source FROM kb_documents"))


# -- 1. globs and symbolic links -------------------------------------------------------


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\n" + TEXT)
    (folder / "plain.txt").write_text("Walruses sleep on ice floes.")
    (folder / ".env").write_text("API_KEY=do-not-ingest-me")
    return folder


def test_a_single_include_string_is_one_pattern(kb, tmp_path):
    folder = _folder(tmp_path)
    kb.ingest(folder, collection="c", include="*.md")
    assert _sources(kb) == [str((folder / "notes.md").resolve())]


def test_a_single_exclude_string_is_one_pattern(kb, tmp_path):
    folder = _folder(tmp_path)
    kb.ingest(folder, collection="c", exclude="*.txt")
    assert _sources(kb) == [str((folder / "notes.md").resolve())]  # not .env, not nothing


def test_symlinks_never_lead_out_of_the_ingested_directory(kb, tmp_path):
    folder = _folder(tmp_path)
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.md").write_text("The vault code is 1234.")
    (folder / "leak.md").symlink_to(outside / "secret.md")
    (folder / "leakdir").symlink_to(outside, target_is_directory=True)
    (folder / "alias.md").symlink_to(folder / "notes.md")  # inside: read once, real path
    result = kb.ingest(folder, collection="c")
    assert _sources(kb) == sorted(str((folder / n).resolve()) for n in ("notes.md", "plain.txt"))
    assert result.documents_added == 2 and result.documents_skipped == 0
    reasons = {Path(p).name: r for p, r in result.skipped_files}
    assert "outside the directory" in reasons["leak.md"]
    assert "folder outside the directory" in reasons["leakdir"]  # not walked, and told
    assert all("1234" not in str(row) for row in _rows(kb, "SELECT text FROM kb_chunks"))


# -- 2 and 7. refused before the first write ---------------------------------------------

BAD_METADATA = {
    "NaN": {"score": float("nan")},
    "infinity": {"score": float("inf")},
    "nested NaN": {"a": [1, {"b": float("-inf")}]},
    "NUL in a key": {"k\x00": "v"},
    "NUL in a nested value": {"a": {"b": ["ok", "v\x00"]}},
    "lone surrogate in a value": {"a": "\ud800"},
    "lone surrogate in a nested key": {"a": {"\udfff": 1}},
    "reserved entity_enhanced": {"entity_enhanced": True},
    "reserved start_index": {"start_index": 0},
    "reserved hit_start (a whole-section result's)": {"hit_start": "mine"},
    "reserved section_chunks": {"section_chunks": ["a"]},
    "non-string key": {1: "one"},
}


@pytest.mark.parametrize("metadata", list(BAD_METADATA.values()), ids=list(BAD_METADATA))
def test_unstorable_metadata_is_refused_and_nothing_is_stored(kb, metadata):
    with pytest.raises(ValueError, match="metadata|reserved|NaN|NUL|surrogate") as caught:
        kb.ingest(TEXT, collection="fresh", metadata=metadata)
    assert "psycopg" not in type(caught.value).__module__
    assert kb.collections() == [] and _stored(kb) == (0, 0, 0)


BAD_CALLS = {
    "NUL in the collection": ({"collection": "a\x00b"}, ValueError, "NUL"),
    "lone surrogate in the collection": ({"collection": "a\ud800b"}, ValueError, "surrogate"),
    "NUL in the document name": ({"name": "doc\x00"}, IngestError, "NUL"),
    "lone surrogate in the document name": ({"name": "doc\udc80"}, IngestError, "surrogate"),
    "entities given as a string": ({"entities": "yes"}, TypeError, "entities"),
    "collection 'all'": ({"collection": "all"}, ValueError, "reserved"),
    "collection ' ALL '": ({"collection": " ALL "}, ValueError, "reserved"),
    "collection of 201 characters": ({"collection": "n" * 201}, ValueError, "at most 200"),
}


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"), list(BAD_CALLS.values()), ids=list(BAD_CALLS)
)
def test_a_refused_ingest_stores_nothing(kb, kwargs, error, fragment):
    with pytest.raises(error, match=fragment) as caught:
        kb.ingest(TEXT, **{"collection": "fresh", **kwargs})
    assert not isinstance(caught.value, UnicodeError)  # ours, not the encoder's on the way out
    assert kb.collections() == [] and _stored(kb) == (0, 0, 0)


def test_text_with_a_lone_surrogate_is_a_clear_error(kb):
    with pytest.raises(IngestError, match="surrogate"):
        kb.ingest("Otters \ud83d sleep.", collection="fresh")
    assert kb.collections() == [] and _stored(kb) == (0, 0, 0)


# -- 3. two processes ingesting the same directory ---------------------------------------

CHILD_INGEST = textwrap.dedent(
    """
    import json, pathlib, sys, time
    from arcana_loop.knowledge import KnowledgeBase
    folder, schema, go = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    kb = KnowledgeBase(schema=schema)
    kb.pool()  # connected and schema checked before the start line
    kb.embeddings.embed_documents(["warm up"])
    (go.parent / f"ready-{sys.argv[4]}").write_text("ready")
    while not go.exists():
        time.sleep(0.01)
    result = kb.ingest(folder, collection="shared", batch_size=4)
    print(json.dumps(result.to_dict()))
    """
)


def test_two_processes_ingesting_one_directory_both_succeed_without_duplicates(
    kb, pg_url, tmp_path
):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(60):
        (folder / f"doc{i:02}.md").write_text(f"# Document {i}\n\nAnimal fact number {i}: {TEXT}\n")
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": pg_url}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD_INGEST, str(folder), kb.schema, str(go), str(n)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    try:
        for n, child in enumerate(children):
            while not (tmp_path / f"ready-{n}").exists():
                assert child.poll() is None, child.stderr.read() if child.stderr else ""
                threading.Event().wait(0.02)
        go.write_text("go")
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert "UniqueViolation" not in err and "Traceback" not in err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert sum(r["documents_added"] for r in results) == 60
    assert all(r["documents_added"] + r["documents_skipped"] == 60 for r in results)
    rows = _rows(
        kb,
        "SELECT count(c.id), coalesce(max(c.position), -1) FROM kb_documents d"
        " LEFT JOIN kb_chunks c ON c.document_id = d.id GROUP BY d.id",
    )
    assert len(rows) == 60 and all(n == 1 and top == 0 for n, top in rows)
    (embedded,) = _rows(kb, "SELECT count(*) FROM kb_embeddings_256")
    assert embedded == (60,)


# -- 4. a full disk during a bulk load ---------------------------------------------------


HNSW = "kb_embeddings_256_c*_hnsw"
"""A collection's HNSW index (on its partition), as `_indexes` names it."""


def _indexes(kb: KnowledgeBase) -> set[str]:
    rows = _rows(kb, f"SELECT indexname FROM pg_indexes WHERE schemaname = '{kb.schema}'")
    names = {re.sub(r"_c\d+_s\d+_hnsw$", "_c*_hnsw", str(r[0])) for r in rows}
    return names & {"kb_chunks_tsv_idx", HNSW}


def _disk_full(times: int, real):  # a test double of either index builder
    calls = {"n": 0}

    def build(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= times:
            raise psycopg.errors.DiskFull("could not extend file: No space left on device")
        return real(*args, **kwargs)

    return build


@pytest.fixture
def bulk(kb, monkeypatch):
    """Make every ingest a bulk load (drops and rebuilds both indexes); restore them after."""
    monkeypatch.setattr(writer, "BULK_MIN_CHUNKS", 1)
    yield kb
    with psycopg.connect(
        kb.url, options=f"-c search_path={kb.schema},public", autocommit=True
    ) as conn:
        create_fulltext_index(conn)
        create_hnsw_index(conn, 256)


def test_a_full_disk_at_the_index_rebuild_is_a_clear_error_and_leaves_the_indexes(
    bulk, monkeypatch
):
    kb = bulk
    monkeypatch.setattr(writer, "create_hnsw_index", _disk_full(1, writer.create_hnsw_index))
    with pytest.raises(StorageFull, match="disk is full") as caught:
        kb.ingest(TEXT, collection="full", name="otters")
    assert "1 document(s) of this ingest into 'full' were stored" in str(caught.value)
    assert _indexes(kb) == {"kb_chunks_tsv_idx", HNSW}
    assert [h["text"] for h in kb.search("otters sleep", collection="full")] == [TEXT]


def test_a_disk_that_stays_full_leaves_a_usable_base_that_rebuilds_its_index_later(
    bulk, monkeypatch
):
    kb = bulk
    monkeypatch.setattr(writer, "create_hnsw_index", _disk_full(99, writer.create_hnsw_index))
    real = kb_schema_module.create_hnsw_index
    monkeypatch.setattr(kb_schema_module, "create_hnsw_index", _disk_full(99, real))
    with pytest.raises(StorageFull, match="disk is full.*HNSW index could not be rebuilt"):
        kb.ingest(TEXT, collection="full", name="otters")
    assert _indexes(kb) == {"kb_chunks_tsv_idx"}
    still_full = KnowledgeBase(kb.url, schema=kb.schema)  # a new process, disk still full
    try:
        assert [h["text"] for h in still_full.search("otters sleep", collection="full")] == [TEXT]
    finally:
        still_full.close()
    monkeypatch.setattr(kb_schema_module, "create_hnsw_index", real)
    freed = KnowledgeBase(kb.url, schema=kb.schema)  # space freed: the next opening rebuilds it
    try:
        freed.collections()
    finally:
        freed.close()
    assert _indexes(kb) == {"kb_chunks_tsv_idx", HNSW}


def test_a_full_disk_during_the_load_is_a_clear_error_and_the_indexes_are_rebuilt(
    bulk, monkeypatch
):
    kb = bulk
    monkeypatch.setattr(writer, "_copy_chunks", _disk_full(99, writer._copy_chunks))
    with pytest.raises(
        StorageFull, match=r"disk is full.*0 document\(s\).*every index is in place"
    ):
        kb.ingest(TEXT, collection="full", name="otters")
    # the collection this ingest created held nothing: it is gone, with its partition and index
    assert kb.collections() == []
    assert _indexes(kb) == {"kb_chunks_tsv_idx"}
    partitions = (
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        f" JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{kb.schema}'"
        " AND c.relkind = 'r'"
    )
    assert _rows(kb, partitions) == [(0,)]


# -- 5. only regular files, the limit enforced while reading -----------------------------


def test_a_fifo_in_a_directory_is_skipped_with_its_reason(kb, tmp_path):
    folder = _folder(tmp_path)
    os.mkfifo(folder / "pipe.md")
    outcome: dict[str, object] = {}
    worker = threading.Thread(
        target=lambda: outcome.update(r=kb.ingest(folder, collection="c")), daemon=True
    )
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # the old behaviour: blocked opening the FIFO; unblock it to fail cleanly
        os.close(os.open(folder / "pipe.md", os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=30)
        pytest.fail("ingest blocked on a FIFO")
    reasons = {Path(p).name: r for p, r in outcome["r"].skipped_files}  # type: ignore[attr-defined]
    assert "not a regular file" in reasons["pipe.md"]
    assert len(_sources(kb)) == 2


def test_a_pipe_named_directly_is_refused_even_when_it_holds_more_than_the_limit(kb, tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with open(fifo, "w") as pipe:
                pipe.write("otters " * 5000)
        except BrokenPipeError:  # the reader closed first: what the refusal may do
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    with pytest.raises(IngestError, match="not a regular file"):
        kb.ingest(fifo, collection="c", max_bytes=1000)
    # Let a writer still waiting finish. Opened without blocking: a blocking open would
    # wait forever for a writer that already gave up (a broken pipe) between the two steps.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        feeder.join(timeout=10)
    finally:
        os.close(reader)
    assert _stored(kb) == (0, 0, 0)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_named_directly_is_refused(kb):
    with pytest.raises(IngestError, match="not a regular file.*character device"):
        kb.ingest(Path("/dev/zero"), collection="c")
    assert _stored(kb) == (0, 0, 0)


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="needs /proc")
def test_the_size_limit_holds_for_what_is_read_not_what_the_file_reports(kb):
    assert (
        Path("/proc/cpuinfo").stat().st_size == 0 and len(Path("/proc/cpuinfo").read_bytes()) > 100
    )
    with pytest.raises(IngestError, match="too large"):
        kb.ingest(Path("/proc/cpuinfo"), collection="c", max_bytes=100)
    assert _stored(kb) == (0, 0, 0)


# -- 6. any depth -------------------------------------------------------------------------


def test_a_directory_nested_1100_levels_is_walked(kb, tmp_path):
    root = deep = tmp_path / "root"
    deep.mkdir()
    try:
        for _ in range(1100):  # one level at a time: mkdir(parents=True) itself recurses
            deep = deep / "d"
            deep.mkdir()
        (deep / "bottom.md").write_text("# Bottom\n\n" + TEXT)
        result = kb.ingest(root, collection="deep")
        assert result.documents_added == 1 and result.chunks_added == 1
    finally:  # pytest's clean-up of tmp_path (like os.walk in 3.11) recurses and would fail here
        (deep / "bottom.md").unlink(missing_ok=True)
        while deep != tmp_path:
            deep.rmdir()
            deep = deep.parent


# -- 8. one spelling, one limit, one reserved name -----------------------------------------


def test_nfc_and_nfd_spellings_name_one_collection(kb):
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    kb.ingest(TEXT, collection=nfc, name="a")
    kb.ingest("Walruses sleep on ice floes.", collection=nfd, name="b")
    assert [(c.name, c.documents) for c in kb.collections()] == [(nfc, 2)]
    assert {h["collection"] for h in kb.search("otters walruses", collection=nfd)} == {nfc}
    assert kb.delete_document(source="a", collection=nfd) == 1
    kb.delete_collection(nfd)
    assert kb.collections() == []


def test_the_collection_name_limit_is_the_one_a_run_uses(kb):
    from arcana_loop.tools.scoping import normalize_scope

    longest = "n" * MAX_COLLECTION_NAME_CHARS
    kb.ingest(TEXT, collection=longest)
    assert normalize_scope(longest).names == (longest,)
    with pytest.raises(ValueError, match=f"at most {MAX_COLLECTION_NAME_CHARS}"):
        kb.ingest(TEXT, collection=longest + "n")
    assert [c.name for c in kb.collections()] == [longest]


def test_the_cli_refuses_a_10000_character_collection_name_on_one_line(
    kb, pg_url, tmp_path, monkeypatch
):
    from arcana_loop.cli.main import app

    monkeypatch.setenv("DATABASE_URL", pg_url)
    (tmp_path / "a.md").write_text(TEXT)
    done = CliRunner().invoke(app, ["ingest", str(tmp_path / "a.md"), "-c", "n" * 10_000])
    assert done.exit_code != 0
    assert "at most 200 characters" in done.output and "Traceback" not in done.output
    assert not isinstance(done.exception, ValueError)  # handled, not raised through


# -- 9. deleting a collection during an ingest --------------------------------------------


def test_deleting_the_collection_during_an_ingest_is_a_clear_error(kb, tmp_path):
    texts = [f"Fact {i} about otters: {TEXT}" for i in range(6)]
    folder = tmp_path / "many"
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"f{i}.txt").write_text(text)

    def delete_after_first_batch(done: int, total: int) -> None:
        if 0 < done < total and [c.name for c in kb.collections()] == ["doomed"]:
            kb.delete_collection("doomed")

    with pytest.raises(CollectionNotFound, match="deleted while this ingest"):
        kb.ingest(folder, collection="doomed", batch_size=2, progress=delete_after_first_batch)
    assert kb.collections() == [] and _stored(kb) == (0, 0, 0)
