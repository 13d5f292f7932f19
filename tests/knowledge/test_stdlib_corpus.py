"""The demo corpus: complete, and every chunk under the member it documents.

Most checks split the corpus as ingest does, without embedding or a database,
so they cover every chunk in a few seconds; one test ingests a few modules.
"""

from __future__ import annotations

import re
from functools import lru_cache

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    ChunkRow,
    langchain_documents,
    split_document,
)
from arcana_loop.knowledge.stdlib_docs import (
    COLLECTION,
    Section,
    ensure_python_docs,
    module_sections,
    stdlib_documents,
    stdlib_sections,
)
from arcana_loop.knowledge.writer import check_metadata

QUALIFIED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
ONCE_DROPPED = (
    "asyncio.run",
    "os.path.abspath",
    "os.cpu_count",
    "pickle.dump",
    "sqlite3.connect",
    "functools.cmp_to_key",
    "operator.getitem",
    "hashlib.sha384",
)
"""Members implemented in C or in a submodule, which the corpus once left out."""


@lru_cache(maxsize=1)
def _chunks() -> tuple[tuple[Section, ChunkRow], ...]:
    """Every chunk of the corpus with the section it was cut from, split as ingest splits."""
    out = []
    for _, sections in stdlib_sections():
        docs = langchain_documents(
            [s.document() for s in sections], name=None, metadata={}, check_metadata=check_metadata
        )
        for section, doc in zip(sections, docs, strict=True):
            rows = split_document(
                doc,
                collection=COLLECTION,
                chunk_size=DEFAULT_CHUNK_SIZE,
                chunk_overlap=DEFAULT_CHUNK_OVERLAP,
            )
            out.extend((section, row) for row in rows)
    return tuple(out)


def test_every_section_path_is_the_qualified_name_of_what_the_chunk_holds():
    for section, row in _chunks():
        path = row.metadata["section"]
        # a dotted name only: no sentence, no code, no lone bracket, no underline rule
        assert QUALIFIED_NAME.fullmatch(path), (section.source, path)
        assert path == section.name and row.context == f"{section.module} > {path}".removesuffix(
            f" > {section.module}"
        ), (section.source, row.context)
        assert row.text in section.text, section.source  # no chunk spans two members


def test_the_once_dropped_members_each_have_a_chunk_titled_by_their_name():
    first_chunks = {s.name: row for s, row in _chunks() if row.position == 0}
    for name in ONCE_DROPPED:
        assert name in first_chunks, name
        assert first_chunks[name].text.startswith(name), first_chunks[name].text[:80]


def test_a_member_is_titled_by_its_signature_where_it_has_one():
    first_chunks = {s.name: row.text for s, row in _chunks() if row.position == 0}
    assert first_chunks["asyncio.run"].startswith("asyncio.run(main, *, debug=None)\n\n")
    assert first_chunks["operator.getitem"].startswith("operator.getitem(a, b, /)\n\n")
    assert first_chunks["functools.cmp_to_key"].startswith("functools.cmp_to_key\n\n")  # none
    assert first_chunks["collections.OrderedDict.move_to_end"].startswith(
        "collections.OrderedDict.move_to_end(self, /, key, last=True)\n\n"
    )


def test_members_sharing_a_module_are_never_in_one_chunk():
    # time.perf_counter's text once sat in a chunk titled time.mktime
    (row,) = [r for _, r in _chunks() if "Performance counter for benchmarking." in r.text]
    assert row.metadata["section"] == "time.perf_counter"
    assert "mktime" not in row.text


def test_an_object_is_documented_once_under_the_first_module_listing_it():
    names = [s.name for _, sections in stdlib_sections() for s in sections]
    assert len(names) == len(set(names))
    assert "asyncio.wait_for" in names and "asyncio.tasks.wait_for" not in names


def test_a_module_without_all_keeps_its_accelerator_and_submodule_members():
    import sqlite3

    names = {s.name for s in module_sections("sqlite3", sqlite3)}
    assert {"sqlite3.connect", "sqlite3.Connection", "sqlite3.register_adapter"} <= names
    assert "sqlite3.Date" not in names  # datetime.date, imported, not sqlite3's


def test_the_per_module_view_holds_every_section_text():
    texts = {source: text for source, text, _ in stdlib_documents()}
    for section, _ in _chunks()[:500]:
        assert section.text in texts[f"pydoc:{section.module}"]


def test_a_section_given_in_metadata_places_the_chunk_and_no_line_is_a_heading(kb: KnowledgeBase):
    text = "Usage:\n------\nSome text.\n\nother.name\n\nMore text."
    kb.ingest(text, collection="given", metadata={"title": "mod", "section": "mod.func"})
    # "func" is only in the given section: the chunk is searched under it, not under "Usage:"
    (hit,) = kb.search("func", collection="given", mode="fulltext")
    assert hit["metadata"]["section"] == "mod.func" and hit["text"] == text


def test_the_demo_corpus_ingests_with_its_sections(kb: KnowledgeBase, monkeypatch):
    import arcana_loop.knowledge.stdlib_docs as stdlib_docs

    monkeypatch.setattr(stdlib_docs, "MODULES", ["heapq", "pickle"])
    result = ensure_python_docs(kb)
    assert result is not None and result.documents_added > 10
    (hit, *_) = kb.search("pickle.dump", collection=COLLECTION, mode="fulltext")
    assert hit["metadata"]["section"] == "pickle.dump"
    assert hit["metadata"]["source"] == "pydoc:pickle#dump"
    assert ensure_python_docs(kb) is None  # already there


def test_a_docstring_is_documented_once():
    sections = [s for _, module in stdlib_sections() for s in module]
    names = {s.name for s in sections}
    # random.randint is a bound method of a hidden Random: one function, one section
    assert "random.randint" in names and "random.Random.randint" not in names
    # exceptions without a docstring once all read as their base's
    inherited = "Common base class for all non-exit exceptions."
    assert [s.name for s in sections if inherited in s.text] == ["builtins.Exception"]
    assert "Bases: socketserver.ThreadingMixIn, http.server.HTTPServer" in next(
        s.text for s in sections if s.name == "http.server.ThreadingHTTPServer"
    )
