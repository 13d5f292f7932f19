"""The loop's tool history records whether a search used the knowledge graph."""

from __future__ import annotations

import pytest

from arcana_loop.graph import run
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.entities import EntitySearchOptions
from arcana_loop.tools.search import entity_usage
from tests.fakes import ScriptedChatModel, answer, search
from tests.knowledge.helpers import HashEmbeddings

pytestmark = pytest.mark.postgres


def test_tool_history_records_entity_use(kb: KnowledgeBase) -> None:
    hkb = KnowledgeBase(
        kb.url,
        embeddings=HashEmbeddings(),
        schema=kb.schema,
        entity_options=EntitySearchOptions(entity_limit=2, entity_threshold=0.3),
    )
    try:
        hkb.ingest("AlphaNode works with BetaNode.", collection="g", name="a", entities=True)
        hkb.ingest("BetaNode works with GammaNode.", collection="g", name="b", entities=True)
        hkb.ingest("AlphaNode in a collection without entities.", collection="plain", name="p")
        model = ScriptedChatModel(
            responses=[search("AlphaNode"), search("AlphaNode", collection="plain"), answer("x")]
        )
        result = run(
            "What works with AlphaNode?",
            controller_llm=model,
            search_fn=hkb.search,
            collection=["g", "plain"],
        )
    finally:
        hkb.close()
    graphed, plain = [e for e in result.tool_history if e["tool"] == "search"]
    assert graphed["entities"]["used"] is True
    assert graphed["entities"]["matched_entities"] == 2
    assert graphed["entities"]["entity_chunks"] >= 1
    assert "entities" not in plain


def test_entity_usage_reads_chunk_metadata() -> None:
    assert entity_usage([{"id": "a", "text": "", "score": 1.0}]) is None
    marked = {"matched_entities": 3, "entity_enhanced": True}
    assert entity_usage(
        [
            {"id": "a", "text": "", "score": 1.0, "metadata": marked},
            {"id": "b", "text": "", "score": 0.5, "metadata": {**marked, "entity_enhanced": False}},
        ]
    ) == {"used": True, "matched_entities": 3, "entity_chunks": 1}
