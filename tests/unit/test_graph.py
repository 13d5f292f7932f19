"""The graph's shape, its live events, and the async path."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopOutput
from arcana_loop.graph import arun, build_graph, make_deps, run
from arcana_loop.graph.build import graph as served_graph
from arcana_loop.nodes.deps import LoopDeps
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, calls, chunk, search, tool_call
from tests.unit.test_loop import assert_every_call_answered

SNAPSHOT = Path(__file__).parent / "snapshots" / "graph.mmd"


def test_graph_shape_matches_the_snapshot():
    drawn = served_graph.get_graph().draw_mermaid(with_styles=False)
    # To change the topology on purpose: write the new drawing to the snapshot and review it.
    assert drawn == SNAPSHOT.read_text()
    for node in ("start", "controller", "tools", "answerer", "synthesis", "ground", "finish"):
        assert node in served_graph.nodes


def test_custom_stream_shows_start_each_tool_call_and_stop():
    model = ScriptedChatModel(responses=[search("a"), search("b"), answer("done")])
    compiled = build_graph(
        make_deps(controller_llm=model, search_fn=ScriptedSearch([[chunk("c1")], [chunk("c2")]]))
    ).compile()
    events = [
        e for e in compiled.stream({"question": "Q?"}, context=LoopContext(), stream_mode="custom")
    ]
    kinds = [e["event"] for e in events]
    assert kinds == ["loop_start", "tool_call", "tool_call", "tool_call", "loop_stop"]
    assert events[0] == {
        "event": "loop_start",
        "question": "Q?",
        "max_iterations": 10,
        "tool_count": 3,
    }
    assert (
        events[1]["tool"] == "search"
        and events[1]["returned_chunk_ids"] == ["c1"]
        and events[1]["history_size"] == 1
    )
    assert (
        events[-1]["terminated_by"] == "answered"
        and events[-1]["iterations"] == 3
        and events[-1]["tool_count"] == 3
    )


@pytest.mark.parametrize(
    ("responses", "options", "outcome"),
    [
        (["plain"], {}, "answered"),
        ([RuntimeError("x")], {}, "error"),
        ([search("a")], {"max_iterations": 1}, "max_iterations"),
        ([search("a"), "synth"], {"max_iterations": 1}, "max_iterations"),
    ],
)
def test_stop_event_is_emitted_exactly_once_on_every_path(responses, options, outcome):
    model = ScriptedChatModel(responses=list(responses))
    compiled = build_graph(
        make_deps(
            controller_llm=model,
            search_fn=ScriptedSearch([[chunk("c1")]] if len(responses) > 1 else [[]]),
        )
    ).compile()
    events = list(
        compiled.stream({"question": "Q?"}, context=LoopContext(**options), stream_mode="custom")
    )
    stops = [e for e in events if e["event"] == "loop_stop"]
    assert len(stops) == 1 and stops[0]["terminated_by"] == outcome


async def test_arun_gives_the_same_result_as_run():
    def script():
        return ScriptedChatModel(
            responses=[
                search("a"),
                calls(tool_call("search", query="b"), tool_call("search", query="c")),
                answer("x"),
            ]
        )

    results = {
        "a": [chunk("ca", score=0.3)],
        "b": [chunk("cb", score=0.9)],
        "c": [chunk("cc", score=0.6)],
    }
    sync_result = run("Q?", controller_llm=script(), search_fn=ScriptedSearch(results))
    async_result = await arun("Q?", controller_llm=script(), search_fn=ScriptedSearch(results))
    assert async_result.tool_history == sync_result.tool_history
    assert async_result.chunks == sync_result.chunks
    assert [m.content for m in async_result.messages] == [m.content for m in sync_result.messages]


async def test_async_searches_of_one_turn_run_concurrently_in_call_order():
    async def slow_search(query, **kwargs):
        await asyncio.sleep(0.2)
        return [chunk(f"c-{query}")]

    turn = calls(*[tool_call("search", query=q) for q in "abcd"])
    started = time.perf_counter()
    result = await arun(
        "Q?", controller_llm=ScriptedChatModel(responses=[turn, answer("x")]), search_fn=slow_search
    )
    elapsed = time.perf_counter() - started
    assert [e["args"]["query"] for e in result.tool_history[:4]] == list("abcd")
    assert elapsed < 0.6  # four 0.2 s searches, concurrently


def _meeting_searches(expected: int):
    """A search whose calls wait for each other: they only all finish if they run at once."""
    import threading

    barrier = threading.Barrier(expected, timeout=10)
    lock, active, peak = threading.Lock(), [0], [0]

    def search_fn(query, **kwargs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            barrier.wait()
        finally:
            with lock:
                active[0] -= 1
        return [chunk(f"c-{query}")]

    return search_fn, peak


def test_sync_searches_of_one_turn_run_at_once_in_call_order():
    search_fn, peak = _meeting_searches(4)
    turn = calls(*[tool_call("search", query=q) for q in "abcd"])
    result = run(
        "Q?", controller_llm=ScriptedChatModel(responses=[turn, answer("x")]), search_fn=search_fn
    )
    assert peak[0] == 4
    assert [e["args"]["query"] for e in result.tool_history[:4]] == list("abcd")
    assert [e["returned_chunk_ids"] for e in result.tool_history[:4]] == [
        [f"c-{q}"] for q in "abcd"
    ]
    assert_every_call_answered(result.messages)


def test_sync_searches_respect_max_parallel_searches_and_match_serial_results():
    search_fn, peak = _meeting_searches(2)  # pairs meet: two at once, never more
    turn = calls(*[tool_call("search", query=q) for q in "abcdef"])
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[turn, answer("x")]),
        search_fn=search_fn,
        max_parallel_searches=2,
    )
    assert peak[0] == 2 and [e["args"]["query"] for e in result.tool_history[:6]] == list("abcdef")
    serial = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[turn, answer("x")]),
        search_fn=lambda query, **kwargs: [chunk(f"c-{query}")],
        max_parallel_searches=1,
    )
    assert serial.tool_history == result.tool_history and serial.chunks == result.chunks


async def test_async_path_runs_sync_search_functions_off_the_event_loop():
    loop_threads = []

    def blocking_search(query, **kwargs):
        import threading

        loop_threads.append(threading.current_thread() is threading.main_thread())
        return [chunk("c1")]

    await arun(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("a"), answer("x")]),
        search_fn=blocking_search,
    )
    assert loop_threads == [False]


@pytest.fixture
def knowledge_base_holds_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The served graph's default knowledge base, taken as searchable (these tests are about models)."""
    monkeypatch.setattr(LoopDeps, "unsearchable", lambda self, scope: None)


