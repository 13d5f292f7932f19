"""The knowledge graph: extraction, storage consistency, traversal, fusion, scoping, fallbacks, communities."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.runnables import RunnableLambda

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.entities import (
    ChunkText,
    EntityBuildError,
    EntitySearchOptions,
    Extraction,
    OfflineExtractor,
    normalize_name,
)
from arcana_loop.knowledge.entities import communities as comm
from arcana_loop.knowledge.entities import search as es
from arcana_loop.knowledge.entities.llm import ExtractionReply, LLMExtractor
from arcana_loop.knowledge.entities.offline import extract_chunk
from arcana_loop.knowledge.types import Chunk
from tests.knowledge.helpers import HashEmbeddings

pytestmark = pytest.mark.postgres

CHAIN = {
    "d1": "AlphaNode works with BetaNode in the first stage.",
    "d2": "BetaNode works with GammaNode in the second stage.",
    "d3": "GammaNode works with DeltaNode in the third stage.",
    "d4": "Bread dough rises when the yeast releases carbon dioxide.",
}


@pytest.fixture
def hkb(kb: KnowledgeBase) -> Iterator[KnowledgeBase]:
    """A knowledge base on the same (emptied) schema with the deterministic hashing embedder."""
    base = KnowledgeBase(
        kb.url,
        embeddings=HashEmbeddings(),
        schema=kb.schema,
        entity_options=EntitySearchOptions(entity_limit=1, entity_threshold=0.3),
    )
    yield base
    base.close()


def _load_chain(kb: KnowledgeBase, collection: str = "chain", entities: bool = True) -> None:
    for name, text in CHAIN.items():
        kb.ingest(text, collection=collection, name=name, entities=entities)


def _query(kb: KnowledgeBase, sql_text: str, *params: Any) -> list[tuple[Any, ...]]:
    with kb.pool().connection() as conn:
        return conn.execute(sql_text, params).fetchall()


def _assert_consistent(kb: KnowledgeBase) -> None:
    """No entity without a mention, no mention or relationship outside its entity's collection."""
    assert (
        _query(
            kb,
            "SELECT e.name FROM kb_graph_entities e WHERE NOT EXISTS"
            " (SELECT 1 FROM kb_graph_mentions m WHERE m.entity_id = e.id)",
        )
        == []
    )
    assert (
        _query(
            kb,
            "SELECT m.chunk_id FROM kb_graph_mentions m JOIN kb_graph_entities e ON e.id = m.entity_id"
            " JOIN kb_chunks c ON c.id = m.chunk_id WHERE c.collection_id <> e.collection_id",
        )
        == []
    )
    assert (
        _query(
            kb,
            "SELECT r.chunk_id FROM kb_graph_relationships r"
            " JOIN kb_graph_entities s ON s.id = r.source_id"
            " JOIN kb_graph_entities t ON t.id = r.target_id"
            " WHERE s.collection_id <> r.collection_id OR t.collection_id <> r.collection_id",
        )
        == []
    )


def _entities(kb: KnowledgeBase, collection: str) -> set[str]:
    rows = _query(
        kb,
        "SELECT e.norm_name FROM kb_graph_entities e JOIN kb_collections k ON k.id = e.collection_id"
        " WHERE k.name = %s",
        collection,
    )
    return {r[0] for r in rows}


# -- offline extraction ----------------------------------------------------------


