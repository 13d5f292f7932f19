"""The loop end to end on a real ingested corpus (embedded PostgreSQL)."""

from __future__ import annotations

import pytest

from arcana_loop.graph import arun, run
from tests.fakes import ScriptedChatModel, answer, search

pytestmark = pytest.mark.postgres

DOCS = {
    "asyncio": "asyncio.wait_for runs a coroutine with a timeout. When the timeout expires the task is cancelled and TimeoutError is raised.",
    "json": "json.loads parses a JSON document from a string and returns Python objects such as dicts and lists.",
}


def ingest_docs(kb):
    for name, text in DOCS.items():
        kb.ingest(text, collection=name, metadata={"name": name})


def test_scripted_controller_over_the_knowledge_base(kb):
    ingest_docs(kb)
    model = ScriptedChatModel(
        responses=[search("coroutine timeout"), answer("Use asyncio.wait_for.")]
    )
    result = run(
        "How do I time out a coroutine?",
        controller_llm=model,
        search_fn=kb.search,
        collection="asyncio",
    )
    assert result.terminated_by == "answered"
    assert result.chunks and all(c["collection"] == "asyncio" for c in result.chunks)
    assert "wait_for" in result.chunks[0]["text"]


def test_offline_controller_answers_from_the_knowledge_base_and_grounds_it(kb):
    ingest_docs(kb)
    result = run(
        "How do I run a coroutine with a timeout?",
        controller_llm="offline",
        search_fn=kb.search,
        grounder="local",
    )
    assert result.terminated_by == "answered"
    assert "wait_for" in result.answer
    assert result.grounding is not None and result.grounding["score"] > 0.5


async def test_locked_scope_never_returns_other_collections_async(kb):
    ingest_docs(kb)
    model = ScriptedChatModel(
        responses=[search("json loads parse", collection="json"), answer("x")]
    )
    result = await arun("Q?", controller_llm=model, search_fn=kb.asearch, collection="asyncio")
    assert all(c["collection"] == "asyncio" for c in result.chunks)
