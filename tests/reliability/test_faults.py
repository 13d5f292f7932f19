"""Faults mid-run: each has a defined outcome, and what the run had gathered is kept."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from arcana_loop.graph import arun, resume, run, trace
from arcana_loop.grounding.llm_judge import LLMJudgeGrounder
from arcana_loop.knowledge import KnowledgeBase
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search

pytestmark = pytest.mark.reliability


def _client(server, **kwargs):
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", **kwargs)


SEARCH = {"tool_calls": [{"name": "search", "arguments": {"query": "timeouts"}}]}
ANSWER = {"tool_calls": [{"name": "answer", "arguments": {"text": "Use wait_for."}}]}


def _found():
    return ScriptedSearch([[chunk("c1", "asyncio.wait_for times out.")]])


def test_a_rate_limit_past_the_client_retries_ends_as_error_and_keeps_the_history(openai_server):
    openai_server.enqueue(SEARCH, {"status": 429}, {"status": 429}, {"status": 429})
    result = run(
        "Timeouts?", controller_llm=_client(openai_server, max_retries=2), search_fn=_found()
    )
    assert (result.terminated_by, result.error) == (
        "error",
        "OpenAIRateLimitError: Error code: 429 - scripted fault",
    )
    assert [e["tool"] for e in result.tool_history] == ["search"] and [
        c["id"] for c in result.chunks
    ] == ["c1"]
    assert (
        len(openai_server.requests) == 1 + 3
    )  # the first turn, then one try and two bounded retries


async def test_server_errors_past_the_retries_on_the_async_path_end_as_error(openai_server):
    openai_server.enqueue(SEARCH, {"status": 500}, {"status": 503})
    result = await arun(
        "Timeouts?", controller_llm=_client(openai_server, max_retries=1), search_fn=_found()
    )
    assert (result.terminated_by, result.error) == (
        "error",
        "OpenAIAPIError: Error code: 503 - scripted fault",
    )
    assert [c["id"] for c in result.chunks] == ["c1"] and len(openai_server.requests) == 1 + 2


def test_a_rate_limited_answerer_keeps_the_draft_within_bounded_retries(openai_server):
    openai_server.enqueue({"status": 429}, {"status": 429}, "never sent")
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(
            responses=[search("timeouts"), answer("Draft: use wait_for.")]
        ),
        answer_llm=_client(openai_server, max_retries=1),
        search_fn=_found(),
    )
    assert (result.terminated_by, result.answer, result.error) == (
        "answered",
        "Draft: use wait_for.",
        None,
    )
    assert len(openai_server.requests) == 2


def test_a_failing_synthesis_through_the_client_keeps_the_chunks(openai_server):
    openai_server.enqueue({"status": 500}, {"status": 500}, "never sent")
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("timeouts")]),
        answer_llm=_client(openai_server, max_retries=1),
        search_fn=_found(),
        max_iterations=1,
    )
    assert (result.terminated_by, result.answer) == ("max_iterations", None)
    assert (result.error or "").startswith("fallback synthesis failed:") and "500" in (
        result.error or ""
    )
    assert [c["id"] for c in result.chunks] == ["c1"] and result.tool_history[0][
        "returned_chunk_ids"
    ] == ["c1"]
    assert len(openai_server.requests) == 2


def test_a_checkpointed_run_that_fails_keeps_its_history_and_is_not_rerun(openai_server, tmp_path):
    spec = f"sqlite:{tmp_path / 'threads.sqlite'}"
    openai_server.enqueue(SEARCH, {"status": 429})
    failed = run(
        "Timeouts?",
        controller_llm=_client(openai_server, max_retries=0),
        search_fn=_found(),
        checkpointer=spec,
    )
    assert failed.terminated_by == "error"
    later = ScriptedSearch([])
    again = resume(
        failed.thread_id,
        checkpointer=spec,
        controller_llm=ScriptedChatModel(responses=[]),
        search_fn=later,
    )
    assert (again.terminated_by, again.error, again.tool_history) == (
        "error",
        failed.error,
        failed.tool_history,
    )
    assert later.calls == [] and [s.node for s in trace(failed.thread_id, spec)] == [
        "start",
        "controller",
        "tools",
        "controller",
        "finish",
    ]


def test_a_rate_limit_within_the_client_retries_is_invisible(openai_server):
    openai_server.enqueue(SEARCH, {"status": 429}, ANSWER)
    result = run(
        "Timeouts?", controller_llm=_client(openai_server, max_retries=2), search_fn=_found()
    )
    assert (result.terminated_by, result.answer) == ("answered", "Use wait_for.")


def test_a_controller_timeout_ends_as_error(openai_server):
    openai_server.enqueue(SEARCH, {"sleep": 3, "then": ANSWER})
    result = run(
        "Timeouts?",
        controller_llm=_client(openai_server, max_retries=0, timeout=0.5),
        search_fn=_found(),
    )
    assert result.terminated_by == "error" and "Timeout" in (result.error or "")
    assert result.tool_history[0]["returned_chunk_ids"] == ["c1"]


def test_a_controller_exception_mid_loop_ends_as_error():
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(
            responses=[search("timeouts"), ConnectionResetError("peer reset")]
        ),
        search_fn=_found(),
    )
    assert result.terminated_by == "error" and result.error == "ConnectionResetError: peer reset"
    assert result.iterations == 2 and len(result.tool_history) == 1


def test_a_failing_answerer_keeps_the_controllers_answer():
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(
            responses=[search("timeouts"), answer("Draft: use wait_for.")]
        ),
        answer_llm=ScriptedChatModel(responses=[RuntimeError("answer model down")]),
        search_fn=_found(),
    )
    assert (result.terminated_by, result.answer) == ("answered", "Draft: use wait_for.")


def test_a_failing_synthesis_leaves_no_answer_but_keeps_the_chunks():
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(
            responses=[search("timeouts"), RuntimeError("synthesis down")]
        ),
        search_fn=_found(),
        max_iterations=1,
    )
    assert result.terminated_by == "max_iterations" and result.answer is None
    assert result.error == "fallback synthesis failed: RuntimeError: synthesis down"
    assert [c["id"] for c in result.chunks] == ["c1"]


def test_a_synthesis_without_text_says_so():
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("timeouts"), AIMessage(content="  ")]),
        search_fn=_found(),
        max_iterations=1,
    )
    assert (result.terminated_by, result.answer, result.error) == (
        "max_iterations",
        None,
        "fallback synthesis returned no text",
    )


@pytest.mark.parametrize("reply", ["not json at all", '{"claims": "oops"}', '{"score": 7}', ""])
def test_a_judge_returning_garbage_leaves_grounding_none_and_the_answer_intact(reply):
    judge = ScriptedChatModel(responses=[reply], repeat_last=True)
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("timeouts"), answer("Use wait_for.")]),
        search_fn=_found(),
        grounder=LLMJudgeGrounder(judge),
    )
    assert result.answer == "Use wait_for." and result.terminated_by == "answered"
    assert result.grounding is None


def _cut_every_connection(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'"
        ).fetchone()
    return row[0]


def _end_every_connection_and_wait(pg_url):
    """End every other client backend and wait until each is gone (``pg_terminate_backend`` only signals)."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND datname = current_database()"
            " AND backend_type = 'client backend'"
        )


