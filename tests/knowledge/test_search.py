from __future__ import annotations

import inspect
import json
from dataclasses import replace
from typing import Any

import pytest

from arcana_loop import knowledge
from arcana_loop.knowledge import SEARCH_MODES, EmbeddingMismatch, KnowledgeBase
from tests.knowledge.corpus import QUESTIONS, TOPICS
from tests.knowledge.helpers import HashEmbeddings, ingest_topic, load_topics

pytestmark = pytest.mark.postgres


@pytest.fixture
def loaded(kb: KnowledgeBase) -> KnowledgeBase:
    load_topics(kb, collection="topics")
    ingest_topic(kb, "chess", collection="games", name="chess2", metadata={"topic": "chess"})
    return kb


def _topics(hits: list[knowledge.Chunk]) -> list[str]:
    return [h["metadata"]["topic"] for h in hits]


@pytest.mark.parametrize("mode", SEARCH_MODES)
@pytest.mark.parametrize("topic", list(QUESTIONS))
def test_each_mode_finds_the_relevant_topic(loaded: KnowledgeBase, mode: str, topic: str) -> None:
    hits = loaded.search(QUESTIONS[topic], mode=mode, limit=3)
    assert hits, f"{mode} found nothing for {topic}"
    assert _topics(hits)[0] == topic
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    json.dumps(hits)  # plain JSON
    assert set(hits[0]) == {
        "id",
        "text",
        "score",
        "collection",
        "document_id",
        "position",
        "metadata",
    }


def test_semantic_scores_are_cosine(loaded: KnowledgeBase) -> None:
    total = sum(c.chunks for c in loaded.collections())
    hits = loaded.search(QUESTIONS["tcp"], mode="semantic", limit=100, whole_sections=False)
    assert len(hits) == total  # semantic always ranks every chunk in scope
    assert all(-1.0 <= h["score"] <= 1.0 for h in hits)
    assert hits[0]["score"] > hits[-1]["score"]


def test_fulltext_falls_back_to_or_of_words(loaded: KnowledgeBase) -> None:
    hits = loaded.search("sourdough zzyzxqv", mode="fulltext")
    assert hits and all("sourdough" in h["text"].lower() for h in hits)
    assert loaded.search("zzyzxqv qqwwxx", mode="fulltext") == []


def test_fulltext_or_fallback_ranks_only_the_rarest_words(kb: KnowledgeBase) -> None:
    for i in range(30):
        kb.ingest(f"alpha note number {i} about the weather", collection="notes", name=f"n{i}")
    kb.ingest("zebra crossings stripe the road", collection="notes", name="zebra")
    with kb.pool().connection() as conn:
        conn.execute("ANALYZE kb_chunks")
    # no chunk has both words: every chunk holding either is scored
    kb.ranking = replace(kb.ranking, lexical_min_ratio=0.0)
    everything = kb.search("alpha zebra", mode="fulltext", limit=50)
    assert len(everything) == 31 and everything[0]["text"] == "zebra crossings stripe the road"
    # by default, rows far below the best (only the common word) are not candidates
    kb.ranking = replace(kb.ranking, lexical_min_ratio=0.3)
    assert [h["text"] for h in kb.search("alpha zebra", mode="fulltext", limit=50)] == [
        "zebra crossings stripe the road"
    ]
    kb.ranking = replace(kb.ranking, or_budget=1)  # room for one word: the rare one
    rare = kb.search("alpha zebra", mode="fulltext", limit=50)
    assert [h["text"] for h in rare] == ["zebra crossings stripe the road"]
    hybrid = kb.search("alpha zebra", mode="hybrid", limit=50)
    assert "zebra crossings stripe the road" in [h["text"] for h in hybrid]


def test_hybrid_excludes_chunks_matching_neither(loaded: KnowledgeBase) -> None:
    assert loaded.search("zzyzxqv qqwwxx blorptang", mode="hybrid") == []
    query = QUESTIONS["bread"]
    hybrid = loaded.search(query, mode="hybrid", limit=50)
    fulltext = {h["id"] for h in loaded.search(query, mode="fulltext", limit=100)}
    close = {
        h["id"]
        for h in loaded.search(query, mode="semantic", limit=100)
        if h["score"] >= loaded.ranking.hybrid_min_similarity
    }
    assert hybrid and {h["id"] for h in hybrid} <= fulltext | close
    assert len(hybrid) < loaded.collections()[1].chunks + 1  # not everything
    assert "volcanoes" not in _topics(hybrid)


