"""Load: 50 runs at once, in process and against the served graph; none crossed, connections bounded.

Throughput and p95 latency are printed and written to ``RELIABILITY_LOAD_JSON`` when set
(tests/reliability/README.md's load figures come from there).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from arcana_loop.graph import arun
from arcana_loop.graph.checkpoints import resolve_checkpointer
from tests.fakes import answer, search
from tests.fixtures.langgraph_server import LangGraphServer
from tests.fixtures.postgres import temporary_collection

pytestmark = [pytest.mark.reliability, pytest.mark.postgres, pytest.mark.slow]

RUNS = 50
TOKEN = re.compile(r"tok\d{2}x")


def _token(i: int) -> str:
    # fixed width, so no run's token is a substring of another's
    return f"tok{i:02d}x"


def _question_of(messages: list[BaseMessage]) -> str:
    return next(str(m.content) for m in messages if isinstance(m, HumanMessage))


async def instant_controller(messages: list[BaseMessage], tools: Any, opts: Any) -> AIMessage:
    """Two searches about the run's own token, then an answer naming it: no waiting at all."""
    token = TOKEN.findall(_question_of(messages))[0]
    seen = sum(isinstance(m, ToolMessage) for m in messages)
    if seen == 0:
        return search(f"{token} launch")
    if seen == 1:
        return search(f"{token} landing")
    return answer(f"The {token} mission launched and landed.")


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def _record(name: str, figures: dict[str, Any]) -> None:
    print(f"\n{name}: {json.dumps(figures)}")  # the figures are the point of a load test
    target = os.environ.get("RELIABILITY_LOAD_JSON")
    if not target:
        return
    path = Path(target)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = figures
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


