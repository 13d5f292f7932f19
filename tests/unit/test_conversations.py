"""Conversations on a thread: follow-up questions, messages in and out, per-question state."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from arcana_loop.core.context import LoopContext
from arcana_loop.graph import arun, run
from arcana_loop.graph.build import build_graph, make_deps
from arcana_loop.graph.trace import trace
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, give_up, search

TIMEOUT_TEXT = (
    "asyncio.wait_for runs a coroutine with a timeout and cancels it when the timeout expires."
)
JSON_TEXT = "json.loads parses a JSON document from a string."


def _texts(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, str(m.content)) for m in messages]


def _every_call_answered(messages: list[BaseMessage]) -> bool:
    """Whether every assistant tool call is answered by a tool message before the next other message."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            pending.discard(message.tool_call_id)
            continue
        if pending:
            return False
        if isinstance(message, AIMessage):
            pending = {str(c["id"]) for c in message.tool_calls}
    return not pending


def test_a_follow_up_on_a_thread_answers_the_new_question_with_fresh_per_question_fields() -> None:
    model = ScriptedChatModel(
        responses=[
            search("timeouts"),
            answer("Use wait_for [t1]."),
            search("cancel"),
            answer("It is cancelled [t2]."),
        ]
    )
    found = ScriptedSearch(
        [[chunk("t1", TIMEOUT_TEXT)], [chunk("t2", "the task is cancelled", score=0.9)]]
    )
    saver = InMemorySaver()
    first = run(
        "How do I run a coroutine with a timeout?",
        controller_llm=model,
        search_fn=found,
        checkpointer=saver,
    )
    second = run(
        "And what happens to it then?",
        controller_llm=model,
        search_fn=found,
        checkpointer=saver,
        thread_id=first.thread_id,
    )

    sent = model.calls[2]["messages"]
    assert isinstance(sent[-1], HumanMessage) and sent[-1].content == "And what happens to it then?"
    # the earlier answer is part of the conversation, as its reader saw it (the ids are in its call)
    assert ("ai", "Use wait_for [1].") in _texts(sent)
    assert second.question == "And what happens to it then?"
    assert (second.answer, second.terminated_by, second.iterations) == (
        "It is cancelled [t2].",
        "answered",
        2,
    )
    assert [e["tool"] for e in second.tool_history] == ["search", "answer"]
    assert [e["args"].get("query") for e in second.tool_history][:1] == ["cancel"]
    assert [c["id"] for c in second.chunks] == [
        "t2"
    ]  # earlier questions' chunks are not this one's evidence
    assert second.question_index == 1 and first.question_index == 0
    questions = [m.content for m in second.messages if isinstance(m, HumanMessage)]
    assert questions == ["How do I run a coroutine with a timeout?", "And what happens to it then?"]
    assert _every_call_answered(second.messages)


def test_earlier_search_results_are_sent_by_chunk_id_without_their_text() -> None:
    model = ScriptedChatModel(
        responses=[
            search("timeouts"),
            answer("Use wait_for [t1]."),
            search("json"),
            answer("json.loads [j1]"),
        ]
    )
    found = ScriptedSearch([[chunk("t1", TIMEOUT_TEXT)], [chunk("j1", JSON_TEXT)]])
    saver = InMemorySaver()
    first = run("How do I time out?", controller_llm=model, search_fn=found, checkpointer=saver)
    run(
        "How do I parse JSON?",
        controller_llm=model,
        search_fn=found,
        checkpointer=saver,
        thread_id=first.thread_id,
    )

    earlier_results = [
        str(m.content)
        for m in model.calls[2]["messages"]
        if isinstance(m, ToolMessage) and m.name == "search"
    ]
    assert (
        len(earlier_results) == 1
        and 'id="t1"' in earlier_results[0]
        and TIMEOUT_TEXT not in earlier_results[0]
    )
    current_results = [
        str(m.content)
        for m in model.calls[3]["messages"]
        if isinstance(m, ToolMessage) and m.name == "search"
    ]
    assert JSON_TEXT in current_results[-1]  # this question's results are sent whole


