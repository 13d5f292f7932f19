"""Budget ledger, usage, duplicate-search guard and chunks shown once."""

from __future__ import annotations

import time

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from arcana_loop.graph import run
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, calls, chunk, search, tool_call
from tests.unit.test_loop import assert_every_call_answered


def with_usage(message: AIMessage, tokens: int) -> AIMessage:
    return message.model_copy(
        update={
            "usage_metadata": {
                "input_tokens": tokens - 1,
                "output_tokens": 1,
                "total_tokens": tokens,
            }
        }
    )


def test_budget_status_is_in_each_turns_system_prompt_and_not_in_the_conversation():
    model = ScriptedChatModel(responses=[search("a"), search("b"), answer("x")])
    result = run(
        "Q?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")], [chunk("c2")]]),
        max_iterations=5,
        chunk_cap=7,
    )
    systems = [c["messages"][0].content for c in model.calls]
    assert "This is turn 1 of 5. Searches made: 0. Chunks gathered: 0 of 7." in systems[0]
    assert "This is turn 3 of 5. Searches made: 2. Chunks gathered: 2 of 7." in systems[2]
    assert not any("Budget status" in str(m.content) for m in result.messages)


def test_budget_ledger_can_be_turned_off():
    model = ScriptedChatModel(responses=[answer("x")])
    run("Q?", controller_llm=model, search_fn=ScriptedSearch(), budget_ledger=False)
    assert "Budget status" not in model.calls[0]["messages"][0].content


def test_usage_counts_tokens_per_role_and_time_per_node():
    model = ScriptedChatModel(
        responses=[with_usage(search("a"), 100), with_usage(answer("draft"), 50)]
    )
    answerer = ScriptedChatModel(responses=[with_usage(AIMessage(content="final"), 30)])
    result = run(
        "Q?", controller_llm=model, answer_llm=answerer, search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.usage["controller"]["total_tokens"] == 150
    assert result.usage["answerer"]["total_tokens"] == 30
    assert result.usage["total"]["total_tokens"] == 180
    assert set(result.usage["node_seconds"]) == {
        "start",
        "controller",
        "tools",
        "answerer",
        "finish",
    }
    assert all(v >= 0 for v in result.usage["node_seconds"].values())


def test_token_limit_ends_the_loop_with_synthesis():
    model = ScriptedChatModel(
        responses=[with_usage(search("a"), 600), with_usage(search("b"), 600), "synthesised"]
    )
    result = run(
        "Q?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")], [chunk("c2")]]),
        max_tokens_total=1000,
    )
    assert result.terminated_by == "max_iterations" and result.budget_stop == "tokens"
    assert result.iterations == 2 and result.answer == "synthesised"


def test_time_limit_ends_the_loop():
    def slow_search(query, **kwargs):
        time.sleep(0.15)
        return [chunk(query)]

    model = ScriptedChatModel(responses=[search("a"), search("b"), search("c"), "synthesised"])
    result = run("Q?", controller_llm=model, search_fn=slow_search, max_seconds=0.1)
    assert result.budget_stop == "seconds" and result.iterations == 1


def test_iteration_budget_is_named():
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("a")]),
        search_fn=ScriptedSearch([[]]),
        max_iterations=1,
    )
    assert result.budget_stop == "iterations"


# --- duplicate guard ---------------------------------------------------------------------


def test_repeated_search_is_not_sent_again_and_is_recorded_as_duplicate():
    found = ScriptedSearch([[chunk("c1"), chunk("c2")]])
    model = ScriptedChatModel(
        responses=[search("Asyncio  timeout"), search("asyncio   TIMEOUT"), answer("x")]
    )
    result = run("Q?", controller_llm=model, search_fn=found)
    assert len(found.calls) == 1
    duplicate = result.tool_history[1]
    assert duplicate["duplicate_of"] == 0 and duplicate["returned_chunk_ids"] == []
    assert "already searched 'Asyncio  timeout' at iteration 0" in duplicate["summary"]
    assert "c1, c2" in duplicate["summary"] and "Rephrase" in duplicate["summary"]
    assert_every_call_answered(result.messages)


def test_a_search_that_failed_is_sent_again():
    sent: list[str] = []

    def down_once(query, **kwargs):
        sent.append(query)
        if len(sent) == 1:
            raise ConnectionError("the index is restarting")
        return [chunk("c1")]

    model = ScriptedChatModel(responses=[search("timeout"), search("timeout"), answer("x")])
    result = run("Q?", controller_llm=model, search_fn=down_once)
    assert sent == ["timeout", "timeout"]
    assert [e.get("error") for e in result.tool_history[:2]] == [
        "ConnectionError: the index is restarting",
        None,
    ]
    assert result.tool_history[1]["returned_chunk_ids"] == ["c1"]


