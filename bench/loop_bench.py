"""Loop orchestration benchmark: what the graph machinery costs around an instant model.

Run: `python -m bench.loop_bench [--rounds 60] [--profile]`. Every variant runs the same
6-turn script (5 ``search`` calls returning 5 chunks of ~800 characters each, then
``answer``) with an instant scripted chat model and an instant search function:

* ``floor``: a bare Python loop doing the same bookkeeping with LangChain messages.
* ``stategraph``: a minimal hand-written StateGraph (controller, tools, conditional edges).
* ``react_agent``: ``langgraph.prebuilt.create_react_agent`` (deprecated, still common).
* ``create_agent``: ``langchain.agents.create_agent``.
* ``arcana_run``: ``graph.run(...)`` (its compiled-graph cache pays compile once).
* ``arcana_compiled``: the same graph compiled once and called with ``invoke``.
* ``arcana_run_exit``: ``graph.run(..., durability="exit")`` with a checkpointer: one write at
  the end instead of one per step (``run()`` defaults to ``"sync"``, so that a killed run
  can be resumed from its last step).

Each graph variant runs without a checkpointer and with InMemorySaver, SqliteSaver (a
temporary file) and PostgresSaver (the embedded server of ``knowledge.server``, when it
starts). Variants are interleaved round-robin, so machine noise hits all of them alike;
medians are reported, with ratios to the floor. Results go to `bench/results/loop.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import platform
import pstats
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from bench.report import write_results
from bench.scripted import TurnScriptedModel

RESULTS = Path(__file__).parent / "results" / "loop.json"
QUESTION = "How does asyncio.gather report exceptions?"
SEARCHES = 5
CHUNKS_PER_SEARCH = 5
CHUNK_CHARS = 800
TURNS = SEARCHES + 1
ANSWER_TEXT = "gather() propagates the first exception unless return_exceptions=True [c0_0]."
CHECKPOINTERS = ("none", "memory", "sqlite", "postgres")
GRAPH_VARIANTS = (
    "stategraph",
    "react_agent",
    "create_agent",
    "arcana_run",
    "arcana_compiled",
    "arcana_run_exit",
)
LABELS = {
    "floor": "bare loop (floor)",
    "stategraph": "minimal StateGraph",
    "react_agent": "create_react_agent",
    "create_agent": "create_agent",
    "arcana_run": "arcana-loop run()",
    "arcana_compiled": "arcana-loop compiled.invoke",
    "arcana_run_exit": "arcana-loop run(durability=exit)",
}

_FILLER = (
    "Return a future aggregating results from the given awaitables. If all awaitables "
    "complete successfully, the result is an aggregate list of returned values. "
)


def _chunk_text(query: str, index: int) -> str:
    head = f"{query} (part {index}). "
    return (head + _FILLER * (CHUNK_CHARS // len(_FILLER) + 1))[:CHUNK_CHARS]


def script_reply(turn: int) -> AIMessage:
    """The scripted controller's reply on a 0-based turn: 5 distinct searches, then an answer."""
    call_id = f"call_{turn}"
    if turn < SEARCHES:
        query = f"asyncio gather exceptions aspect {turn}"
        return AIMessage(
            content="",
            tool_calls=[
                {"name": "search", "args": {"query": query}, "id": call_id, "type": "tool_call"}
            ],
        )
    return AIMessage(
        content="",
        tool_calls=[
            {"name": "answer", "args": {"text": ANSWER_TEXT}, "id": call_id, "type": "tool_call"}
        ],
    )


def InstantChatModel() -> BaseChatModel:  # reads as the class it stands for
    """The loop benchmark's scripted model: 5 searches, then an answer."""
    return TurnScriptedModel(script=script_reply)


def instant_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Five chunks of ~800 characters, with ids distinct per query."""
    key = query.rsplit(" ", 1)[-1]
    return [
        {
            "id": f"c{key}_{i}",
            "text": _chunk_text(query, i),
            "score": 1.0 - i / 10,
            "collection": "bench",
            "document_id": f"d{key}",
            "position": i,
            "metadata": {},
        }
        for i in range(CHUNKS_PER_SEARCH)
    ]


def format_chunks(chunks: list[dict[str, Any]]) -> str:
    """The tool result the controller reads, as the reference variants render it."""
    return "\n\n".join(f"[{c['id']}] (score {c['score']:.2f})\n{c['text']}" for c in chunks)


def merge(existing: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accumulate chunks without duplicates, best first."""
    by_id = {c["id"]: c for c in existing}
    for c in new:
        by_id.setdefault(c["id"], c)
    return sorted(by_id.values(), key=lambda c: -c["score"])


# ----- (a) the floor -------------------------------------------------------------------


