"""The design's loop points: replaceable tools, exception and grounding events, ignored
arguments, the answerer on plain text, search before answering, give-ups left ungrounded."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from arcana_loop.graph import DEFAULT_TOOLS, arun, default_tools, ground, run
from arcana_loop.nodes.search_first import SEARCH_FIRST
from tests.fakes import (
    ScriptedChatModel,
    ScriptedSearch,
    answer,
    calls,
    chunk,
    give_up,
    scripted,
    search,
    tool_call,
)
from tests.unit.test_loop import assert_every_call_answered


def offered(model: ScriptedChatModel, call: int = 0) -> list[str]:
    return [t["function"]["name"] for t in model.bound_tools[call]]


@pytest.fixture
def default_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run with require_search at its default (the suite turns it off for scripted models)."""
    monkeypatch.delenv("ARCANA_LOOP_REQUIRE_SEARCH", raising=False)


# --- 1. tools= replaces the defaults when it names them -----------------------------------


@tool
def web_lookup(query: str) -> str:
    """Look something up on the web."""
    return f"web says {query}"


def test_default_tools_are_public_in_order_and_a_fresh_list_each_time():
    assert [t.name for t in DEFAULT_TOOLS] == ["search", "answer", "give_up"]
    assert default_tools() == list(DEFAULT_TOOLS) and default_tools() is not default_tools()
    with pytest.raises(NotImplementedError, match="run by the loop"):
        DEFAULT_TOOLS[1].invoke({"text": "x"})


def test_a_list_holding_default_tools_is_the_whole_toolset():
    without_give_up = [t for t in default_tools() if t.name != "give_up"]
    model = scripted(calls(tool_call("give_up", reason="no")), answer("done"))
    result = run(
        "Q?", controller_llm=model, tools=[*without_give_up, web_lookup], search_fn=ScriptedSearch()
    )
    assert offered(model) == ["search", "answer", "web_lookup"]
    # give_up was not offered, so a call to it is unknown and does not end the run
    assert result.tool_history[0]["summary"] == "Unknown tool: give_up"
    assert result.terminated_by == "answered" and result.answer == "done"


def _system_prompt(model: ScriptedChatModel) -> str:
    first = model.calls[0]["messages"][0]
    assert isinstance(first, SystemMessage)
    return str(first.content)


def test_the_system_prompt_names_only_the_tools_offered():
    without_give_up = [t for t in default_tools() if t.name != "give_up"]
    model = scripted(answer("done"))
    run(
        "Q?", controller_llm=model, tools=[*without_give_up, web_lookup], search_fn=ScriptedSearch()
    )
    prompt = _system_prompt(model)
    assert "give_up" not in prompt and "give up" not in prompt
    assert "- `web_lookup`: Look something up on the web." in prompt
    assert "- `search`:" in prompt and "Call `answer`" in prompt
    assert prompt.index("`search`") < prompt.index("`answer`") < prompt.index("`web_lookup`")


def test_the_default_system_prompt_names_the_three_default_tools():
    model = scripted(answer("done"))
    run("Q?", controller_llm=model, search_fn=ScriptedSearch())
    prompt = _system_prompt(model)
    for name in ("search", "answer", "give_up"):
        assert f"- `{name}`:" in prompt
    assert "give up and say what is missing" in prompt


def test_without_answer_offered_the_prompt_asks_for_a_plain_reply():
    only_search = [t for t in default_tools() if t.name == "search"]
    model = scripted("a plain reply")
    run("Q?", controller_llm=model, tools=only_search, search_fn=ScriptedSearch())
    prompt = _system_prompt(model)
    assert "`answer`" not in prompt and "Reply with a complete" in prompt


def test_the_toolset_keeps_the_order_it_is_given():
    model = scripted(answer("x"))
    run(
        "Q?",
        controller_llm=model,
        tools=[web_lookup, *reversed(DEFAULT_TOOLS)],
        search_fn=ScriptedSearch(),
    )
    assert offered(model) == ["web_lookup", "give_up", "answer", "search"]


def test_custom_tools_alone_are_still_added_to_the_defaults():
    model = scripted(answer("x"))
    run("Q?", controller_llm=model, tools=[web_lookup], search_fn=ScriptedSearch())
    assert offered(model) == ["search", "answer", "give_up", "web_lookup"]


