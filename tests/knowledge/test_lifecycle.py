"""A knowledge base kept in step with its files: change-only re-embedding and sync."""

from __future__ import annotations

import dataclasses
import random
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.embeddings import Embeddings
from psycopg import sql
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.knowledge import IngestResult, KnowledgeBase, placed, writer
from arcana_loop.knowledge.loading import Chunked
from arcana_loop.knowledge.placed import PLACED_CHUNK_SQL
from arcana_loop.knowledge.schema import ensure_schema
from arcana_loop.knowledge.structure import MarkdownMap


class CountingEmbeddings(Embeddings):
    """The knowledge base's own embedder, counting the texts it is given."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def _counting(kb: KnowledgeBase) -> CountingEmbeddings:
    counting = CountingEmbeddings(kb.embeddings)
    kb.embeddings = counting
    return counting


def _guide(sections: int, *, edited: int | None = None, preface: str = "") -> str:
    parts = [f"# Harbour guide\n\n{preface}"]
    for n in range(sections):
        fact = f"Berth {n} is {n + 10} metres deep and takes ships of {n * 3 + 40} metres."
        if n == edited:
            fact = f"Berth {n} was dredged to {n + 30} metres last spring."
        parts.append(f"## Berth {n}\n\n{fact}\n\nIts crane lifts {n + 5} tonnes.\n")
    return "\n".join(parts)


def _chunks(kb: KnowledgeBase, collection: str) -> dict[str, tuple[int, dict[str, Any], str]]:
    with kb.pool().connection() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT c.id, {placed}, c.text FROM kb_chunks c"  # where readers see them
                " JOIN kb_collections k ON k.id = c.collection_id"
                " JOIN kb_documents d ON d.id = c.document_id WHERE k.name = %s"
            ).format(placed=PLACED_CHUNK_SQL),
            (collection,),
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _row_versions(kb: KnowledgeBase, collection: str) -> dict[str, str]:
    """Each chunk row's version (``xmin``): it changes whenever the row is rewritten."""
    with kb.pool().connection() as conn:
        rows = conn.execute(
            "SELECT c.id, c.xmin::text FROM kb_chunks c"
            " JOIN kb_collections k ON k.id = c.collection_id WHERE k.name = %s",
            (collection,),
        ).fetchall()
    return dict(rows)


def test_an_edit_re_embeds_only_the_chunks_it_changed(kb: KnowledgeBase, tmp_path: Path) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(_guide(40))
    counting = _counting(kb)
    first = kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    before = _chunks(kb, "harbour")
    assert first.chunks_added == len(before) == len(counting.texts) >= 40

    counting.texts.clear()
    guide.write_text(_guide(40, edited=7))
    second = kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    after = _chunks(kb, "harbour")
    assert (second.documents_replaced, second.chunks_added, second.chunks_removed) == (1, 1, 1)
    assert second.chunks_reused == len(before) - 1
    assert len(counting.texts) == 1 and "dredged" in counting.texts[0]
    assert len(set(before) & set(after)) == len(before) - 1  # the others keep their ids
    hits = kb.search("dredged last spring", collection="harbour", limit=1)
    assert "dredged to 37 metres" in hits[0]["text"]


def _written(kb: KnowledgeBase, collection: str) -> set[tuple[Any, ...]]:
    """What each chunk of a collection stores, as text, by chunk text (ids differ between collections)."""
    with kb.pool().connection() as conn:
        rows = conn.execute(
            "SELECT c.text, c.position, c.metadata::text, c.lex::text, c.lex_keys::text,"
            " e.embedding::text FROM kb_chunks c JOIN kb_collections k ON k.id = c.collection_id"
            " JOIN kb_embeddings_256 e ON e.chunk_id = c.id WHERE k.name = %s",
            (collection,),
        ).fetchall()
    return set(rows)


