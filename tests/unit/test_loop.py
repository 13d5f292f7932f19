"""The loop's behaviour, driven by scripted models and searches."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from arcana_loop.graph import run
from arcana_loop.nodes.deps import ConfigurationError
from tests.fakes import ScriptedSearch, answer, calls, chunk, give_up, scripted, search, tool_call


def assert_every_call_answered(messages):
    """Every assistant tool call id is answered by exactly one tool message, right after it."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in pending, (
                f"tool message for unknown call {message.tool_call_id}"
            )
            pending.remove(message.tool_call_id)
            continue
        assert not pending, f"calls {pending} not answered before {type(message).__name__}"
        if isinstance(message, AIMessage):
            ids = [c["id"] for c in [*message.tool_calls, *message.invalid_tool_calls]]
            assert len(ids) == len(set(ids)), "duplicate tool call ids"
            pending = set(ids)
    assert not pending


# --- termination paths ---------------------------------------------------------------


def test_answer_tool_ends_the_run_as_answered():
    model = scripted(search("asyncio timeout"), answer("Use asyncio.wait_for."))
    found = ScriptedSearch([[chunk("c1", "wait_for runs a coroutine with a timeout", 0.9)]])
    result = run("How do I time out a coroutine?", controller_llm=model, search_fn=found)
    assert result.terminated_by == "answered"
    assert result.answer == "Use asyncio.wait_for."
    assert result.iterations == 2
    assert [e["tool"] for e in result.tool_history] == ["search", "answer"]
    assert result.tool_history[1]["summary"] == "Answered."
    assert [c["id"] for c in result.chunks] == ["c1"]
    assert result.error is None and result.grounding is None
    assert_every_call_answered(result.messages)


def test_give_up_ends_the_run_with_could_not_answer():
    model = scripted(search("x"), give_up("nothing about x"))
    result = run("What is x?", controller_llm=model, search_fn=ScriptedSearch())
    assert result.terminated_by == "gave_up"
    assert result.answer == "Could not answer: nothing about x"
    assert result.tool_history[-1]["summary"] == "Gave up: Could not answer: nothing about x"


def test_plain_text_reply_ends_the_run_as_answered_without_history():
    result = run("Say hi", controller_llm=scripted("Hi there."), search_fn=ScriptedSearch())
    assert result.terminated_by == "answered"
    assert result.answer == "Hi there."
    assert result.tool_history == []
    assert result.iterations == 1


def test_max_iterations_runs_synthesis_from_the_gathered_chunks():
    model = scripted(search("a"), search("b"), "Synthesised answer.")
    found = ScriptedSearch([[chunk("c1", score=0.4)], [chunk("c2", score=0.8)]])
    result = run("Q?", controller_llm=model, search_fn=found, max_iterations=2)
    assert result.terminated_by == "max_iterations"
    assert result.answer == "Synthesised answer."
    assert result.iterations == 2
    entry = result.tool_history[-1]
    assert entry["tool"] == "synthesis"
    assert entry["args"] == {"text": "Synthesised answer."}
    assert entry["summary"] == "Synthesized from 2 chunks"
    assert entry["iteration"] == 2
    synthesis_call = model.calls[-1]
    assert synthesis_call["tools"] == []  # tool-less
    assert "search budget" in synthesis_call["messages"][-1].content
    assert_every_call_answered(synthesis_call["messages"])


def test_max_iterations_without_fallback_leaves_answer_none():
    model = scripted(search("a"))
    result = run(
        "Q?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")]]),
        max_iterations=1,
        fallback_synthesis=False,
    )
    assert result.terminated_by == "max_iterations"
    assert result.answer is None
    assert len(model.calls) == 1


def test_max_iterations_without_chunks_skips_synthesis():
    model = scripted(search("a"))
    result = run("Q?", controller_llm=model, search_fn=ScriptedSearch([[]]), max_iterations=1)
    assert result.terminated_by == "max_iterations"
    assert result.answer is None
    assert len(model.calls) == 1


def test_zero_max_iterations_ends_before_any_call():
    model = scripted()
    result = run("Q?", controller_llm=model, search_fn=ScriptedSearch(), max_iterations=0)
    assert result.terminated_by == "max_iterations"
    assert result.iterations == 0
    assert model.calls == []