def test_offline_extractor_finds_code_names_classes_calls_and_terms() -> None:
    text = (
        "The Transmission Control Protocol is slow. Call asyncio.wait_for() or gather() "
        "with a ThreadPoolExecutor; HTTPServer sets max_workers, e.g. to four. "
        "ThreadPoolExecutor again."
    )
    ext = extract_chunk(ChunkText("c1", text))
    found = {e.name: e for e in ext.entities}
    assert set(found) == {
        "Transmission Control Protocol",
        "asyncio.wait_for",
        "gather",
        "ThreadPoolExecutor",
        "HTTPServer",
        "max_workers",
    }
    assert found["asyncio.wait_for"].type == "function"
    assert found["ThreadPoolExecutor"].type == "class"
    assert found["Transmission Control Protocol"].type == "term"
    for ent in ext.entities:
        for start, end in ent.spans:
            assert normalize_name(text[start:end]) == normalize_name(ent.name)
    assert len(found["ThreadPoolExecutor"].spans) == 2
    strengths = {(r.source, r.target): r.strength for r in ext.relationships}
    assert len(strengths) == 6 * 5 // 2  # every pair once
    assert strengths[("ThreadPoolExecutor", "Transmission Control Protocol")] == 1.0
    assert all(r.type == "co_occurs" for r in ext.relationships)
    assert found["gather"].description.startswith("Call asyncio.wait_for()")


def test_offline_extractor_ignores_plain_prose_and_abbreviations() -> None:
    ext = extract_chunk(ChunkText("c", "This is plain prose, i.e. nothing named. The end."))
    assert ext.entities == () and ext.relationships == ()
    strong = extract_chunk(ChunkText("c", "SomeClass and SomeClass and OtherClass, OtherClass."))
    assert [r.strength for r in strong.relationships] == [2.0]


def test_normalize_name() -> None:
    assert normalize_name("  Wait_For ()") == "wait_for"
    assert normalize_name("Mount   Fuji") == "mount fuji"


# -- LLM extraction --------------------------------------------------------------


class ScriptedStructuredModel:
    """A chat model stand-in whose `with_structured_output` replays scripted replies.

    A dict is validated against the schema (as LangChain's parsers do), an exception
    is raised, anything else is returned as it is.
    """

    model_name = "scripted-extractor"

    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies
        self.prompts: list[str] = []
        self.configs: list[Any] = []

    def with_structured_output(self, schema: type[ExtractionReply]) -> Any:
        def reply(prompt: str) -> Any:
            self.prompts.append(prompt)
            key = next(k for k in self.replies if k in prompt)
            value = self.replies[key]
            if isinstance(value, BaseException):
                raise value
            return schema.model_validate(value) if isinstance(value, dict) else value

        runnable = RunnableLambda(reply)
        original = runnable.batch

        def batch(inputs: list[Any], config: Any = None, **kwargs: Any) -> Any:
            self.configs.append(config)
            return original(inputs, config, **kwargs)

        runnable.batch = batch  # type: ignore[method-assign]
        return runnable


GOOD = {
    "entities": [
        {"name": "asyncio.wait_for", "type": "function", "description": "Waits with a timeout."},
        {"name": "TimeoutError", "type": "class", "description": "Raised on timeout."},
    ],
    "relationships": [
        {"source": "asyncio.wait_for", "target": "TimeoutError", "type": "raises", "strength": 8},
        {"source": "asyncio.wait_for", "target": "Nowhere", "type": "uses"},
    ],
}


def test_llm_extractor_parses_batches_and_skips_malformed_replies() -> None:
    model = ScriptedStructuredModel(
        {
            "first": GOOD,
            "second": {"entities": [{"name": ""}]},  # fails validation
            "third": OutputParserException("not JSON"),
            "fourth": "plain text instead of a structure",
        }
    )
    extractor = LLMExtractor(model, batch_size=3, max_concurrency=2)  # type: ignore[arg-type]
    chunks = [
        ChunkText("a", "first: asyncio.wait_for raises TimeoutError"),
        ChunkText("b", "second"),
        ChunkText("c", "third"),
        ChunkText("d", "fourth"),
    ]
    out = extractor.extract(chunks)
    assert [e.chunk_id for e in out] == ["a", "b", "c", "d"]
    assert [e.skipped is None for e in out] == [True, False, False, False]
    assert "validation" in (out[1].skipped or "")
    assert "not JSON" in (out[2].skipped or "")
    assert "malformed" in (out[3].skipped or "")
    first = out[0]
    assert [e.name for e in first.entities] == ["asyncio.wait_for", "TimeoutError"]
    assert first.entities[0].spans == ((7, 23),)
    assert [(r.source, r.target, r.type, r.strength) for r in first.relationships] == [
        ("asyncio.wait_for", "TimeoutError", "raises", 8.0)
    ]  # the relationship to an unknown entity is dropped
    assert [c["max_concurrency"] for c in model.configs] == [2, 2]  # two batches: 3 + 1
    assert extractor.name == "llm:scripted-extractor"


