"""The loop through langchain-openai's real client, against a scripted server on loopback."""

from __future__ import annotations

from langchain_openai import ChatOpenAI

from arcana_loop.graph import run
from tests.fakes import ScriptedSearch, chunk
from tests.fixtures.openai_server import conversation_problem


def model(server):
    return ChatOpenAI(
        model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0
    )


def test_full_loop_with_answerer_and_skipped_calls_is_valid_openai(openai_server):
    openai_server.enqueue(
        {
            "tool_calls": [
                {"name": "search", "arguments": {"query": "asyncio timeout"}},
                {"name": "search", "arguments": {"query": "wait_for"}},
            ]
        },
        {
            "tool_calls": [
                {"name": "answer", "arguments": {"text": "Use asyncio.wait_for."}},
                {"name": "search", "arguments": {"query": "late"}},
            ]
        },
        "Use `asyncio.wait_for(coro, timeout)`.",
    )
    found = ScriptedSearch(
        {
            "asyncio timeout": [chunk("c1", "wait_for runs a coroutine with a timeout.")],
            "wait_for": [chunk("c1"), chunk("c2")],
        }
    )
    result = run(
        "How do I time out a coroutine?",
        controller_llm=model(openai_server),
        answer_llm=model(openai_server),
        search_fn=found,
        temperature=0.2,
    )
    assert result.terminated_by == "answered"
    assert result.answer == "Use `asyncio.wait_for(coro, timeout)`."
    assert [c["query"] for c in found.calls] == ["asyncio timeout", "wait_for"]
    assert len(openai_server.requests) == 3
    for request in openai_server.requests:
        assert conversation_problem(request["messages"]) is None
        assert request["temperature"] == 0.2
    assert [t["function"]["name"] for t in openai_server.requests[0]["tools"]] == [
        "search",
        "answer",
        "give_up",
    ]
    assert "tools" not in openai_server.requests[2]  # the answerer call is tool-less
    assert result.usage["controller"]["total_tokens"] == 28


def test_synthesis_after_the_budget_is_valid_openai(openai_server):
    openai_server.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "q"}}]}, "Synthesised."
    )
    result = run(
        "Q?",
        controller_llm=model(openai_server),
        search_fn=ScriptedSearch([[chunk("c1")]]),
        max_iterations=1,
    )
    assert result.answer == "Synthesised." and result.terminated_by == "max_iterations"
    assert conversation_problem(openai_server.requests[-1]["messages"]) is None


def test_rate_limit_mid_loop_ends_as_error(openai_server):
    openai_server.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "q"}}]},
        {"status": 429, "body": "rate limited"},
    )
    result = run(
        "Q?", controller_llm=model(openai_server), search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.terminated_by == "error" and "RateLimitError" in result.error
    assert result.iterations == 2


def test_the_validator_catches_an_unanswered_call():
    broken = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "a"}]},
        {"role": "user", "content": "next"},
    ]
    assert conversation_problem(broken) is not None