def test_custom_synthesizer_wins_over_the_models():
    seen = {}

    def synthesizer(messages, opts):
        seen["messages"], seen["opts"] = messages, opts
        return "From my synthesizer."

    answerer = scripted()
    result = run(
        "Q?",
        controller_llm=scripted(search("a")),
        answer_llm=answerer,
        search_fn=ScriptedSearch([[chunk("c1")]]),
        max_iterations=1,
        synthesizer=synthesizer,
        fallback_temperature=0.3,
    )
    assert result.answer == "From my synthesizer."
    assert answerer.calls == []
    assert seen["opts"]["temperature"] == 0.3
    assert isinstance(seen["messages"][0], SystemMessage)


def test_synthesis_uses_the_answer_model_when_set():
    answerer = scripted("Strong synthesis.")
    result = run(
        "Q?",
        controller_llm=scripted(search("a")),
        answer_llm=answerer,
        search_fn=ScriptedSearch([[chunk("c1")]]),
        max_iterations=1,
    )
    assert result.answer == "Strong synthesis."
    assert len(answerer.calls) == 1


def test_failed_synthesis_leaves_answer_none():
    model = scripted(search("a"), RuntimeError("model down"))
    result = run(
        "Q?", controller_llm=model, search_fn=ScriptedSearch([[chunk("c1")]]), max_iterations=1
    )
    assert result.terminated_by == "max_iterations"
    assert result.answer is None
    assert all(e["tool"] != "synthesis" for e in result.tool_history)


