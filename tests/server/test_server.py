"""The served graph through `langgraph dev`, driven with langgraph-sdk only.

The server (see ``tests/fixtures/langgraph_server.py``) searches the session's PostgreSQL
with the default knowledge base; its default controller is the offline one, and a run
can switch to the scripted OpenAI-compatible server through its context.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk.client import SyncLangGraphClient
from langgraph_sdk.schema import StreamMode

from tests.fixtures.langgraph_server import LangGraphServer
from tests.fixtures.postgres import temporary_collection

pytestmark = [pytest.mark.server, pytest.mark.postgres]

DOCS = {
    "asyncio": (
        "asyncio.wait_for runs a coroutine with a timeout. When the timeout expires the task "
        "is cancelled and TimeoutError is raised."
    ),
    "json": "json.loads parses a JSON document from a string and returns Python objects such as dicts and lists.",
}
TIMEOUT_QUESTION = "How do I run a coroutine with a timeout?"
JSON_QUESTION = "How do I parse a JSON document from a string?"
STREAM_MODES: list[StreamMode] = ["updates", "values", "custom", "messages"]


@pytest.fixture(scope="module")
def collection(pg_url: str) -> Iterator[str]:
    """A small collection where the served graph searches (the default knowledge base), dropped afterwards."""
    with temporary_collection(
        pg_url, "server-test", ((text, {"topic": topic}) for topic, text in DOCS.items())
    ) as name:
        yield name


@pytest.fixture
def server(langgraph_server: LangGraphServer) -> Iterator[LangGraphServer]:
    assert langgraph_server.openai is not None
    langgraph_server.openai.replies.clear()
    yield langgraph_server
    assert "BlockingError" not in langgraph_server.log(), "a run blocked the server's event loop"


def _assistant_id(server: LangGraphServer) -> str:
    found = server.sync_client().assistants.search(graph_id=server.graph_id)
    assert len(found) == 1, found
    assistant_id: str = found[0]["assistant_id"]
    return assistant_id


def _error_message(result: Any) -> str:
    assert isinstance(result, dict) and "__error__" in result, f"the run did not fail: {result}"
    message: str = result["__error__"]["message"]
    return message


def _ask(
    server: LangGraphServer, collection: str, context: dict[str, Any]
) -> tuple[SyncLangGraphClient, str, Any]:
    """Ask the timeout question on a new thread and wait for the run: the client, the thread's id, the output."""
    client = server.sync_client()
    thread_id: str = client.threads.create()["thread_id"]
    result = client.runs.wait(
        thread_id,
        server.graph_id,
        input={"question": TIMEOUT_QUESTION, "collection": collection},
        context=context,
    )
    return client, thread_id, result


def _steps(history: list[Any]) -> list[str]:
    """Nodes in the order they ran, from a thread's history (newest checkpoint first)."""
    return [node for state in reversed(history) for node in state["next"] if node != "__start__"]


def test_schemas_show_the_public_contract(server: LangGraphServer) -> None:
    schemas: Any = server.sync_client().assistants.get_schemas(_assistant_id(server))
    input_schema = schemas["input_schema"]
    assert set(input_schema["properties"]) == {
        "question",
        "collection",
        "messages",
    }  # chat clients send messages
    assert "question" in input_schema["properties"]
    output = set(schemas["output_schema"]["properties"])
    assert {
        "answer",
        "terminated_by",
        "iterations",
        "tool_history",
        "chunks",
        "error",
        "grounding",
    } <= output
    assert "messages" in output  # chat views read the conversation
    context = schemas["context_schema"]
    assert context is not None, server.log()[-3000:]
    props = context["properties"]
    assert {
        "controller_model",
        "max_iterations",
        "chunk_cap",
        "grounder",
        "search_opts",
        "max_seconds",
    } <= set(props)
    assert props["max_iterations"]["type"] == "integer"
    assert props["search_opts"]["type"] == "object"
    assert all(spec.get("description") for spec in props.values()), [
        n for n, s in props.items() if not s.get("description")
    ]


