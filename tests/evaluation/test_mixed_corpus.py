"""A folder of one's own documents read as a careful person reads it: sections, pages, no boilerplate."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from arcana_loop.evaluation.cases import MIXED_CORPUS, MIXED_QUESTIONS
from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres

BOILERPLATE = ("Home", "Teams", "Cookie settings", "Privacy", "©", "Related:", "analytics")
RUNNING_HEADER = "Capacity Report 2026"
HEADINGS = {
    "harbor-guide.md": {
        "Harbor Guide",
        "Harbor Guide > Berths",
        "Harbor Guide > Booking a berth",
        "Harbor Guide > Booking a berth > Cancelling",
        "Harbor Guide > Cranes",
    },
    "operations.rst": {
        "Operations",
        "Operations > Pilotage",
        "Operations > Tugs",
        "Operations > Waste reception",
    },
    "status.html": {"Port status", "Port status > Channel", "Port status > Closures"},
}


@pytest.fixture
def mixed(kb: KnowledgeBase, tmp_path: Path) -> list[dict[str, Any]]:
    result = kb.ingest(MIXED_CORPUS, collection="mine")
    assert result.documents_added == 4 and not result.skipped_files
    with kb.pool().connection() as conn:
        rows = conn.execute("SELECT text, metadata FROM kb_chunks ORDER BY id").fetchall()
    return [{"text": text, "metadata": meta} for text, meta in rows]


def _file(chunk: dict[str, Any]) -> str:
    return Path(chunk["metadata"]["source"]).name


def test_every_section_path_is_made_of_the_files_headings(mixed: list[dict[str, Any]]) -> None:
    for chunk in mixed:
        name, section = _file(chunk), chunk["metadata"].get("section")
        if name == "capacity.pdf":
            assert section is None  # a PDF has pages, not headings
            continue
        assert section in HEADINGS[name], (name, section, chunk["text"][:60])
    sections = {(_file(c), c["metadata"].get("section")) for c in mixed}
    # every section with text of its own has a chunk (the title-only ones fold into the next)
    assert ("harbor-guide.md", "Harbor Guide > Booking a berth > Cancelling") in sections
    assert ("operations.rst", "Operations > Waste reception") in sections


def test_code_blocks_and_tables_stay_whole_and_no_chunk_is_a_bare_fence(
    mixed: list[dict[str, Any]],
) -> None:
    texts = [c["text"] for c in mixed]
    for text in texts:
        assert text.count("```") % 2 == 0, text  # a fence never cut
        assert re.sub(r"[`~\s]", "", text), text  # never only fence marks
    shell = next(t for t in texts if "harbor-cli book" in t)
    assert "# configure the region" in shell and shell.count("```") == 2
    table = next(t for t in texts if "| B3" in t)
    assert all(f"| B{n}" in table for n in (1, 2, 3)) and "Depth (m)" in table
    waste = next(t for t in texts if "Oily water" in t)
    assert "Garbage" in waste and "Reception point" in waste
    assert any("harbor-cli tugs order" in t for t in texts)


def test_no_chunk_holds_page_furniture(mixed: list[dict[str, Any]]) -> None:
    for chunk in mixed:
        for word in BOILERPLATE:
            assert word not in chunk["text"], (word, chunk["text"][:80])
        assert RUNNING_HEADER not in chunk["text"]
        assert not re.search(r"^Page \d+$", chunk["text"], re.M)
    status = [c for c in mixed if _file(c) == "status.html"]
    assert {c["metadata"]["title"] for c in status} == {"Port status – Harbor Authority"}


def test_pdf_facts_carry_the_page_they_are_on(mixed: list[dict[str, Any]]) -> None:
    pdf = [c for c in mixed if _file(c) == "capacity.pdf"]
    for fact, page in (("412,000 TEU", 2), ("60,000 tonnes", 3), ("yearly handling", 1)):
        holding = [c for c in pdf if fact in c["text"]]
        assert holding, fact
        assert all(c["metadata"]["page"] <= page <= c["metadata"]["page_end"] for c in holding)
    assert all(c["metadata"]["page"] == c["metadata"]["page_end"] for c in pdf), [
        (c["metadata"]["page"], c["metadata"]["page_end"]) for c in pdf
    ]


def test_every_frozen_question_has_its_evidence_in_the_corpus(
    mixed: list[dict[str, Any]],
) -> None:
    questions = json.loads(MIXED_QUESTIONS.read_text())["questions"]
    assert len(questions) == 16 and len({q["id"] for q in questions}) == 16
    for q in questions:
        holding = [c for c in mixed if q["evidence"] in c["text"] and _file(c) == q["source"]]
        assert holding, q["id"]
        if "page" in q:
            assert holding[0]["metadata"]["page"] == q["page"], q["id"]