def test_llm_extractor_rejects_bad_settings() -> None:
    model = ScriptedStructuredModel({})
    with pytest.raises(ValueError, match="batch_size"):
        LLMExtractor(model, batch_size=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="text"):
        LLMExtractor(model, prompt="no slot")  # type: ignore[arg-type]


def test_llm_entity_build_writes_nothing_for_a_skipped_chunk(hkb: KnowledgeBase) -> None:
    hkb.ingest("first: asyncio.wait_for raises TimeoutError", collection="llm", name="good")
    hkb.ingest("second chunk about nothing", collection="llm", name="bad")
    model = ScriptedStructuredModel({"first": GOOD, "second": {"entities": "garbage"}})
    result = hkb.build_entities("llm", LLMExtractor(model))  # type: ignore[arg-type]
    assert result.chunks_processed == 2 and result.chunks_skipped == 1
    assert _entities(hkb, "llm") == {"asyncio.wait_for", "timeouterror"}
    assert _query(hkb, "SELECT type, strength FROM kb_graph_relationships") == [("raises", 8.0)]
    # the skipped chunk stays pending: the next build retries only it
    model.replies["second"] = {"entities": [{"name": "chunk"}]}
    again = hkb.build_entities("llm", LLMExtractor(model))  # type: ignore[arg-type]
    assert again.chunks_processed == 1 and again.chunks_skipped == 0
    assert _entities(hkb, "llm") == {"asyncio.wait_for", "timeouterror", "chunk"}
    _assert_consistent(hkb)


# -- storage consistency ---------------------------------------------------------


def test_reingest_and_delete_keep_the_entities_consistent(hkb: KnowledgeBase) -> None:
    hkb.ingest("OldWidget talks to SharedThing.", collection="c", name="doc", entities=True)
    hkb.ingest("SharedThing is used by OtherDoc.", collection="c", name="other", entities=True)
    assert _entities(hkb, "c") == {"oldwidget", "sharedthing", "otherdoc"}
    # entities=None: the collection has entities, so the replacement is extracted too
    hkb.ingest("NewWidget talks to SharedThing.", collection="c", name="doc")
    assert _entities(hkb, "c") == {"newwidget", "sharedthing", "otherdoc"}
    _assert_consistent(hkb)
    # explicitly without entities: what the old version said still goes away
    hkb.ingest("Nothing named here at all.", collection="c", name="doc", entities=False)
    assert _entities(hkb, "c") == {"sharedthing", "otherdoc"}
    hkb.delete_document(source="other", collection="c")
    assert _entities(hkb, "c") == set()
    assert _query(hkb, "SELECT count(*) FROM kb_graph_relationships") == [(0,)]
    _assert_consistent(hkb)
    hkb.delete_collection("c")
    assert _query(hkb, "SELECT count(*) FROM kb_graph_collections") == [(0,)]