def test_controller_exception_ends_the_run_as_error():
    model = scripted(search("a"), ConnectionError("connection reset"))
    answerer = scripted("never")
    result = run(
        "Q?", controller_llm=model, answer_llm=answerer, search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.terminated_by == "error"
    assert result.error == "ConnectionError: connection reset"
    assert result.iterations == 2
    assert result.answer is None
    assert answerer.calls == []  # no fallback, no answerer


def test_callable_controller_that_raises_is_an_llm_error():
    def controller(messages, tools, opts):
        raise ValueError("bad request")

    result = run("Q?", controller_llm=controller, search_fn=ScriptedSearch())
    assert result.terminated_by == "error"
    assert "bad request" in result.error
    assert result.iterations == 1


def test_callable_controller_receives_messages_tools_and_opts():
    seen = []

    def controller(messages, tools, opts):
        seen.append((messages, tools, opts))
        return answer("done") if len(seen) > 1 else search("q")

    result = run(
        "Q?", controller_llm=controller, search_fn=ScriptedSearch([[chunk("c1")]]), max_iterations=4
    )
    assert result.answer == "done"
    messages, tools, opts = seen[0]
    assert isinstance(messages[0], SystemMessage) and isinstance(messages[1], HumanMessage)
    assert [t["function"]["name"] for t in tools] == ["search", "answer", "give_up"]
    assert opts["max_iterations"] == 4 and opts["role"] == "controller"
    assert "temperature" not in opts


def test_missing_controller_is_a_clear_error_before_anything_runs():
    found = ScriptedSearch()
    with pytest.raises(ConfigurationError, match="controller"):
        run("Q?", search_fn=found)
    assert found.calls == []


# --- answerer -------------------------------------------------------------------------


def test_answerer_rewrites_the_answer_with_the_whole_conversation():
    answerer = scripted("Polished answer.")
    model = scripted(search("a"), answer("draft"))
    result = run(
        "Q?", controller_llm=model, answer_llm=answerer, search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.answer == "Polished answer."
    assert result.tool_history[-1]["args"] == {"text": "draft"}
    sent = answerer.calls[0]["messages"]
    assert answerer.calls[0]["tools"] == []
    assert any(isinstance(m, ToolMessage) and "text of c1" in m.content for m in sent)
    assert "research is complete" in sent[-1].content
    assert_every_call_answered(sent)


@pytest.mark.parametrize("failure", [RuntimeError("down"), "", AIMessage(content="   ")])
def test_answerer_failure_or_empty_text_keeps_the_draft(failure):
    result = run(
        "Q?",
        controller_llm=scripted(answer("draft")),
        answer_llm=scripted(failure),
        search_fn=ScriptedSearch(),
    )
    assert result.terminated_by == "answered"
    assert result.answer == "draft"


def test_answerer_never_runs_on_give_up_but_rewrites_a_plain_text_answer():
    answerer = scripted("rewritten")
    first = run(
        "Q?",
        controller_llm=scripted(give_up("no")),
        answer_llm=answerer,
        search_fn=ScriptedSearch(),
    )
    assert first.answer == "Could not answer: no" and answerer.calls == []
    second = run(
        "Q?", controller_llm=scripted("text reply"), answer_llm=answerer, search_fn=ScriptedSearch()
    )
    assert second.terminated_by == "answered" and second.answer == "rewritten"
    assert (
        second.messages[-3].content == "text reply"
    )  # the draft, then the instruction, then the rewrite


def test_answer_prompt_as_string_and_function():
    answerer = scripted("A1", "A2")
    run(
        "Q?",
        controller_llm=scripted(answer("d")),
        answer_llm=answerer,
        search_fn=ScriptedSearch(),
        answer_prompt="Be brief.",
    )
    run(
        "Q?",
        controller_llm=scripted(answer("d")),
        answer_llm=answerer,
        search_fn=ScriptedSearch(),
        answer_prompt=lambda opts: f"Budget was {opts['max_iterations']}.",
        max_iterations=7,
    )
    assert answerer.calls[0]["messages"][-1].content == "Be brief."
    assert answerer.calls[1]["messages"][-1].content == "Budget was 7."


# --- temperatures ----------------------------------------------------------------------


def test_role_temperatures_reach_the_right_calls():
    controller = scripted(search("a"), answer("d"))
    answerer = scripted("final")
    run(
        "Q?",
        controller_llm=controller,
        answer_llm=answerer,
        search_fn=ScriptedSearch([[chunk("c1")]]),
        temperature=0.5,
        controller_temperature=0.0,
    )
    assert [c["kwargs"].get("temperature") for c in controller.calls] == [0.0, 0.0]
    assert answerer.calls[0]["kwargs"]["temperature"] == 0.5


def test_no_temperature_means_none_is_passed():
    controller = scripted(answer("d"))
    run("Q?", controller_llm=controller, search_fn=ScriptedSearch())
    assert "temperature" not in controller.calls[0]["kwargs"]


def test_environment_defaults_apply_and_explicit_values_win(monkeypatch):
    monkeypatch.setenv("ARCANA_LOOP_MAX_ITERATIONS", "1")
    monkeypatch.setenv("ARCANA_LOOP_TEMPERATURE", "0.25")
    model = scripted(search("a"), search("b"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=ScriptedSearch(), fallback_synthesis=False)
    assert result.iterations == 1
    assert model.calls[0]["kwargs"]["temperature"] == 0.25
    model = scripted(search("a"), answer("x"))
    assert (
        run("Q?", controller_llm=model, search_fn=ScriptedSearch(), max_iterations=5).terminated_by
        == "answered"
    )


# --- scoping ---------------------------------------------------------------------------


def search_params(model):
    schema = next(t for t in model.bound_tools[0] if t["function"]["name"] == "search")
    return schema["function"]["parameters"]["properties"], schema["function"]["description"]


@pytest.mark.parametrize("collection", ["all", None, "docs", ["docs"]])  # [] asks no model
def test_search_schema_has_no_collection_parameter_unless_picking(collection):
    model = scripted(answer("x"))
    run("Q?", controller_llm=model, search_fn=ScriptedSearch(), collection=collection)
    properties, _ = search_params(model)
    assert set(properties) == {"query", "limit"}
    assert "# Collections" not in model.calls[0]["messages"][0].content


def test_pick_scope_lists_exactly_the_allowed_collections():
    model = scripted(answer("x"))
    run("Q?", controller_llm=model, search_fn=ScriptedSearch(), collection=["docs", "wiki"])
    properties, description = search_params(model)
    assert properties["collection"]["enum"] == ["docs", "wiki"]
    assert '"docs", "wiki"' in description
    system = model.calls[0]["messages"][0].content
    assert (
        "# Collections" in system
        and "`docs`, `wiki`" in system
        and "`collection` argument" in system
    )


@pytest.mark.parametrize(
    ("collection", "argument", "expected"),
    [
        ("all", None, None),
        ("docs", None, "docs"),
        ("docs", "wiki", "docs"),  # the lock wins over what the controller sends
        (["docs"], None, "docs"),
        (["docs", "wiki"], None, ["docs", "wiki"]),
        (["docs", "wiki"], "wiki", "wiki"),
    ],
)
def test_search_receives_the_resolved_scope(collection, argument, expected):
    args = {"collection": argument} if argument else {}
    found = ScriptedSearch([[chunk("c1")]])
    run(
        "Q?",
        controller_llm=scripted(search("q", **args), answer("x")),
        search_fn=found,
        collection=collection,
    )
    assert found.calls == [{"query": "q", "collection": expected, "limit": 5}]


def test_collection_outside_the_allowed_list_is_a_tool_error_and_the_loop_goes_on():
    found = ScriptedSearch([[chunk("c1")]])
    model = scripted(search("q", collection="secret"), search("q", collection="docs"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=found, collection=["docs", "wiki"])
    assert (
        result.tool_history[0]["summary"]
        == 'search error: collection "secret" is not in the allowed list ("docs", "wiki")'
    )
    assert result.tool_history[0]["returned_chunk_ids"] == []
    assert found.calls == [{"query": "q", "collection": "docs", "limit": 5}]
    assert result.terminated_by == "answered"


def test_empty_scope_matches_nothing_and_ends_as_a_give_up_before_any_model_call():
    found = ScriptedSearch([[chunk("c1")], [chunk("c2")]])
    model = scripted(search("q"), search("q", collection="docs"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=found, collection=[])
    assert found.calls == []  # never called: a custom search cannot mistake [] for "everything"
    assert model.calls == []  # a question about nothing is no question for a model
    assert result.terminated_by == "gave_up"
    assert "scope is empty (collection=[])" in result.answer
    assert result.chunks == [] and result.tool_history == []


@pytest.mark.parametrize("bad", [42, {"a": 1}, [1, 2], ["ok", ""], "   "])
def test_malformed_collection_is_rejected_before_anything_runs(bad):
    model = scripted(answer("x"))
    with pytest.raises((TypeError, ValueError)):
        run("Q?", controller_llm=model, search_fn=ScriptedSearch(), collection=bad)
    assert model.calls == []


# --- search results and chunks -----------------------------------------------------------


def test_search_result_shows_full_text_of_top_five_with_ids():
    results = [chunk(f"c{i}", f"text {i} " + "x" * 900, score=1 - i / 10) for i in range(7)]
    model = scripted(search("q", limit=7), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=ScriptedSearch([results]))
    summary = result.tool_history[0]["summary"]
    assert summary.startswith('Found 7 chunks. Top 5:\n\n<chunk n="1" id="c0">\ntext 0 ')
    assert '<chunk n="5" id="c4">' in summary and '"c5"' not in summary
    assert "x" * 900 in summary  # never truncated
    assert result.tool_history[0]["returned_chunk_ids"] == [f"c{i}" for i in range(7)]


def test_empty_search_says_no_results():
    result = run(
        "Q?", controller_llm=scripted(search("q"), answer("x")), search_fn=ScriptedSearch([[]])
    )
    assert result.tool_history[0]["summary"] == "No results."


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "search error: missing :query argument"),
        ({"query": "  "}, "search error: query must be a non-blank string"),
        ({"query": "q", "limit": "five"}, "search error: limit must be a positive integer"),
    ],
)
def test_bad_search_arguments_are_tool_errors(args, message):
    found = ScriptedSearch()
    result = run(
        "Q?",
        controller_llm=scripted(calls(tool_call("search", **args)), answer("x")),
        search_fn=found,
    )
    assert result.tool_history[0]["summary"].startswith(message)
    assert found.calls == []
    assert result.terminated_by == "answered"


def test_search_failure_is_a_tool_error_not_a_crash():
    found = ScriptedSearch([TimeoutError("db timed out")])
    result = run("Q?", controller_llm=scripted(search("q"), answer("x")), search_fn=found)
    assert result.tool_history[0]["summary"] == "search error: TimeoutError: db timed out"
    assert result.terminated_by == "answered"


def test_chunks_are_deduplicated_sorted_and_capped():
    found = ScriptedSearch(
        [
            [chunk("a", score=0.1), chunk("b", score=0.5)],
            [chunk("c", score=0.9), chunk("d", score=0.95), chunk("b", score=0.7)],
        ]
    )
    model = scripted(search("q1"), search("q2"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=found, chunk_cap=3)
    assert [(c["id"], c["score"]) for c in result.chunks] == [("d", 0.95), ("c", 0.9), ("b", 0.7)]


def test_chunk_cap_zero_keeps_no_chunks():
    result = run(
        "Q?",
        controller_llm=scripted(search("q"), answer("x")),
        search_fn=ScriptedSearch([[chunk("a")]]),
        chunk_cap=0,
    )
    assert result.chunks == []
    assert result.tool_history[0]["returned_chunk_ids"] == ["a"]


def test_odd_search_results_are_normalised():
    class Hit:
        id, text, score = 7, "object hit", "0.3"

    results = [{"text": "no id"}, {"id": "x", "score": "high"}, Hit(), "not a chunk", None]
    result = run(
        "Q?", controller_llm=scripted(search("q"), answer("x")), search_fn=ScriptedSearch([results])
    )
    by_text = {c["text"]: c for c in result.chunks}
    assert by_text["no id"]["id"].startswith("anon-") and by_text["no id"]["score"] == 0.0
    assert by_text[""]["id"] == "x" and by_text[""]["score"] == 0.0
    assert by_text["object hit"] == {"id": "7", "text": "object hit", "score": 0.3}
    json.dumps(result.to_dict())


# --- several calls per turn, custom and unknown tools ---------------------------------------


def test_calls_after_a_terminating_call_are_skipped_but_answered():
    found = ScriptedSearch([[chunk("c1")]])
    turn = calls(
        tool_call("search", query="first"),
        tool_call("answer", text="done"),
        tool_call("search", query="never"),
    )
    result = run("Q?", controller_llm=scripted(turn), search_fn=found)
    assert [c["query"] for c in found.calls] == ["first"]
    assert [e["tool"] for e in result.tool_history] == ["search", "answer"]
    assert all(e["iteration"] == 0 for e in result.tool_history)
    skipped = [m for m in result.messages if isinstance(m, ToolMessage)][-1]
    assert skipped.content.startswith("Skipped")
    assert_every_call_answered(result.messages)


def test_several_searches_in_one_turn_run_in_order():
    found = ScriptedSearch({"a": [chunk("ca")], "b": [chunk("cb")]})
    turn = calls(tool_call("search", query="a"), tool_call("search", query="b"))
    result = run("Q?", controller_llm=scripted(turn, answer("x")), search_fn=found)
    assert [e["args"]["query"] for e in result.tool_history[:2]] == ["a", "b"]
    assert result.iterations == 2


def test_custom_tools_are_offered_executed_and_never_terminate():
    @tool
    def web_lookup(query: str) -> str:
        """Look something up on the web."""
        return f"web says {query}"

    @tool
    def broken(query: str) -> str:
        """Always fails."""
        raise RuntimeError("service down")

    model = scripted(
        calls(
            tool_call("web_lookup", query="x"),
            tool_call("broken", query="y"),
            tool_call("nope", a=1),
        ),
        answer("x"),
    )
    result = run("Q?", controller_llm=model, search_fn=ScriptedSearch(), tools=[web_lookup, broken])
    assert [t["function"]["name"] for t in model.bound_tools[0]] == [
        "search",
        "answer",
        "give_up",
        "web_lookup",
        "broken",
    ]
    summaries = [e["summary"] for e in result.tool_history]
    assert summaries[:3] == ["web says x", "Tool error: service down", "Unknown tool: nope"]
    assert result.terminated_by == "answered"


def test_custom_tool_cannot_take_a_control_tools_name():
    @tool
    def answer(text: str) -> str:
        """Shadow."""
        return ""

    with pytest.raises(ValueError, match="control tools"):
        run("Q?", controller_llm=scripted(), tools=[answer], search_fn=ScriptedSearch())


@pytest.mark.parametrize(
    ("call", "text"),
    [(tool_call("answer"), "answer needs"), (tool_call("give_up"), "give_up needs")],
)
def test_terminating_tools_without_their_argument_continue_with_an_error(call, text):
    result = run(
        "Q?", controller_llm=scripted(calls(call), answer("ok")), search_fn=ScriptedSearch()
    )
    assert text in result.tool_history[0]["summary"]
    assert result.answer == "ok"


def test_missing_and_duplicate_tool_call_ids_are_made_unique():
    turn = AIMessage(
        content="",
        tool_calls=[
            {"name": "search", "args": {"query": "a"}, "id": None, "type": "tool_call"},
            {"name": "search", "args": {"query": "b"}, "id": "dup", "type": "tool_call"},
            {"name": "search", "args": {"query": "c"}, "id": "dup", "type": "tool_call"},
        ],
    )
    result = run("Q?", controller_llm=scripted(turn, answer("x")), search_fn=ScriptedSearch())
    assert_every_call_answered(result.messages)
    assert len(result.tool_history) == 4


def test_invalid_json_arguments_get_a_tool_error():
    turn = AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "name": "search",
                "args": "{not json",
                "id": "bad",
                "error": "JSONDecodeError",
                "type": "invalid_tool_call",
            }
        ],
    )
    result = run("Q?", controller_llm=scripted(turn, answer("x")), search_fn=ScriptedSearch())
    assert "not valid JSON" in result.tool_history[0]["summary"]
    assert result.terminated_by == "answered"
    assert_every_call_answered(result.messages)


