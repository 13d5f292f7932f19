"""Exploring an entity: `KnowledgeBase.explore` and the controller's optional `explore` tool."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import ToolMessage

from arcana_loop.graph import run
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.entities import EntitySearchOptions
from tests.fakes import ScriptedChatModel, answer, calls, tool_call
from tests.knowledge.helpers import HashEmbeddings

pytestmark = pytest.mark.postgres


@pytest.fixture
def hkb(kb: KnowledgeBase) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(
        kb.url,
        embeddings=HashEmbeddings(),
        schema=kb.schema,
        entity_options=EntitySearchOptions(entity_threshold=0.3),
    )
    base.ingest(
        "asyncio.wait_for raises TimeoutError when the time is up.",
        collection="docs",
        name="a",
        entities=True,
    )
    base.ingest(
        "TimeoutError is also raised by ThreadPoolExecutor futures. TimeoutError again, ThreadPoolExecutor again.",
        collection="docs",
        name="b",
        entities=True,
    )
    base.ingest(
        "asyncio.wait_for lives elsewhere too.", collection="other", name="o", entities=True
    )
    base.build_entities("docs")  # communities
    yield base
    base.close()


def test_explore_returns_description_neighbours_and_community(hkb: KnowledgeBase) -> None:
    [found] = hkb.explore("TimeoutError", collection="docs")
    assert found["name"] == "TimeoutError" and found["collection"] == "docs"
    assert found["description"] == "asyncio.wait_for raises TimeoutError when the time is up."
    assert [(n["name"], n["strength"]) for n in found["neighbours"]] == [
        ("ThreadPoolExecutor", 2.0),
        ("asyncio.wait_for", 1.0),
    ]
    assert found["neighbours"][0]["types"] == ["co_occurs"]
    assert found["community"] is not None and "TimeoutError" in found["community"]["summary"]
    assert len(found["chunk_ids"]) == 2


def test_explore_matches_dotted_suffixes_within_the_scope(hkb: KnowledgeBase) -> None:
    assert [(f["name"], f["collection"]) for f in hkb.explore("wait_for", collection="docs")] == [
        ("asyncio.wait_for", "docs")
    ]
    assert {f["collection"] for f in hkb.explore("wait_for")} == {"docs", "other"}
    assert hkb.explore("ThreadPoolExecutor", collection="other") == []
    assert hkb.explore("wait_for", collection=[]) == []
    assert hkb.explore("nothing-like-this") == []
    with pytest.raises(ValueError, match="entity"):
        hkb.explore("  ")


def test_controller_explore_tool_is_off_by_default_and_scoped_when_on(hkb: KnowledgeBase) -> None:
    script = [calls(tool_call("explore", entity="ThreadPoolExecutor")), answer("done")]
    off = ScriptedChatModel(responses=list(script))
    result = run("Q?", controller_llm=off, search_fn=hkb.search, collection="docs")
    names = [t["function"]["name"] for t in off.bound_tools[0]]
    assert "explore" not in names
    assert result.tool_history[0]["summary"] == "Unknown tool: explore"

    on = ScriptedChatModel(responses=list(script))
    result = run(
        "Q?", controller_llm=on, search_fn=hkb.search, collection="docs", explore_tool=True
    )
    assert "explore" in [t["function"]["name"] for t in on.bound_tools[0]]
    reply = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert reply.content.startswith("ThreadPoolExecutor (class, collection docs)")
    assert "Related: TimeoutError" in reply.content

    scoped = ScriptedChatModel(responses=list(script))
    result = run(
        "Q?", controller_llm=scoped, search_fn=hkb.search, collection="other", explore_tool=True
    )
    assert (
        result.tool_history[0]["summary"]
        == "No entity named 'ThreadPoolExecutor' in the knowledge graph."
    )