def test_failing_extractor_leaves_chunks_stored_and_entities_pending(hkb: KnowledgeBase) -> None:
    class Boom:
        name = "boom"

        def extract(self, chunks: Any) -> list[Extraction]:
            raise RuntimeError("extractor down")

    with pytest.raises(EntityBuildError, match="extractor down"):
        hkb.ingest(
            "AlphaNode and BetaNode.",
            collection="f",
            name="x",
            entities=True,
            entity_extractor=Boom(),
        )
    assert [c.chunks for c in hkb.collections() if c.name == "f"] == [1]
    assert _query(hkb, "SELECT count(*) FROM kb_graph_entities") == [(0,)]
    result = hkb.build_entities("f")
    assert result.chunks_processed == 1 and result.entities == 2

    class Liar:
        name = "liar"

        def extract(self, chunks: Any) -> list[Extraction]:
            return []

    with pytest.raises(EntityBuildError, match="one Extraction per chunk"):
        hkb.build_entities("f", Liar(), rebuild=True)
    assert _entities(hkb, "f") == {"alphanode", "betanode"}  # untouched by the failed rebuild
    with pytest.raises(TypeError, match="entity_extractor"):
        hkb.build_entities("f", object())


# -- traversal -------------------------------------------------------------------


def test_expand_step_decays_per_hop_and_respects_fanout() -> None:
    edges = [(1, 2, 4.0), (1, 3, 2.0), (2, 4, 1.0)]
    weights, frontier = es.expand_step({1: 1.0}, [1], edges, decay=0.5, fanout=10)
    assert weights == {1: 1.0, 2: 0.5, 3: 0.25} and frontier == [2, 3]
    weights, frontier = es.expand_step(weights, frontier, edges, decay=0.5, fanout=10)
    # node 2 passes 0.5 * 0.5 * (1 / 4): its strongest edge (back to 1) sets the scale
    assert weights[4] == pytest.approx(0.0625) and weights[1] == 1.0  # a seed keeps its weight
    narrow, _ = es.expand_step({1: 1.0}, [1], edges, decay=0.5, fanout=1)
    assert narrow == {1: 1.0, 2: 0.5}


@pytest.mark.parametrize(
    ("depth", "expected"), [(0, {"d1"}), (1, {"d1", "d2"}), (2, {"d1", "d2", "d3"})]
)
def test_entity_depth_reaches_further_chunks(
    hkb: KnowledgeBase, depth: int, expected: set[str]
) -> None:
    _load_chain(hkb)
    hits = hkb.search("AlphaNode", collection="chain", entity_depth=depth, limit=10)
    by_entities = {h["metadata"]["source"] for h in hits if h["metadata"]["entity_enhanced"]}
    assert by_entities == expected
    assert {
        h["metadata"]["source"] for h in hkb.search("AlphaNode", collection="chain", entities=False)
    } == {"d1"}
    assert all(h["metadata"]["matched_entities"] == 1 for h in hits)


async def test_async_search_matches_sync(hkb: KnowledgeBase) -> None:
    _load_chain(hkb)
    for mode in ("hybrid", "fulltext"):
        sync = hkb.search("AlphaNode", collection="chain", entity_depth=2, limit=10, mode=mode)
        asynced = await hkb.asearch(
            "AlphaNode", collection="chain", entity_depth=2, limit=10, mode=mode
        )
        assert len([c for c in sync if c["metadata"]["entity_enhanced"]]) == 3
        assert [(c["id"], round(c["score"], 9), c["metadata"]) for c in asynced] == [
            (c["id"], round(c["score"], 9), c["metadata"]) for c in sync
        ]
    await hkb.aclose()


# -- fusion ----------------------------------------------------------------------


def _chunk(chunk_id: str) -> Chunk:
    return Chunk(
        id=chunk_id,
        text=chunk_id,
        score=0.0,
        collection="c",
        document_id="d",
        position=0,
        metadata={},
    )