def floor_loop(model: BaseChatModel) -> dict[str, Any]:
    """The same bookkeeping with no graph: messages, tool dispatch by name, chunk accumulation."""
    messages: list[BaseMessage] = [HumanMessage(content=QUESTION)]
    chunks: list[dict[str, Any]] = []
    answer: str | None = None

    def run_search(query: str) -> str:
        nonlocal chunks
        found = instant_search(query)
        chunks = merge(chunks, found)
        return format_chunks(found)

    def run_answer(text: str) -> str:
        nonlocal answer
        answer = text
        return "Answered."

    dispatch: dict[str, Callable[..., str]] = {"search": run_search, "answer": run_answer}
    for _ in range(TURNS + 2):
        reply = model.invoke(messages)
        messages = [*messages, reply]
        for call in reply.tool_calls:
            content = dispatch[call["name"]](**call["args"])
            messages = [
                *messages,
                ToolMessage(content=content, tool_call_id=call["id"], name=call["name"]),
            ]
        if answer is not None:
            break
    return {"answer": answer, "messages": messages, "chunks": chunks}


# ----- (b) the minimal hand-written StateGraph ------------------------------------------


class MinimalState(TypedDict, total=False):
    question: str
    messages: Annotated[list[AnyMessage], add_messages]
    chunks: list[dict[str, Any]]
    answer: str | None