def test_an_edit_in_a_pipeline_writes_what_copy_writes(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small edit inserts its rows in pipeline mode, the rest by binary COPY: the same bytes
    guide = tmp_path / "guide.md"
    for collection, pipeline_max in (("piped", writer.PIPELINE_MAX_CHUNKS), ("copied", 0)):
        monkeypatch.setattr(writer, "PIPELINE_MAX_CHUNKS", pipeline_max)
        guide.write_text(_guide(12))
        kb.ingest(guide, collection=collection, chunk_size=200, chunk_overlap=0)
        guide.write_text(_guide(12, edited=4, preface="Pilots board at the buoy."))
        edit = kb.ingest(guide, collection=collection, chunk_size=200, chunk_overlap=0)
        assert edit.chunks_added == 2
    assert _written(kb, "piped") == _written(kb, "copied")


def test_text_added_before_a_chunk_moves_it_without_re_embedding_it(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(_guide(12))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    before = _chunks(kb, "harbour")
    versions = _row_versions(kb, "harbour")
    counting = _counting(kb)
    text = _guide(12, preface="Pilots board at the outer buoy.\n")
    guide.write_text(text)
    result = kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    after = _chunks(kb, "harbour")
    assert result.chunks_added == len(counting.texts) <= 2 and result.chunks_reused >= 10
    for chunk_id, (_, metadata, chunk_text) in after.items():
        # a kept chunk's position and offset follow the new text
        assert text[metadata["start_index"] :].startswith(chunk_text)
        if chunk_id in before:
            assert metadata["section"] == before[chunk_id][1]["section"]
    assert sorted(p for p, _, _ in after.values()) == list(range(len(after)))
    # the moved chunks' rows were not rewritten: their places live in the document's row
    kept = set(before) & set(after)
    moved = {i for i in kept if after[i][:2] != before[i][:2]}
    assert len(moved) >= 10
    assert {i: v for i, v in _row_versions(kb, "harbour").items() if i in kept} == {
        i: versions[i] for i in kept
    }
    # and a search returns the moved chunk where it now is, as a filter on the offset finds it
    last = max(kept, key=lambda i: after[i][0])
    found = kb.search("Berth 11 crane", collection="harbour", limit=20)
    (hit,) = [h for h in found if h["id"] == last]
    assert (hit["position"], hit["metadata"]["start_index"]) == (
        after[last][0],
        after[last][1]["start_index"],
    )
    start = after[last][1]["start_index"]
    assert {
        h["id"]
        for h in kb.search(
            "Berth 11 crane", collection="harbour", filter={"start_index": {"$gte": start}}
        )
    } == {last}


def test_an_edit_keeps_what_it_did_not_touch_and_is_searchable_at_once(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(_guide(60))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    assert kb.merge_pending("harbour") > 0  # an indexed collection: every vector in its graph
    before = _chunks(kb, "harbour")
    # an edit near the top (every chunk after it moves), one in the middle, a section removed
    text = _guide(60, edited=30).replace("## Berth 5\n\n", "## Berth 5\n\nTugs wait here.\n\n")
    text = text.replace("## Berth 44\n\nBerth 44 is 54 metres deep", "## Berth 44\n\nClosed")
    guide.write_text(text)
    chunked: list[Chunked] = []
    real = writer.chunk_document
    monkeypatch.setattr(
        writer, "chunk_document", lambda *a, **k: chunked.append(real(*a, **k)) or chunked[-1]
    )
    result = kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    after = _chunks(kb, "harbour")
    assert result.chunks_added == result.chunks_removed == 3
    # only the changed sections were chunked; the others were carried over from the stored map
    assert [(len(c.rows), len(c.carried)) for c in chunked] == [(3, len(before) - 3)]
    kept = set(before) & set(after)
    assert len(kept) == len(before) - 3  # the untouched chunks keep their ids
    for chunk_id, (position, metadata, chunk_text) in after.items():
        assert text[metadata["start_index"] :].startswith(chunk_text)
        assert position == sorted(after.values(), key=lambda c: c[1]["start_index"]).index(
            after[chunk_id]
        )
    moved = [i for i in kept if after[i][1]["start_index"] != before[i][1]["start_index"]]
    assert len(moved) >= 50
    kb.exact_max_rows = 0  # through the graph, with the new vectors pending beside it
    for mode in ("semantic", "hybrid", "fulltext"):
        for query, expected in (
            ("Tugs wait here", "Tugs wait here."),
            ("Berth 30 was dredged last spring", "dredged to 60 metres"),
            ("Berth 44 closed", "Closed"),
        ):
            hits = kb.search(query, collection="harbour", mode=mode, limit=3)
            assert any(expected in h["text"] for h in hits), (mode, query)
        found = kb.search("Berth 58 crane lifts", collection="harbour", mode=mode, limit=3)
        hit = next(h for h in found if h["id"] in moved and "Berth 58" in h["text"])
        assert (hit["position"], hit["metadata"]["start_index"]) == (
            after[hit["id"]][0],
            after[hit["id"]][1]["start_index"],
        )
    # the replaced text is gone
    assert not any("54 metres deep" in t for _, _, t in after.values())
    assert not any(
        "54 metres" in h["text"]
        for h in kb.search("Berth 44 is 54 metres deep", collection="harbour", mode="fulltext")
    )


def test_an_edit_with_new_metadata_rewrites_the_kept_chunks_and_moves_them_back(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(_guide(8))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0, metadata={"tag": "a"})
    first = _chunks(kb, "harbour")
    guide.write_text(_guide(8, preface="Pilots board at the outer buoy.\n"))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0, metadata={"tag": "b"})
    moved = _chunks(kb, "harbour")
    assert {m["tag"] for _, m, _ in moved.values()} == {"b"}  # every row rewritten
    assert {h["id"] for h in kb.search("crane", collection="harbour", filter={"tag": "a"})} == set()
    guide.write_text(_guide(8))  # back where they were, with the first metadata
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0, metadata={"tag": "a"})
    assert _chunks(kb, "harbour") == first
    assert _shifts(kb, "harbour") is None  # every row where its chunk is: nothing to shift


def _placed_as_whole(kb: KnowledgeBase, collection: str) -> list[tuple[int, dict[str, Any], str]]:
    """Every chunk of `collection` as readers see it (position, metadata, text), in order."""
    return sorted(_chunks(kb, collection).values(), key=lambda c: c[0])


def _shifts(kb: KnowledgeBase, collection: str) -> tuple[list[int], ...] | None:
    """The shift ranges of the one document of `collection` (`knowledge.placed`), if it has any."""
    with kb.pool().connection() as conn:
        row = conn.execute(
            "SELECT d.shift_from, d.shift_position, d.shift_start FROM kb_documents d"
            " JOIN kb_collections k ON k.id = d.collection_id WHERE k.name = %s",
            (collection,),
        ).fetchone()
    assert row is not None
    return None if row[0] is None else tuple(row)


def _forget_rows(kb: KnowledgeBase) -> None:
    """Store the document's map as maps were stored before they recorded their chunks' rows."""
    with kb.pool().connection() as conn:
        (blob,) = conn.execute("SELECT structure FROM kb_documents").fetchone() or (None,)
        stored = MarkdownMap.load(blob)
        assert stored is not None and stored.packing is not None and stored.packing.placed
        older = dataclasses.replace(stored.packing, placed=b"")
        conn.execute(
            "UPDATE kb_documents SET structure = %s",
            (dataclasses.replace(stored, packing=older).dump(),),
        )


def test_an_edit_places_kept_chunks_from_the_stored_map_without_reading_their_rows(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guide = tmp_path / "guide.md"
    reads: list[str] = []
    real = writer._send_stored_chunks
    monkeypatch.setattr(
        writer,
        "_send_stored_chunks",
        lambda conn, item: reads.append(item.doc_id) or real(conn, item),
    )
    moves = "Pilots board at the outer buoy.\n"
    steps = [  # text, metadata, whether the chunk rows are read
        (_guide(20), {"tag": "a"}, False),
        (_guide(20, preface=moves), {"tag": "a"}, False),  # every chunk moves
        (_guide(20, edited=12), {"tag": "a"}, False),  # back where their rows are, one edited
        (_guide(20, edited=12, preface=moves), {"tag": "a"}, True),  # a map of before: rows read
        (_guide(20, edited=3), {"tag": "a"}, False),  # and recorded again
        (_guide(20, edited=3, preface=moves), {"tag": "b"}, True),  # new metadata: rows rewritten
        (_guide(20, edited=5), {"tag": "b"}, False),
        (_guide(20, edited=5, preface="A long note. " * 20), {"tag": "b"}, False),  # one more
        (_guide(20, edited=6), {"tag": "b"}, False),
    ]
    for number, (text, metadata, read) in enumerate(steps):
        if number == 3:
            _forget_rows(kb)
        guide.write_text(text)
        reads.clear()
        options: dict[str, Any] = {"chunk_size": 200, "chunk_overlap": 0, "metadata": metadata}
        kb.ingest(guide, collection="harbour", **options)
        assert bool(reads) == read, number
        kb.ingest(guide, collection=f"whole{number}", **options)
        assert _placed_as_whole(kb, "harbour") == _placed_as_whole(kb, f"whole{number}"), number
        shifts = _shifts(kb, "harbour")
        if number in (2, 7):  # offsets moved alone (one section edited), then positions too
            assert shifts is not None and (set(shifts[1]) != {0}) == (number == 7), shifts
            assert len(shifts[0]) <= 6  # a few ranges, not an entry per moved chunk
    with kb.pool().connection() as conn:
        assert conn.execute(
            "SELECT count(*) FROM kb_documents WHERE shift_from IS NULL"
        ).fetchone() == (len(steps),)  # a whole ingest writes every row where its chunk is


def _edit_after_another_writer(
    kb: KnowledgeBase, guide: Path, monkeypatch: pytest.MonkeyPatch, meanwhile: list[str]
) -> IngestResult:
    """Edit berth 3 of a stored guide; between its planning and its write another writer stores each of `meanwhile`."""
    guide.write_text(_guide(12))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    other = KnowledgeBase(kb.url, schema=kb.schema)
    real_load = writer._load

    def another_writer_first(load: Any) -> None:
        monkeypatch.setattr(writer, "_load", real_load)
        for text in meanwhile:
            guide.write_text(text)
            other.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
        guide.write_text(_guide(12, edited=3))
        real_load(load)

    monkeypatch.setattr(writer, "_load", another_writer_first)
    try:
        guide.write_text(_guide(12, edited=3))
        return kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    finally:
        other.close()


def test_an_edit_planned_against_a_version_stored_again_since_reads_its_rows(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real_read = writer._send_stored_chunks
    monkeypatch.setattr(
        writer,
        "_send_stored_chunks",
        lambda conn, item: reads.append(item.doc_id) or real_read(conn, item),
    )
    # meanwhile another writer edits the text and stores it again: the same text and hash,
    # but rows of its own, which the map planned against does not record
    guide = tmp_path / "guide.md"
    buoy = _guide(12, edited=5, preface="Pilots board at the buoy.\n\n" * 12)
    _edit_after_another_writer(kb, guide, monkeypatch, [buoy, _guide(12)])
    assert reads  # the rows were read, not taken from the map planned against
    kb.ingest(guide, collection="whole", chunk_size=200, chunk_overlap=0)
    assert _placed_as_whole(kb, "harbour") == _placed_as_whole(kb, "whole")


def test_an_edit_planned_against_a_version_another_writer_changed_is_chunked_again(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the stored text changed between planning and writing: the document is chunked again
    # inside the write, and the chunks the plan embedded are told apart from the others
    guide = tmp_path / "guide.md"
    buoy = _guide(12, edited=9, preface="Pilots board at the buoy.\n\n" * 3)
    done = _edit_after_another_writer(kb, guide, monkeypatch, [buoy])
    assert done.documents_replaced == 1 and done.chunks_added >= 2  # the edit, and the buoy undone
    kb.ingest(guide, collection="whole", chunk_size=200, chunk_overlap=0)
    assert _placed_as_whole(kb, "harbour") == _placed_as_whole(kb, "whole")


class _ServiceLike(Embeddings):
    """An embedder as a service's client is: no `embed_array`, and a list for no text."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(t) % 7 + 1), 1.0, 0.5] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def test_an_edit_that_only_removes_chunks_embeds_nothing(kb: KnowledgeBase, tmp_path: Path) -> None:
    served = KnowledgeBase(kb.url, schema=kb.schema, embeddings=_ServiceLike())
    guide = tmp_path / "guide.md"
    text = _guide(12)
    try:
        guide.write_text(text)
        served.ingest(guide, collection="served", chunk_size=200, chunk_overlap=0)
        guide.write_text(text[: text.index("## Berth 11")])
        done = served.ingest(guide, collection="served", chunk_size=200, chunk_overlap=0)
    finally:
        served.close()
    assert (done.documents_replaced, done.chunks_added, done.chunks_removed) == (1, 0, 1)


def _ingest_as_whole(kb: KnowledgeBase, guide: Path, whole: str, chunk_size: int = 200) -> None:
    """Ingest `guide` as an edit of collection ``harbour`` and whole into `whole`: both read alike."""
    for collection in ("harbour", whole):
        kb.ingest(guide, collection=collection, chunk_size=chunk_size, chunk_overlap=0)
    assert _placed_as_whole(kb, "harbour") == _placed_as_whole(kb, whole)


def test_random_edits_read_as_a_whole_ingest_reads(kb: KnowledgeBase, tmp_path: Path) -> None:
    # sections edited, added, removed and moved, text added on top and taken away: rows of
    # many edits side by side, each placed by the ranges as a whole ingest writes it
    rng = random.Random(7)
    facts = [f"Berth {n} takes ships of {n * 3 + 40} metres." for n in range(30)]
    guide = tmp_path / "guide.md"
    for number in range(14):
        change = rng.choice(("edit", "add", "remove", "move", "preface"))
        at = rng.randrange(len(facts))
        if change == "edit":
            facts[at] += f" Dredged in year {number}."
        elif change == "add":
            facts.insert(at, f"Berth {number}b was opened in year {number}.")
        elif change == "remove" and len(facts) > 5:
            facts.pop(at)
        elif change == "move":
            facts.insert(rng.randrange(len(facts)), facts.pop(at))
        preface = "Pilots board at the buoy. " * rng.randint(0, 3)
        parts = [f"# Harbour guide\n\n{preface}"]
        parts += [
            f"## Note {i}\n\n{fact}\n\nIts crane lifts {i + 5} tonnes.\n"
            for i, fact in enumerate(facts)
        ]
        guide.write_text("\n".join(parts))
        _ingest_as_whole(kb, guide, f"whole{number}", chunk_size=120)


def test_edits_of_a_document_with_identical_chunks_read_as_a_whole_ingest_reads(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    def faq(edited: int | None) -> str:
        # the same question under the same heading path, ten times: identical chunks, whose
        # ids count their order
        parts = ["# FAQ"]
        for n in range(30):
            answer = "Restart it." + (" Then wait." if n == edited else "")
            parts += [f"## Q{n % 3}\n\n{answer}", f"## Note {n}\n\nNote {n} applies."]
        return "\n\n".join(parts)

    guide = tmp_path / "faq.md"
    guide.write_text(faq(None))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    for number, edited in enumerate((4, 0, 29, None)):
        guide.write_text(faq(edited))
        _ingest_as_whole(kb, guide, f"whole{number}")


def test_an_edit_beside_a_split_code_block_and_identical_chunks_reads_as_a_whole_ingest(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    # identical chunks make the edit read its rows; the pieces of a code block longer than a
    # chunk carry no offset (each is fenced again), so their run is built, never carried
    code = "\n".join(f"step_{n} = run({n})  # restart pump {n}" for n in range(20))

    def faq(edited: int | None) -> str:
        parts = ["# FAQ"]
        for n in range(12):
            answer = "Restart it." + (" Then wait." if n == edited else "")
            parts += [f"## Q{n % 3}\n\n{answer}", f"## Note {n}\n\nNote {n} applies."]
            if n == 6:  # after the first edits: carried over
                parts.append(f"## Script\n\n```python\n{code}\n```")
        return "\n\n".join(parts)

    guide = tmp_path / "faq.md"
    guide.write_text(faq(None))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    for number, edited in enumerate((4, 0, None)):
        guide.write_text(faq(edited))
        _ingest_as_whole(kb, guide, f"whole{number}")


def test_new_rows_without_free_positions_write_the_kept_rows_where_their_chunks_are(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(_guide(12))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    versions = _row_versions(kb, "harbour")
    # text on top: the new rows would go past the kept ones, beyond the largest position
    monkeypatch.setattr(placed, "MAX_STORED_POSITION", len(versions) - 2)
    guide.write_text(_guide(12, preface="Pilots board at the outer buoy.\n"))
    _ingest_as_whole(kb, guide, "whole")
    assert _shifts(kb, "harbour") is None  # every kept row rewritten where its chunk is
    assert set(versions.values()).isdisjoint(_row_versions(kb, "harbour").values())


def test_a_moved_map_of_before_is_written_into_the_rows_once(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(_guide(12))
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    text = _guide(12, edited=4, preface="Pilots board at the outer buoy.\n")
    guide.write_text(text)
    kb.ingest(guide, collection="harbour", chunk_size=200, chunk_overlap=0)
    edited = _placed_as_whole(kb, "harbour")
    assert _shifts(kb, "harbour") is not None
    with kb.pool().connection() as conn:
        # as stored before shift ranges: a moved map of each chunk's place, where its row differs
        conn.execute("ALTER TABLE kb_documents ADD COLUMN moved jsonb")
        conn.execute(
            sql.SQL(
                "UPDATE kb_documents d SET shift_from = NULL, shift_position = NULL,"
                " shift_start = NULL, moved = (SELECT jsonb_object_agg(p.id, jsonb_build_object("
                "   'position', p.position, 'start_index', p.metadata -> 'start_index'))"
                "   FROM (SELECT c.id, c.position AS row_at, {placed} FROM kb_chunks c"
                "         WHERE c.document_id = d.id) p (id, row_at, position, metadata)"
                "   WHERE p.row_at <> p.position"
                "      OR p.metadata -> 'start_index' IS DISTINCT FROM"
                "         (SELECT c.metadata -> 'start_index' FROM kb_chunks c WHERE c.id = p.id))"
            ).format(placed=PLACED_CHUNK_SQL)
        )
        (moved,) = conn.execute("SELECT moved FROM kb_documents").fetchone() or (None,)
        assert moved and len(moved) >= 10
        ensure_schema(conn, conn.execute("SELECT current_schema()").fetchone()[0])
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'kb_documents'"
        ).fetchall()
        assert ("moved",) not in columns
        # the rows are where the map placed them; the map, which recorded them before, is gone
        assert conn.execute("SELECT structure FROM kb_documents").fetchall() == [(None,)]
    assert _placed_as_whole(kb, "harbour") == edited
    guide.write_text(_guide(12, edited=5))
    _ingest_as_whole(kb, guide, "whole")


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_sync_adds_updates_and_removes_and_touches_nothing_else(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    _tree(
        docs,
        {
            "tides.md": "# Tides\n\nHigh tide is at six.",
            "cranes.md": "# Cranes\n\nThe crane lifts forty tonnes.",
            "guides/pilots.md": "# Pilots\n\nPilots board at the outer buoy.",
            "drafts/old.md": "# Old\n\nA draft about moorings.",
        },
    )
    elsewhere = tmp_path / "docs-elsewhere.md"  # beside the directory, sharing its name's start
    elsewhere.write_text("# Elsewhere\n\nNot under the synced directory.")
    kb.ingest(docs, collection="port", sync=True)
    kb.ingest(elsewhere, collection="port")
    kb.ingest("A note of text.", collection="port", name="note")
    kb.ingest(docs, collection="other")  # the same files in another collection

    (docs / "tides.md").unlink()  # deleted
    (docs / "cranes.md").rename(docs / "lifting.md")  # renamed
    (docs / "guides/pilots.md").write_text("# Pilots\n\nPilots board at the inner buoy now.")
    (docs / "drafts/old.md").write_text("# Old\n\nStill a draft.")  # changed, but left out
    result = kb.ingest(docs, collection="port", sync=True, exclude="drafts/*")
    assert (
        result.documents_added,
        result.documents_replaced,
        result.documents_removed,
        result.documents_skipped,
    ) == (1, 1, 2, 0)
    sources = {d.source for d in kb.documents("port")}
    assert sources == {
        str((docs / "lifting.md").resolve()),
        str((docs / "guides/pilots.md").resolve()),
        str((docs / "drafts/old.md").resolve()),  # excluded, so kept as stored
        str(elsewhere.resolve()),
        "note",
    }
    assert len(kb.documents("other")) == 4  # another collection is never touched
    assert not kb.search("high tide six", collection="port", mode="fulltext")
    again = kb.ingest(docs, collection="port", sync=True, exclude="drafts/*")
    assert (again.documents_added, again.documents_removed, again.documents_skipped) == (0, 0, 2)


def test_sync_of_an_emptied_directory_removes_its_documents(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    _tree(docs, {"a.md": "# A\n\nAlpha.", "b.md": "# B\n\nBravo."})
    kb.ingest(docs, collection="port", sync=True)
    for name in ("a.md", "b.md"):
        (docs / name).unlink()
    result = kb.ingest(docs, collection="port", sync=True)
    assert (result.documents_removed, result.chunks_removed) == (2, 2)
    assert kb.documents("port") == []


def test_sync_needs_a_directory_and_refuses_before_writing(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA note.")
    for source in ("Some text to ingest.", note):
        with pytest.raises(ValueError, match="sync=True needs a directory"):
            kb.ingest(source, collection="port", sync=True)
    assert kb.collections() == []


def _count_rows(stdout: str) -> list[list[str]]:
    """The rows of counts the CLI's ingest prints: documents added, unchanged, replaced,
    removed; chunks added, kept, removed."""
    return [
        line.split()[-7:]
        for line in stdout.splitlines()
        if len(line.split()) >= 8 and all(n.isdigit() for n in line.split()[-7:])
    ]


@pytest.fixture
def cli_collection(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, KnowledgeBase]]:
    """A collection name for the CLI (of the default knowledge base), and that base; dropped afterwards."""
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("COLUMNS", "80")
    name = f"cli-sync-{uuid.uuid4().hex[:8]}"
    base = KnowledgeBase(pg_url)
    try:
        yield name, base
    finally:
        base.delete_collection(name)
        base.close()


@pytest.mark.postgres
def test_the_cli_syncs_with_globs_and_counts_what_it_did(
    cli_collection: tuple[str, KnowledgeBase], tmp_path: Path
) -> None:
    name, base = cli_collection
    docs = tmp_path / "docs"
    _tree(docs, {"a.md": "# A\n\nAlpha.", "b.md": "# B\n\nBravo.", "c.txt": "Charlie."})
    runner = CliRunner()
    done = runner.invoke(app, ["ingest", str(docs), "-c", name, "--include", "*.md"])
    assert done.exit_code == 0, done.output
    assert {Path(d.source).name for d in base.documents(name)} == {"a.md", "b.md"}
    (docs / "a.md").unlink()
    synced = runner.invoke(app, ["ingest", str(docs), "-c", name, "--sync", "--exclude", "*.txt"])
    assert synced.exit_code == 0, synced.output
    assert _count_rows(synced.stdout) == [["0", "1", "0", "1", "0", "0", "1"]], synced.stdout
    assert {Path(d.source).name for d in base.documents(name)} == {"b.md"}
    refused = runner.invoke(app, ["ingest", str(docs / "b.md"), "-c", name, "--sync"])
    assert refused.exit_code == 1 and "--sync needs directories" in refused.stderr


@pytest.mark.postgres
def test_the_cli_syncs_a_rename_and_an_edit(
    cli_collection: tuple[str, KnowledgeBase], tmp_path: Path
) -> None:
    name, base = cli_collection
    docs = tmp_path / "docs"
    _tree(
        docs,
        {"tides.md": "# Tides\n\nHigh tide is at six.", "cranes.md": "# Cranes\n\nForty tonnes."},
    )
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(docs), "-c", name, "--sync"]).exit_code == 0
    (docs / "cranes.md").rename(docs / "lifting.md")
    (docs / "tides.md").write_text("# Tides\n\nHigh tide is at seven now.")
    synced = runner.invoke(app, ["ingest", str(docs), "-c", name, "--sync"])
    assert synced.exit_code == 0, synced.output
    assert _count_rows(synced.stdout) == [["1", "0", "1", "1", "2", "0", "2"]], synced.stdout
    assert {Path(d.source).name for d in base.documents(name)} == {"tides.md", "lifting.md"}
    hits = base.search("high tide", collection=name, mode="fulltext")
    assert [h["text"] for h in hits] == ["# Tides\n\nHigh tide is at seven now."]


KILLED_SYNC = textwrap.dedent(
    """
    import os, signal, sys
    from arcana_loop.knowledge import KnowledgeBase

    kb = KnowledgeBase(sys.argv[1], schema=sys.argv[2])

    def progress(done, total):
        if done >= 2:  # two batches committed, the rest not
            os.kill(os.getpid(), signal.SIGKILL)

    kb.ingest(sys.argv[3], collection="port", sync=True, batch_size=1, progress=progress)
    """
)


def _versions(kb: KnowledgeBase) -> dict[str, tuple[str, set[str]]]:
    """Each stored document's content hash, and which version ("Old", "New") each of its chunks holds.

    Read in one statement, one snapshot: a killed writer's last transaction, its COMMIT
    already sent with its writes, may still commit while this reads.
    """
    with kb.pool().connection() as conn:
        rows = conn.execute(
            "SELECT d.source, d.content_hash, array_remove(array_agg(c.text), NULL)"
            " FROM kb_documents d JOIN kb_collections k ON k.id = d.collection_id"
            " LEFT JOIN kb_chunks c ON c.document_id = d.id"
            " WHERE k.name = 'port' GROUP BY d.source, d.content_hash"
        ).fetchall()
    return {
        Path(source).name: (digest, {v for t in texts for v in ("Old", "New") if f"{v} text" in t})
        for source, digest, texts in rows
    }


def test_a_sync_killed_midway_leaves_each_document_old_or_new_and_a_rerun_completes_it(
    kb: KnowledgeBase, pg_url: str, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    old = {f"d{n}.md": f"# Doc {n}\n\nOld text number {n}." for n in range(8)}
    _tree(docs, old)
    kb.ingest(docs, collection="port")
    old_hashes = {name: digest for name, (digest, _) in _versions(kb).items()}
    _tree(docs, {name: text.replace("Old", "New") for name, text in old.items()})
    (docs / "d7.md").unlink()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_SYNC, pg_url, kb.schema, str(docs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    midway = _versions(kb)
    assert set(midway) == set(old)  # nothing removed before every write is done

    rerun = kb.ingest(docs, collection="port", sync=True)
    assert rerun.documents_removed == 1
    done = _versions(kb)
    assert set(done) == set(old) - {"d7.md"}
    assert all(versions == {"New"} for _, versions in done.values())
    for name, (digest, versions) in midway.items():
        # wholly old or wholly new: its hash and every one of its chunks agree
        expected = "Old" if digest == old_hashes[name] else "New"
        assert versions == {expected}, (name, versions)
        if expected == "New":
            assert digest == done[name][0]
    assert 1 <= sum(digest != old_hashes[n] for n, (digest, _) in midway.items()) < 7


def test_an_interrupted_database_loses_no_document(kb: KnowledgeBase, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _tree(docs, {"a.md": "# A\n\nAlpha.", "b.md": "# B\n\nBravo."})
    kb.ingest(docs, collection="port")
    (docs / "a.md").write_text("# A\n\nAlpha, changed.")
    (docs / "b.md").unlink()
    calls = 0

    def fail_second(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # after the first batch: the connection to the database goes away
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    with pytest.raises(psycopg.OperationalError):
        kb.ingest(docs, collection="port", sync=True, progress=fail_second, batch_size=1)
    names = {Path(d.source).name for d in kb.documents("port")}
    assert names == {"a.md", "b.md"}  # the removal comes last, after every write
    kb.ingest(docs, collection="port", sync=True)
    assert {Path(d.source).name for d in kb.documents("port")} == {"a.md"}