def test_a_thousand_tool_calls_in_one_turn_are_bounded():
    found = ScriptedSearch()
    turn = calls(*[tool_call("search", query=f"q{i}") for i in range(1000)])
    result = run("Q?", controller_llm=scripted(turn, answer("x")), search_fn=found)
    assert len(found.calls) == 16
    assert_every_call_answered(result.messages)
    assert result.terminated_by == "answered"


def test_empty_tool_call_list_is_a_text_reply():
    result = run(
        "Q?",
        controller_llm=scripted(AIMessage(content="just text", tool_calls=[])),
        search_fn=ScriptedSearch(),
    )
    assert result.terminated_by == "answered" and result.answer == "just text"


# --- prompts -------------------------------------------------------------------------------


def test_default_system_prompt_follows_the_rules():
    model = scripted(answer("x"))
    run("Q?", controller_llm=model, search_fn=ScriptedSearch(), max_iterations=6)
    system = model.calls[0]["messages"][0].content
    for phrase in (
        "research agent",
        "# Workflow",
        "# When not to call tools",
        "at most 6 turns",
        "# Output",
        "based on",
    ):
        assert phrase in system
    assert "{" not in system  # every slot filled


def test_system_prompt_as_string_and_function():
    first, second = scripted(answer("x")), scripted(answer("x"))
    run("Q?", controller_llm=first, search_fn=ScriptedSearch(), system_prompt="Custom prompt.")
    run(
        "Q?",
        controller_llm=second,
        search_fn=ScriptedSearch(),
        system_prompt=lambda o: f"Turns: {o['max_iterations']}",
        max_iterations=3,
    )
    assert first.calls[0]["messages"][0].content == "Custom prompt."
    assert second.calls[0]["messages"][0].content == "Turns: 3"


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["", "   ", None, 42, "x" * 1_000_000])
def test_bad_questions_are_rejected_before_anything_runs(question):
    model = scripted(answer("x"))
    with pytest.raises((TypeError, ValueError)):
        run(question, controller_llm=model, search_fn=ScriptedSearch())
    assert model.calls == []