def minimal_stategraph(model: BaseChatModel) -> StateGraph[Any, Any, Any, Any]:
    """The reference shape: controller, tools, two conditional edges, ``add_messages``."""

    def controller(state: MinimalState) -> dict[str, Any]:
        new = [] if state.get("messages") else [HumanMessage(content=state["question"])]
        reply = model.invoke([*state.get("messages", []), *new])
        return {"messages": [*new, reply]}

    def tools(state: MinimalState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        out: list[ToolMessage] = []
        chunks = state.get("chunks") or []
        update: dict[str, Any] = {}
        for call in last.tool_calls:
            if call["name"] == "search":
                found = instant_search(call["args"]["query"])
                chunks = merge(chunks, found)
                content = format_chunks(found)
            else:
                update["answer"] = call["args"]["text"]
                content = "Answered."
            out.append(ToolMessage(content=content, tool_call_id=call["id"], name=call["name"]))
        return {**update, "messages": out, "chunks": chunks}

    def after_controller(state: MinimalState) -> Literal["tools", "__end__"]:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    def after_tools(state: MinimalState) -> Literal["controller", "__end__"]:
        return "__end__" if state.get("answer") is not None else "controller"

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(MinimalState)
    builder.add_node(controller)
    builder.add_node(tools)
    builder.add_edge(START, "controller")
    builder.add_conditional_edges("controller", after_controller)
    builder.add_conditional_edges("tools", after_tools)
    return builder


# ----- (c, d) the prebuilt agents -------------------------------------------------------


def langchain_tools() -> list[BaseTool]:
    """``search`` and ``answer`` as LangChain tools; ``answer`` returns directly, ending the run."""

    @tool
    def search(query: str) -> str:
        """Search the knowledge base."""
        return format_chunks(instant_search(query))

    @tool(return_direct=True)
    def answer(text: str) -> str:
        """Give the final answer."""
        return text

    return [search, answer]


def react_agent(model: BaseChatModel, checkpointer: BaseCheckpointSaver[Any] | None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated; measured on purpose
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(model, langchain_tools(), checkpointer=checkpointer)


def langchain_agent(model: BaseChatModel, checkpointer: BaseCheckpointSaver[Any] | None) -> Any:
    from langchain.agents import create_agent

    return create_agent(model, langchain_tools(), checkpointer=checkpointer)


# ----- checkpointers --------------------------------------------------------------------


@contextlib.contextmanager
def checkpointers(
    with_postgres: bool = True,
) -> Iterator[tuple[dict[str, BaseCheckpointSaver[Any] | None], dict[str, str]]]:
    """Yield the savers by column name, and a note for each column that could not run."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    notes: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        savers: dict[str, BaseCheckpointSaver[Any] | None] = {
            "none": None,
            "memory": InMemorySaver(),
        }
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="loop-bench-")))
        conn = sqlite3.connect(tmp / "checkpoints.sqlite", check_same_thread=False)
        stack.callback(conn.close)
        sqlite_saver = SqliteSaver(conn)
        sqlite_saver.setup()
        savers["sqlite"] = sqlite_saver
        if with_postgres:
            try:
                savers["postgres"] = stack.enter_context(_postgres_saver())
            except Exception as exc:  # no server here: the column is skipped with the reason
                notes["postgres"] = f"skipped: {type(exc).__name__}: {exc}"
        else:
            notes["postgres"] = "skipped: --no-postgres"
        yield savers, notes


@contextlib.contextmanager
def _postgres_saver() -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from arcana_loop.knowledge.server import database_url

    with PostgresSaver.from_conn_string(database_url()) as saver:
        saver.setup()
        yield saver


# ----- the variants ---------------------------------------------------------------------

Runner = Callable[[], Any]


def _config(saver: BaseCheckpointSaver[Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {"recursion_limit": 100}
    if saver is not None:
        config["configurable"] = {"thread_id": str(uuid.uuid4())}
    return config


def make_runners(
    model: BaseChatModel, savers: dict[str, BaseCheckpointSaver[Any] | None]
) -> dict[str, Runner]:
    """One zero-argument callable per (variant, checkpointer), each running the full loop once."""
    from arcana_loop import graph
    from arcana_loop.core.context import LoopContext

    runners: dict[str, Runner] = {"floor": lambda: floor_loop(model)}
    for column, saver in savers.items():
        minimal = minimal_stategraph(model).compile(checkpointer=saver)
        react = react_agent(model, saver)
        agent = langchain_agent(model, saver)
        arcana = graph.build_graph(
            graph.make_deps(controller_llm=model, search_fn=instant_search)
        ).compile(checkpointer=saver, name="arcana-loop")
        inputs = {"messages": [HumanMessage(content=QUESTION)]}
        runners[f"stategraph/{column}"] = lambda g=minimal, s=saver: g.invoke(
            {"question": QUESTION}, _config(s)
        )
        runners[f"react_agent/{column}"] = lambda g=react, s=saver, i=inputs: g.invoke(
            i, _config(s)
        )
        runners[f"create_agent/{column}"] = lambda g=agent, s=saver, i=inputs: g.invoke(
            i, _config(s)
        )
        runners[f"arcana_run/{column}"] = lambda s=saver: graph.run(
            QUESTION, controller_llm=model, search_fn=instant_search, checkpointer=s
        )
        if saver is not None:
            runners[f"arcana_run_exit/{column}"] = lambda s=saver: graph.run(
                QUESTION,
                controller_llm=model,
                search_fn=instant_search,
                checkpointer=s,
                durability="exit",
            )
        runners[f"arcana_compiled/{column}"] = lambda g=arcana, s=saver: g.invoke(
            {"question": QUESTION}, _config(s), context=LoopContext()
        )
    return runners


def check_runs(runners: dict[str, Runner]) -> None:
    """Fail loudly if a variant does not run the whole script (a benchmark of a broken loop is worthless)."""
    for name, runner in runners.items():
        out = runner()
        if name.startswith("arcana_run"):  # arcana_run and arcana_run_exit
            assert out.terminated_by == "answered" and out.iterations == TURNS, (
                name,
                out.terminated_by,
                out.iterations,
            )
            assert len(out.chunks) == SEARCHES * CHUNKS_PER_SEARCH, (name, len(out.chunks))
            continue
        if name.startswith("arcana_compiled"):
            assert out["terminated_by"] == "answered" and out["iterations"] == TURNS, (
                name,
                out.get("terminated_by"),
            )
            assert len(out["chunks"]) == SEARCHES * CHUNKS_PER_SEARCH, (name, len(out["chunks"]))
            continue
        ai = [m for m in out["messages"] if isinstance(m, AIMessage)]
        assert len(ai) == TURNS, (name, len(ai))


def measure(
    runners: dict[str, Runner], rounds: int, warmup: int = 3, seed: int = 0
) -> dict[str, list[float]]:
    """Time every runner ``rounds`` times, interleaved round-robin in a shuffled order per round."""
    names = list(runners)
    for _ in range(warmup):
        for name in names:
            runners[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(names)
        gc.collect()
        for name in names:
            start = time.perf_counter()
            runners[name]()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


# ----- report ---------------------------------------------------------------------------


def summarize(times: dict[str, list[float]], notes: dict[str, str]) -> dict[str, Any]:
    """Medians, ratios to the floor, per-step figures and the target checks."""
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    floor = medians["floor"]
    table: dict[str, dict[str, Any]] = {}
    for variant in GRAPH_VARIANTS:
        row: dict[str, Any] = {}
        for column in CHECKPOINTERS:
            ms = medians.get(f"{variant}/{column}")
            row[column] = (
                None
                if ms is None
                else {
                    "ms": round(ms, 3),
                    "ratio_to_floor": round(ms / floor, 2),
                    "ms_per_turn": round(ms / TURNS, 3),
                    "p90_ms": round(
                        statistics.quantiles(times[f"{variant}/{column}"], n=10)[-1], 3
                    ),
                }
            )
        table[variant] = row
    return {
        "floor_ms": round(floor, 3),
        "floor_ms_per_turn": round(floor / TURNS, 3),
        "table": table,
        "targets": targets(medians),
        "notes": notes,
    }


STATEGRAPH_GUARD = 1.6
"""Without a checkpointer, `run()` against a minimal StateGraph: the start and finish supersteps
cost microseconds, far below 1 % of a run against a real model."""
CREATE_AGENT_GUARD = 1.1
"""With each checkpointer (memory, SQLite, PostgreSQL), `run()` against `create_agent`."""


def targets(medians: dict[str, float]) -> list[dict[str, Any]]:
    """Today's guards, checked on each arcana-loop entry point (ratios of medians in one run)."""
    checks: list[dict[str, Any]] = []

    def check(name: str, ours: str, theirs: str, limit: float) -> None:
        if ours not in medians or theirs not in medians:
            return
        ratio = medians[ours] / medians[theirs]
        checks.append(
            {
                "target": name,
                "ours": ours,
                "reference": theirs,
                "ratio": round(ratio, 3),
                "limit": limit,
                "pass": ratio <= limit,
            }
        )

    for entry in ("arcana_run", "arcana_compiled", "arcana_run_exit"):
        check(
            f"<= {STATEGRAPH_GUARD}x minimal StateGraph, no checkpointer",
            f"{entry}/none",
            "stategraph/none",
            STATEGRAPH_GUARD,
        )
        for column in CHECKPOINTERS[1:]:
            check(
                f"<= {CREATE_AGENT_GUARD}x create_agent, {column}",
                f"{entry}/{column}",
                f"create_agent/{column}",
                CREATE_AGENT_GUARD,
            )
    return checks


def print_report(summary: dict[str, Any], rounds: int) -> None:
    floor = summary["floor_ms"]
    print(
        f"\nLoop orchestration, {TURNS} turns ({SEARCHES} searches x {CHUNKS_PER_SEARCH} chunks of {CHUNK_CHARS} chars, then answer); "
        f"median of {rounds} interleaved rounds"
    )
    print(
        f"floor (bare loop): {floor:.2f} ms per loop, {summary['floor_ms_per_turn']:.3f} ms per turn\n"
    )
    header = f"{'variant':<30}" + "".join(f"{c:>20}" for c in CHECKPOINTERS)
    print(header)
    print("-" * len(header))
    for variant, row in summary["table"].items():
        cells = []
        for column in CHECKPOINTERS:
            cell = row[column]
            cells.append(
                f"{'skipped':>20}"
                if cell is None
                else f"{cell['ms']:>9.2f} ms {cell['ratio_to_floor']:>5.1f}x"
            )
        print(f"{LABELS[variant]:<30}" + "".join(cells))
    print(
        "\nper turn (ms): "
        + "; ".join(
            f"{LABELS[v]} "
            + "/".join(
                "-" if row[c] is None else f"{row[c]['ms_per_turn']:.2f}" for c in CHECKPOINTERS
            )
            for v, row in summary["table"].items()
        )
    )
    for column, note in summary["notes"].items():
        print(f"note: {column}: {note}")
    print("\ntargets:")
    for t in summary["targets"]:
        print(
            f"  {'PASS' if t['pass'] else 'FAIL'}  {t['ours']:<24} {t['target']:<46} ratio {t['ratio']:.2f} (limit {t['limit']})"
        )


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "packages": {
            p: _version(p)
            for p in (
                "langgraph",
                "langchain",
                "langchain-core",
                "langgraph-checkpoint",
                "langgraph-checkpoint-sqlite",
                "langgraph-checkpoint-postgres",
            )
        },
    }


def _version(package: str) -> str | None:
    try:
        return version(package)
    except Exception:  # not installed
        return None


def profile(runner: Runner, runs: int = 200, top: int = 25) -> str:
    """cProfile a runner; return the top functions by cumulative and by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        runner()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="timed rounds per variant (>= 30)")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgresSaver column")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile arcana-loop without a checkpointer"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    model = InstantChatModel()
    with checkpointers(with_postgres=not args.no_postgres) as (savers, notes):
        runners = make_runners(model, savers)
        check_runs(runners)
        times = measure(runners, max(args.rounds, 30))
        summary = summarize(times, notes)
        print_report(summary, max(args.rounds, 30))
        if args.profile:
            print(profile(runners["arcana_compiled/none"]))
    result = {
        "benchmark": "loop",
        "rounds": max(args.rounds, 30),
        "turns": TURNS,
        "environment": environment(),
        **summary,
    }
    write_results(args.output, result)
    return result


if __name__ == "__main__":
    main()
