"""Chat front ends against `langgraph dev`: the request shapes Studio's chat view and agent-chat-ui send.

agent-chat-ui (``useStream``) submits ``{"messages": [{"type": "human", "content": text, "id": ...}]}``
on a thread, with the run's ``context``, and reads ``messages-tuple`` tokens, ``custom``
events and ``updates``; Studio's chat view sends the content as text blocks. Neither sends
a ``question`` or a ``collection``: the offline controller searches the whole knowledge base.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from arcana_loop.core.sources import render_citations
from tests.fixtures.langgraph_server import LangGraphServer
from tests.fixtures.postgres import temporary_collection

pytestmark = [pytest.mark.server, pytest.mark.postgres]

# a made-up library, so no other collection of the test session holds these words
DOCS = {
    "deadline": (
        "quornix.deadline_call runs a quornix coroutine with a deadline in seconds. "
        "When the deadline passes the quornix coroutine is cancelled and QuornixDeadlineError is raised."
    ),
    "parse": "quornix.parse_blob parses a quornix blob from bytes and returns a QuornixRecord.",
}
QUESTIONS = (
    "How do I run a quornix coroutine with a deadline?",
    "What is raised when it passes?",  # a follow-up: only makes sense with the first question
    "How do I parse a quornix blob from bytes?",
)
EXPECTED = ("quornix.deadline_call", "QuornixDeadlineError", "quornix.parse_blob")
CONTEXT = {"controller_model": "offline"}


def _shown(content: str | list[Any]) -> str:
    """What a chat front end that shows text only renders of a message: its text blocks, joined."""
    if isinstance(content, str):
        return content
    return "".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")


@pytest.fixture(scope="module")
def quornix(pg_url: str) -> Iterator[str]:
    """The made-up library's docs in a collection of their own, dropped afterwards."""
    with temporary_collection(
        pg_url, "chat-test", ((text, {"topic": topic}) for topic, text in DOCS.items())
    ) as name:
        yield name


def _human(text: str, *, blocks: bool) -> dict[str, Any]:
    """A human message as agent-chat-ui (a string, with an id) or Studio's chat (text blocks) sends it."""
    if blocks:
        return {"type": "human", "content": [{"type": "text", "text": text}]}
    return {"type": "human", "content": text, "id": str(uuid.uuid4())}


async def test_a_three_question_chat_on_one_thread(
    langgraph_server: LangGraphServer, quornix: str
) -> None:
    server = langgraph_server
    client = server.client()
    schemas: Any = await client.assistants.get_schemas(
        (await client.assistants.search(graph_id=server.graph_id))[0]["assistant_id"]
    )
    assert (
        "messages" in schemas["input_schema"]["properties"]
        and "messages" in schemas["output_schema"]["properties"]
    )
    thread = await client.threads.create()
    answers: list[str] = []
    for number, question in enumerate(QUESTIONS):
        parts = [
            (part.event, part.data)
            async for part in client.runs.stream(
                thread["thread_id"],
                server.graph_id,
                input={"messages": [_human(question, blocks=number == 1)]},
                context=CONTEXT,
                stream_mode=["messages-tuple", "custom", "updates"],
            )
        ]
        assert not [data for event, data in parts if event == "error"], server.log()[-3000:]
        streamed = [
            data[0]
            for event, data in parts
            if event == "messages" and data[0]["type"] in ("ai", "AIMessageChunk")
        ]
        final = [m for m in streamed if m.get("name") == "answer" and not m.get("tool_calls")]
        assert len(final) == 1, streamed
        content = final[0]["content"]
        # the answer as a text block citing its sources by number (the annotations keep the
        # chunk ids), that it was extracted, then the sources in words, numbered
        assert isinstance(content, list) and content[0]["annotations"], content
        numbers = [
            content[0]["text"][a["start_index"] : a["end_index"]] for a in content[0]["annotations"]
        ]
        cited = {a["extras"]["chunk_id"] for a in content[0]["annotations"]}
        assert numbers and set(numbers) == {str(n) for n in range(1, len(cited) + 1)}
        assert not any(chunk_id in content[0]["text"] for chunk_id in cited)
        assert content[1]["text"].startswith("\n\nExtracted: "), content
        assert content[2]["text"].startswith("\n\nSources:\n[1] a text in "), content
        answers.append(content[0]["text"])
        custom = [data for event, data in parts if event == "custom"]
        assert custom[0]["event"] == "loop_start" and custom[0]["question"] == question
        assert custom[-1]["event"] == "loop_stop" and custom[-1]["terminated_by"] == "answered"
        assert "controller" in [next(iter(data)) for event, data in parts if event == "updates"]
    for expected, text in zip(EXPECTED, answers, strict=True):
        assert expected in text, answers

    state: Any = await client.threads.get_state(thread["thread_id"])
    values = state["values"]
    assert (values["question"], values["question_index"]) == (QUESTIONS[-1], 2)
    # the answer cites chunk ids; what the client showed is the same answer, numbered
    assert render_citations(values["answer"], values["sources"])[0] == answers[-1]
    messages = values["messages"]
    humans = [
        m
        for m in messages
        if m["type"] == "human" and not str(m.get("id")).startswith("do-not-render-")
    ]
    assert [
        m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in humans
    ] == list(QUESTIONS)
    closings = [
        m["content"][0]["text"] for m in messages if m["type"] == "ai" and m.get("name") == "answer"
    ]
    assert closings == answers  # three answers, in order, each the last message of its question
    assert messages[-1]["type"] == "ai" and _shown(messages[-1]["content"]).startswith(answers[-1])
    assert [e["tool"] for e in values["tool_history"]] == [
        "search",
        "search",
        "answer",
    ]  # the last question's own steps: its parts and key terms searched, then the answer
    assert all(c["collection"] == quornix for c in values["chunks"][:1])


def test_a_follow_up_run_with_question_input_on_a_served_thread(
    langgraph_server: LangGraphServer, quornix: str
) -> None:
    client = langgraph_server.sync_client()
    thread = client.threads.create()
    first: Any = client.runs.wait(
        thread["thread_id"],
        langgraph_server.graph_id,
        input={"question": QUESTIONS[0], "collection": quornix},
    )
    second: Any = client.runs.wait(
        thread["thread_id"],
        langgraph_server.graph_id,
        input={"question": QUESTIONS[2], "collection": quornix},
        context={"sources_footer": False},
    )
    assert EXPECTED[0] in first["answer"]
    assert (
        second["question"] == QUESTIONS[2]
        and EXPECTED[2] in second["answer"]
        and second["answer"] != first["answer"]
    )
    # on by default for a served run, for clients that show text only; a client can turn it off
    closing = [m for m in first["messages"] if m.get("name") == "answer"][-1]
    assert "\n\nSources:\n[1] " in _shown(closing["content"])
    assert "Sources:" not in _shown(second["messages"][-1]["content"])
