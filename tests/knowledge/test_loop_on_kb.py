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


def test_run_on_a_missing_collection_of_the_default_knowledge_base_gives_up_unasked(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arcana_loop import knowledge
    from arcana_loop.graph import run
    from tests.fakes import scripted
    from tests.fixtures.postgres import temporary_collection

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setattr(knowledge, "_default", None)
    model = scripted("never asked")
    docs = [("A zorblat is a harbour crane.", {})]
    try:
        with temporary_collection(pg_url, "loop-known", docs) as known:
            result = run(
                "What is a zorblat?", collection="no-such-collection", controller_llm=model
            )
            held = run("What is a zorblat?", collection=known, controller_llm=scripted("x", "x"))
    finally:
        if knowledge._default is not None:
            knowledge._default.close()
    assert result.terminated_by == "gave_up" and model.calls == []
    assert "no collection named 'no-such-collection'" in (result.answer or "")
    assert f"'{known}'" in (result.answer or "")
    assert held.terminated_by == "answered"  # a stored collection is asked as before


def test_an_empty_scope_on_a_stored_knowledge_base_gives_up_saying_so_unasked(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arcana_loop import knowledge
    from tests.fakes import scripted
    from tests.fixtures.postgres import temporary_collection

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setattr(knowledge, "_default", None)
    model = scripted("never asked")
    try:
        with temporary_collection(pg_url, "loop-held", [("A zorblat is a crane.", {})]):
            result = run("What is a zorblat?", collection=[], controller_llm=model)
    finally:
        if knowledge._default is not None:
            knowledge._default.close()
    assert result.terminated_by == "gave_up" and result.error is None and model.calls == []
    assert "scope is empty (collection=[])" in (result.answer or "")


def test_a_toolset_without_search_is_asked_whatever_the_knowledge_base_holds(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.tools import tool

    from arcana_loop import DEFAULT_TOOLS, knowledge
    from arcana_loop.graph import run
    from tests.fakes import calls, scripted, tool_call

    @tool
    def glossary(term: str) -> str:
        """Look a term up in the team's glossary."""
        return "A zorblat is a harbour crane."

    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setattr(knowledge, "_default", None)
    _, answer_tool, _ = DEFAULT_TOOLS
    model = scripted(calls(tool_call("glossary", term="zorblat")), "A harbour crane.")
    try:
        result = run(
            "What is a zorblat?",
            collection="no-such-collection",  # nothing stored there, and nothing searches it
            controller_llm=model,
            tools=[answer_tool, glossary],
        )
    finally:
        if knowledge._default is not None:
            knowledge._default.close()
    assert (result.terminated_by, result.answer) == ("answered", "A harbour crane.")
    assert [e["tool"] for e in result.tool_history] == ["glossary"]
