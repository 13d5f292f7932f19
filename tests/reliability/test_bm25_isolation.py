"""BM25 statistics stay inside the scope searched: one collection's words never move another's scores."""

from __future__ import annotations

import pytest

from arcana_loop.knowledge import KnowledgeBase

pytestmark = [pytest.mark.postgres, pytest.mark.reliability]

A_TEXTS = {
    "falcon": "The falcon dives at great speed to catch its prey.",
    "sparrow": "A sparrow eats seeds and small insects in the garden.",
    "heron": "The heron waits in shallow water for fish.",
}


def _scores(kb: KnowledgeBase, query: str) -> dict[str, float]:
    hits = kb.search(query, collection="A", mode="fulltext", limit=10)
    return {h["metadata"]["source"]: h["score"] for h in hits}


def test_a_word_stored_only_in_b_never_changes_scores_under_a_lock_to_a(kb: KnowledgeBase):
    for name, text in A_TEXTS.items():
        kb.ingest(text, collection="A", name=name)
    before = _scores(kb, "falcon prey speed")
    assert before, "the query must match collection A"
    for i in range(5):
        kb.ingest(f"falcon note {i}: the falcon is a bird", collection="B", name=f"b{i}")
    assert _scores(kb, "falcon prey speed") == before


def test_a_scope_of_two_collections_scores_as_one_collection_holding_both(kb: KnowledgeBase):
    # each collection normalises lengths by its first chunk's; the falcon's and the
    # kestrel's have 7 terms each, so all three collections share one normalisation
    texts = {**A_TEXTS, "kestrel": "A kestrel hovers high before it dives on a small vole."}
    for name, text in texts.items():
        kb.ingest(text, collection="union", name=name)
    union = {
        h["metadata"]["source"]: h["score"]
        for h in kb.search("dives prey", collection="union", mode="fulltext", limit=10)
    }
    for name, text in A_TEXTS.items():
        kb.ingest(text, collection="left", name=name)
    kb.ingest(texts["kestrel"], collection="right", name="kestrel")
    split = {
        h["metadata"]["source"]: h["score"]
        for h in kb.search("dives prey", collection=["left", "right"], mode="fulltext", limit=10)
    }
    assert split.keys() == union.keys() and len(split) >= 2
    assert all(split[k] == pytest.approx(union[k], rel=1e-9) for k in union)


def test_deleting_a_document_takes_its_terms_out_of_the_statistics(kb: KnowledgeBase):
    for name, text in A_TEXTS.items():
        kb.ingest(text, collection="A", name=name)
    before = _scores(kb, "falcon prey speed")
    kb.ingest("falcon falcon falcon", collection="A", name="extra")
    with_extra = {k: v for k, v in _scores(kb, "falcon prey speed").items() if k in before}
    assert with_extra != before  # the extra document's falcon lowers the word's IDF
    assert kb.delete_document(source="extra", collection="A") == 1
    assert _scores(kb, "falcon prey speed") == before