def test_wait_answers_from_the_collection_with_context_options(
    server: LangGraphServer, collection: str
) -> None:
    client, thread_id, result = _ask(server, collection, {"grounder": "local", "chunk_cap": 5})
    assert result["terminated_by"] == "answered", (result, server.log()[-3000:])
    assert "wait_for" in result["answer"]
    assert result["chunks"] and all(c["collection"] == collection for c in result["chunks"])
    # the offline controller searches the question and its key terms, then answers
    assert [e["tool"] for e in result["tool_history"]] == ["search", "search", "answer"]
    assert result["grounding"] is not None and result["grounding"]["score"] > 0.5

    state: Any = client.threads.get_state(thread_id)
    assert state["next"] == []
    assert state["values"]["answer"] == result["answer"]
    options = state["values"]["options"]
    assert options["chunk_cap"] == 5  # from the run's context
    assert (
        options["controller_model"] == "offline"
    )  # from the server's ARCANA_LOOP_CONTROLLER_MODEL
    assert options["max_iterations"] == 10  # the documented default


@pytest.mark.parametrize("synthesis", [False, True])
def test_context_budget_reaches_the_graph(
    server: LangGraphServer, collection: str, synthesis: bool
) -> None:
    client, thread_id, result = _ask(
        server, collection, {"max_iterations": 1, "fallback_synthesis": synthesis}
    )
    assert result["terminated_by"] == "max_iterations", result
    assert result["iterations"] == 1
    assert [e["tool"] for e in result["tool_history"]] == (
        ["search", "search", "synthesis"] if synthesis else ["search", "search"]
    )
    assert bool(result.get("answer")) is synthesis  # the server omits output keys no node wrote
    history = client.threads.get_history(thread_id, limit=50)
    # the second controller turn finds the budget spent and ends the loop without a model call
    assert _steps(history) == [
        "start",
        "controller",
        "tools",
        "controller",
        *(["synthesis"] if synthesis else []),
        "finish",
    ]


async def test_stream_shows_each_tool_call_live_and_matches_history(
    server: LangGraphServer, collection: str
) -> None:
    client = server.client()
    thread = await client.threads.create()
    parts: list[tuple[str, Any]] = []
    async for part in client.runs.stream(
        thread["thread_id"],
        server.graph_id,
        input={"question": TIMEOUT_QUESTION, "collection": collection},
        context={"grounder": "local"},
        stream_mode=STREAM_MODES,
    ):
        parts.append((part.event, part.data))
    events = [name for name, _ in parts]
    assert "error" not in events, parts
    custom = [(i, data) for i, (name, data) in enumerate(parts) if name == "custom"]
    updates = [(i, next(iter(data))) for i, (name, data) in enumerate(parts) if name == "updates"]
    final = next(data for name, data in reversed(parts) if name == "values")

    assert custom[0][1]["event"] == "loop_start" and custom[0][1]["question"] == TIMEOUT_QUESTION
    assert custom[-1][1]["event"] == "loop_stop" and custom[-1][1]["terminated_by"] == "answered"
    calls = [(i, data) for i, data in custom if data["event"] == "tool_call"]
    assert [(d["tool"], d["args"], d["iteration"]) for _, d in calls] == [
        (e["tool"], e["args"], e["iteration"]) for e in final["tool_history"]
    ]
    assert [d["history_size"] for _, d in calls] == [1, 2, 3]
    # live: each tool call arrives before its turn's `tools` step completes, not with the result
    tools_updates = [i for i, node in updates if node == "tools"]
    turns = sorted({d["iteration"] for _, d in calls})
    assert len(tools_updates) == len(turns)
    assert all(call_at < tools_updates[turns.index(d["iteration"])] for call_at, d in calls)

    history = await client.threads.get_history(thread["thread_id"], limit=50)
    assert (
        _steps(history)
        == [node for _, node in updates]
        == ["start", "controller", "tools", "controller", "tools", "ground", "finish"]
    )
    assert [s["metadata"]["step"] for s in reversed(history)] == list(range(-1, len(history) - 1))

    # messages mode: the controller's model replies, tagged with the node that made them
    meta = [data for name, data in parts if name == "messages/metadata"]
    complete = [data for name, data in parts if name == "messages/complete"]
    ai_calls = [m for batch in complete for m in batch if m["type"] == "ai" and m.get("tool_calls")]
    assert [m["tool_calls"][0]["name"] for m in ai_calls] == ["search", "answer"]
    nodes = {info["metadata"].get("langgraph_node") for batch in meta for info in batch.values()}
    assert "controller" in nodes