class ConnectionWatch:
    """Polls pg_stat_activity while a load runs and keeps the highest client connection count."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[int] = []

    async def _poll(self, stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            while not stop.is_set():
                row = await (
                    await conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    )
                ).fetchone()
                assert row is not None
                self.samples.append(int(row[0]))
                await asyncio.sleep(0.02)

    @property
    def peak(self) -> int:
        return max(self.samples)


async def _watching(url: str, work: Any) -> tuple[Any, ConnectionWatch]:
    watch = ConnectionWatch(url)
    stop = asyncio.Event()
    poller = asyncio.create_task(watch._poll(stop))
    try:
        return await work, watch
    finally:
        stop.set()
        await poller


@pytest.fixture
async def missions(kb: Any) -> AsyncIterator[Any]:
    """One document per run in the ``missions`` collection, each about its own token."""
    await asyncio.to_thread(
        kb.ingest,
        "\n\n".join(
            f"The {_token(i)} mission launched at dawn and its {_token(i)} capsule landing was soft."
            for i in range(RUNS)
        ),
        collection="missions",
    )
    for i in range(RUNS):
        await asyncio.to_thread(
            kb.ingest,
            f"Mission {_token(i)}: launch and landing log of {_token(i)}.",
            collection="missions",
        )
    yield kb
    await kb.aclose()


async def test_fifty_concurrent_in_process_runs_finish_uncrossed_with_bounded_connections(
    missions: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    kb = missions
    threads = [f"load-{i:02d}-{uuid.uuid4().hex[:8]}" for i in range(RUNS)]
    latencies: list[float] = [0.0] * RUNS
    sent: dict[str, tuple[dict[str, Any], list[str]]] = {}

    async def recorded_search(query: str, **kwargs: Any) -> Any:
        hits = await kb.asearch(query, **kwargs)
        sent[query] = (kwargs, [h["id"] for h in hits])
        return hits

    async def one(i: int) -> Any:
        started = time.perf_counter()
        result = await arun(
            _question(i),
            collection="missions",
            controller_llm=instant_controller,
            search_fn=recorded_search,
            checkpointer="postgres",
            thread_id=threads[i],
        )
        latencies[i] = time.perf_counter() - started
        return result

    # the first run opens the pools and creates the checkpoint tables: not part of the load
    await arun(
        _question(0),
        collection="missions",
        controller_llm=instant_controller,
        search_fn=kb.asearch,
        checkpointer="postgres",
    )
    started = time.perf_counter()
    results, watch = await _watching(pg_url, asyncio.gather(*(one(i) for i in range(RUNS))))
    wall = time.perf_counter() - started

    assert [r.terminated_by for r in results] == ["answered"] * RUNS
    saver = resolve_checkpointer("postgres")
    for i, (result, thread) in enumerate(zip(results, threads, strict=True)):
        own = _token(i)
        assert result.answer == f"The {own} mission launched and landed."
        queries = [f"{own} launch", f"{own} landing"]
        assert [e["args"].get("query") for e in result.tool_history] == [*queries, None]
        for event, query in zip(result.tool_history, queries, strict=False):
            kwargs, ids = sent[query]
            assert (
                event["returned_chunk_ids"] == ids
            )  # this run's own search results, not a neighbour's
            assert [
                h["id"] for h in await kb.asearch(query, **kwargs)
            ] == ids  # and what the query returns alone
        checkpoints = list(saver.list({"configurable": {"thread_id": thread}}))
        assert len(checkpoints) >= 6, (thread, len(checkpoints))
        for saved in checkpoints:
            values = saved.checkpoint["channel_values"]
            assert (values.get("question") or values["__start__"]["question"]) == _question(i)
            for message in values.get("messages", []):
                if isinstance(message, HumanMessage | AIMessage):
                    assert set(TOKEN.findall(json.dumps(message.model_dump(), default=str))) <= {
                        own
                    }, (thread, message)
            assert all(
                e["args"].get("query", own).startswith(own) for e in values.get("tool_history", [])
            )

    # one checkpoint pool per event loop (at most 4) and the knowledge base's (at most 4), whatever the number of runs
    assert watch.peak <= 12, watch.peak
    figures = {
        "runs": RUNS,
        "seconds": round(wall, 2),
        "runs_per_second": round(RUNS / wall, 1),
        "p50_seconds": round(statistics.median(latencies), 3),
        "p95_seconds": round(_p95(latencies), 3),
        "peak_client_connections": watch.peak,
        "connection_samples": len(watch.samples),
        "controller": "instant scripted function, 3 turns (2 searches, answer)",
        "search": "KnowledgeBase.asearch (hybrid), embedded PostgreSQL",
        "checkpointer": "postgres",
    }
    _record("in_process", figures)


def _question(i: int) -> str:
    return f"What happened to the {_token(i)} mission?"


@pytest.fixture(scope="module")
def served_missions(pg_url: str) -> Iterator[str]:
    """The missions in the default knowledge base, where the served graph searches; dropped afterwards."""
    with temporary_collection(
        pg_url,
        "missions",
        ((f"Mission {_token(i)}: launch and landing log of {_token(i)}.", {}) for i in range(RUNS)),
    ) as name:
        yield name


async def test_fifty_concurrent_runs_against_the_served_graph(
    langgraph_server: LangGraphServer, served_missions: str, pg_url: str
) -> None:
    client = langgraph_server.client()
    threads = [(await client.threads.create())["thread_id"] for _ in range(RUNS)]
    latencies: list[float] = [0.0] * RUNS

    async def one(i: int) -> Any:
        started = time.perf_counter()
        result = await client.runs.wait(
            threads[i],
            langgraph_server.graph_id,
            input={"question": _question(i), "collection": served_missions},
            context={"max_iterations": 4},
        )
        latencies[i] = time.perf_counter() - started
        return result

    started = time.perf_counter()
    results, watch = await _watching(pg_url, asyncio.gather(*(one(i) for i in range(RUNS))))
    wall = time.perf_counter() - started

    assert all(isinstance(r, dict) and "__error__" not in r for r in results), [
        r for r in results if "__error__" in r
    ][:2]
    assert [r["terminated_by"] for r in results] == ["answered"] * RUNS, [
        r.get("error") for r in results
    ][:3]
    for i, (result, thread) in enumerate(zip(results, threads, strict=True)):
        own = _token(i)
        assert result["question"] == _question(i) and own in result["answer"]
        searches = [e for e in result["tool_history"] if e["tool"] == "search"]
        assert searches and all(TOKEN.findall(e["args"]["query"]) == [own] for e in searches)
        history: list[Any] = await client.threads.get_history(thread, limit=100)
        assert len(history) >= 4
        for state in history:
            values = state["values"]
            assert values.get("question", _question(i)) == _question(i)
            humans = [m["content"] for m in values.get("messages", []) if m.get("type") == "human"]
            assert humans in ([], [_question(i)])
            queries = [
                e["args"].get("query", "")
                for e in values.get("tool_history", [])
                if e["tool"] == "search"
            ]
            assert all(TOKEN.findall(q) == [own] for q in queries)
    assert "BlockingError" not in langgraph_server.log(), "a run blocked the server's event loop"
    assert watch.peak <= 16, (
        watch.peak
    )  # the server's knowledge base pools, whatever the number of runs
    _record(
        "served",
        {
            "runs": RUNS,
            "seconds": round(wall, 2),
            "runs_per_second": round(RUNS / wall, 1),
            "p50_seconds": round(statistics.median(latencies), 3),
            "p95_seconds": round(_p95(latencies), 3),
            "peak_client_connections": watch.peak,
            "server": "langgraph dev, --n-jobs-per-worker 4, in-memory runtime",
            "controller": "offline",
            "search": "default knowledge base (hybrid), embedded PostgreSQL",
            "client": "langgraph-sdk runs.wait",
        },
    )
