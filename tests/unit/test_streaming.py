"""The answer's tokens as a real client streams them, through `run(on_token=...)` and `arun`."""

from __future__ import annotations

import json
import threading

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI

from arcana_loop.graph import arun, run
from arcana_loop.graph.streaming import AnswerTokens
from arcana_loop.nodes.models import ANSWER_TAG, CONTROLLER_TAG
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search

SEARCH = {"tool_calls": [{"name": "search", "arguments": {"query": "timeouts"}}]}
ANSWER_TEXT = (
    'Use asyncio.wait_for(coro, timeout): it cancels the coroutine and raises "TimeoutError".'
)


def _model(server, **kwargs):
    return ChatOpenAI(
        model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0, **kwargs
    )


def _found():
    return ScriptedSearch([[chunk("c1", "asyncio.wait_for times out.")]])


def test_the_answer_tools_text_streams_piece_by_piece_and_adds_up_to_the_answer(openai_server):
    openai_server.enqueue(
        SEARCH, {"tool_calls": [{"name": "answer", "arguments": {"text": ANSWER_TEXT}}]}
    )
    pieces: list[str] = []
    result = run(
        "How do I time out a coroutine?",
        controller_llm=_model(openai_server),
        search_fn=_found(),
        on_token=pieces.append,
    )
    assert result.answer == ANSWER_TEXT
    assert "".join(pieces) == ANSWER_TEXT  # escapes decoded, nothing of the search call
    assert len(pieces) > 5  # streamed, not told once
    assert all(body.get("stream") for body in openai_server.requests)


def test_a_plain_text_reply_streams_word_by_word(openai_server):
    openai_server.enqueue(SEARCH, "Use asyncio.wait_for with a timeout in seconds.")
    pieces: list[str] = []
    result = run(
        "How do I time out a coroutine?",
        controller_llm=_model(openai_server),
        search_fn=_found(),
        on_token=pieces.append,
    )
    assert "".join(pieces) == result.answer == "Use asyncio.wait_for with a timeout in seconds."
    assert len(pieces) == 7  # a word at a time


def test_with_an_answer_model_only_its_rewrite_streams(openai_server):
    openai_server.enqueue(
        SEARCH,
        {"tool_calls": [{"name": "answer", "arguments": {"text": "draft: wait_for"}}]},
        "Rewritten: use asyncio.wait_for.",
    )
    pieces: list[str] = []
    result = run(
        "How do I time out a coroutine?",
        controller_llm=_model(openai_server),
        answer_llm=_model(openai_server),
        search_fn=_found(),
        on_token=pieces.append,
    )
    assert result.answer == "Rewritten: use asyncio.wait_for."
    assert "".join(pieces) == result.answer  # the controller's draft is not told


async def test_arun_streams_the_same_while_the_reply_is_still_coming(openai_server):
    held = threading.Event()
    answer_reply = {"tool_calls": [{"name": "answer", "arguments": {"text": ANSWER_TEXT}}]}
    openai_server.enqueue(SEARCH, {"hold": held, "then": answer_reply})
    pieces: list[str] = []
    seen_before_the_end: list[str] = []

    def told(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:  # the server sends its last piece only once tokens have arrived
            seen_before_the_end.extend(pieces)
            held.set()

    result = await arun(
        "How do I time out a coroutine?",
        controller_llm=_model(openai_server),
        search_fn=_found(),
        on_token=told,
    )
    assert "".join(pieces) == result.answer == ANSWER_TEXT
    assert len(seen_before_the_end) == 3 and held.is_set()


def test_a_model_that_does_not_stream_tells_nothing_and_events_still_arrive():
    pieces: list[str] = []
    events: list[dict] = []
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("q"), answer("Done.")]),
        search_fn=ScriptedSearch([[chunk("c1")]]),
        on_token=pieces.append,
        on_event=events.append,
    )
    assert result.answer == "Done." and pieces == []
    assert [e["event"] for e in events][0] == "loop_start" and events[-1]["event"] == "loop_stop"


def test_on_token_must_be_callable():
    with pytest.raises(TypeError, match="on_token must be a function"):
        run("Q?", controller_llm=ScriptedChatModel(responses=[]), on_token="print")


def test_text_before_a_tool_call_and_other_tools_arguments_are_told_apart():
    pieces: list[str] = []
    tokens = AnswerTokens(pieces.append)
    controller = {"tags": [CONTROLLER_TAG]}
    tokens.take(AIMessageChunk(content="Let me look.", id="m1"), controller)
    tokens.take(
        AIMessageChunk(
            content="",
            id="m2",
            tool_call_chunks=[{"name": "search", "args": '{"query": "x"}', "id": "a", "index": 0}],
        ),
        controller,
    )
    tokens.take(
        AIMessageChunk(
            content="",
            id="m3",
            tool_call_chunks=[{"name": "answer", "args": '{"text": "Hel', "id": "b", "index": 0}],
        ),
        controller,
    )
    tokens.take(
        AIMessageChunk(
            content="",
            id="m3",
            tool_call_chunks=[{"name": None, "args": 'lo \\"you\\""}', "id": None, "index": 0}],
        ),
        controller,
    )
    tokens.take(AIMessageChunk(content="rewrite", id="m4"), {"tags": [ANSWER_TAG]})
    tokens.take(AIMessageChunk(content="untagged", id="m5"), {"tags": []})
    # text a model writes before calling a tool is streamed as it comes (the caller compares
    # what it showed with the final answer); a search's arguments never are
    assert pieces == ["Let me look.", "Hel", 'lo "you"', "rewrite"]