async def test_concurrent_threads_do_not_share_state(
    server: LangGraphServer, collection: str
) -> None:
    client = server.client()
    threads = [await client.threads.create() for _ in range(2)]
    questions = [TIMEOUT_QUESTION, JSON_QUESTION]
    results: list[Any] = await asyncio.gather(
        *(
            client.runs.wait(
                t["thread_id"], server.graph_id, input={"question": q, "collection": collection}
            )
            for t, q in zip(threads, questions, strict=True)
        )
    )
    assert [r["terminated_by"] for r in results] == ["answered", "answered"], results
    assert "wait_for" in results[0]["answer"] and "json.loads" not in results[0]["answer"]
    assert "json.loads" in results[1]["answer"] and "wait_for" not in results[1]["answer"]
    for thread, question, other in zip(threads, questions, reversed(questions), strict=True):
        state: Any = await client.threads.get_state(thread["thread_id"])
        values = state["values"]
        assert values["question"] == question
        texts = [str(m.get("content")) for m in values["messages"]]
        assert texts[0] == question and not any(other in t for t in texts)
        history: list[Any] = await client.threads.get_history(thread["thread_id"], limit=50)
        asked = [s["metadata"]["step"] for s in history if s["values"].get("question") == question]
        assert asked == [s["metadata"]["step"] for s in history if s["metadata"]["step"] >= 0]
        assert not any(other in str(s["values"]) for s in history)


def test_openai_compatible_controller_through_the_server(
    server: LangGraphServer, collection: str
) -> None:
    openai = server.openai
    assert openai is not None
    openai.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "coroutine timeout"}}]},
        {"tool_calls": [{"name": "answer", "arguments": {"text": "Use asyncio.wait_for."}}]},
    )
    before = len(openai.requests)
    result: Any = server.sync_client().runs.wait(
        None,
        server.graph_id,
        input={"question": TIMEOUT_QUESTION, "collection": collection},
        context={"controller_model": "openai:gpt-4o-mini"},
    )
    assert result["terminated_by"] == "answered", (result, server.log()[-3000:])
    assert result["answer"] == "Use asyncio.wait_for."
    assert [e["tool"] for e in result["tool_history"]] == ["search", "answer"]
    sent = openai.requests[before:]
    assert len(sent) == 2
    tool_results = [m["content"] for m in sent[1]["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1 and "wait_for" in tool_results[0]
    assert result["usage"]["controller"]["total_tokens"] == 28  # two scripted replies of 14


async def test_a_run_streamed_for_its_tokens_counts_them_and_keeps_to_its_token_budget(
    server: LangGraphServer, collection: str
) -> None:
    # a messages stream streams every model call; the server sends a stream's usage only when asked
    openai = server.openai
    assert openai is not None
    openai.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "coroutine timeout"}}]},
        {"tool_calls": [{"name": "search", "arguments": {"query": "wait_for"}}]},
    )
    before = len(openai.requests)
    client = server.client()
    thread = await client.threads.create()
    parts = [
        part
        async for part in client.runs.stream(
            thread["thread_id"],
            server.graph_id,
            input={"question": TIMEOUT_QUESTION, "collection": collection},
            context={
                "controller_model": "openai:gpt-4o-mini",
                "max_tokens_total": 20,
                "fallback_synthesis": False,
            },
            stream_mode=["messages-tuple", "values"],
        )
    ]
    final = next(part.data for part in reversed(parts) if part.event == "values")
    sent = openai.requests[before:]
    assert len(sent) == 2 and all(body.get("stream") for body in sent), server.log()[-3000:]
    assert final["usage"]["controller"]["total_tokens"] == 28  # two scripted replies of 14
    assert (final["terminated_by"], final["budget_stop"]) == ("max_iterations", "tokens")


def test_answer_model_and_judge_through_the_server(
    server: LangGraphServer, collection: str
) -> None:
    openai = server.openai
    assert openai is not None
    rewrite = "Use asyncio.wait_for to run a coroutine with a timeout."
    verdict = {"claims": [{"text": rewrite, "verdict": "supported", "chunk_indices": [1]}]}
    openai.enqueue(rewrite, json.dumps(verdict))
    before = len(openai.requests)
    client, thread_id, result = _ask(
        server, collection, {"answer_model": "openai:gpt-4o-mini", "grounder": "llm_judge"}
    )
    assert result["answer"] == rewrite, (result, server.log()[-3000:])
    assert result["grounding"]["score"] == 1.0
    assert len(openai.requests) - before == 2  # the rewrite, then the judge
    history = client.threads.get_history(thread_id, limit=50)
    assert _steps(history) == [
        "start",
        "controller",
        "tools",
        "controller",
        "tools",
        "answerer",
        "ground",
        "finish",
    ]