@pytest.mark.usefixtures("knowledge_base_holds_documents")
def test_served_graph_reads_models_from_the_context(monkeypatch):
    from arcana_loop.nodes import models

    model = ScriptedChatModel(responses=[answer("from context")])
    monkeypatch.setitem(models._cache, "scripted:test", models.resolve_model(model))
    out = served_graph.invoke(
        {"question": "Q?"}, context=LoopContext(controller_model="scripted:test")
    )
    assert out["answer"] == "from context" and out["terminated_by"] == "answered"
    # the served output's fields, each present (one nothing wrote is None), and nothing internal
    assert list(out) == list(LoopOutput.__annotations__)
    assert (
        out["messages"][-1].content == "from context"
    )  # chat clients read the answer from the messages


@pytest.mark.usefixtures("knowledge_base_holds_documents")
def test_served_graph_with_a_bad_model_name_ends_as_error():
    out = served_graph.invoke(
        {"question": "Q?"}, context=LoopContext(controller_model="nosuchprovider:x")
    )
    assert out["terminated_by"] == "error" and "nosuchprovider" in out["error"]


def _scripted_graph():
    model = ScriptedChatModel(responses=[search("timeouts"), answer("Use wait_for [c1].")])
    found = ScriptedSearch([[chunk("c1", "asyncio.wait_for runs a coroutine with a timeout.")]])
    return build_graph(make_deps(controller_llm=model, search_fn=found)).compile()


async def test_the_graph_streams_its_events_as_langgraph_clients_ask():
    # astream_events (the server's "events" stream mode) runs each node through its transform
    ended = []
    async for event in _scripted_graph().astream_events(
        {"question": "Timeouts?"}, version="v2", context=LoopContext()
    ):
        if event["event"] == "on_chain_end" and event["name"] in ("controller", "finish"):
            ended.append(event["name"])
    assert ended == ["controller", "controller", "finish"]
    *_, last = _scripted_graph().stream({"question": "Timeouts?"}, stream_mode="values")
    assert last["terminated_by"] == "answered"


def test_a_graph_invoked_without_a_context_runs_on_the_defaults():
    out = _scripted_graph().invoke({"question": "Timeouts?"})
    assert out["terminated_by"] == "answered" and out["answer"].startswith("Use wait_for")
