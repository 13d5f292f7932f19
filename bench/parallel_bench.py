"""Parallel searches: one controller turn with 4 searches against a search with 50 ms latency.

Run: `python -m bench.parallel_bench [--rounds 7] [--latency 0.05]`. The loop runs on its
async path (`arun`) with ``max_parallel_searches`` 4 and 1 (sequential, the baseline of
the same run), and as a sync `run` for comparison. Each run is one turn of 4 searches,
then an answer; the time reported is the whole run. Medians go to
`bench/results/parallel.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage

from bench.scripted import TurnScriptedModel

RESULTS = Path(__file__).parent / "results" / "parallel.json"
SEARCHES = 4


def four_searches(turn: int) -> AIMessage:
    """First turn: 4 searches in one message; then: answer."""
    if turn:
        calls = [{"name": "answer", "args": {"text": "done"}, "id": "answer", "type": "tool_call"}]
    else:
        calls = [
            {"name": "search", "args": {"query": f"aspect {i}"}, "id": f"s{i}", "type": "tool_call"}
            for i in range(SEARCHES)
        ]
    return AIMessage(content="", tool_calls=calls)


def make_searches(latency: float) -> tuple[Any, Any]:
    def search(query: str, **_: Any) -> list[dict[str, Any]]:
        time.sleep(latency)
        return [{"id": f"{query}-0", "text": query, "score": 0.9}]

    async def asearch(query: str, **_: Any) -> list[dict[str, Any]]:
        await asyncio.sleep(latency)
        return [{"id": f"{query}-0", "text": query, "score": 0.9}]

    return search, asearch


def main(argv: list[str] | None = None) -> dict[str, float]:
    from arcana_loop import graph

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args(argv)
    search, asearch = make_searches(args.latency)
    model = TurnScriptedModel(script=four_searches)

    def sync_run() -> Any:
        return graph.run("Q?", controller_llm=model, search_fn=search)

    def async_run(parallel: int) -> Any:
        compiled = graph.build_graph(
            graph.make_deps(controller_llm=model, search_fn=asearch)
        ).compile()
        return lambda: asyncio.run(
            compiled.ainvoke(
                {"question": "Q?"}, context=graph.LoopContext(max_parallel_searches=parallel)
            )
        )

    variants = {
        "async search, 4 at once": async_run(4),
        "async search, 1 at a time": async_run(1),
        "sync run()": sync_run,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, runner in variants.items():
            started = time.perf_counter()
            out = runner()
            times[name].append(time.perf_counter() - started)
            history = out.tool_history if hasattr(out, "tool_history") else out["tool_history"]
            assert [e["args"].get("query") for e in history if e["tool"] == "search"] == [
                f"aspect {i}" for i in range(SEARCHES)
            ]
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    one = args.latency * 1000
    print(
        f"one turn of {SEARCHES} searches at {one:.0f} ms each, whole run, median of {args.rounds}"
    )
    for name, ms in medians.items():
        print(f"{name:<22} {ms:>8.1f} ms  {ms / one:>5.2f}x one search")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"latency_ms": one, "searches": SEARCHES, "median_ms": medians}, indent=2) + "\n"
    )
    return medians


if __name__ == "__main__":
    main()