def test_a_served_run_searches_through_the_filter_of_its_context(
    server: LangGraphServer, collection: str, pg_url: str
) -> None:
    def ask_json(topic: str) -> Any:
        return server.sync_client().runs.wait(
            None,
            server.graph_id,
            input={"question": JSON_QUESTION, "collection": collection},
            context={"search_opts": {"filter": {"topic": topic}}},
        )

    narrowed = ask_json("json")
    assert narrowed["terminated_by"] == "answered", (narrowed, server.log()[-3000:])
    assert {c["metadata"]["topic"] for c in narrowed["chunks"]} == {"json"}
    elsewhere = ask_json("asyncio")  # the one document that answers is filtered out
    assert {c["metadata"]["topic"] for c in elsewhere.get("chunks", [])} <= {"asyncio"}
    assert "json.loads" not in str(elsewhere.get("answer"))
    _, _, nothing = _ask(server, collection, {"search_opts": {"filter": {"topic": "tides"}}})
    assert not nothing.get("chunks") and nothing["terminated_by"] != "answered"
    # another collection's metadata named under this run's collection: nothing of it leaks
    secret = ((DOCS["asyncio"] + " The secret yard times out too.", {"topic": "yard"}),)
    with temporary_collection(pg_url, "server-secret", secret):
        _, _, locked = _ask(server, collection, {"search_opts": {"filter": {"topic": "yard"}}})
    assert not locked.get("chunks"), locked


@pytest.mark.parametrize(
    ("run_input", "context", "expected"),
    [
        ({"collection": "x"}, {}, "needs a 'question'"),
        ({"question": "   "}, {}, "question must not be empty"),
        ({"question": 42}, {}, "question must be a string"),
        ({"question": "q", "collection": 5}, {}, "collection must be"),
        ({"question": "q"}, {"max_iterations": -1}, "max_iterations must be at least 0"),
        ({"question": "q"}, {"chunk_cap": "ten"}, "chunk_cap must be an integer"),
        (
            {"question": "q"},
            {"controller_model": "nonsense"},
            "controller_model must be 'provider:model'",
        ),
    ],
    ids=[
        "no-question",
        "blank-question",
        "number-question",
        "bad-collection",
        "negative-budget",
        "string-cap",
        "bad-model-spec",
    ],
)
def test_bad_input_fails_the_run_with_a_clear_error(
    server: LangGraphServer, run_input: dict[str, Any], context: dict[str, Any], expected: str
) -> None:
    result = server.sync_client().runs.wait(
        None, server.graph_id, input=run_input, context=context, raise_error=False
    )
    assert expected in _error_message(result)


def test_unknown_context_keys_are_dropped_by_the_server(
    server: LangGraphServer, collection: str
) -> None:
    # langgraph-api filters a run's context by the graph's context schema, so a misspelt
    # option is ignored there (run() raises on it); this pins the documented behaviour.
    client, thread_id, result = _ask(server, collection, {"max_iteration": 1})
    assert result["terminated_by"] == "answered"
    state: Any = client.threads.get_state(thread_id)
    assert state["values"]["options"]["max_iterations"] == 10
    assert "max_iteration" not in state["values"]["options"]


def test_a_missing_collection_gives_up_before_any_model_call(
    server: LangGraphServer, collection: str
) -> None:
    assert server.openai is not None
    sent_before = len(server.openai.requests)
    result: Any = server.sync_client().runs.wait(
        None,
        server.graph_id,
        input={"question": TIMEOUT_QUESTION, "collection": "no-such-collection"},
        context={"controller_model": "openai:gpt-4o-mini"},
    )
    assert result["terminated_by"] == "gave_up", result
    assert "no collection named 'no-such-collection'" in result["answer"]
    assert f"'{collection}'" in result["answer"]  # the collections it does hold
    assert "arcana-loop ingest PATH --collection no-such-collection" in result["answer"]
    assert len(server.openai.requests) == sent_before  # no model was asked