def test_usage_and_budgets_are_per_question_and_summed_for_the_thread() -> None:
    model = ScriptedChatModel(responses=[search("a"), answer("one"), search("b"), answer("two")])
    saver = InMemorySaver()
    first = run(
        "Q1?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")], [chunk("c2")]]),
        checkpointer=saver,
        max_iterations=2,
    )
    second = run(
        "Q2?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c2")]]),
        checkpointer=saver,
        thread_id=first.thread_id,
        max_iterations=2,
    )
    assert (second.terminated_by, second.answer, second.iterations) == (
        "answered",
        "two",
        2,
    )  # a fresh turn budget
    own = second.usage["node_seconds"]["controller"]
    total = second.thread_usage["node_seconds"]["controller"]
    assert total == pytest.approx(own + first.usage["node_seconds"]["controller"])


def test_a_failed_question_is_never_returned_for_the_next_one() -> None:
    model = ScriptedChatModel(responses=[RuntimeError("rate limited"), answer("fine now")])
    saver = InMemorySaver()
    first = run("Q1?", controller_llm=model, checkpointer=saver, search_fn=ScriptedSearch())
    assert first.terminated_by == "error"
    assert first.messages[-1].content.startswith(
        "The run failed before an answer: RuntimeError: rate limited"
    )
    second = run(
        "Q2?",
        controller_llm=model,
        checkpointer=saver,
        thread_id=first.thread_id,
        search_fn=ScriptedSearch(),
    )
    assert (second.answer, second.terminated_by, second.error) == ("fine now", "answered", None)


class KilledOnce:
    """A search whose first call stops the process (as a kill would); later calls find ``found``."""

    def __init__(self, found: list[dict[str, Any]]) -> None:
        self.found = found
        self.queries: list[str] = []

    def __call__(self, query: str, **_: Any) -> list[dict[str, Any]]:
        self.queries.append(query)
        if len(self.queries) == 1:
            raise KeyboardInterrupt  # the process stops mid-question
        return self.found


def test_a_question_left_unfinished_gives_way_to_the_new_one_and_the_conversation_stays_valid() -> (
    None
):
    model = ScriptedChatModel(
        responses=[search("timeouts"), search("json"), answer("json.loads [j1]")]
    )
    killed_once = KilledOnce([chunk("j1", JSON_TEXT)])
    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):
        run(
            "How do I time out?",
            controller_llm=model,
            search_fn=killed_once,
            checkpointer=saver,
            thread_id="left",
        )
    second = run(
        "How do I parse JSON?",
        controller_llm=model,
        search_fn=killed_once,
        checkpointer=saver,
        thread_id="left",
    )
    assert (second.answer, second.terminated_by, second.question_index) == (
        "json.loads [j1]",
        "answered",
        1,
    )
    assert killed_once.queries == ["timeouts", "json"]
    assert _every_call_answered(second.messages)
    assert _every_call_answered(model.calls[1]["messages"][1:])


def test_the_same_question_asked_again_carries_on_with_the_search_it_was_making() -> None:
    model = ScriptedChatModel(responses=[search("timeouts"), answer("wait_for [t1]")])
    killed_once = KilledOnce([chunk("t1", "asyncio.wait_for times out.")])
    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):
        run("How do I time out?", controller_llm=model, search_fn=killed_once, checkpointer=saver)
    thread_id = next(iter(saver.storage))
    again = run(
        "How do I time out?",
        controller_llm=model,
        search_fn=killed_once,
        checkpointer=saver,
        thread_id=thread_id,
    )
    assert (again.answer, again.terminated_by, again.question_index) == (
        "wait_for [t1]",
        "answered",
        0,
    )
    assert killed_once.queries == [
        "timeouts",
        "timeouts",
    ]  # the pending search ran, no new turn asked for it
    assert [e["tool"] for e in again.tool_history] == ["search", "answer"]
    assert len(model.calls) == 2 and _every_call_answered(model.calls[1]["messages"][1:])


