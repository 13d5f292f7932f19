"""A hit is read whole: its section, once per search, with the hit's span marked."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from arcana_loop.evaluation.retrieval import evaluate_retrieval
from arcana_loop.knowledge import KnowledgeBase, whole
from arcana_loop.knowledge.types import Chunk

# -- merging ranked chunks into sections (no database) -------------------------------


def _hit(chunk_id: str, text: str, position: int, start: int, *, doc: str = "d1") -> Chunk:
    return {
        "id": chunk_id,
        "text": text,
        "score": 1.0 / (position + 2),
        "document_id": doc,
        "position": position,
        "metadata": {"section": "Guide > Install", "start_index": start},
    }


def _section(*pieces: tuple[str, str, int, int]) -> whole.Section:
    return whole.Section(
        pieces=tuple(whole.Piece(i, t, p, s) for i, t, p, s in pieces), total=len(pieces)
    )


SIGNATURE = "field(*, default, default_factory)\n\nReturn an object to identify dataclass fields."
FACTORY = "default_factory is a 0-argument function called to initialize a field's value."
KEY = ("d1", "Guide > Install")


def test_a_hit_is_returned_with_the_rest_of_its_section_and_its_span_marked() -> None:
    hit = _hit("sig", SIGNATURE, 0, 0)
    sections = {KEY: _section(("sig", SIGNATURE, 0, 0), ("fac", FACTORY, 1, len(SIGNATURE) + 2))}
    [result] = whole.read_whole([hit], sections, limit=5, budget=2000)
    assert result["text"] == f"{SIGNATURE}\n\n{FACTORY}"
    meta = result["metadata"]
    assert result["text"][meta["hit_start"] : meta["hit_end"]] == SIGNATURE
    assert meta["section_chunks"] == ["sig", "fac"] and meta["section_complete"] is True
    assert (result["id"], result["score"], result["position"]) == ("sig", hit["score"], 0)
    assert meta["start_index"] == 0  # still the hit's own offset in its document


def test_hits_of_one_section_are_one_result_at_the_best_hits_rank() -> None:
    best, other = _hit("fac", FACTORY, 1, 100), _hit("sig", SIGNATURE, 0, 0)
    elsewhere = _hit("x", "Another document.", 0, 0, doc="d2")
    sections = {KEY: _section(("sig", SIGNATURE, 0, 0), ("fac", FACTORY, 1, 100))}
    results = whole.read_whole([best, elsewhere, other], sections, limit=5, budget=2000)
    assert [r["id"] for r in results] == ["fac", "x"]
    meta = results[0]["metadata"]
    assert meta["merged_hits"] == ["sig"]
    assert results[0]["text"][meta["hit_start"] : meta["hit_end"]] == FACTORY
    # the limit counts sections: a third section's hit is not returned
    assert len(whole.read_whole([best, elsewhere, other], sections, limit=1, budget=2000)) == 1


def test_a_long_section_keeps_its_hits_its_start_and_the_nearest_chunks_within_the_budget() -> None:
    pieces = [(f"c{n}", f"Paragraph {n}. " + "x" * 300, n, n * 400) for n in range(8)]
    hit = _hit("c5", pieces[5][1], 5, 2000)
    [result] = whole.read_whole([hit], {KEY: _section(*pieces)}, limit=5, budget=1300)
    meta = result["metadata"]
    assert meta["section_chunks"] == ["c0", "c4", "c5", "c6"]
    assert meta["section_complete"] is False
    assert result["text"].startswith("Paragraph 0.") and whole.GAP in result["text"]
    assert result["text"][meta["hit_start"] : meta["hit_end"]] == pieces[5][1]
    assert len(result["text"]) <= 1300


def test_a_hit_longer_than_the_budget_is_never_cut() -> None:
    text = "y" * 500
    [result] = whole.read_whole([_hit("big", text, 0, 0)], {}, limit=5, budget=100)
    assert result["text"] == text and result["metadata"]["section_complete"] is True


def test_overlapping_neighbours_are_joined_without_repeating_the_overlap() -> None:
    first, second = "alpha beta gamma delta", "gamma delta epsilon"
    start = first.index("gamma")
    sections = {KEY: _section(("a", first, 0, 0), ("b", second, 1, start))}
    [result] = whole.read_whole([_hit("b", second, 1, start)], sections, limit=5, budget=2000)
    assert result["text"] == "alpha beta gamma delta epsilon"
    meta = result["metadata"]
    assert result["text"][meta["hit_start"] : meta["hit_end"]] == second


def test_two_parts_of_a_section_apart_in_the_document_read_with_a_gap_between() -> None:
    # the same heading twice: the chunk between the parts is under another section
    first, second = "Install with pip.", "Install from source."
    sections = {KEY: _section(("a", first, 0, 0), ("b", second, 2, 40))}
    [result] = whole.read_whole([_hit("a", first, 0, 0)], sections, limit=5, budget=2000)
    assert result["text"] == f"{first}{whole.GAP}{second}"


def test_a_chunk_without_a_document_is_its_own_result() -> None:
    chunks: list[Chunk] = [
        {"id": "a", "text": "A", "score": 1.0},
        {"id": "b", "text": "B", "score": 0.5},
    ]
    assert [r["text"] for r in whole.read_whole(chunks, {}, limit=5, budget=100)] == ["A", "B"]


# -- the knowledge base -----------------------------------------------------------------

GUIDE = """# Packaging

## Build a wheel

Run the build frontend in the project folder to produce a wheel archive.

The wheel lands in the dist folder beside the source distribution.

