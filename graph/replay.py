"""Re-running threads: time travel and forks from a checkpoint, and recorded replays.

`fork` (and `replay`, a fork without edits) copies a thread's state at one of its
checkpoints into a new thread and runs the loop on from there, so the original thread
is never touched. `record_of` turns a finished thread into a `Record`: the question,
the options, every LLM reply and every search result, read from the checkpoint
history. `replay_record` runs the loop again from a record alone, with no model and
no database, and reproduces the same answer, tool history and chunks; a record saved
as JSON makes a bug report reproducible anywhere.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, message_to_dict, messages_from_dict
from langgraph.graph import START
from pydantic import ConfigDict, Field

from arcana_loop.core.context import CONTEXT_FIELDS, LoopContext
from arcana_loop.core.state import RESULT_KEYS
from arcana_loop.core.text import check_thread_id
from arcana_loop.graph.build import build_graph, make_deps
from arcana_loop.graph.checkpoints import resolve_checkpointer
from arcana_loop.graph.run import LoopResult, recursion_limit, run
from arcana_loop.graph.trace import history
from arcana_loop.knowledge.types import Chunk, SearchResults
from arcana_loop.nodes.conversation import is_closing, is_instruction, opening_index
from arcana_loop.nodes.replying import ReplyingChatModel
from arcana_loop.tools import registry

_COMPARED = ("answer", "terminated_by", "iterations", "tool_history", "chunks")
"""What a recorded replay must reproduce exactly."""


class ReplayError(ValueError):
    """A thread or record cannot be replayed (unknown checkpoint, unfinished record...)."""


class NothingToReplay(ReplayError):
    """A question that ended as it opened (nothing stored to search): no model call or search to record."""


def fork(
    thread_id: str,
    *,
    checkpointer: Any,
    checkpoint_id: str | None = None,
    values: Mapping[str, Any] | None = None,
    new_thread_id: str | None = None,
    controller_llm: Any = None,
    answer_llm: Any = None,
    search_fn: Any = None,
    grounder: Any = None,
    **options: Any,
) -> LoopResult:
    """Copy a thread's state at a checkpoint into a new thread, edit it, and run on.

    Args:
        thread_id: the thread to fork; it is left as it was.
        checkpointer: the saver object or spec the thread ran with; the fork is stored there too.
        checkpoint_id: where to fork (a `TraceStep.checkpoint_id`); default the latest. Where
            a question opens (its input, or its ``start`` step) the fork asks it again, after
            the conversation before it.
        values: state edits applied on top of the copy, through the state's reducers
            (an `AIMessage` with the id of an existing one replaces it, e.g. to change a
            search query; ``{"chunks": []}`` drops the gathered chunks); where a question
            opens, edits of the run's input (``question``, ``collection``).
        new_thread_id: the fork's thread id (generated when omitted).
        controller_llm: as in `run`; default the model named in the thread's options.
        answer_llm: as in `run`.
        search_fn: as in `run`; default the knowledge base.
        grounder: as in `run`; default the thread's grounder option.
        **options: run options overriding the thread's (e.g. ``max_iterations=3``).

    Raises:
        ReplayError: for an unknown checkpoint id.
    """
    unknown = set(options) - CONTEXT_FIELDS
    if unknown:
        raise TypeError(f"unknown run option(s): {', '.join(sorted(unknown))}")
    check_thread_id(new_thread_id)
    saver = resolve_checkpointer(checkpointer)
    snapshots = history(thread_id, saver)
    index = _find(snapshots, checkpoint_id)
    snapshot = snapshots[index]
    opening = _opening(snapshots, index)
    stored = snapshot.values if opening is None else {**opening[0], **opening[1]}
    context = _stored_context(stored, options)
    compiled = _compiled(saver, controller_llm, answer_llm, search_fn, grounder)
    target = new_thread_id or str(uuid.uuid4())
    config: Any = {
        "configurable": {"thread_id": target},
        "recursion_limit": recursion_limit(context),
    }
    if opening is not None:
        # where a question opens: the fork asks it again, after the conversation before it
        before, asked = opening
        if before.get("messages"):
            compiled.update_state(config, dict(before), as_node="finish")
        inputs: Any = {k: v for k, v in asked.items() if k != "options"}  # options: the context
        inputs.update(values or {})
    else:
        as_node = snapshots[index - 1].tasks[0].name
        compiled.update_state(config, dict(snapshot.values), as_node=as_node)
        compiled.update_state(
            config, {**dict(values or {}), "options": asdict(context)}, as_node=as_node
        )
        inputs = None
    state = compiled.invoke(inputs, config, context=context, output_keys=list(RESULT_KEYS))
    return LoopResult.from_state(state, target)


def resume(
    thread_id: str,
    *,
    checkpointer: Any,
    controller_llm: Any = None,
    answer_llm: Any = None,
    search_fn: Any = None,
    grounder: Any = None,
) -> LoopResult:
    """Finish an interrupted thread (a crashed or killed process) from its last checkpoint, in place.

    The steps the checkpoints hold are not run again; the step that was under way when
    the process died runs from its start. A finished thread is returned as it is.

    Raises:
        ThreadNotFoundError: when the checkpointer has nothing for the thread.
    """
    saver = resolve_checkpointer(checkpointer)
    snapshots = history(thread_id, saver)
    context = _stored_context(snapshots[-1].values, {})
    config: Any = {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": recursion_limit(context),
    }
    compiled = _compiled(saver, controller_llm, answer_llm, search_fn, grounder)
    if not snapshots[-1].next:
        return LoopResult.from_state(snapshots[-1].values, thread_id)
    state = compiled.invoke(None, config, context=context, output_keys=list(RESULT_KEYS))
    return LoopResult.from_state(state, thread_id)


def _stored_context(values: Mapping[str, Any], overrides: Mapping[str, Any]) -> LoopContext:
    """The thread's recorded options, with the given ones (``None``: keep the thread's) on top."""
    merged = {
        **dict(values.get("options") or {}),
        **{k: v for k, v in overrides.items() if v is not None},
    }
    return LoopContext(**{k: v for k, v in merged.items() if k in CONTEXT_FIELDS})


def _compiled(
    saver: Any, controller_llm: Any, answer_llm: Any, search_fn: Any, grounder: Any
) -> Any:
    deps = make_deps(
        controller_llm=controller_llm, answer_llm=answer_llm, search_fn=search_fn, grounder=grounder
    )
    return build_graph(deps).compile(checkpointer=saver)


def replay(
    thread_id: str, *, checkpointer: Any, checkpoint_id: str | None = None, **kwargs: Any
) -> LoopResult:
    """Re-run a thread from one of its checkpoints in a new thread (a `fork` with no edits)."""
    return fork(thread_id, checkpointer=checkpointer, checkpoint_id=checkpoint_id, **kwargs)


def _opening(
    snapshots: Sequence[Any], index: int
) -> tuple[Mapping[str, Any], dict[str, Any]] | None:
    """Where a question opens (its input checkpoint, or its ``start`` step's): the state before it and the run's input.

    The input is no state yet (LangGraph keeps it as the ``__start__`` task's writes), and
    at the ``start`` step it is mixed into the state of the question before: copying either
    checkpoint's values would ask the earlier question again, or nothing.
    """
    if snapshots[index].next == ("start",) and index > 0:
        index -= 1
    snapshot = snapshots[index]
    if snapshot.next != (START,) or not snapshot.tasks:
        return None
    written = snapshot.tasks[0].result
    return (snapshot.values, dict(written)) if isinstance(written, Mapping) else None


def _find(snapshots: Sequence[Any], checkpoint_id: str | None) -> int:
    if checkpoint_id is None:
        return len(snapshots) - 1
    for index, snapshot in enumerate(snapshots):
        if snapshot.config["configurable"]["checkpoint_id"] == checkpoint_id:
            return index
    raise ReplayError(f"the thread has no checkpoint {checkpoint_id!r}")


# ----- recorded replay ---------------------------------------------------------------


@dataclass
class Record:
    """Everything a run took from the outside world, and what it produced."""

    question: str
    collection: Any
    options: dict[str, Any]
    controller_replies: list[dict[str, Any]] = field(default_factory=list)
    """Each controller turn's reply (a LangChain message dict), or ``{"error": text}``."""
    answerer_reply: dict[str, Any] | None = None
    synthesis_reply: dict[str, Any] | None = None
    searches: list[dict[str, Any]] = field(default_factory=list)
    """``{"query", "collection", "result": [chunks] | None, "error": text | None, "unmatched": [words]}`` per
    search sent, in order (``collection`` is the scope the controller asked for, ``None`` for the run's;
    ``unmatched`` the query's words its scope never uses; older records lack either)."""
    expected: dict[str, Any] = field(default_factory=dict)
    """The original run's answer, terminated_by, iterations, tool_history and chunks."""
    question_index: int = 0
    """Which question of its thread's conversation this is (0-based)."""
    conversation: list[dict[str, Any]] = field(default_factory=list)
    """The conversation before the question (LangChain message dicts), for a follow-up; empty for a first question."""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    """The chunks the answer rests on, with their versions (`core.state.EvidencePin`); empty in records written before pins."""
    grounding: dict[str, Any] | None = None
    """The run's grounding (its claims and their support), when it was grounded."""
    usage: dict[str, Any] = field(default_factory=dict)
    """The run's tokens and seconds (`LoopResult.usage`)."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        """Write the record as JSON."""
        target = Path(path)
        target.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Record:
        """Read a record written by `save`.

        Raises:
            ReplayError: for a file that is not a record.
        """
        try:
            data = json.loads(Path(path).read_text())
            record = cls(**_record_fields(data))
            record._check_shapes()
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ReplayError(f"{path} is not a replay record: {exc}") from exc
        return record

    def _check_shapes(self) -> None:
        """Raise `TypeError` for a field a file holds in another shape than `save` writes.

        A replay or a diff reads every field as `save` wrote it; a hand-edited or damaged
        file is refused here, whole, rather than failing halfway through either.
        """
        if not isinstance(self.question, str):
            raise TypeError("question must be a string")
        for name in ("options", "expected", "usage"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be an object")
        for name in ("answerer_reply", "synthesis_reply", "grounding"):
            if not isinstance(getattr(self, name), dict | None):
                raise TypeError(f"{name} must be an object or null")
        for name in ("controller_replies", "searches", "conversation", "evidence"):
            items = getattr(self, name)
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise TypeError(f"{name} must be a list of objects")
        # the messages are parsed as a replay parses them: a missing or unknown type raises
        messages_from_dict([r for r in self.controller_replies if "error" not in r])
        messages_from_dict(self.conversation)


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _record_fields(data: object) -> dict[str, Any]:
    """The fields of a record as a file holds them; `TypeError` naming what is wrong with any other JSON."""
    if not isinstance(data, dict):
        kind = "null" if data is None else _JSON_KINDS.get(type(data), "value")
        raise TypeError(f"it holds a JSON {kind}, where a record is an object")
    known = {f.name for f in fields(Record)}
    required = [
        f.name for f in fields(Record) if f.default is MISSING and f.default_factory is MISSING
    ]
    missing = [name for name in required if name not in data]
    if missing:
        raise TypeError(f"it has no {missing[0]!r}, which every record holds")
    other = sorted(str(key) for key in data if key not in known)
    if other:
        raise TypeError(f"it has a field no record has: {other[0]!r}")
    return data


def record_of(
    thread_id: str, checkpointer: Any, *, question: int | None = None, replayable: bool = True
) -> Record:
    """Read one finished question of a thread as a record, from the thread's checkpoint history.

    Args:
        thread_id: the thread.
        checkpointer: the saver object or spec the thread ran with.
        question: which question of the thread's conversation (0-based; negative counts
            from the last); the last when ``None``.
        replayable: refuse a question that ended as it opened (nothing stored to search:
            no model call or search to replay). Without it, such a question is a record
            of no turn and no search, which a diff can compare (`graph.diff`).

    Raises:
        ReplayError: when the question has not finished, ended as it opened (nothing
            stored to search, when `replayable`), or the thread has no such question.
    """
    snapshots = history(thread_id, checkpointer)
    tagged = [
        (i, task, _question_of(snapshot, task))
        for i, snapshot in enumerate(snapshots)
        for task in snapshot.tasks
        if not task.name.startswith("__")
    ]
    asked = sorted({q for _, _, q in tagged})
    wanted = asked[-1] if question is None and asked else question
    if wanted is not None and wanted < 0 and -wanted <= len(asked):
        wanted = asked[wanted]
    if wanted not in asked:
        raise ReplayError(f"thread {thread_id!r} has no question {question!r}; it has {len(asked)}")
    own = [(i, task) for i, task, q in tagged if q == wanted]
    end = own[-1][0] + 1
    final = snapshots[end].values if end < len(snapshots) else {}
    if end >= len(snapshots) or snapshots[end].next or not final.get("terminated_by"):
        raise ReplayError(
            f"thread {thread_id!r} has not finished; only finished questions can be recorded"
        )
    if replayable and {task.name for _, task in own} <= {"start", "finish"}:
        raise NothingToReplay(
            f"question {wanted} of thread {thread_id!r} ended as it opened, before any model "
            f"call or search ({final.get('answer')}): there is nothing to replay"
        )
    record = Record(
        question=final["question"],
        collection=final.get("collection", "all"),
        options=dict(final.get("options") or {}),
        expected={k: final.get(k) for k in _COMPARED},
        question_index=int(wanted or 0),
        conversation=_conversation_before(final),
        evidence=[dict(p) for p in final.get("evidence") or []],
        grounding=final.get("grounding"),
        usage=dict(final.get("usage") or {}),
    )
    for _, task in own:
        result = task.result if isinstance(task.result, dict) else None
        if result is not None:
            _record_task(record, task.name, result)
    return record


def _question_of(snapshot: Any, task: Any) -> int:
    """The question of the conversation a task belongs to (the one it opened, or the one under way)."""
    result = task.result if isinstance(task.result, dict) else {}
    return int(
        result["question_index"]
        if "question_index" in result
        else snapshot.values.get("question_index") or 0
    )


def _conversation_before(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages before the question's opening human message, as dicts."""
    messages = list(values.get("messages") or [])
    opening = opening_index(messages, values.get("question_message_id"))
    return [message_to_dict(m) for m in messages[: opening or 0]]


def _reply_of(result: Mapping[str, Any]) -> dict[str, Any] | None:
    # a model's reply, not the message the loop writes to close a question
    replies = [
        m for m in result.get("messages") or [] if isinstance(m, AIMessage) and not is_closing(m)
    ]
    return message_to_dict(replies[-1]) if replies else None


def _record_task(record: Record, node: str, result: Mapping[str, Any]) -> None:
    if node == "controller" and ("messages" in result or "error" in result):
        reply = _reply_of(result)
        record.controller_replies.append(
            reply if reply is not None else {"error": result.get("error") or "failed"}
        )
    elif node == "answerer":
        record.answerer_reply = _reply_of(result) or {"error": "failed"}
    elif node == "synthesis":
        record.synthesis_reply = _reply_of(result) or {"error": "failed"}
    elif node == "tools":
        _record_searches(record, result)


def _record_searches(record: Record, result: Mapping[str, Any]) -> None:
    write = result.get("chunks")
    found: list[Chunk] = (
        list(write["merge"]) if isinstance(write, dict) and "merge" in write else []
    )
    for event in result.get("tool_history") or []:
        args = event.get("args") or {}
        searched = registry.is_search(event.get("tool"))
        if not searched or "duplicate_of" in event or args.get("collection") == []:
            continue
        ids = list(event.get("returned_chunk_ids") or [])
        error = event.get("error")
        # the scope the search was sent with (an ignored argument was not used)
        scope = None if "collection" in event.get("ignored_args", ()) else args.get("collection")
        if not ids and isinstance(error, str):
            # the entry says why the search failed (entries stored before it did replay as a
            # search that found nothing, and the replay reports the difference)
            record.searches.append(
                {"query": args.get("query"), "collection": scope, "result": None, "error": error}
            )
            continue
        taken, found = found[: len(ids)], found[len(ids) :]
        if [c["id"] for c in taken] != ids:
            raise ReplayError("the thread's stored search results do not match its tool history")
        record.searches.append(
            {
                "query": args.get("query"),
                "collection": scope,
                "result": taken,
                "error": None,
                "unmatched": list(event.get("unmatched", ())),
            }
        )


class _ReplayedError(Exception):
    """Raised where the recorded run met an error, with the recorded description."""


def _exception(description: str) -> Exception:
    # describe_error writes "TypeName: message"; rebuild an exception that describes itself the same way
    name, _, message = description.partition(": ")
    if name.isidentifier() and message:
        replayed: Exception = type(name, (_ReplayedError,), {})(message)
        return replayed
    return _ReplayedError(description)


class RecordedChatModel(ReplyingChatModel):
    """Replies from a record, one per call, in order."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    replies: list[dict[str, Any]] = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "recorded"

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> BaseMessage:
        if self.calls >= len(self.replies):
            raise ReplayError(
                f"the record holds {len(self.replies)} replies; the replay asked for more"
            )
        reply = self.replies[self.calls]
        self.calls += 1
        if "error" in reply:
            raise _exception(str(reply["error"]))
        return messages_from_dict([reply])[0]


class RecordedSearch:
    """Returns each query's recorded results, in the order they were sent."""

    def __init__(self, searches: Sequence[Mapping[str, Any]]) -> None:
        self._queue: dict[Any, deque[Mapping[str, Any]]] = defaultdict(deque)
        for entry in searches:
            self._queue[entry.get("query")].append(entry)

    def __call__(self, query: str, **_: Any) -> SearchResults:
        """Return the next recorded result for the query, or raise its recorded error."""
        pending = self._queue.get(query)
        if not pending:
            raise ReplayError(f"the record has no (more) results for the search {query!r}")
        entry = pending.popleft()
        if entry.get("error") is not None:
            raise _exception(str(entry["error"]))
        chunks: list[Chunk] = [dict(c) for c in entry["result"]]  # type: ignore[misc]  # recorded chunks are Chunk dicts
        return SearchResults(chunks, entry.get("unmatched") or ())


def replay_record(record: Record) -> LoopResult:
    """Run the loop again from a record alone: no model, no database, no checkpointer."""
    options = {k: v for k, v in record.options.items() if k in CONTEXT_FIELDS}
    options.update(controller_model=None, answer_model=None, judge_model=None)
    # recorded results are handed out per query in the order they were sent: one at a time keeps that order
    options["max_parallel_searches"] = 1
    if options.get("grounder") == "llm_judge":
        options["grounder"] = None  # the judge's replies are not recorded; see `verify_record`
    synthesis = record.synthesis_reply

    def synthesizer(messages: list[BaseMessage], opts: Mapping[str, Any]) -> str:
        if synthesis is None or "error" in synthesis:
            raise _exception(
                str((synthesis or {}).get("error") or "synthesis did not run in the record")
            )
        return str(messages_from_dict([synthesis])[0].content)

    answer_llm = (
        RecordedChatModel(replies=[record.answerer_reply])
        if record.answerer_reply is not None
        else None
    )
    thread = _seeded_thread(record)
    return run(
        record.question,
        collection=record.collection,
        controller_llm=RecordedChatModel(replies=list(record.controller_replies)),
        answer_llm=answer_llm,
        search_fn=RecordedSearch(record.searches),
        synthesizer=synthesizer,
        **({} if thread is None else {"checkpointer": thread[0], "thread_id": thread[1]}),
        **options,
    )


def _seeded_thread(record: Record) -> tuple[Any, str] | None:
    """For a follow-up, a private in-memory thread holding the conversation before it (``None`` otherwise)."""
    if not record.conversation:
        return None
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    conversation = messages_from_dict(record.conversation)
    asked = [m for m in conversation if isinstance(m, HumanMessage) and not is_instruction(m)]
    saver, thread_id = InMemorySaver(), str(uuid.uuid4())
    seed = {
        "messages": conversation,
        "question": str(asked[-1].content) if asked else "",
        "question_message_id": asked[-1].id if asked else None,
        "question_index": record.question_index - 1,
        "terminated_by": "answered",  # the earlier question is over: the run opens the recorded one
    }
    build_graph(make_deps()).compile(checkpointer=saver).update_state(
        {"configurable": {"thread_id": thread_id}}, seed, as_node="ground"
    )
    return saver, thread_id


def verify_record(record: Record) -> list[str]:
    """Replay a record and list every field that differs from the original run (empty: identical)."""
    replayed = replay_record(record)
    got = {k: getattr(replayed, k) for k in _COMPARED}
    return [
        f"{k}: recorded {record.expected.get(k)!r}, replayed {got[k]!r}"
        for k in _COMPARED
        if _plain(got[k]) != _plain(record.expected.get(k))
    ]


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