def test_same_query_in_another_scope_is_not_a_duplicate():
    found = ScriptedSearch([[chunk("c1")], [chunk("c2")]])
    model = ScriptedChatModel(
        responses=[search("q", collection="a"), search("q", collection="b"), answer("x")]
    )
    run("Q?", controller_llm=model, search_fn=found, collection=["a", "b"])
    assert [c["collection"] for c in found.calls] == ["a", "b"]


def test_duplicate_within_one_turn_points_at_the_first_call():
    found = ScriptedSearch([[chunk("c1")]])
    turn = calls(tool_call("search", query="same"), tool_call("search", query="SAME"))
    result = run(
        "Q?", controller_llm=ScriptedChatModel(responses=[turn, answer("x")]), search_fn=found
    )
    assert len(found.calls) == 1
    assert "returned c1" in result.tool_history[1]["summary"]


def test_duplicate_guard_off_sends_every_search():
    found = ScriptedSearch([[chunk("c1")], [chunk("c1")]])
    model = ScriptedChatModel(responses=[search("q"), search("q"), answer("x")])
    run("Q?", controller_llm=model, search_fn=found, duplicate_guard=False)
    assert len(found.calls) == 2


def test_embedding_similarity_catches_rephrased_repeats():
    found = ScriptedSearch([[chunk("c1")], [chunk("c2")]])
    model = ScriptedChatModel(
        responses=[
            search("run a coroutine with a timeout"),
            search("run coroutine with timeout"),
            search("parse json files"),
            answer("x"),
        ]
    )
    result = run("Q?", controller_llm=model, search_fn=found, duplicate_similarity=0.9)
    assert [c["query"] for c in found.calls] == [
        "run a coroutine with a timeout",
        "parse json files",
    ]
    assert result.tool_history[1]["duplicate_of"] == 0


# --- chunks shown once ----------------------------------------------------------------------


def tool_texts(result):
    return [m.content for m in result.messages if isinstance(m, ToolMessage)]


def test_a_chunk_seen_before_is_shown_by_reference():
    found = ScriptedSearch(
        [[chunk("c1", "ALPHA TEXT")], [chunk("c1", "ALPHA TEXT"), chunk("c2", "BETA TEXT")]]
    )
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("a"), search("b"), answer("x")]),
        search_fn=found,
    )
    first, second = tool_texts(result)[:2]
    assert "ALPHA TEXT" in first
    assert (
        "ALPHA TEXT" not in second
        and '<chunk n="1" id="c1" text="in the search result of iteration 0 above"/>' in second
    )
    assert "BETA TEXT" in second


def test_show_chunks_once_off_repeats_the_text():
    found = ScriptedSearch([[chunk("c1", "ALPHA TEXT")], [chunk("c1", "ALPHA TEXT")]])
    model = ScriptedChatModel(responses=[search("a"), search("b"), answer("x")])
    result = run("Q?", controller_llm=model, search_fn=found, show_chunks_once=False)
    assert all("ALPHA TEXT" in t for t in tool_texts(result)[:2])


@pytest.mark.parametrize(
    "options",
    [
        {"min_support": 1.5},
        {"duplicate_similarity": -0.1},
        {"max_tokens_total": 0},
        {"max_seconds": "soon"},
    ],
)
def test_bad_economy_options_are_rejected(options):
    with pytest.raises((TypeError, ValueError)):
        run(
            "Q?",
            controller_llm=ScriptedChatModel(responses=[answer("x")]),
            search_fn=ScriptedSearch(),
            **options,
        )


def test_min_support_without_a_grounder_is_a_configuration_error():
    from arcana_loop.nodes.deps import ConfigurationError

    with pytest.raises(ConfigurationError, match="grounder"):
        run(
            "Q?",
            controller_llm=ScriptedChatModel(responses=[answer("x")]),
            search_fn=ScriptedSearch(),
            min_support=0.5,
        )


def test_judge_tokens_are_counted_under_judge_and_in_the_total():
    from arcana_loop.grounding.llm_judge import LLMJudgeGrounder

    model = ScriptedChatModel(
        responses=[with_usage(search("a"), 100), with_usage(answer("Use wait_for."), 50)]
    )
    verdict = AIMessage(
        content='{"claims": [{"text": "Use wait_for.", "verdict": "supported", "chunk_ids": ["c1"]}]}'
    )
    judge = ScriptedChatModel(responses=[with_usage(verdict, 40)])
    result = run(
        "Q?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1", "Use wait_for to bound it.")]]),
        grounder=LLMJudgeGrounder(judge),
    )
    assert result.grounding is not None and "usage" not in result.grounding
    assert result.usage["judge"] == {"input_tokens": 39, "output_tokens": 1, "total_tokens": 40}
    assert result.usage["total"]["total_tokens"] == 190


def test_a_grounder_without_model_calls_adds_no_judge_usage():
    model = ScriptedChatModel(responses=[answer("Use wait_for.")])
    result = run(
        "Q?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1", "Use wait_for.")]]),
        grounder="local",
    )
    assert "judge" not in result.usage