def test_hybrid_ranks_by_fusion(loaded: KnowledgeBase) -> None:
    hits = loaded.search("checkmate king", mode="hybrid", limit=5)
    assert _topics(hits)[0] == "chess"
    r = loaded.ranking  # the best a chunk can score: first on both sides
    assert all(
        0 < h["score"] <= (r.semantic_weight + r.lexical_weight) / (r.rrf_k + 1) + 1e-9
        for h in hits
    )


def test_scoping(loaded: KnowledgeBase) -> None:
    query = "checkmate king"
    everywhere = loaded.search(query, limit=20, mode="fulltext")
    assert {h["collection"] for h in everywhere} == {"topics", "games"}
    assert loaded.search(query, collection="all", limit=20, mode="fulltext") == everywhere
    for mode in SEARCH_MODES:
        only = loaded.search(query, collection="games", limit=20, mode=mode)
        assert only and {h["collection"] for h in only} == {"games"}
        both = loaded.search(query, collection=["games", "topics"], limit=20, mode=mode)
        assert {h["collection"] for h in both} == {"topics", "games"}
        assert loaded.search(query, collection=[], mode=mode) == []
        assert loaded.search(query, collection="nope", mode=mode) == []
        mixed = loaded.search(query, collection=["nope", "games"], limit=20, mode=mode)
        assert {h["collection"] for h in mixed} == {"games"}


def test_empty_scope_never_touches_the_database(tmp_path: object) -> None:
    kb = KnowledgeBase("postgresql://nobody@/none?host=/nonexistent")
    assert kb.search("anything", collection=[]) == []


def test_filtered_hnsw_returns_limit_rows(loaded: KnowledgeBase) -> None:
    loaded.exact_max_rows = 0  # force the HNSW path with a collection filter
    loaded.merge_pending()  # every vector in the graph: the walk itself is under test
    hits = loaded.search(
        QUESTIONS["bread"],
        collection="games",
        mode="semantic",
        limit=3,
        ef_search=1,
        whole_sections=False,  # the chunks the walk found, not the sections they share
    )
    assert len(hits) == 3 and {h["collection"] for h in hits} == {"games"}
    exact = KnowledgeBase(loaded.url, schema=loaded.schema)
    try:
        want = exact.search(
            QUESTIONS["bread"], collection="games", mode="semantic", limit=3, whole_sections=False
        )
    finally:
        exact.close()
    assert [h["id"] for h in hits] == [h["id"] for h in want]


def test_threshold_and_limit(loaded: KnowledgeBase) -> None:
    hits = loaded.search(QUESTIONS["tcp"], mode="semantic", limit=10, threshold=0.5)
    assert all(h["score"] >= 0.5 for h in hits) and len(hits) < 10
    assert len(loaded.search(QUESTIONS["tcp"], mode="semantic", limit=2)) == 2
    with pytest.raises(ValueError, match="limit"):
        loaded.search("x", limit=0)
    with pytest.raises(ValueError, match="ef_search"):
        loaded.search("x", ef_search=0)


def test_bad_queries(loaded: KnowledgeBase) -> None:
    for blank in ("", "   ", "\n\t"):
        with pytest.raises(ValueError, match="blank"):
            loaded.search(blank)
    with pytest.raises(ValueError, match="semantic, fulltext, hybrid"):
        loaded.search("lava", mode="vector")
    with pytest.raises(TypeError):
        loaded.search("lava", bogus=1)  # type: ignore[call-arg]
    assert loaded.search(
        "lava", entities=True
    )  # accepted: no collection has entities, so the plain search


def test_long_query_is_truncated_not_fatal(loaded: KnowledgeBase) -> None:
    long = ("volcano lava eruption magma " * 5000) + "!!! :* & | <-> ( ' \\"
    # a reStructuredText table rule overflowed PostgreSQL's tsquery stack once
    rule = "========= ------- volcano lava -------- 'r' open --- -x " * 40
    for mode in SEARCH_MODES:
        hits = loaded.search(long, mode=mode)
        assert hits and _topics(hits)[0] == "volcanoes"
    # the rule's " -x" is an exclusion: full text then means exactly what it says
    assert isinstance(loaded.search(rule, mode="fulltext"), list)
    for mode in ("semantic", "hybrid"):
        hits = loaded.search(rule, mode=mode)
        assert hits and _topics(hits)[0] == "volcanoes"


@pytest.mark.parametrize(
    "evil",
    ["x' OR '1'='1", "topics'; DROP TABLE kb_chunks; --", "%s", "{t}", "games\x00"],
)
def test_injection_strings_match_nothing(loaded: KnowledgeBase, evil: str) -> None:
    for mode in SEARCH_MODES:
        if "\x00" in evil:
            continue
        assert loaded.search("chess king", collection=evil, mode=mode) == []
        assert loaded.search("chess king", collection=[evil], mode=mode) == []
        loaded.search(evil + " chess", mode=mode)  # as a query: just text
    assert {c.name for c in loaded.collections()} == {"topics", "games"}
    assert loaded.collections()[1].chunks > 0