@pytest.mark.postgres
async def test_a_search_handed_a_connection_the_server_ended_runs_again_on_another(
    kb, pg_url, monkeypatch
):
    # the window the pool cannot see: the server ended the connection, its socket is quiet yet
    import arcana_loop.knowledge.pools as pools

    kb.ingest("asyncio.wait_for runs a coroutine with a timeout.", collection="faults")
    assert kb.search("wait_for timeout", collection="faults")
    assert await kb.asearch("wait_for timeout", collection="faults")
    monkeypatch.setattr(pools, "_has_news", lambda conn: False)
    _end_every_connection_and_wait(pg_url)
    assert kb.search("wait_for timeout", collection="faults")
    assert await kb.asearch("wait_for timeout", collection="faults")
    await kb.aclose()


QUERIES = [
    "wait_for timeout",
    "gather concurrently",
    "gather awaitables",
    "timeout coroutine",
    "concurrent awaitables",
]


@pytest.fixture
def faults_kb(kb):
    kb.ingest("asyncio.wait_for runs a coroutine with a timeout.", collection="faults")
    kb.ingest("asyncio.gather runs awaitables concurrently.", collection="faults")
    return kb


@pytest.mark.postgres
def test_the_database_cutting_every_connection_mid_run_loses_no_search(faults_kb, pg_url):
    kb = faults_kb
    with ThreadPoolExecutor(4) as pool:  # four pooled connections, all of them about to go stale
        list(pool.map(lambda q: kb.search(q, collection="faults"), QUERIES * 4))
    cut = []

    def search_then_cut(query, **kwargs):
        hits = kb.search(query, **kwargs)
        if not cut:
            cut.append(_cut_every_connection(pg_url))
        return hits

    model = ScriptedChatModel(responses=[*(search(q) for q in QUERIES), answer("Both.")])
    result = run(
        "Timeouts and gather?",
        collection="faults",
        controller_llm=model,
        search_fn=search_then_cut,
        max_iterations=8,
    )
    assert cut[0] >= 4  # the knowledge base's connections were among those cut
    assert (result.terminated_by, result.answer) == ("answered", "Both.")
    assert [e["args"]["query"] for e in result.tool_history[:-1]] == QUERIES
    assert all(
        e["returned_chunk_ids"] and not e["summary"].startswith("search error")
        for e in result.tool_history[:-1]
    )


