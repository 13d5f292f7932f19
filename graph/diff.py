"""Run diff: where two runs of a question part ways, from their records alone.

Each side is a thread (its last question, read as a `Record` from the checkpoints) or
a record file, so a diff needs no model and no network. `diff_runs` compares the
controller's decisions turn by turn (the first that differs), the searches (by query
and scope: those only one run sent, and those both sent that returned other chunks),
the chunks found, the claims whose support changed (supported in one run, unsupported
or absent in the other), the answers, and the tokens and time each run took.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, messages_from_dict

from arcana_loop.graph.replay import Record, ReplayError, record_of
from arcana_loop.graph.trace import ThreadNotFoundError


@dataclass
class RunDiff:
    """How run B differs from run A."""

    a: str
    b: str
    """What each side was read from: a thread id or a record file."""
    questions: tuple[str, str]
    first_difference: dict[str, Any] | None = None
    """``{"turn", "a", "b"}``: the first controller turn (from 1) whose decision differs, each
    side's decision (``[{"name", "args"}]`` tool calls, ``{"text"}``, ``{"error"}``, or
    ``None`` for a turn the run did not take); ``None`` when every turn decided alike."""
    searches_only_in_a: list[dict[str, Any]] = field(default_factory=list)
    """``{"query", "collection"}`` of each search only A sent (``collection``: the scope asked for)."""
    searches_only_in_b: list[dict[str, Any]] = field(default_factory=list)
    searches_changed: list[dict[str, Any]] = field(default_factory=list)
    """``{"query", "collection", "only_in_a", "only_in_b"}``: a search both sent whose results differ (chunk ids)."""
    chunks_only_in_a: list[str] = field(default_factory=list)
    """Ids of the chunks A's searches found and B's did not."""
    chunks_only_in_b: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    """``{"text", "a", "b"}``: a claim supported in one run and not in the other (its verdicts, ``None`` where absent)."""
    answers: tuple[str | None, str | None] = (None, None)
    tokens: tuple[int | None, int | None] = (None, None)
    seconds: tuple[float | None, float | None] = (None, None)

    @property
    def same(self) -> bool:
        """Whether the runs decided, searched, found and supported alike and gave the same answer."""
        return not (
            self.first_difference
            or self.searches_only_in_a
            or self.searches_only_in_b
            or self.searches_changed
            or self.chunks_only_in_a
            or self.chunks_only_in_b
            or self.claims
            or self.answers[0] != self.answers[1]
        )

    def to_dict(self) -> dict[str, Any]:
        """The diff as JSON-ready data (pairs as ``{"a", "b"}``)."""
        data = asdict(self)
        for name in ("questions", "answers", "tokens", "seconds"):
            data[name] = dict(zip("ab", getattr(self, name), strict=True))
        data["same"] = self.same
        return data


def load_run(ref: str | os.PathLike[str], checkpointer: Any) -> Record:
    """A run to compare: a record file when ``ref`` names one (a `Path` always does), else the last question of thread ``ref``.

    Raises:
        ReplayError: for a file that is not a record, a folder, a blank name, a name
            that looks like a file's (``.json``, a path separator) and is neither a file
            nor a thread, or a thread not finished.
        ThreadNotFoundError: when the checkpointer holds no such thread.
    """
    if isinstance(ref, os.PathLike) or Path(ref).is_file():
        return Record.load(ref)
    if not ref.strip():
        raise ReplayError("a run to compare is a record file or a thread id, not a blank name")
    if Path(ref).is_dir():
        raise ReplayError(f"{ref} is a folder, not a record file or a thread id")
    try:
        # a question that ended as it opened (nothing stored to search) compares as a run of no turn
        return record_of(ref, checkpointer, replayable=False)
    except ThreadNotFoundError:
        if ref.endswith(".json") or any(s and s in ref for s in (os.sep, os.altsep)):
            # what `record --out` writes: the file was meant, not a thread of that name
            raise ReplayError(f"{ref}: no such record file (nor a thread of that name)") from None
        raise


def _decision(reply: Mapping[str, Any]) -> Any:
    if "error" in reply:
        return {"error": str(reply["error"])}
    message = messages_from_dict([dict(reply)])[0]
    if isinstance(message, AIMessage) and message.tool_calls:
        return [{"name": c["name"], "args": c["args"]} for c in message.tool_calls]
    return {"text": message.text}


def _first_difference(a: Record, b: Record) -> dict[str, Any] | None:
    turns = max(len(a.controller_replies), len(b.controller_replies))
    for turn in range(turns):
        sides = [
            _decision(r.controller_replies[turn]) if turn < len(r.controller_replies) else None
            for r in (a, b)
        ]
        if _plain(sides[0]) != _plain(sides[1]):
            return {"turn": turn + 1, "a": sides[0], "b": sides[1]}
    return None


def _key(search: Mapping[str, Any]) -> str:
    return json.dumps([search.get("query"), search.get("collection")], sort_keys=True, default=str)


def _ids(search: Mapping[str, Any]) -> list[str]:
    return [str(c.get("id")) for c in search.get("result") or [] if isinstance(c, Mapping)]


def _searches(diff: RunDiff, a: Record, b: Record) -> None:
    """Pair the searches of A and B by query and scope, in the order sent; the rest is one run's only."""
    waiting: dict[str, list[Mapping[str, Any]]] = {}
    for search in b.searches:
        waiting.setdefault(_key(search), []).append(search)
    for search in a.searches:
        described = {"query": search.get("query"), "collection": search.get("collection")}
        pending = waiting.get(_key(search))
        if not pending:
            diff.searches_only_in_a.append(described)
            continue
        ids_a, ids_b = _ids(search), _ids(pending.pop(0))
        if ids_a != ids_b:
            only_a = [i for i in ids_a if i not in ids_b]
            only_b = [i for i in ids_b if i not in ids_a]
            diff.searches_changed.append({**described, "only_in_a": only_a, "only_in_b": only_b})
    diff.searches_only_in_b = [
        {"query": s.get("query"), "collection": s.get("collection")}
        for left in waiting.values()
        for s in left
    ]