def test_embedder_mismatch_on_search(loaded: KnowledgeBase) -> None:
    other = KnowledgeBase(loaded.url, embeddings=HashEmbeddings(), schema=loaded.schema)
    try:
        for mode in ("semantic", "hybrid"):
            with pytest.raises(EmbeddingMismatch, match="topics"):
                other.search("lava", collection="topics", mode=mode)
        # fulltext needs no embedder
        assert other.search("lava", collection="topics", mode="fulltext")
        # unrestricted semantic search skips collections of another embedder
        other.ingest(TOPICS["aqueducts"], collection="hashed", name="aq")
        hits = other.search("aqueduct water", mode="semantic", limit=50)
        assert hits and {h["collection"] for h in hits} == {"hashed"}
    finally:
        other.close()


async def test_asearch_matches_search(loaded: KnowledgeBase) -> None:
    for mode in SEARCH_MODES:
        sync = loaded.search(QUESTIONS["tcp"], collection=["topics"], mode=mode)
        got = await loaded.asearch(QUESTIONS["tcp"], collection=["topics"], mode=mode)
        assert [h["id"] for h in got] == [h["id"] for h in sync]
    assert await loaded.asearch("lava", collection=[]) == []
    with pytest.raises(ValueError):
        await loaded.asearch(" ")
    await loaded.aclose()


def test_asearch_takes_the_parameters_search_declares() -> None:
    assert inspect.signature(KnowledgeBase.asearch) == inspect.signature(KnowledgeBase.search)
    assert inspect.iscoroutinefunction(KnowledgeBase.asearch)


async def test_asearch_refuses_an_unknown_keyword_as_search_does(loaded: KnowledgeBase) -> None:
    with pytest.raises(TypeError, match="nosuch"):
        loaded.search("bread", nosuch=1)  # type: ignore[call-arg]  # the mistake under test
    with pytest.raises(TypeError, match="nosuch"):
        await loaded.asearch("bread", nosuch=1)  # type: ignore[call-arg]  # the mistake under test


async def test_module_level_api_fits_search_fn(
    loaded: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(knowledge, "_default", loaded)
    assert knowledge.default_knowledge_base() is loaded
    opts: dict[str, Any] = {"mode": "semantic"}
    hits = knowledge.search(QUESTIONS["bread"], collection="topics", limit=2, **opts)
    ahits = await knowledge.asearch(QUESTIONS["bread"], collection="topics", limit=2, **opts)
    assert [h["id"] for h in hits] == [h["id"] for h in ahits] and len(hits) == 2
    for fn in (knowledge.search, knowledge.asearch):
        params = inspect.signature(fn).parameters
        assert {"collection", "limit", "mode", "entities"} <= set(params)
    res = knowledge.ingest(TOPICS["volcanoes"], collection="mod", name="v")
    assert res.documents_added == 1
    again = await knowledge.aingest(TOPICS["volcanoes"], collection="mod", name="v")
    assert again.documents_skipped == 1
    await loaded.aclose()


def test_only_large_exact_scans_get_parallel_settings() -> None:
    from arcana_loop.knowledge import queries as q

    req = q.make_request(
        "x", collection=None, limit=5, mode="semantic", threshold=None, ef_search=None
    )
    assert req is not None
    big = q.PARALLEL_EXACT_MIN_ROWS
    assert q.scan_settings(req, exact=True, rows=big - 1) is None
    assert q.scan_settings(req, exact=True, rows=big) == q.exact_settings_statement()
    assert q.scan_settings(req, exact=False, rows=10) == q.settings_statement(req)


def test_the_candidate_list_is_the_default_or_the_chosen_one_at_any_scope() -> None:
    from arcana_loop.knowledge import queries as q

    def ef(req: q.SearchRequest | None, rows: int) -> str:
        assert req is not None
        return q.scan_settings(req, exact=False, rows=rows)[1]["ef"]  # type: ignore[index]

    default = q.make_request(
        "x", collection=None, limit=5, mode="semantic", threshold=None, ef_search=None
    )
    chosen = q.make_request(
        "x", collection=None, limit=5, mode="semantic", threshold=None, ef_search=120
    )
    assert ef(default, 10) == ef(default, 10**7) == str(q.DEFAULT_EF_SEARCH) == "300"
    assert ef(chosen, 10**7) == ef(chosen, 10) == "120"