def _budgeted_run(server, controller, **kwargs):
    """Two searches at 14 tokens a reply, under a budget of 20 tokens: the third turn is never made."""
    server.enqueue(
        SEARCH,
        {"tool_calls": [{"name": "search", "arguments": {"query": "wait_for"}}]},
        "Use asyncio.wait_for.",  # the synthesis, once the budget is spent
    )
    found = ScriptedSearch([[chunk("c1", "asyncio.wait_for times out.")], [chunk("c2")]])
    return run(
        "How do I time out a coroutine?",
        controller_llm=controller,
        search_fn=found,
        max_tokens_total=20,
        **kwargs,
    )


@pytest.mark.parametrize("given", ["a ChatOpenAI with a base_url", "a spec with OPENAI_BASE_URL"])
def test_a_streamed_run_counts_its_tokens_and_keeps_to_max_tokens_total(
    openai_server, monkeypatch, given
):
    # an OpenAI-compatible server sends a stream's usage only when the request asks for it
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    make = (lambda: _model(openai_server)) if given.startswith("a ChatOpenAI") else None
    whole = _budgeted_run(openai_server, make() if make else "openai:gpt-4o-mini")
    openai_server.requests.clear()
    pieces: list[str] = []
    streamed = _budgeted_run(
        openai_server, make() if make else "openai:gpt-4o-mini", on_token=pieces.append
    )
    assert all(body.get("stream") for body in openai_server.requests) and pieces
    assert all(
        body.get("stream_options") == {"include_usage": True} for body in openai_server.requests
    )
    assert (
        streamed.usage["controller"]
        == whole.usage["controller"]
        == {
            "input_tokens": 22,
            "output_tokens": 6,
            "total_tokens": 28,
        }
    )
    assert (streamed.terminated_by, streamed.budget_stop, streamed.iterations) == (
        "max_iterations",
        "tokens",
        2,
    )
    assert streamed.answer == whole.answer == "Use asyncio.wait_for."


def test_a_streamed_run_counts_the_judges_tokens(openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    verdict = {"claims": [{"text": "Use wait_for.", "verdict": "supported", "chunk_indices": [1]}]}
    openai_server.enqueue(
        SEARCH,
        {"tool_calls": [{"name": "answer", "arguments": {"text": "Use wait_for."}}]},
        json.dumps(verdict),
    )
    result = run(
        "How do I time out a coroutine?",
        controller_llm="openai:gpt-4o-mini",
        search_fn=_found(),
        grounder="llm_judge",
        judge_model="openai:gpt-4o-mini",
        on_token=lambda piece: None,
    )
    assert result.grounding is not None and result.grounding["score"] == 1.0
    assert openai_server.requests[-1]["stream"] is True  # the judge's call streamed too
    assert result.usage["judge"]["total_tokens"] == 14
    assert result.usage["total"]["total_tokens"] == 3 * 14


def test_a_models_own_stream_usage_setting_is_kept(openai_server):
    openai_server.enqueue(SEARCH, "Use asyncio.wait_for.")
    model = _model(openai_server, stream_usage=False)  # a server that refuses stream_options
    result = run("Q?", controller_llm=model, search_fn=_found(), on_token=lambda piece: None)
    assert result.answer == "Use asyncio.wait_for."
    assert [body.get("stream_options") for body in openai_server.requests] == [None, None]
    assert model.stream_usage is False  # the caller's model is not changed


def test_a_character_escaped_as_a_surrogate_pair_is_told_whole():
    # a provider may send the answer's arguments with JSON escapes, cut anywhere
    text = "Use wait_for \U0001f600 then done."
    arguments = json.dumps({"text": text})  # the emoji as "\ud83d\ude00"
    pieces: list[str] = []
    tokens = AnswerTokens(pieces.append)
    cut = arguments.index("\\ude00")  # between the pair's two halves
    for index, piece in enumerate((arguments[:cut], arguments[cut:])):
        chunk_args = {"name": "answer" if index == 0 else None, "args": piece, "index": 0}
        tokens.take(
            AIMessageChunk(content="", id="m1", tool_call_chunks=[{**chunk_args, "id": None}]),
            {"tags": [CONTROLLER_TAG]},
        )
    assert "".join(pieces) == text
    # text that does hold a lone surrogate is told as the kept reply holds it
    tokens.take(AIMessageChunk(content="half \ud83d", id="m2"), {"tags": [ANSWER_TAG]})
    assert pieces[-1] == "half \ufffd"
    assert all(piece.encode("utf-8") for piece in pieces)  # printable, whatever the provider sent
