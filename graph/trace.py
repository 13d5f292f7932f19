"""Per-step traces of a checkpointed thread, read from its checkpoint history.

Every superstep of a run leaves a checkpoint whose task result is what that node
wrote; a trace turns those into one `TraceStep` per node run, oldest first. Nothing is
recorded beyond what the checkpointer already keeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.types import StateSnapshot

from arcana_loop.core.channels import is_replacing
from arcana_loop.core.text import check_thread_id
from arcana_loop.graph.checkpoints import resolve_checkpointer
from arcana_loop.tools import registry


class ThreadNotFoundError(LookupError):
    """The checkpointer holds no checkpoint for the thread."""


@dataclass
class TraceStep:
    """One node run of a thread."""

    step: int
    """LangGraph's superstep number (1 is the `start` step that opens the first question)."""
    node: str
    checkpoint_id: str
    """The checkpoint the node ran from: pass it to `fork` or `replay` to re-run from here."""
    iteration: int | None = None
    """The 0-based controller turn this step belongs to (within its question)."""
    question: int = 0
    """The 0-based number of the question of the thread's conversation this step belongs to."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """``{"name", "args"}`` of each tool call the controller asked for."""
    searches: list[dict[str, Any]] = field(default_factory=list)
    """``{"query", "collection", "returned_chunk_ids", "duplicate_of"}`` of each executed search."""
    events: list[str] = field(default_factory=list)
    """One-line summaries of the tool history entries this step recorded."""
    terminated_by: str | None = None
    error: str | None = None
    seconds: float | None = None
    """Wall time of the node, when its timing was recorded."""
    tokens: int | None = None
    """Tokens the step's model call used, when the model reported them."""
    created_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        return asdict(self)


def _graph() -> Any:
    from arcana_loop.graph.build import build_graph, make_deps

    return build_graph(make_deps())


def history(thread_id: str, checkpointer: Any) -> list[StateSnapshot]:
    """The thread's checkpoints, oldest first.

    Raises:
        ThreadNotFoundError: when the checkpointer has nothing for the thread.
        ValueError: for an unknown checkpointer spec or a malformed thread id.
    """
    check_thread_id(thread_id)
    saver = resolve_checkpointer(checkpointer)
    if saver is None:
        raise ValueError("a trace needs the checkpointer the thread ran with")
    compiled = _graph().compile(checkpointer=saver)
    snapshots = list(compiled.get_state_history({"configurable": {"thread_id": thread_id}}))
    if not snapshots:
        raise ThreadNotFoundError(f"no checkpoints for thread {thread_id!r}")
    return list(reversed(snapshots))


def _usage_of(result: dict[str, Any], node: str) -> tuple[float | None, int | None]:
    usage = result.get("usage") or {}
    seconds = (usage.get("node_seconds") or {}).get(node)
    total = usage.get("total")
    tokens = total.get("total_tokens") if isinstance(total, dict) else None
    return (float(seconds) if isinstance(seconds, int | float) else None), tokens


def _step(snapshot: StateSnapshot, task: Any) -> TraceStep:
    result: dict[str, Any] = task.result if isinstance(task.result, dict) else {}
    seconds, tokens = _usage_of(result, task.name)
    opened = "question_index" in result  # the step started a new question of the conversation
    iterations = 0 if opened else snapshot.values.get("iterations", 0)
    row = TraceStep(
        step=int(snapshot.metadata.get("step", -1)) + 1 if snapshot.metadata else 0,
        node=task.name,
        checkpoint_id=str(snapshot.config["configurable"]["checkpoint_id"]),
        iteration=iterations if task.name == "controller" else max(iterations - 1, 0),
        question=int(
            result["question_index"] if opened else snapshot.values.get("question_index") or 0
        ),
        terminated_by=result.get("terminated_by"),
        error=result.get("error"),
        seconds=seconds,
        tokens=tokens,
        created_at=snapshot.created_at,
    )
    for message in result.get("messages") or []:
        if isinstance(message, AIMessage) and task.name == "controller":
            row.tool_calls = [{"name": c["name"], "args": c["args"]} for c in message.tool_calls]
    for event in _tool_events(result):
        row.events.append(f"{event['tool']}: {event['summary']}")
        if registry.is_search(event["tool"]):
            row.searches.append(
                {
                    "query": event["args"].get("query"),
                    "collection": None
                    if "collection" in event.get("ignored_args", ())
                    else event["args"].get("collection"),
                    "returned_chunk_ids": list(event["returned_chunk_ids"]),
                    "duplicate_of": event.get("duplicate_of"),
                }
            )
    return row


def _tool_events(result: dict[str, Any]) -> Iterator[dict[str, Any]]:
    written: Any = result.get("tool_history") or []
    if is_replacing(written):  # a new question's fresh history
        written = written["replace"]
    yield from (written if isinstance(written, list) else [written])


def trace(thread_id: str, checkpointer: Any, *, question: int | None = None) -> list[TraceStep]:
    """One row per node run of the thread, oldest first.

    Args:
        thread_id: the thread (``LoopResult.thread_id``).
        checkpointer: the saver object or spec the thread ran with (``"memory"``,
            ``"sqlite:<path>"``, ``"postgres"``).
        question: only the steps of this question of the conversation (0-based, as
            ``LoopResult.question_index``; negative counts from the last); all when ``None``.

    Raises:
        ThreadNotFoundError: for a thread the checkpointer does not hold.
        ValueError: for a question the thread does not have.
    """
    rows: list[TraceStep] = []
    for snapshot in history(thread_id, checkpointer):
        for task in snapshot.tasks:
            if task.name.startswith("__") or task.result is None and not task.error:
                continue
            rows.append(_step(snapshot, task))
    if question is None:
        return rows
    asked = sorted({row.question for row in rows})
    wanted = asked[question] if question < 0 and -question <= len(asked) else question
    if wanted not in asked:
        raise ValueError(f"thread {thread_id!r} has no question {question!r}; it has {len(asked)}")
    return [row for row in rows if row.question == wanted]