@pytest.mark.postgres
async def test_the_database_cutting_every_connection_mid_run_loses_no_search_async(
    faults_kb, pg_url
):
    kb = faults_kb
    await asyncio.gather(*(kb.asearch(q, collection="faults") for q in QUERIES * 4))
    cut = []

    async def search_then_cut(query, **kwargs):
        hits = await kb.asearch(query, **kwargs)
        if not cut:
            cut.append(await asyncio.to_thread(_cut_every_connection, pg_url))
        return hits

    model = ScriptedChatModel(responses=[*(search(q) for q in QUERIES), answer("Both.")])
    try:
        result = await arun(
            "Timeouts and gather?",
            collection="faults",
            controller_llm=model,
            search_fn=search_then_cut,
            max_iterations=8,
        )
    finally:
        await kb.aclose()
    assert (result.terminated_by, result.answer) == ("answered", "Both.")
    assert all(
        e["returned_chunk_ids"] and not e["summary"].startswith("search error")
        for e in result.tool_history[:-1]
    )


@pytest.mark.postgres
def test_a_database_that_stays_away_is_a_search_error_and_the_loop_goes_on(kb):
    down = KnowledgeBase("postgresql://nobody@127.0.0.1:1/none", schema=kb.schema)
    model = ScriptedChatModel(responses=[search("timeouts"), answer("I could not search.")])
    result = run("Timeouts?", controller_llm=model, search_fn=down.search)
    assert (result.terminated_by, result.answer) == ("answered", "I could not search.")
    assert (
        result.tool_history[0]["summary"].startswith("search error: ")
        and "PostgreSQL" in result.tool_history[0]["summary"]
    )
    assert result.tool_history[0]["returned_chunk_ids"] == []


@pytest.mark.postgres
@pytest.mark.parametrize("path", ["sync", "async"])
async def test_the_postgres_checkpointer_survives_its_connections_being_cut(
    pg_url, monkeypatch, path
):
    monkeypatch.setenv("DATABASE_URL", pg_url)

    async def once():
        model = ScriptedChatModel(responses=[search("timeouts"), answer("Use wait_for.")])
        if path == "sync":
            return await asyncio.to_thread(
                run, "Timeouts?", controller_llm=model, search_fn=_found(), checkpointer="postgres"
            )
        return await arun(
            "Timeouts?", controller_llm=model, search_fn=_found(), checkpointer="postgres"
        )

    await once()  # the saver and its pool exist now, with idle connections
    assert _cut_every_connection(pg_url) >= 1
    result = await once()
    assert (result.terminated_by, result.answer) == ("answered", "Use wait_for.")
    assert [s.node for s in trace(result.thread_id, "postgres")] == [
        "start",
        "controller",
        "tools",
        "controller",
        "tools",
        "finish",
    ]