def test_a_served_run_carrying_on_a_question_records_the_options_it_runs_with() -> None:
    model = ScriptedChatModel(responses=[search("timeouts"), answer("wait_for [t1]")])
    killed_once = KilledOnce([chunk("t1", "asyncio.wait_for times out.")])
    # a served graph: its input holds no options, the run's context does
    compiled = build_graph(make_deps(controller_llm=model, search_fn=killed_once)).compile(
        checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "served"}}
    with pytest.raises(KeyboardInterrupt):
        compiled.invoke({"question": "Q?"}, config, context=LoopContext(max_iterations=5))
    out = compiled.invoke({"question": "Q?"}, config, context=LoopContext(max_iterations=7))
    assert out["answer"] == "wait_for [t1]"
    assert compiled.get_state(config).values["options"]["max_iterations"] == 7


def test_a_chat_message_after_an_unfinished_question_is_sent_as_a_valid_conversation() -> None:
    model = ScriptedChatModel(responses=[search("timeouts"), answer("json.loads")])
    calls = 0

    def killed_once(query: str, **_: Any) -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        raise KeyboardInterrupt

    compiled = build_graph(make_deps(controller_llm=model, search_fn=killed_once)).compile(
        checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "chat"}}
    with pytest.raises(KeyboardInterrupt):
        compiled.invoke({"question": "How do I time out?"}, config, context=LoopContext())
    out = compiled.invoke(
        {"messages": [{"type": "human", "content": "How do I parse JSON?"}]},
        config,
        context=LoopContext(),
    )
    assert (out["answer"], out["question"]) == ("json.loads", "How do I parse JSON?")
    assert _every_call_answered(model.calls[1]["messages"][1:])


@pytest.mark.parametrize(
    "message",
    [
        {"type": "human", "content": "What is A?"},
        {"role": "user", "content": [{"type": "text", "text": "What is A?"}]},
        HumanMessage(content="What is A?", id="client-1"),
    ],
    ids=["dict", "content-blocks", "message-object"],
)
def test_chat_clients_start_a_run_with_messages_and_read_the_answer_from_them(message: Any) -> None:
    model = ScriptedChatModel(responses=[search("a"), answer("A is a letter [c1].")])
    compiled = build_graph(
        make_deps(controller_llm=model, search_fn=ScriptedSearch([[chunk("c1")]]))
    ).compile()
    out = compiled.invoke({"messages": [message]}, context=LoopContext())
    assert (out["question"], out["answer"], out["terminated_by"]) == (
        "What is A?",
        "A is a letter [c1].",
        "answered",
    )
    last = out["messages"][-1]
    assert (
        isinstance(last, AIMessage)
        and last.text.startswith("A is a letter [1].\n\nSources:\n[1] ")
        and not last.tool_calls
    )
    assert any(
        isinstance(m, ToolMessage) and m.name == "search" for m in out["messages"]
    )  # tool steps stay for debugging
    assert sum(isinstance(m, HumanMessage) for m in out["messages"]) == 1


@pytest.mark.parametrize(
    ("responses", "options", "ending"),
    [
        ([give_up("the base says nothing")], {}, "Could not answer: the base says nothing"),
        ([RuntimeError("boom")], {}, "The run failed before an answer: RuntimeError: boom"),
        (
            [search("a"), search("b")],
            {"max_iterations": 2, "fallback_synthesis": False},
            "No answer within the run's budget (iterations).",
        ),
        (
            [search("a"), search("b"), "Synthesized answer."],
            {"max_iterations": 2},
            "Synthesized answer.",
        ),
        (["Plain reply."], {}, "Plain reply."),
    ],
    ids=["gave_up", "error", "budget", "synthesis", "plain-text"],
)
def test_every_outcome_ends_the_messages_with_an_assistant_text(
    responses: list[Any], options: dict[str, Any], ending: str
) -> None:
    model = ScriptedChatModel(responses=responses)
    result = run(
        "What is A?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")], [chunk("c2")]]),
        **options,
    )
    last = result.messages[-1]
    assert (
        isinstance(last, AIMessage)
        and last.content == ending
        and not last.tool_calls
        and last.name == "answer"
    )
    assert (
        sum(isinstance(m, AIMessage) and m.content == ending for m in result.messages) == 1
    )  # said once