def test_fusion_orders_by_reciprocal_rank_and_marks_paths() -> None:
    text = [_chunk("t1"), _chunk("both"), _chunk("t3")]
    plan = es.EntityPlan(seeds={7: 0.9}, names={7: "Seven", 8: "Eight"})
    plan.ranked = [("g1", 2.0, [7]), ("both", 1.0, [8, 7]), ("gone", 0.5, [7])]
    out = es.fuse(text, plan, {"g1": _chunk("g1")}, limit=4, entity_weight=1.0)
    # both: 1/62 + 1/62; t1 and g1 tie at 1/61 (broken by id); "gone" has no row
    assert [c["id"] for c in out] == ["both", "g1", "t1", "t3"]
    assert out[0]["score"] == pytest.approx(2 / 62)
    assert out[0]["metadata"]["found_by"] == ["text", "entities"]
    assert out[0]["metadata"]["entity_names"] == ["Eight", "Seven"]
    assert out[1]["metadata"]["found_by"] == ["entities"] and out[1]["metadata"]["entity_enhanced"]
    assert out[2]["metadata"] == {
        "entity_enhanced": False,
        "entity_names": [],
        "matched_entities": 1,
        "found_by": ["text"],
    }
    light = es.fuse(text, plan, {"g1": _chunk("g1")}, limit=2, entity_weight=0.0)
    assert [c["id"] for c in light] == ["t1", "both"]  # weight 0: the text order


def test_rank_chunks_discounts_entities_named_everywhere() -> None:
    rows = [("a", 1, 3), ("b", 1, 3), ("c", 1, 3), ("c", 2, 1)]
    ranked = es.rank_chunks({1: 1.0, 2: 0.6}, rows, pool=2)
    assert [r[0] for r in ranked] == ["c", "a"]
    assert ranked[0][2] == [2, 1]  # the rarer entity contributes more


# -- scoping and fallbacks -------------------------------------------------------


def test_entity_path_is_scoped_in_sql(hkb: KnowledgeBase) -> None:
    _load_chain(hkb, "chain")
    hkb.ingest(
        "AlphaNode also appears with EpsilonNode elsewhere.",
        collection="other",
        name="o1",
        entities=True,
    )
    one = hkb.search("AlphaNode", collection="chain", entity_depth=2, limit=10)
    assert {h["collection"] for h in one} == {"chain"}
    assert all("EpsilonNode" not in h["metadata"]["entity_names"] for h in one)
    other = hkb.search("AlphaNode", collection="other", entity_depth=2, limit=10)
    assert {h["collection"] for h in other} == {"other"}
    both = hkb.search("AlphaNode", collection=["chain", "other"], entity_depth=2, limit=10)
    assert {h["collection"] for h in both} == {"chain", "other"}
    assert hkb.search("AlphaNode", collection=[], limit=10) == []
    assert hkb.search("AlphaNode", collection="missing", limit=10) == []


def _plain(kb: KnowledgeBase, query: str, **kwargs: Any) -> list[tuple[str, float]]:
    return [(c["id"], c["score"]) for c in kb.search(query, entities=False, **kwargs)]


