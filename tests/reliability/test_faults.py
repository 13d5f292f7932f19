"""Faults mid-run: each has a defined outcome, and what the run had gathered is kept."""

from __future__ import annotations

import psycopg
import pytest
from langchain_openai import ChatOpenAI

from graph import run
from grounding.llm_judge import LLMJudgeGrounder
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
    result = run("Timeouts?", controller_llm=_client(openai_server, max_retries=2), search_fn=_found())
    assert result.terminated_by == "error" and "429" in (result.error or "") or "RateLimit" in (result.error or "")
    assert [e["tool"] for e in result.tool_history] == ["search"] and [c["id"] for c in result.chunks] == ["c1"]
    assert len(openai_server.requests) == 1 + 3  # the first turn, then one try and two bounded retries


def test_a_rate_limit_within_the_client_retries_is_invisible(openai_server):
    openai_server.enqueue(SEARCH, {"status": 429}, ANSWER)
    result = run("Timeouts?", controller_llm=_client(openai_server, max_retries=2), search_fn=_found())
    assert (result.terminated_by, result.answer) == ("answered", "Use wait_for.")


def test_a_controller_timeout_ends_as_error(openai_server):
    openai_server.enqueue(SEARCH, {"sleep": 3, "then": ANSWER})
    result = run("Timeouts?", controller_llm=_client(openai_server, max_retries=0, timeout=0.5), search_fn=_found())
    assert result.terminated_by == "error" and "Timeout" in (result.error or "")
    assert result.tool_history[0]["returned_chunk_ids"] == ["c1"]


def test_a_controller_exception_mid_loop_ends_as_error():
    result = run("Q?", controller_llm=ScriptedChatModel(responses=[search("timeouts"), ConnectionResetError("peer reset")]), search_fn=_found())
    assert result.terminated_by == "error" and result.error == "ConnectionResetError: peer reset"
    assert result.iterations == 2 and len(result.tool_history) == 1


def test_a_failing_answerer_keeps_the_controllers_answer():
    result = run("Q?", controller_llm=ScriptedChatModel(responses=[search("timeouts"), answer("Draft: use wait_for.")]),
                 answer_llm=ScriptedChatModel(responses=[RuntimeError("answer model down")]), search_fn=_found())
    assert (result.terminated_by, result.answer) == ("answered", "Draft: use wait_for.")


def test_a_failing_synthesis_leaves_no_answer_but_keeps_the_chunks():
    result = run("Q?", controller_llm=ScriptedChatModel(responses=[search("timeouts"), RuntimeError("synthesis down")]),
                 search_fn=_found(), max_iterations=1)
    assert result.terminated_by == "max_iterations" and result.answer is None
    assert [c["id"] for c in result.chunks] == ["c1"]


@pytest.mark.parametrize("reply", ["not json at all", '{"claims": "oops"}', '{"score": 7}', ""])
def test_a_judge_returning_garbage_leaves_grounding_none_and_the_answer_intact(reply):
    judge = ScriptedChatModel(responses=[reply], repeat_last=True)
    result = run("Q?", controller_llm=ScriptedChatModel(responses=[search("timeouts"), answer("Use wait_for.")]),
                 search_fn=_found(), grounder=LLMJudgeGrounder(judge))
    assert result.answer == "Use wait_for." and result.terminated_by == "answered"
    assert result.grounding is None


@pytest.mark.postgres
def test_the_database_going_away_mid_search_and_coming_back(kb, pg_url):
    kb.ingest("asyncio.wait_for runs a coroutine with a timeout.", collection="faults")
    kb.ingest("asyncio.gather runs awaitables concurrently.", collection="faults")
    sent = []

    def flaky_search(query, **kwargs):
        sent.append(query)
        if len(sent) == 2:  # every connection of the knowledge base is cut before the second search
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'")
        return kb.search(query, **kwargs)

    model = ScriptedChatModel(responses=[search("wait_for timeout"), search("gather concurrently"), search("gather awaitables"), answer("Both.")])
    result = run("Timeouts and gather?", collection="faults", controller_llm=model, search_fn=flaky_search)
    assert result.terminated_by == "answered" and result.answer == "Both."
    first, second, third = result.tool_history[:3]
    assert first["returned_chunk_ids"]
    # the cut search either recovered at once or reported an error; the next one works again
    assert second["returned_chunk_ids"] or second["summary"].startswith("search error")
    assert third["returned_chunk_ids"]