Upload both archives to the package index with the upload tool.

## Sign a release

Sign each archive with a detached signature before uploading it.
"""


@pytest.fixture
def guide(kb: KnowledgeBase) -> KnowledgeBase:
    kb.ingest(GUIDE, collection="guide", name="guide.md", chunk_size=80, chunk_overlap=0)
    return kb


def _by_section(kb: KnowledgeBase, collection: str) -> dict[str, list[dict[str, Any]]]:
    with kb.pool().connection() as conn:
        rows = conn.execute(
            "SELECT c.id, c.text, c.metadata ->> 'section' FROM kb_chunks c"
            " JOIN kb_collections k ON k.id = c.collection_id WHERE k.name = %s ORDER BY c.position",
            (collection,),
        ).fetchall()
    out: dict[str, list[dict[str, Any]]] = {}
    for chunk_id, text, section in rows:
        out.setdefault(section, []).append({"id": chunk_id, "text": text})
    return out


pg = pytest.mark.postgres


@pg
def test_a_search_returns_the_whole_section_of_its_hit_once(guide: KnowledgeBase) -> None:
    stored = _by_section(guide, "guide")["Packaging > Build a wheel"]
    assert len(stored) >= 3  # the section is cut into several chunks
    hits = guide.search("upload archives package index", collection="guide", limit=5)
    sections = [h["metadata"]["section"] for h in hits]
    assert len(sections) == len(set(sections))  # each section once
    top = hits[0]
    assert top["metadata"]["section"] == "Packaging > Build a wheel"
    for chunk in stored:  # the sentences of the other chunks are in the result
        assert chunk["text"].split("\n")[-1] in top["text"]
    meta = top["metadata"]
    hit_text = next(c["text"] for c in stored if c["id"] == top["id"])
    assert top["text"][meta["hit_start"] : meta["hit_end"]] == hit_text
    assert meta["section_chunks"] == [c["id"] for c in stored]
    assert meta["section_complete"] is True
    assert "Sign each archive" not in top["text"]  # another section is not read


@pg
def test_whole_sections_off_returns_the_chunk_alone(guide: KnowledgeBase) -> None:
    hits = guide.search(
        "upload archives package index", collection="guide", limit=5, whole_sections=False
    )
    assert "Upload both archives" in hits[0]["text"]
    assert "Run the build frontend" not in hits[0]["text"]
    assert "hit_start" not in hits[0]["metadata"]


@pg
def test_async_search_reads_sections_as_the_sync_one(guide: KnowledgeBase) -> None:
    query = "wheel dist folder"
    sync = guide.search(query, collection="guide", section_chars=120)
    assert asyncio.run(guide.asearch(query, collection="guide", section_chars=120)) == sync
    assert all(len(h["text"]) <= 120 or h["metadata"]["merged_hits"] for h in sync)


@pg
def test_a_filter_bounds_what_a_section_reads(guide: KnowledgeBase) -> None:
    stored = _by_section(guide, "guide")["Packaging > Build a wheel"]
    with guide.pool().connection() as conn:
        starts = dict(
            conn.execute(
                "SELECT id, (metadata ->> 'start_index')::int FROM kb_chunks WHERE id = ANY(%s)",
                ([c["id"] for c in stored],),
            ).fetchall()
        )
    last = stored[-1]
    hits = guide.search(
        "wheel archive",
        collection="guide",
        filter={"start_index": {"$lt": starts[last["id"]]}},
    )
    assert hits and all(last["text"] not in h["text"] for h in hits)


@pg
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"section_chars": 0}, ValueError),
        ({"section_chars": whole.MAX_SECTION_CHARS + 1}, ValueError),
        ({"section_chars": True}, ValueError),
        ({"whole_sections": "yes"}, TypeError),
    ],
)
def test_bad_section_options_are_refused_before_anything_runs(
    guide: KnowledgeBase, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error, match="section_chars|whole_sections"):
        guide.search("wheel", collection="guide", **options)


@pg
def test_the_evaluation_counts_evidence_anywhere_in_a_returned_section(
    guide: KnowledgeBase,
) -> None:
    case = {
        "id": "c1",
        "question": "How do I run the build frontend to produce a wheel archive?",
        "evidence": ["Upload both archives to the package index with the upload tool."],
    }

    scores = {}
    for whole_on in (False, True):
        search = functools.partial(guide.search, whole_sections=whole_on)
        report = evaluate_retrieval([case], search, collection="guide", modes=("hybrid",), k=(1,))
        scores[whole_on] = report["modes"]["hybrid"]["summary"]["hit@1"]
    assert scores == {False: 0.0, True: 1.0}


@pg
def test_a_chunk_found_outside_the_text_ranking_has_its_section_read(guide: KnowledgeBase) -> None:
    """Chunks the knowledge graph alone found get their sections from a statement of their own."""
    from arcana_loop.knowledge import queries as q

    stored = _by_section(guide, "guide")["Packaging > Build a wheel"]
    req = q.make_request(
        "wheel",
        collection="guide",
        limit=5,
        mode="hybrid",
        threshold=None,
        ef_search=None,
        whole_sections=True,
    )
    assert req is not None
    with guide.pool().connection() as conn:
        rows = conn.execute(*q.sections_statement(req, [stored[1]["id"]])).fetchall()
    [(key, section)] = q.sections_of(rows).items()
    assert key[1] == "Packaging > Build a wheel"
    assert [p.id for p in section.pieces] == [c["id"] for c in stored]
    assert section.total == len(stored)