@pytest.mark.parametrize(
    "options",
    [
        {"max_iterations": -1},
        {"max_iterations": "3"},
        {"chunk_cap": -5},
        {"temperature": "hot"},
        {"temperature": float("nan")},
        {"fallback_synthesis": "yes"},
        {"search_opts": ["mode"]},
        {"no_such_option": 1},
    ],
)
def test_bad_options_are_rejected_before_anything_runs(options):
    model = scripted(answer("x"))
    with pytest.raises((TypeError, ValueError)):
        run("Q?", controller_llm=model, search_fn=ScriptedSearch(), **options)
    assert model.calls == []


@pytest.mark.parametrize("spec", ["gpt-4o", "nosuchprovider:model", ":", 12])
def test_bad_model_specs_are_clear_errors(spec):
    with pytest.raises((TypeError, ValueError)):
        run("Q?", controller_llm=spec, search_fn=ScriptedSearch())


def test_result_is_json_serialisable():
    result = run(
        "Q?",
        controller_llm=scripted(search("q"), answer("x")),
        search_fn=ScriptedSearch([[chunk("c1", metadata={"page": 1})]]),
    )
    data = json.loads(json.dumps(result.to_dict(messages=True)))
    assert data["terminated_by"] == "answered" and data["chunks"][0]["metadata"] == {"page": 1}
