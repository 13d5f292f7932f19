"""Streamed answers: which tokens of ``stream_mode="messages"`` are the answer, and the final answer message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk

from arcana_loop.core.context import LoopContext
from arcana_loop.core.sources import answer_text
from arcana_loop.graph.build import build_graph, make_deps
from arcana_loop.nodes.models import ANSWER_TAG, CONTROLLER_TAG
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search


class StreamingModel(GenericFakeChatModel):
    """A chat model that streams its scripted replies word by word, and takes tools (unused)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def _replies(*texts: str) -> Iterator[AIMessage]:
    return iter([AIMessage(content=t) for t in texts])


def _stream(compiled: Any) -> tuple[list[tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """The ``messages`` events of a run, and its final state values."""
    events, values = [], {}
    for mode, item in compiled.stream(
        {"question": "How do I time out?"},
        stream_mode=["messages", "values"],
        context=LoopContext(),
    ):
        if mode == "messages":
            events.append(item)
        else:
            values = item
    return events, values


def test_answer_model_tokens_stream_tagged_as_the_answer_and_the_controller_tagged_apart() -> None:
    controller = ScriptedChatModel(responses=[search("timeouts"), answer("draft [c1]")])
    writer = StreamingModel(messages=_replies("Use asyncio.wait_for with a timeout [c1]."))
    compiled = build_graph(
        make_deps(
            controller_llm=controller, answer_llm=writer, search_fn=ScriptedSearch([[chunk("c1")]])
        )
    ).compile()
    events, values = _stream(compiled)
    answer_chunks = [
        m
        for m, meta in events
        if ANSWER_TAG in meta.get("tags", []) and isinstance(m, AIMessageChunk)
    ]
    assert len(answer_chunks) > 3  # token by token
    assert (
        "".join(str(m.content) for m in answer_chunks)
        == "Use asyncio.wait_for with a timeout [c1]."
    )
    assert all(
        meta["langgraph_node"] == "answerer"
        for m, meta in events
        if ANSWER_TAG in meta.get("tags", [])
    )
    controller_replies = [m for m, meta in events if CONTROLLER_TAG in meta.get("tags", [])]
    assert controller_replies and all(
        isinstance(m, AIMessage) and m.tool_calls for m in controller_replies
    )
    # the streamed answer's id is the final message's: a client merges them, and gets no second copy
    final = values["messages"][-1]
    assert {m.id for m in answer_chunks} == {final.id}
    # the same message, its citations numbered for people (the answer keeps the id)
    assert (
        values["answer"] == "Use asyncio.wait_for with a timeout [c1]." and final.name == "answer"
    )
    assert answer_text(final.content) == "Use asyncio.wait_for with a timeout [1]."
    assert final.text.startswith("Use asyncio.wait_for with a timeout [1].\n\nSources:\n[1] ")
    assert [m for m, _ in events if not isinstance(m, AIMessageChunk) and m.id == final.id] == []


def test_the_answer_tools_text_arrives_as_one_final_assistant_message() -> None:
    controller = ScriptedChatModel(responses=[search("timeouts"), answer("Use wait_for [c1].")])
    compiled = build_graph(
        make_deps(controller_llm=controller, search_fn=ScriptedSearch([[chunk("c1")]]))
    ).compile()
    events, _ = _stream(compiled)
    answers = [
        (m, meta)
        for m, meta in events
        if m.type == "ai" and answer_text(m.content) == "Use wait_for [1]."
    ]
    assert len(answers) == 1
    message, meta = answers[0]
    assert (
        message.name == "answer" and not message.tool_calls and meta["langgraph_node"] == "finish"
    )
    assert [m.type for m, _ in events][-1] == "ai"  # it is the last message of the run


def test_a_plain_text_reply_streams_under_the_controller_tag_and_is_the_answer() -> None:
    controller = StreamingModel(messages=_replies("Use asyncio.wait_for."))
    compiled = build_graph(
        make_deps(controller_llm=controller, search_fn=ScriptedSearch())
    ).compile()
    events, values = _stream(compiled)
    tokens = [
        m
        for m, meta in events
        if CONTROLLER_TAG in meta.get("tags", []) and isinstance(m, AIMessageChunk)
    ]
    assert "".join(str(m.content) for m in tokens) == "Use asyncio.wait_for." == values["answer"]
    assert {m.id for m in tokens} == {
        values["messages"][-1].id
    }  # the answer message is the streamed reply