def test_a_custom_search_tool_replaces_the_built_in_one():
    seen: list[dict] = []

    @tool("search")
    def my_search(query: str) -> str:
        """Search my own index."""
        seen.append({"query": query})
        return f"my index has {query}"

    found = ScriptedSearch([[chunk("c1")]])
    model = scripted(search("wait_for"), answer("x"))
    result = run("Q?", controller_llm=model, tools=[my_search], search_fn=found, collection="docs")
    assert offered(model) == ["search", "answer", "give_up"]
    schema = model.bound_tools[0][0]["function"]
    assert (
        schema["description"] == "Search my own index."
        and "limit" not in schema["parameters"]["properties"]
    )
    assert found.calls == [] and seen == [
        {"query": "wait_for"}
    ]  # the scope is the custom tool's job
    assert result.tool_history[0]["summary"] == "my index has wait_for"
    tool_message = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert tool_message.content == "my index has wait_for"
    assert result.chunks == [] and result.grounded_in_chunks is False


@pytest.mark.parametrize("name", ["answer", "give_up"])
def test_a_custom_tool_cannot_replace_a_control_tool(name):
    @tool(name)
    def impostor(text: str) -> str:
        """Shadow a control tool."""
        return text

    model = scripted(answer("x"))
    with pytest.raises(ValueError, match=rf"cannot be named '{name}'.*control tools"):
        run(
            "Q?",
            controller_llm=model,
            tools=[*DEFAULT_TOOLS[:1], impostor],
            search_fn=ScriptedSearch(),
        )
    assert model.calls == []


def test_a_tool_listed_twice_is_refused():
    with pytest.raises(ValueError, match="'search' appears twice"):
        run(
            "Q?",
            controller_llm=scripted(),
            tools=[*DEFAULT_TOOLS, DEFAULT_TOOLS[0]],
            search_fn=ScriptedSearch(),
        )


# --- 2. a run that raises says so -----------------------------------------------------------


def _broken_prompt(opts):
    raise RuntimeError("prompt  template\nbroke")


@pytest.mark.parametrize("runner", ["run", "arun"])
def test_a_run_that_raises_emits_loop_exception(runner):
    events: list[dict] = []
    kwargs = {
        "controller_llm": scripted(answer("x")),
        "search_fn": ScriptedSearch(),
        "system_prompt": _broken_prompt,
        "on_event": events.append,
    }
    with pytest.raises(RuntimeError, match="broke"):
        if runner == "run":
            run("Q?", **kwargs)
        else:
            asyncio.run(arun("Q?", **kwargs))
    assert [e["event"] for e in events] == ["loop_start", "loop_exception"]
    assert events[-1] == {
        "event": "loop_exception",
        "question": "Q?",
        "max_iterations": 10,
        "iterations": 0,
        "error_type": "RuntimeError",
        "error": "prompt template broke",
    }


def test_a_listener_that_fails_cannot_hide_the_runs_error():
    def listener(event):
        if event["event"] == "loop_exception":
            raise ValueError("listener broke too")

    with pytest.raises(RuntimeError, match="broke"):
        run(
            "Q?",
            controller_llm=scripted(answer("x")),
            search_fn=ScriptedSearch(),
            system_prompt=_broken_prompt,
            on_event=listener,
        )


# --- 3. ground() emits the node's events ----------------------------------------------------


def _grounding_events(events):
    return [e for e in events if e["event"].startswith("ground_")]


def test_ground_called_directly_emits_the_same_events_as_the_node():
    def script():
        return scripted(search("timeout"), answer("wait_for runs a coroutine with a timeout."))

    found = {"timeout": [chunk("c1", "wait_for runs a coroutine with a timeout.", 0.9)]}
    node_events: list[dict] = []
    in_graph = run(
        "Q?",
        controller_llm=script(),
        search_fn=ScriptedSearch(found),
        grounder="local",
        on_event=node_events.append,
    )
    plain = run("Q?", controller_llm=script(), search_fn=ScriptedSearch(found))
    direct_events: list[dict] = []
    grounded = ground(plain, "local", on_event=direct_events.append)
    assert grounded.grounding == in_graph.grounding and grounded.grounding is not None
    assert _grounding_events(direct_events) == _grounding_events(node_events)
    stop = direct_events[-1]
    assert stop["event"] == "ground_stop" and stop["score"] == grounded.grounding["score"]
    assert stop["faithful_span_count"] == len(grounded.grounding["faithful_spans"])
    assert stop["hallucinated_span_count"] == len(grounded.grounding["hallucinated_spans"])


def test_ground_refuses_an_on_event_that_is_not_a_function():
    result = run("Q?", controller_llm=scripted(answer("x")), search_fn=ScriptedSearch())
    with pytest.raises(TypeError, match="on_event must be a function"):
        ground(result, "local", on_event="print")


# --- 4. arguments the offered schema does not have ------------------------------------------