def test_without_entities_or_match_the_search_is_unchanged(
    hkb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    _load_chain(hkb, "plain", entities=False)
    for mode in ("hybrid", "semantic", "fulltext"):
        got = hkb.search("AlphaNode stage", collection="plain", mode=mode, entities=True)
        assert [(c["id"], c["score"]) for c in got] == _plain(
            hkb, "AlphaNode stage", collection="plain", mode=mode
        )
        assert all("entity_enhanced" not in c["metadata"] for c in got)
    _load_chain(hkb, "chain")
    strict = KnowledgeBase(
        hkb.url,
        embeddings=hkb.embeddings,
        schema=hkb.schema,
        entity_options=EntitySearchOptions(entity_threshold=1.0),
    )
    try:
        got = strict.search("yeast dough", collection="chain")
        assert [(c["id"], c["score"]) for c in got] == _plain(
            strict, "yeast dough", collection="chain"
        )
    finally:
        strict.close()


def test_failing_matcher_falls_back_and_logs(
    hkb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _load_chain(hkb)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise psycopg.errors.UndefinedTable("entity vectors missing")

    monkeypatch.setattr(es, "match_statement", lambda *a, **k: ("SELECT * FROM no_such_table", {}))
    with caplog.at_level(logging.WARNING, logger="arcana_loop.knowledge.entities.hooks"):
        got = hkb.search("AlphaNode", collection="chain")
    assert [(c["id"], c["score"]) for c in got] == _plain(hkb, "AlphaNode", collection="chain")
    assert "entity search failed" in caplog.text
    monkeypatch.setattr(es, "plan_steps", broken)
    assert [(c["id"], c["score"]) for c in hkb.search("AlphaNode", collection="chain")] == _plain(
        hkb, "AlphaNode", collection="chain"
    )


def test_bad_entity_arguments_are_errors(hkb: KnowledgeBase) -> None:
    _load_chain(hkb)
    with pytest.raises(ValueError, match="entity_depth"):
        hkb.search("AlphaNode", entity_depth=-1)
    with pytest.raises(TypeError, match="entities must be"):
        hkb.search("AlphaNode", entities="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="entities must be"):
        hkb.ingest("x y z", collection="chain", entities="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="entity_threshold"):
        EntitySearchOptions(entity_threshold=2)
    with pytest.raises(ValueError, match="fanout"):
        EntitySearchOptions(fanout=0)


# -- communities -----------------------------------------------------------------


def test_louvain_finds_known_communities_deterministically() -> None:
    entities = [(i, f"n{i}", f"node {i}") for i in range(1, 9)]
    clique_a = [(a, b, 5.0) for a in range(1, 5) for b in range(a + 1, 5)]
    clique_b = [(a, b, 5.0) for a in range(5, 9) for b in range(a + 1, 9)]
    network = comm.build_network(entities, [*clique_a, *clique_b, (4, 5, 0.5)])
    found = comm.communities(network)
    top = [c for c in found if c.level == max(f.level for f in found)]
    assert sorted(sorted(c.members) for c in top) == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert comm.communities(network) == found  # the fixed seed
    assert top[0].summary.startswith("4 entities: ")
    assert comm.communities(comm.build_network(entities, [])) == []


def test_communities_use_a_summariser_and_fall_back_when_it_fails() -> None:
    network = comm.build_network([(1, "a", ""), (2, "b", "about b")], [(1, 2, 1.0)])
    assert (
        comm.communities(network, summarizer=lambda members: "Both letters.")[0].summary
        == "Both letters."
    )

    def boom(members: Any) -> str:
        raise RuntimeError("model down")

    assert comm.communities(network, summarizer=boom)[0].summary.startswith("2 entities: ")


def test_only_dirty_collections_are_recomputed(hkb: KnowledgeBase) -> None:
    _load_chain(hkb, "chain")
    hkb.ingest("OneThing with TwoThing.", collection="side", name="s", entities=True)
    assert _query(hkb, "SELECT count(*) FROM kb_graph_collections WHERE dirty") == [(2,)]
    assert hkb.update_communities() == {"chain": 2, "side": 1}  # the path A-B-C-D splits in two
    before = _query(hkb, "SELECT id, collection_id FROM kb_graph_communities ORDER BY id")
    hkb.ingest("TwoThing with ThreeThing.", collection="side", name="s2")  # entities=None: extended
    assert hkb.update_communities() == {"side": 1}
    after = _query(hkb, "SELECT id, collection_id FROM kb_graph_communities ORDER BY id")
    chain_id = _query(hkb, "SELECT id FROM kb_collections WHERE name = 'chain'")[0][0]
    assert [r for r in after if r[1] == chain_id] == [r for r in before if r[1] == chain_id]
    members = _query(
        hkb,
        "SELECT summary FROM kb_graph_communities c JOIN kb_collections k"
        " ON k.id = c.collection_id WHERE k.name = 'side'",
    )
    assert "3 entities" in members[0][0]
    assert hkb.update_communities() == {}


def test_offline_extractor_satisfies_the_protocol() -> None:
    from arcana_loop.knowledge.entities import Extractor

    assert isinstance(OfflineExtractor(), Extractor)
