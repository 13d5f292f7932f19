from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

import arcana_loop.knowledge.writer as ingest_mod
from arcana_loop.knowledge import (
    CollectionNotFound,
    EmbedderFailed,
    EmbeddingMismatch,
    IngestError,
    IngestResult,
    KnowledgeBase,
    KnowledgeBaseError,
)
from tests.knowledge.corpus import TOPICS
from tests.knowledge.helpers import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    HashEmbeddings,
    ingest_topic,
    load_topics,
)

pytestmark = pytest.mark.postgres


def _rows(kb: KnowledgeBase, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with kb.pool().connection() as conn:
        rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()
    return rows


def _chunk_ids(kb: KnowledgeBase, source: str) -> list[str]:
    return [
        r[0]
        for r in _rows(
            kb,
            "SELECT c.id FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
            " WHERE d.source = %s ORDER BY c.position",
            source,
        )
    ]


def test_text_ingest_counts_and_metadata(kb: KnowledgeBase) -> None:
    res = ingest_topic(kb, "tcp", collection="net", name="tcp", metadata={"lang": "en"})
    assert res.documents_added == 1 and res.chunks_added >= 3
    rows = _rows(kb, "SELECT text, metadata, position FROM kb_chunks ORDER BY position")
    assert len(rows) == res.chunks_added
    assert all(len(text) <= CHUNK_SIZE for text, _, _ in rows)
    for text, meta, _ in rows:
        assert meta["lang"] == "en" and meta["source"] == "tcp"
        assert TOPICS["tcp"][meta["start_index"] :].startswith(text)
    assert [p for _, _, p in rows] == list(range(len(rows)))
    assert res.to_dict()["chunks_added"] == res.chunks_added
    # embeddings stored one per chunk
    assert _rows(kb, "SELECT count(*) FROM kb_embeddings_256")[0][0] == res.chunks_added


def test_unnamed_text_is_idempotent_by_content(kb: KnowledgeBase) -> None:
    first = kb.ingest("A short note about gardening tomatoes.")
    again = kb.ingest("A short note about gardening tomatoes.")
    other = kb.ingest("A different note about pruning roses.")
    assert (first.documents_added, again.documents_skipped, again.chunks_added) == (1, 1, 0)
    assert other.documents_added == 1
    assert kb.collections()[0].documents == 2


def test_reingest_unchanged_skips_and_changed_replaces(kb: KnowledgeBase) -> None:
    ingest_topic(kb, "chess", name="doc")
    before = _chunk_ids(kb, "doc")
    same = ingest_topic(kb, "chess", name="doc")
    assert same.documents_skipped == 1 and same.chunks_added == 0
    assert _chunk_ids(kb, "doc") == before

    changed = ingest_topic(kb, "bread", name="doc")
    after = _chunk_ids(kb, "doc")
    assert changed.documents_replaced == 1 and changed.documents_added == 0
    assert changed.chunks_removed == len(before) and changed.chunks_added == len(after)
    assert not set(before) & set(after)
    texts = " ".join(r[0] for r in _rows(kb, "SELECT text FROM kb_chunks"))
    assert "sourdough" in texts.lower() and "checkmate" not in texts


def test_new_metadata_for_unchanged_text_is_stored_without_embedding_again(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text("# Deploy\n\nRoll back with the rollback command.\n")
    kb.ingest(guide, collection="docs")
    before = _chunk_ids(kb, str(guide))
    tagged = kb.ingest(guide, collection="docs", metadata={"team": "ops"})
    assert tagged.documents_replaced == 1 and tagged.chunks_added == 0 and tagged.chunks_reused
    assert _chunk_ids(kb, str(guide)) == before  # the same rows, ids and embeddings
    assert kb.documents("docs")[0].metadata["team"] == "ops"
    assert kb.search("roll back", collection="docs", filter={"team": "ops"})
    again = kb.ingest(guide, collection="docs", metadata={"team": "ops"})
    assert again.documents_skipped == 1 and again.documents_replaced == 0


def test_failed_replace_leaves_old_document_intact(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_topic(kb, "chess", name="doc")
    before = _chunk_ids(kb, "doc")
    # a replace of a few chunks is written in pipeline mode: the embeddings go last
    real = ingest_mod._insert_embeddings

    def write_then_fail(*args: Any) -> None:
        real(*args)  # rows are written inside the transaction, then it fails
        raise RuntimeError("injected failure")

    monkeypatch.setattr(ingest_mod, "_insert_embeddings", write_then_fail)
    with pytest.raises(RuntimeError, match="injected"):
        ingest_topic(kb, "bread", name="doc")
    assert _chunk_ids(kb, "doc") == before
    assert _rows(kb, "SELECT count(*) FROM kb_embeddings_256")[0][0] == len(before)


def test_failure_mid_ingest_never_half_writes_a_document(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for topic, text in TOPICS.items():
        (tmp_path / f"{topic}.txt").write_text(text)
    real = ingest_mod._copy_chunks
    calls = itertools.count(1)  # next() is atomic: two writers may be copying at once

    def fail_second(*args: Any) -> None:
        call = next(calls)
        real(*args)
        if call == 2:
            raise RuntimeError("injected failure")

    monkeypatch.setattr(ingest_mod, "_copy_chunks", fail_second)
    with pytest.raises(RuntimeError):
        kb.ingest(tmp_path, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, batch_size=4)
    monkeypatch.undo()
    stored = _rows(
        kb,
        "SELECT d.source, count(c.id) FROM kb_documents d"
        " LEFT JOIN kb_chunks c ON c.document_id = d.id GROUP BY d.source",
    )
    assert stored, "the first batch committed"
    assert len(stored) < len(TOPICS), "the failed batch did not"
    for source, count in stored:  # every stored document is complete
        full = kb.ingest(
            Path(source).read_text(),
            name="probe-" + Path(source).stem,
            collection="probe",
            chunk_size=CHUNK_SIZE,
            chunk_overlap=CHUNK_OVERLAP,
        )
        assert count == full.chunks_added
    # resuming completes the rest and skips what was committed
    res = kb.ingest(tmp_path, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, batch_size=4)
    assert res.documents_skipped == len(stored)
    assert res.documents_added == len(TOPICS) - len(stored)


def test_file_markdown_and_string_paths(kb: KnowledgeBase, tmp_path: Path) -> None:
    md = tmp_path / "guide.md"
    md.write_text("# Volcanoes\n\n" + TOPICS["volcanoes"] + "\n\n## Bread\n\n" + TOPICS["bread"])
    res = kb.ingest(md, chunk_size=400, chunk_overlap=0)
    assert res.documents_added == 1 and res.chunks_added >= 2
    first = _rows(kb, "SELECT text, metadata FROM kb_chunks ORDER BY position")
    assert first[0][0].startswith("# Volcanoes")
    assert any(text.startswith("## Bread") for text, _ in first)  # split at the heading
    assert first[0][1]["source"] == str(md.resolve())
    # a str naming an existing file is a path: unchanged, so skipped
    assert kb.ingest(str(md), chunk_size=400, chunk_overlap=0).documents_skipped == 1
    # a str shaped like a path names one even when nothing is there: a typo is an error
    with pytest.raises(IngestError, match="no such file or directory"):
        kb.ingest(str(tmp_path / "nope.md"))
    # a str shaped like no path is text
    assert kb.ingest("nope.md holds no notes").documents_added == 1


def test_directory_walk_with_globs_and_skips(kb: KnowledgeBase, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.md").write_text(TOPICS["tcp"])
    (tmp_path / "a" / "two.txt").write_text(TOPICS["chess"])
    (tmp_path / "three.txt").write_text(TOPICS["bread"])
    (tmp_path / ".hidden.txt").write_text(TOPICS["volcanoes"])
    (tmp_path / "skip_me.txt").write_text(TOPICS["aqueducts"])
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02 binary")
    (tmp_path / "latin.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "big.txt").write_text("x" * 5000)

    res = kb.ingest(tmp_path, exclude=["skip_*"], max_bytes=4000)
    reasons = {Path(p).name: r for p, r in res.skipped_files}
    assert res.documents_added == 3
    assert set(reasons) == {"bin.dat", "latin.txt", "empty.txt", "big.txt"}
    assert "binary" in reasons["bin.dat"] and "UTF-8" in reasons["latin.txt"]
    assert "empty" in reasons["empty.txt"] and "too large" in reasons["big.txt"]

    only_md = kb.ingest(tmp_path, collection="md", include=["*.md"])
    assert only_md.documents_added == 1 and only_md.skipped_files == []


def test_a_file_named_directly_goes_through_the_globs_as_in_a_walk(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    (tmp_path / "guides").mkdir()
    note = tmp_path / "guides" / "note.txt"
    note.write_text(TOPICS["tcp"])
    left_out = [{"include": "*.md"}, {"exclude": "*.txt"}, {"include": "drafts/*"}]
    for globs in left_out:
        result = kb.ingest(note, collection="named", **globs)
        assert result.to_dict() == IngestResult().to_dict(), globs
    assert "named" not in {c.name for c in kb.collections()}  # nothing, not even the collection
    # matched as given, as a walk matches a path below its directory: by name or by its tail
    kept = kb.ingest(note, collection="named", include=["*.md", "guides/*.txt"], exclude="*.md")
    assert kept.documents_added == 1


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"", "empty"), (b"\x00abc", "binary"), ("\xff\xfe".encode("latin-1") + b"ok", "UTF-8")],
)
def test_bad_single_file_is_an_error(
    kb: KnowledgeBase, tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(IngestError, match=match):
        kb.ingest(path)
    assert kb.collections() == []


def test_other_bad_inputs(kb: KnowledgeBase, tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="empty"):
        kb.ingest("   \n\t ")
    with pytest.raises(IngestError, match="no such"):
        kb.ingest(tmp_path / "missing.txt")
    # a string shaped like a path is one, there or not: a typo is no document holding its name
    typos = ("no-such-docs/", str(tmp_path / "missing"), "./missing", "~/no-such-folder-xyz")
    # a file's name, with a folder or with an extension ingest reads, is a path too
    typos += ("docs/no-such-file.md", "no-such-notes.md", "no-such-report.pdf")
    for typo in typos:
        with pytest.raises(IngestError, match="no such file or directory"):
            kb.ingest(typo, collection="typos")
    assert "typos" not in {c.name for c in kb.collections()}
    big = tmp_path / "big.txt"
    big.write_text("y" * 2048)
    with pytest.raises(IngestError, match="too large"):
        kb.ingest(big, max_bytes=1024)
    with pytest.raises(ValueError, match="JSON"):
        kb.ingest("text", metadata={"bad": object()})
    with pytest.raises(ValueError, match="chunk_overlap"):
        kb.ingest("some text", chunk_size=100, chunk_overlap=100)
    with pytest.raises(TypeError):
        kb.ingest(42)  # type: ignore[arg-type]
    assert kb.collections() == []


def test_progress_reports_every_batch(kb: KnowledgeBase) -> None:
    calls: list[tuple[int, int]] = []
    text = "\n\n".join(TOPICS.values())
    res = kb.ingest(
        text,
        name="all",
        chunk_size=200,
        chunk_overlap=0,
        batch_size=5,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls[0] == (0, res.chunks_added) and calls[-1] == (res.chunks_added,) * 2
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_collections_and_deletes(kb: KnowledgeBase) -> None:
    load_topics(kb, collection="a")
    kb.ingest(TOPICS["tcp"], collection="b", name="tcp")
    info = {c.name: c for c in kb.collections()}
    assert set(info) == {"a", "b"}
    assert info["a"].documents == len(TOPICS)
    assert (
        info["a"].chunks
        == _rows(
            kb,
            "SELECT count(*) FROM kb_chunks c JOIN"
            " kb_collections k ON k.id = c.collection_id"
            " WHERE k.name = 'a'",
        )[0][0]
    )
    assert (info["a"].embedding_model, info["a"].dimension) == (kb.model_name, 256)
    assert info["a"].to_dict()["name"] == "a"

    removed = kb.delete_document(source="chess", collection="a")
    assert removed == 1
    doc_id = _rows(kb, "SELECT id FROM kb_documents WHERE source = 'bread'")[0][0]
    assert kb.delete_document(document_id=doc_id) == 1
    assert {c.name: c.documents for c in kb.collections()}["a"] == len(TOPICS) - 2
    with pytest.raises(KnowledgeBaseError):
        kb.delete_document(source="chess", collection="a")
    with pytest.raises(ValueError):
        kb.delete_document()

    kb.delete_collection("a")
    assert [c.name for c in kb.collections()] == ["b"]
    left = _rows(kb, "SELECT count(*) FROM kb_chunks")[0][0]
    assert left == _rows(kb, "SELECT count(*) FROM kb_embeddings_256")[0][0] > 0
    with pytest.raises(CollectionNotFound):
        kb.delete_collection("a")


def test_a_string_shaped_like_a_path_is_a_path_even_when_missing(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    assert kb.ingest("a text/with a slash", collection="texts").documents_added == 1
    assert kb.ingest("/etc is where settings live", collection="texts").documents_added == 1
    assert [c.documents for c in kb.collections()] == [2]  # the typos above stored nothing


def test_delete_document_by_path(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = tmp_path / "doc.txt"
    path.write_text(TOPICS["chess"])
    kb.ingest(path)
    assert kb.delete_document(source=path) == 1
    assert kb.collections()[0].documents == 0


def test_embedder_mismatch_on_ingest(kb: KnowledgeBase, pg_url: str) -> None:
    kb.ingest(TOPICS["tcp"], collection="wl", name="tcp")
    other = KnowledgeBase(pg_url, embeddings=HashEmbeddings(), schema=kb.schema)
    try:
        with pytest.raises(EmbeddingMismatch, match="wordllama"):
            other.ingest(TOPICS["chess"], collection="wl")
        res = other.ingest(TOPICS["chess"], collection="hash", name="chess")
        assert res.chunks_added > 0
    finally:
        other.close()
    dims = {c.name: c.dimension for c in kb.collections()}
    assert dims == {"wl": 256, "hash": 64}


def test_stable_ids_across_reingest(kb: KnowledgeBase) -> None:
    kb.ingest(TOPICS["chess"], name="doc")
    ids = _chunk_ids(kb, "doc")
    kb.delete_document(source="doc", collection="default")
    kb.ingest(TOPICS["chess"], name="doc")
    assert _chunk_ids(kb, "doc") == ids


def test_injection_strings_are_data(kb: KnowledgeBase) -> None:
    evil = "x'); DROP TABLE kb_chunks; --"
    kb.ingest(TOPICS["tcp"], collection=evil, name=evil, metadata={evil: evil})
    assert [c.name for c in kb.collections()] == [evil]
    assert _rows(kb, "SELECT count(*) FROM kb_chunks")[0][0] > 0
    assert kb.delete_document(source=evil, collection=evil) == 1


def test_concurrent_schema_users_share_tables(kb: KnowledgeBase, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        n = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename LIKE 'kb_%%'",
            (kb.schema,),
        ).fetchone()
    assert n is not None and n[0] >= 4


def test_stored_vectors_are_the_embedder_output(kb: KnowledgeBase) -> None:
    import numpy as np

    ingest_topic(kb, "tcp", name="tcp")
    rows = _rows(
        kb,
        "SELECT c.text, e.embedding, e.collection_id = c.collection_id FROM kb_chunks c"
        " JOIN kb_embeddings_256 e ON e.chunk_id = c.id ORDER BY c.position",
    )
    assert len(rows) > 1 and all(r[2] for r in rows)
    stored = np.stack([np.asarray(r[1], dtype=np.float32) for r in rows])
    # each chunk is embedded under its context: the document's title (its name, here)
    expected = np.asarray(
        kb.embeddings.embed_documents([f"tcp\n{r[0]}" for r in rows]), dtype=np.float32
    )
    assert np.array_equal(stored, expected)


def _writers_at_once(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record, at each batch write, how many batch writes are under way (this one included)."""
    real = ingest_mod._write_batch
    lock = threading.Lock()
    state = {"now": 0}
    seen: list[int] = []

    def counted(*args: Any) -> Any:
        with lock:
            state["now"] += 1
            seen.append(state["now"])
        try:
            time.sleep(0.2)  # long enough for a second writer, if there is one, to start
            return real(*args)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(ingest_mod, "_write_batch", counted)
    return seen


def test_writes_into_a_live_index_run_two_batches_at_once_and_a_bulk_load_one(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for topic, text in TOPICS.items():
        (tmp_path / f"{topic}.txt").write_text(text)
    seen = _writers_at_once(monkeypatch)
    live = kb.ingest(tmp_path, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, batch_size=4)
    assert max(seen) == ingest_mod.LIVE_INDEX_WRITERS == 2
    stored = _rows(kb, "SELECT count(*) FROM kb_chunks")[0][0]
    assert stored == live.chunks_added and live.documents_added == len(TOPICS)
    seen.clear()
    monkeypatch.setattr(ingest_mod, "BULK_MIN_CHUNKS", 1)
    bulk = kb.ingest(
        tmp_path,
        collection="bulk",
        chunk_size=CHUNK_SIZE,
        chunk_overlap=CHUNK_OVERLAP,
        batch_size=4,
    )
    assert len(seen) > 1 and max(seen) == 1  # an index is built after it: one writer is enough
    assert bulk.chunks_added == live.chunks_added


def test_bulk_load_rebuilds_both_indexes(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for topic, text in TOPICS.items():
        (tmp_path / f"{topic}.txt").write_text(text)
    monkeypatch.setattr(ingest_mod, "BULK_MIN_CHUNKS", 1)
    dropped: list[str] = []
    real = ingest_mod.drop_fulltext_index

    def record(conn: Any) -> None:
        dropped.append("gin")
        real(conn)

    real_hnsw = ingest_mod.drop_hnsw_index

    def record_hnsw(conn: Any, dimension: int, collection_id: int) -> None:
        dropped.append(f"hnsw {collection_id}")
        real_hnsw(conn, dimension, collection_id)

    monkeypatch.setattr(ingest_mod, "drop_fulltext_index", record)
    monkeypatch.setattr(ingest_mod, "drop_hnsw_index", record_hnsw)
    result = kb.ingest(tmp_path, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, batch_size=4)
    ((coll_id,),) = _rows(kb, "SELECT id FROM kb_collections")
    assert dropped == [f"hnsw {coll_id}", "gin"] and result.chunks_added > 4
    indexes = {
        r[0]
        for r in _rows(kb, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    }
    assert {"kb_chunks_tsv_idx", f"kb_embeddings_256_c{coll_id}_s0_hnsw"} <= indexes
    stats = _rows(
        kb,
        "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'kb_chunks' AND attname = 'tsv'",
    )
    assert stats == [(1,)]  # analysed for the full-text OR fallback
    assert kb.search("sourdough", mode="fulltext")
    # a second load into the indexed collection adds to its indexes, however large
    again = ingest_topic(kb, "chess", name="chess-again")
    assert again.chunks_added and dropped == [f"hnsw {coll_id}", "gin"]


class _Unreachable(HashEmbeddings):
    """An embedder whose service cannot be reached (as a provider's client raises it)."""

    model_name = "test:unreachable"
    dimension = None  # type: ignore[assignment]  # probed, as a provider's is

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("the service at 127.0.0.1:9 refused the connection")

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("the service at 127.0.0.1:9 refused the connection")


@pytest.mark.parametrize("declares_dimension", [True, False])
def test_an_embedder_that_fails_is_said_as_the_knowledge_base_error_and_stores_nothing(
    kb: KnowledgeBase, declares_dimension: bool
) -> None:
    embedder = _Unreachable()
    if declares_dimension:
        embedder.dimension = 64  # embedding fails; else probing its dimension does
    failing = KnowledgeBase(kb.url, embeddings=embedder, schema=kb.schema)
    try:
        with pytest.raises(
            EmbedderFailed, match="the embedder failed: ConnectionError: the service"
        ) as raised:
            failing.ingest("A note about bread.", collection="unreachable", name="bread")
        assert isinstance(raised.value.__cause__, ConnectionError)
    finally:
        failing.close()
    assert _rows(kb, "SELECT count(*) FROM kb_chunks")[0][0] == 0


class _FailsWhenTold(HashEmbeddings):
    """An embedder run in this process (it has `embed_array`) that works until `fail` is set."""

    fail = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.fail:
            raise ConnectionError("the service went away")
        return super().embed_documents(texts)

    def embed_array(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return np.asarray(self.embed_documents(texts), dtype=np.float32)


def _sections(count: int, extra: str = "") -> str:
    parts = [
        f"## Part {n}\n\nA note on topic number {n}, with words of its own.\n" for n in range(count)
    ]
    parts[count // 2] += extra
    return "\n".join(parts)


def test_an_edit_whose_embedding_fails_inside_its_transaction_keeps_the_stored_version(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    # an in-process embedder embeds an edit once its transaction has begun
    embedder = _FailsWhenTold()
    edited = KnowledgeBase(kb.url, embeddings=embedder, schema=kb.schema)
    note = tmp_path / "note.md"
    try:
        note.write_text(_sections(6))
        edited.ingest(note, collection="edits")
        before = _chunk_ids(kb, str(note.resolve()))
        note.write_text(_sections(6, "An added sentence.\n"))
        embedder.fail = True
        with pytest.raises(EmbedderFailed, match="the service went away"):
            edited.ingest(note, collection="edits")
        assert _chunk_ids(kb, str(note.resolve())) == before
        embedder.fail = False  # the pooled connection the failed write used works again
        done = edited.ingest(note, collection="edits")
        assert (done.documents_replaced, done.chunks_added, done.chunks_removed) == (1, 1, 1)
        hits = edited.search("An added sentence", collection="edits", mode="fulltext")
        assert "An added sentence." in hits[0]["text"]
    finally:
        edited.close()


class _LockProbe(HashEmbeddings):
    """A service-like embedder that notes, at each call, whether a writer holds the stored documents' rows."""

    def __init__(self, url: str, schema: str) -> None:
        self.url, self.schema = url, schema
        self.locked: list[bool] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with psycopg.connect(
            self.url, autocommit=True, options=f"-c search_path={self.schema}"
        ) as conn:
            try:
                conn.execute("SELECT 1 FROM kb_documents FOR UPDATE NOWAIT")
                self.locked.append(False)
            except psycopg.errors.LockNotAvailable:
                self.locked.append(True)
        return super().embed_documents(texts)


class _InProcessLockProbe(_LockProbe):
    def embed_array(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return np.asarray(self.embed_documents(texts), dtype=np.float32)


class _OpenTransactions(HashEmbeddings):
    """An in-process embedder that notes, at each call, how many other sessions are inside a transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.open: list[int] = []

    def embed_array(self, texts: list[str]) -> np.ndarray[Any, Any]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND datname = current_database() AND state LIKE 'idle in transaction%%'"
            ).fetchone()
        self.open.append(row[0] if row is not None else -1)
        return np.asarray(self.embed_documents(texts), dtype=np.float32)


def test_a_new_document_is_embedded_before_its_transaction_begins(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    # outside pipeline mode nothing would overlap the embedding: no transaction waits on it
    probe = _OpenTransactions(kb.url)
    new = KnowledgeBase(kb.url, embeddings=probe, schema=kb.schema)
    note = tmp_path / "note.md"
    try:
        note.write_text(_sections(80))
        done = new.ingest(note, collection="fresh")
    finally:
        new.close()
    assert done.chunks_added > ingest_mod.PIPELINE_MAX_CHUNKS // 2 and probe.open == [0]


@pytest.mark.parametrize("in_process", [True, False])
def test_only_an_in_process_embedder_embeds_an_edit_inside_its_transaction(
    kb: KnowledgeBase, tmp_path: Path, in_process: bool
) -> None:
    # a service may take seconds to answer: the document's row is not held while it does
    probe = (_InProcessLockProbe if in_process else _LockProbe)(kb.url, kb.schema)
    edited = KnowledgeBase(kb.url, embeddings=probe, schema=kb.schema)
    note = tmp_path / "note.md"
    try:
        note.write_text(_sections(6))
        edited.ingest(note, collection="edits")
        note.write_text(_sections(6, "An added sentence.\n"))
        probe.locked.clear()
        done = edited.ingest(note, collection="edits")
        assert done.chunks_added == 1 and probe.locked == [in_process]
    finally:
        edited.close()
