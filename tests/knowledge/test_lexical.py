"""The lexical side: code-aware terms, BM25 in PostgreSQL, exact document frequencies, operators."""

from __future__ import annotations

from typing import Any

import pytest

from arcana_loop.knowledge import KnowledgeBase, lexical
from arcana_loop.knowledge.sections import context_line, document_title

pytestmark = pytest.mark.postgres


def test_terms_keep_identifiers_whole_and_split_them():
    assert lexical.terms("asyncio.wait_for(aw, timeout)") == [
        "asyncio.wait_for",
        "asyncio",
        "wait_for",
        "wait",
        "aw",
        "timeout",
    ]
    assert lexical.terms("ThreadPoolExecutor") == [
        "threadpoolexecutor",
        "thread",
        "pool",
        "executor",
    ]
    # stop words and question filler go; stems meet their inflections
    assert lexical.terms("How do I use the timeouts?") == lexical.terms("timeout")


def test_operators_are_quoted_phrases_and_exclusions_only():
    assert lexical.has_operators('a "quoted phrase"') and lexical.has_operators("python -snake")
    assert not any(
        lexical.has_operators(q) for q in ("C++ threads", "x - y", "well-known", '"', "-5 degrees")
    )


def test_titles_and_context_lines():
    assert document_title("pydoc:asyncio.tasks", {}) == "asyncio.tasks"
    assert document_title("docs/deploy-guide.md", {}) == "deploy-guide"
    assert document_title("x", {"title": "The Title"}) == "The Title"
    assert context_line("guide", "guide > Install") == "guide > Install"


def _df(kb: KnowledgeBase) -> dict[int, int]:
    with kb.pool().connection() as conn:
        return dict(
            conn.execute(
                "SELECT key, sum(df)::int FROM kb_lex_terms WHERE df > 0 GROUP BY key"
            ).fetchall()
        )


def _chunks(kb: KnowledgeBase) -> int:
    with kb.pool().connection() as conn:
        row = conn.execute("SELECT coalesce(sum(chunks), 0) FROM kb_lex_stats").fetchone()
    assert row is not None
    return int(row[0])


def test_document_frequencies_follow_inserts_replacements_and_deletes(kb: KnowledgeBase):
    kb.ingest("zebra crossings stripe the road", collection="a", name="zebra")
    kb.ingest("a zebra grazes", collection="b", name="grazing")
    assert _df(kb)[lexical.key("zebra")] == 2 and _chunks(kb) == 2
    kb.ingest("a horse grazes", collection="b", name="grazing")  # replaced
    assert _df(kb)[lexical.key("zebra")] == 1 and _df(kb)[lexical.key("hors")] == 1
    kb.delete_collection("a")
    assert lexical.key("zebra") not in _df(kb) and _chunks(kb) == 1


def test_chunks_stored_before_the_lexical_index_are_backfilled(kb: KnowledgeBase, pg_url: str):
    kb.ingest("The sourdough starter needs flour and water.", collection="bread", name="starter")
    before = _df(kb)
    with kb.pool().connection() as conn:
        conn.execute("UPDATE kb_chunks SET lex = NULL, lex_keys = NULL")
    assert _df(kb) == {} and kb.search("sourdough", mode="fulltext") == []
    kb.close()
    reopened = KnowledgeBase(pg_url, embeddings=kb.embeddings, schema=kb.schema)
    try:
        assert [h["text"] for h in reopened.search("sourdough", mode="fulltext")] == [
            "The sourdough starter needs flour and water."
        ]
        assert _df(reopened) == before
    finally:
        reopened.close()


def test_bm25_ranks_by_rare_terms_and_term_frequency(kb: KnowledgeBase):
    for i in range(20):
        kb.ingest(f"note {i}: the function returns a value", collection="c", name=f"n{i}")
    kb.ingest(
        "heapq.merge merges sorted inputs; the function returns an iterator",
        collection="c",
        name="merge",
    )
    kb.ingest("merge merge merge: merging things, merged", collection="c", name="spam")
    hits = kb.search("which function merges sorted inputs", mode="fulltext", limit=3)
    assert hits[0]["metadata"]["source"] == "merge"
    assert hits[0]["score"] > hits[1]["score"] > 0


def test_a_chunk_is_found_by_its_document_title_and_section(kb: KnowledgeBase):
    doc = "# Deployment\n\n## Rollback\n\n" + "Run the previous release again. " * 3
    kb.ingest(doc, collection="ops", name="runbook.md")
    kb.ingest("Rolling forward is preferred over rolling back.", collection="ops", name="notes")
    hits = kb.search("rollback runbook", mode="fulltext")
    assert hits[0]["metadata"]["source"] == "runbook.md"
    assert hits[0]["metadata"]["section"] == "Deployment > Rollback"
    assert "runbook" not in hits[0]["text"]  # the context is searched, not shown


@pytest.mark.parametrize("mode", ["fulltext", "hybrid"])
@pytest.mark.parametrize("ranking", ["bm25", "ts_rank"])
def test_operators_never_fall_back_to_any_word(kb: KnowledgeBase, mode: str, ranking: str):
    from dataclasses import replace

    kb.ranking = replace(kb.ranking, lexical=ranking)
    kb.ingest("python snake facts: pythons are constrictors", collection="z", name="snake")
    kb.ingest("python programming facts: python runs scripts", collection="z", name="code")
    fulltext = {h["metadata"]["source"] for h in kb.search("python -snake", mode="fulltext")}
    assert fulltext == {"code"}
    assert kb.search('"constrictor programming"', mode="fulltext") == []
    if mode == "hybrid":  # the semantic side may still find things; the lexical side adds none
        hits: list[Any] = kb.search('"zzqx nowhere phrase"', mode="hybrid")
        assert all(
            h["score"] <= kb.ranking.semantic_weight / (kb.ranking.rrf_k + 1) + 1e-9 for h in hits
        )
