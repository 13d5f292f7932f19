"""Checkpoint growth: bytes a checkpointer stores for one loop, against the final state's size.

Run: `python -m bench.checkpoint_bench [--turns 2 5 10 20] [--questions 20] [--no-postgres]`.
Each loop is ``turns - 1`` searches returning 5 chunks of ~800 characters, then ``answer``,
with an instant scripted model. A conversation is ``questions`` questions asked one
after another on one thread, each a search and an answer; it is measured once it ends. Stored bytes are everything the saver keeps for the thread
(checkpoints, metadata, channel blobs, pending writes); the final state's size is the
JSON of its values; the conversation's state is also read back (``get_state``), the read
every later question starts with. Two graphs are measured in the same run: arcana-loop, and the
minimal hand-written StateGraph of ``bench.loop_bench`` (``add_messages`` stored
whole), which is the baseline. Results go to `bench/results/checkpoints.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, messages_to_dict
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from arcana_loop.nodes.replying import ReplyingChatModel
from bench.loop_bench import ANSWER_TEXT, instant_search, minimal_stategraph
from bench.scripted import TurnScriptedModel

RESULTS = Path(__file__).parent / "results" / "checkpoints.json"
TURNS = (2, 5, 10, 20)
QUESTIONS = 20
TARGET_RATIO = 3.0


def TurnsModel(turns: int) -> BaseChatModel:  # reads as the class it stands for
    """Searches ``turns - 1`` times with distinct queries, then answers."""

    def reply(turn: int) -> AIMessage:
        call = (
            {
                "name": "search",
                "args": {"query": f"checkpoint growth aspect {turn}"},
                "id": f"call_{turn}",
                "type": "tool_call",
            }
            if turn < turns - 1
            else {
                "name": "answer",
                "args": {"text": ANSWER_TEXT},
                "id": f"call_{turn}",
                "type": "tool_call",
            }
        )
        return AIMessage(content="", tool_calls=[call])

    return TurnScriptedModel(script=reply)


class ConversationModel(ReplyingChatModel):
    """Each question of a conversation: one search (distinct per question), then an answer."""

    @property
    def _llm_type(self) -> str:
        return "conversation-scripted"

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> BaseMessage:
        asked = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
        question = len(asked)
        turn = sum(isinstance(m, AIMessage) for m in messages[asked[-1] :]) if asked else 0
        call = (
            {
                "name": "search",
                "args": {"query": f"conversation question {question}"},
                "id": f"call_{question}_s",
                "type": "tool_call",
            }
            if turn == 0
            else {
                "name": "answer",
                "args": {"text": ANSWER_TEXT},
                "id": f"call_{question}_a",
                "type": "tool_call",
            }
        )
        return AIMessage(content="", tool_calls=[call])


def state_json_bytes(values: dict[str, Any]) -> int:
    """The JSON size of a state's values (messages in LangChain's dict form)."""
    plain = {k: messages_to_dict(v) if k == "messages" else v for k, v in values.items()}
    return len(json.dumps(plain, default=str).encode())


def stored_bytes(saver: BaseCheckpointSaver[Any], thread_id: str) -> int:
    """Every byte the saver keeps for one thread."""
    if isinstance(saver, InMemorySaver):
        total = 0
        for checkpoints in saver.storage.get(thread_id, {}).values():
            for (_, checkpoint), (_, metadata), _parent in checkpoints.values():
                total += len(checkpoint) + len(metadata)
        total += sum(len(blob) for key, (_, blob) in saver.blobs.items() if key[0] == thread_id)
        for key, writes in saver.writes.items():
            if key[0] == thread_id:
                total += sum(len(value[1]) for _, _, value, _ in writes.values())
        return total
    conn = getattr(saver, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        row = conn.execute(
            "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?)"
            " + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?)",
            (thread_id, thread_id),
        ).fetchone()
        return int(row[0])
    with saver._cursor() as cur:  # type: ignore[attr-defined]  # PostgresSaver's own cursor helper
        cur.execute(
            "SELECT (SELECT COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) FROM checkpoints WHERE thread_id = %(t)s)"
            " + (SELECT COALESCE(SUM(COALESCE(octet_length(blob), 0)), 0) FROM checkpoint_blobs WHERE thread_id = %(t)s)"
            " + (SELECT COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_writes WHERE thread_id = %(t)s) AS total",
            {"t": thread_id},
        )
        row = cur.fetchone()
        return int(row["total"] if isinstance(row, dict) else row[0])


@contextlib.contextmanager
def savers(with_postgres: bool) -> Iterator[dict[str, BaseCheckpointSaver[Any]]]:
    """Fresh savers per kind (so stored bytes belong to this benchmark only)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory() as tmp:
        found: dict[str, BaseCheckpointSaver[Any]] = {
            "memory": InMemorySaver(),
            "sqlite": SqliteSaver(
                sqlite3.connect(str(Path(tmp) / "bench.sqlite"), check_same_thread=False)
            ),
        }
        if with_postgres:
            from arcana_loop.graph.checkpoints import resolve_checkpointer

            found["postgres"] = resolve_checkpointer("postgres")  # type: ignore[assignment]
        yield found


def run_arcana(saver: BaseCheckpointSaver[Any], turns: int) -> tuple[str, dict[str, Any]]:
    from arcana_loop import graph

    result = graph.run(
        "How do checkpoints grow?",
        controller_llm=TurnsModel(turns=turns),
        search_fn=instant_search,
        checkpointer=saver,
        max_iterations=turns + 1,
        chunk_cap=5 * turns,
    )
    assert result.terminated_by == "answered" and result.iterations == turns, (
        result.terminated_by,
        result.iterations,
    )
    assert result.thread_id is not None
    from arcana_loop.graph.build import build_graph, make_deps

    compiled = build_graph(
        make_deps(controller_llm=TurnsModel(turns=turns), search_fn=instant_search)
    ).compile(checkpointer=saver)
    values = compiled.get_state({"configurable": {"thread_id": result.thread_id}}).values
    return result.thread_id, dict(values)