@pytest.mark.parametrize("collection", ["all", "docs"])  # [] asks no model (it gives up at start)
def test_arguments_outside_the_offered_schema_never_reach_the_search(collection):
    found = ScriptedSearch([[chunk("c1")]])
    model = scripted(search("q", collection="secret", mode="raw"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=found, collection=collection)
    assert all("mode" not in c and c.get("collection") in (None, "docs") for c in found.calls)
    entry = result.tool_history[0]
    assert entry["ignored_args"] == ["collection", "mode"]
    assert entry["args"] == {"query": "q", "collection": "secret", "mode": "raw"}  # as sent


def test_a_collection_the_schema_offers_is_used_and_not_listed_as_ignored():
    found = ScriptedSearch([[chunk("c1")]])
    model = scripted(search("q", collection="wiki", mode="raw"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=found, collection=["docs", "wiki"])
    assert found.calls == [{"query": "q", "collection": "wiki", "limit": 5}]
    assert result.tool_history[0]["ignored_args"] == ["mode"]


def test_an_ignored_collection_does_not_make_a_repeated_search_look_new():
    found = ScriptedSearch([[chunk("c1")], [chunk("c2")]])
    model = scripted(search("q", collection="secret"), search("q"), answer("x"))
    result = run("Q?", controller_llm=model, search_fn=found)
    assert len(found.calls) == 1 and found.calls[0]["collection"] is None
    assert result.tool_history[1]["duplicate_of"] == 0


def test_answer_and_give_up_ignore_extra_arguments_too():
    result = run(
        "Q?",
        controller_llm=scripted(calls(tool_call("answer", text="x", sources=["c1"]))),
        search_fn=ScriptedSearch(),
    )
    assert result.answer == "x" and result.tool_history[0]["ignored_args"] == ["sources"]


# --- 5. the answer model rewrites a plain-text answer too -----------------------------------


def test_a_plain_text_answer_goes_through_the_answer_model():
    answerer = scripted("Rewritten.")
    model = scripted(search("q"), "draft in plain text")
    result = run(
        "Q?", controller_llm=model, answer_llm=answerer, search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.terminated_by == "answered" and result.answer == "Rewritten."
    sent = answerer.calls[0]["messages"]
    assert sent[-2].content == "draft in plain text" and "research is complete" in sent[-1].content
    assert_every_call_answered(sent)


# --- 6. search before answering ------------------------------------------------------------


@pytest.mark.usefixtures("default_policy")
def test_an_answer_before_any_search_is_sent_back_once():
    found = ScriptedSearch([[chunk("c1", "wait_for takes a timeout")]])
    model = scripted(answer("from memory"), search("wait_for"), answer("wait_for takes a timeout"))
    result = run("How do I time out a coroutine?", controller_llm=model, search_fn=found)
    assert result.terminated_by == "answered" and result.answer == "wait_for takes a timeout"
    assert [e["tool"] for e in result.tool_history] == ["answer", "search", "answer"]
    assert result.tool_history[0]["summary"] == SEARCH_FIRST
    sent_back = [m for m in result.messages if isinstance(m, ToolMessage)][0]
    assert sent_back.content == SEARCH_FIRST
    assert result.grounded_in_chunks is True and result.to_dict()["grounded_in_chunks"] is True
    assert_every_call_answered(result.messages)


@pytest.mark.usefixtures("default_policy")
def test_an_answer_the_model_insists_on_is_taken_and_marked_as_resting_on_no_chunk():
    found = ScriptedSearch()
    result = run(
        "What is the capital of France?",
        controller_llm=scripted(answer("Paris"), answer("Paris")),
        search_fn=found,
    )
    assert result.terminated_by == "answered" and result.answer == "Paris"
    assert found.calls == [] and result.iterations == 2
    assert result.grounded_in_chunks is False


@pytest.mark.usefixtures("default_policy")
def test_a_plain_text_answer_before_any_search_gets_a_system_note_not_a_user_turn():
    model = scripted("from memory", search("q"), answer("x"))
    result = run(
        "What is asyncio?", controller_llm=model, search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.terminated_by == "answered" and result.answer == "x" and result.iterations == 3
    second = model.calls[1]["messages"]
    assert isinstance(second[0], SystemMessage) and "# Search first" in second[0].content
    assert [m.content for m in second[1:]] == ["What is asyncio?", "from memory"]
    assert [type(m) for m in result.messages].count(HumanMessage) == 1
    assert "# Search first" not in model.calls[2]["messages"][0].content  # said once
    assert_every_call_answered(result.messages)


@pytest.mark.usefixtures("default_policy")
def test_a_search_earlier_in_the_same_turn_lets_the_answer_through():
    turn = calls(tool_call("search", query="q"), tool_call("answer", text="x"))
    result = run(
        "What is asyncio?", controller_llm=scripted(turn), search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert (
        result.terminated_by == "answered"
        and result.iterations == 1
        and result.grounded_in_chunks is True
    )


@pytest.mark.usefixtures("default_policy")
@pytest.mark.parametrize(
    "question", ["Hello!", "thanks a lot", "Hi, who are you?", "What's your name?"]
)
def test_small_talk_needs_no_search_by_default(question):
    result = run(
        question,
        controller_llm=scripted("Hello, I answer questions about the docs."),
        search_fn=ScriptedSearch(),
    )
    assert result.terminated_by == "answered" and result.iterations == 1


@pytest.mark.usefixtures("default_policy")
@pytest.mark.parametrize("question", ["hi, what is asyncio?", "Thanks. How do I cancel a task?"])
def test_a_question_after_a_greeting_is_no_small_talk(question):
    model = scripted("from memory", "still from memory")
    result = run(question, controller_llm=model, search_fn=ScriptedSearch())
    assert result.iterations == 2 and result.answer == "still from memory"


@pytest.mark.parametrize(
    ("policy", "question", "iterations"),
    [("on", "Hello!", 2), ("off", "What is asyncio?", 1), ("auto", "Hello!", 1)],
)
def test_require_search_as_an_option(policy, question, iterations):
    result = run(
        question,
        controller_llm=scripted("reply", "reply"),
        search_fn=ScriptedSearch(),
        require_search=policy,
    )
    assert result.iterations == iterations and result.answer == "reply"


def test_require_search_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ARCANA_LOOP_REQUIRE_SEARCH", "on")
    result = run("Hello!", controller_llm=scripted("hi", "hi"), search_fn=ScriptedSearch())
    assert result.iterations == 2


@pytest.mark.parametrize("value", ["always", True])
def test_a_bad_require_search_is_refused_before_the_model_is_called(value):
    model = scripted("x")
    with pytest.raises(ValueError, match=r"require_search must be one of off, on, auto, got"):
        run("Q?", controller_llm=model, search_fn=ScriptedSearch(), require_search=value)
    assert model.calls == []


@pytest.mark.usefixtures("default_policy")
def test_no_answer_is_sent_back_without_turns_left_to_search_and_answer():
    result = run(
        "What is asyncio?",
        controller_llm=scripted(answer("from memory")),
        search_fn=ScriptedSearch(),
        max_iterations=2,
    )
    assert (
        result.terminated_by == "answered"
        and result.answer == "from memory"
        and result.iterations == 1
    )


@pytest.mark.usefixtures("default_policy")
def test_without_a_search_tool_nothing_is_sent_back():
    no_search = [t for t in default_tools() if t.name != "search"]
    result = run(
        "What is asyncio?",
        controller_llm=scripted(answer("x")),
        tools=no_search,
        search_fn=ScriptedSearch(),
    )
    assert result.terminated_by == "answered" and result.iterations == 1


@pytest.mark.usefixtures("default_policy")
def test_an_answer_after_a_custom_evidence_tool_is_not_sent_back():
    model = scripted(calls(tool_call("web_lookup", query="asyncio")), answer("from the web"))
    result = run(
        "What is asyncio?",
        controller_llm=model,
        tools=[*default_tools(), web_lookup],
        search_fn=ScriptedSearch(),
    )
    assert result.terminated_by == "answered" and result.answer == "from the web"
    assert result.iterations == 2 and len(model.calls) == 2  # no note to search first


@pytest.mark.usefixtures("default_policy")
def test_an_answer_before_any_evidence_tool_is_still_sent_back_once():
    model = scripted(answer("from memory"), answer("after the note"))
    result = run("What is asyncio?", controller_llm=model, search_fn=ScriptedSearch())
    assert result.answer == "after the note" and result.iterations == 2
    assert result.tool_history[0]["tool"] == "answer" and SEARCH_FIRST.startswith(
        result.tool_history[0]["summary"][:20]
    )


# --- 8. a give-up is not grounded ------------------------------------------------------------


def test_a_give_up_is_not_grounded_by_the_node_or_by_ground():
    events: list[dict] = []
    found = ScriptedSearch([[chunk("c1", "unrelated text about parsers")]])
    result = run(
        "Q?",
        controller_llm=scripted(search("q"), give_up("nothing relevant")),
        search_fn=found,
        grounder="local",
        on_event=events.append,
    )
    assert result.terminated_by == "gave_up" and result.chunks
    assert result.grounding is None and result.coverage is None
    assert _grounding_events(events) == []
    direct: list[dict] = []
    assert ground(result, "local", on_event=direct.append).grounding is None and direct == []