def test_an_input_without_question_or_human_message_is_refused_before_any_model_call() -> None:
    model = ScriptedChatModel(responses=[])
    compiled = build_graph(make_deps(controller_llm=model)).compile()
    with pytest.raises(ValueError, match="needs a 'question'.*or 'messages'"):
        compiled.invoke({"messages": []}, context=LoopContext())
    assert model.calls == []


async def test_arun_continues_a_conversation_too() -> None:
    model = ScriptedChatModel(responses=[answer("first"), answer("second")])
    saver = InMemorySaver()
    found = ScriptedSearch()
    first = await arun("Q1?", controller_llm=model, checkpointer=saver, search_fn=found)
    second = await arun(
        "Q2?", controller_llm=model, checkpointer=saver, thread_id=first.thread_id, search_fn=found
    )
    assert (second.question, second.answer, second.question_index) == ("Q2?", "second", 1)
    assert model.calls[1]["messages"][-1].content == "Q2?"


def test_trace_tells_the_questions_of_a_thread_apart() -> None:
    model = ScriptedChatModel(responses=[search("a"), answer("one"), search("b"), answer("two")])
    saver = InMemorySaver()
    first = run(
        "Q1?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")], [chunk("c2")]]),
        checkpointer=saver,
    )
    assert first.thread_id is not None
    run(
        "Q2?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c2")]]),
        checkpointer=saver,
        thread_id=first.thread_id,
    )
    rows = trace(first.thread_id, saver)
    assert [(r.question, r.node, r.iteration) for r in rows] == [
        (0, "start", 0),
        (0, "controller", 0),
        (0, "tools", 0),
        (0, "controller", 1),
        (0, "tools", 1),
        (0, "finish", 1),
        (1, "start", 0),
        (1, "controller", 0),
        (1, "tools", 0),
        (1, "controller", 1),
        (1, "tools", 1),
        (1, "finish", 1),
    ]
    last = trace(first.thread_id, saver, question=-1)
    assert [s["query"] for r in last for s in r.searches] == ["b"]


def test_a_follow_up_is_recorded_and_replayed_on_its_own() -> None:
    from arcana_loop.graph.replay import Record, record_of, verify_record

    model = ScriptedChatModel(
        responses=[search("a"), answer("one [c1]"), search("b"), search("c"), "Synthesized two."]
    )
    found = ScriptedSearch([[chunk("c1")], [chunk("c2")], [chunk("c3", score=0.7)]])
    saver = InMemorySaver()
    first = run("Q1?", controller_llm=model, search_fn=found, checkpointer=saver)
    assert first.thread_id is not None
    second = run(
        "And Q2?",
        controller_llm=model,
        search_fn=found,
        checkpointer=saver,
        thread_id=first.thread_id,
        max_iterations=2,
    )
    assert second.answer == "Synthesized two."
    record = record_of(first.thread_id, saver)
    assert (record.question, record.question_index) == ("And Q2?", 1)
    assert [s["query"] for s in record.searches] == ["b", "c"] and len(
        record.controller_replies
    ) == 2
    assert [m["data"]["content"] for m in record.conversation if m["type"] == "human"] == ["Q1?"]
    assert verify_record(record) == []
    earlier = record_of(first.thread_id, saver, question=0)
    assert (earlier.question, earlier.expected["answer"], earlier.conversation) == (
        "Q1?",
        "one [c1]",
        [],
    )
    assert verify_record(Record(**earlier.to_dict())) == []


def test_a_conversations_checkpoints_grow_linearly_with_its_questions() -> None:
    from bench.checkpoint_bench import run_conversation, stored_bytes

    sizes = {}
    for questions in (4, 8):
        saver = InMemorySaver()
        thread_id, values = run_conversation(saver, questions)
        assert values["question_index"] == questions - 1
        sizes[questions] = stored_bytes(saver, thread_id)
    # twice the questions, about twice the bytes: each question stores what it added, not the conversation again
    assert sizes[8] <= 2.2 * sizes[4], sizes