def run_conversation(saver: BaseCheckpointSaver[Any], questions: int) -> tuple[str, dict[str, Any]]:
    """Ask ``questions`` questions on one thread; return the thread and its final state."""
    from arcana_loop import graph

    model, thread_id = ConversationModel(), str(uuid.uuid4())
    for number in range(questions):
        result = graph.run(
            f"Question {number}: how do checkpoints grow?",
            controller_llm=model,
            search_fn=instant_search,
            checkpointer=saver,
            thread_id=thread_id,
        )
        assert result.terminated_by == "answered" and result.question_index == number, (
            result.terminated_by,
            result.question_index,
        )
    from arcana_loop.graph.build import build_graph, make_deps

    compiled = build_graph(make_deps(controller_llm=model, search_fn=instant_search)).compile(
        checkpointer=saver
    )
    return thread_id, dict(compiled.get_state({"configurable": {"thread_id": thread_id}}).values)


def measure_conversation(questions: int, with_postgres: bool) -> list[dict[str, Any]]:
    """Stored bytes of a ``questions``-question conversation against its final state, per saver."""
    rows: list[dict[str, Any]] = []
    with savers(with_postgres) as found:
        for kind, saver in found.items():
            thread_id, values = run_conversation(saver, questions)
            stored, final = stored_bytes(saver, thread_id), state_json_bytes(values)
            rows.append(
                {
                    "saver": kind,
                    "variant": "arcana-loop conversation",
                    "questions": questions,
                    "stored_bytes": stored,
                    "final_state_bytes": final,
                    "ratio": round(stored / final, 2),
                    "load_ms_p50": round(load_ms(saver, thread_id), 2),
                }
            )
    return rows


def load_ms(saver: BaseCheckpointSaver[Any], thread_id: str, rounds: int = 15) -> float:
    """Median milliseconds to read a thread's state back (what every later question does first)."""
    from arcana_loop.graph.build import build_graph, make_deps

    compiled = build_graph(
        make_deps(controller_llm=ConversationModel(), search_fn=instant_search)
    ).compile(checkpointer=saver)
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        compiled.get_state(config)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def run_minimal(saver: BaseCheckpointSaver[Any], turns: int) -> tuple[str, dict[str, Any]]:
    compiled = minimal_stategraph(TurnsModel(turns=turns)).compile(checkpointer=saver)
    thread_id = str(uuid.uuid4())
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}, "recursion_limit": 200}
    compiled.invoke({"question": "How do checkpoints grow?"}, config)
    return thread_id, dict(compiled.get_state(config).values)


def measure(turn_counts: tuple[int, ...], with_postgres: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with savers(with_postgres) as found:
        for kind, saver in found.items():
            for variant, runner in (
                ("minimal StateGraph", run_minimal),
                ("arcana-loop", run_arcana),
            ):
                for turns in turn_counts:
                    thread_id, values = runner(saver, turns)
                    stored, final = stored_bytes(saver, thread_id), state_json_bytes(values)
                    rows.append(
                        {
                            "saver": kind,
                            "variant": variant,
                            "turns": turns,
                            "stored_bytes": stored,
                            "final_state_bytes": final,
                            "ratio": round(stored / final, 2),
                        }
                    )
    return rows


def print_table(rows: list[dict[str, Any]], turn_counts: tuple[int, ...]) -> None:
    print(f"stored bytes / final state JSON bytes (target <= {TARGET_RATIO}x, linear in turns)")
    print(f"{'saver':<9} {'variant':<20} " + " ".join(f"{t:>14}" for t in turn_counts))
    keys = sorted(
        {(r["saver"], r["variant"]) for r in rows},
        key=lambda k: (k[0], k[1] != "minimal StateGraph"),
    )
    for saver, variant in keys:
        cells = []
        for t in turn_counts:
            r = next(
                r for r in rows if (r["saver"], r["variant"], r["turns"]) == (saver, variant, t)
            )
            cells.append(f"{r['ratio']:>5.1f}x {r['stored_bytes'] / 1024:>6.0f}kB")
        print(f"{saver:<9} {variant:<20} " + " ".join(f"{c:>14}" for c in cells))


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, nargs="+", default=list(TURNS))
    parser.add_argument(
        "--questions",
        type=int,
        default=QUESTIONS,
        help="questions of the conversation measured on one thread",
    )
    parser.add_argument(
        "--no-postgres", action="store_true", help="skip the PostgreSQL checkpointer"
    )
    args = parser.parse_args(argv)
    turn_counts = tuple(args.turns)
    rows = measure(turn_counts, with_postgres=not args.no_postgres)
    print_table(rows, turn_counts)
    conversation = measure_conversation(args.questions, with_postgres=not args.no_postgres)
    print(
        f"\n{args.questions}-question conversation on one thread: stored bytes / final state JSON bytes (target <= {TARGET_RATIO}x)"
    )
    for row in conversation:
        print(
            f"{row['saver']:<9} {row['ratio']:>5.1f}x {row['stored_bytes'] / 1024:>6.0f}kB stored, {row['final_state_bytes'] / 1024:>6.0f}kB final state, state read back in {row['load_ms_p50']:.1f} ms (p50)"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"target_ratio": TARGET_RATIO, "rows": rows, "conversation": conversation}, indent=2
        )
        + "\n"
    )
    return [*rows, *conversation]


if __name__ == "__main__":
    main()