def _verdicts(grounding: Mapping[str, Any] | None) -> dict[str, str]:
    if not grounding:
        return {}
    parts = grounding.get("claims") or [
        *(grounding.get("faithful_spans") or []),
        *(grounding.get("hallucinated_spans") or []),
    ]
    return {
        str(p.get("text")): str(p.get("verdict") or "supported")
        for p in parts
        if isinstance(p, Mapping)
    }


def _claims(a: Record, b: Record) -> list[dict[str, Any]]:
    verdicts_a, verdicts_b = _verdicts(a.grounding), _verdicts(b.grounding)
    changed = []
    for text in dict.fromkeys([*verdicts_a, *verdicts_b]):
        va, vb = verdicts_a.get(text), verdicts_b.get(text)
        if (va == "supported") != (vb == "supported"):
            changed.append({"text": text, "a": va, "b": vb})
    return changed


def _found(record: Record) -> list[str]:
    return list(dict.fromkeys(i for s in record.searches for i in _ids(s)))


def _tokens(usage: Mapping[str, Any]) -> int | None:
    total = usage.get("total")
    tokens = total.get("total_tokens") if isinstance(total, Mapping) else None
    return int(tokens) if isinstance(tokens, int | float) else None


def _seconds(usage: Mapping[str, Any]) -> float | None:
    nodes = usage.get("node_seconds")
    if not isinstance(nodes, Mapping) or not nodes:
        return None
    return round(sum(float(s) for s in nodes.values() if isinstance(s, int | float)), 4)


def diff_runs(
    a: str | os.PathLike[str] | Record,
    b: str | os.PathLike[str] | Record,
    *,
    checkpointer: Any = "postgres",
) -> RunDiff:
    """Compare two runs, each a thread id (its last question), a record file or a `Record`.

    Compared: the controller's decisions, the searches, the chunks found, the claims'
    support, the answers, tokens and time. Reads records only: no model, no network.

    Raises:
        ReplayError: for a side that is not a finished thread or a record file.
        ThreadNotFoundError: for a thread id the checkpointer does not hold.
    """
    ra, rb = (r if isinstance(r, Record) else load_run(r, checkpointer) for r in (a, b))
    diff = RunDiff(
        a=_label(a),
        b=_label(b),
        questions=(ra.question, rb.question),
        first_difference=_first_difference(ra, rb),
        claims=_claims(ra, rb),
        answers=(ra.expected.get("answer"), rb.expected.get("answer")),
        tokens=(_tokens(ra.usage), _tokens(rb.usage)),
        seconds=(_seconds(ra.usage), _seconds(rb.usage)),
    )
    _searches(diff, ra, rb)
    found_a, found_b = _found(ra), _found(rb)
    diff.chunks_only_in_a = [i for i in found_a if i not in set(found_b)]
    diff.chunks_only_in_b = [i for i in found_b if i not in set(found_a)]
    return diff


def _label(side: str | os.PathLike[str] | Record) -> str:
    if isinstance(side, Record):
        return f"record of {side.question!r}"
    return os.fspath(side)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, sort_keys=True))
