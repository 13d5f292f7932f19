"""Reducers of the state's growing fields, stored as deltas so checkpoints grow linearly.

LangGraph's default reducer channels store a field's whole value in every checkpoint
that changes it. The conversation, the tool history and the chunks change on every
turn, so a 20-turn loop would store the conversation 40 times over (quadratic bytes).
These fields use `langgraph.channels.delta.DeltaChannel` instead: a checkpoint keeps
only the step's writes, and a state is rebuilt by folding its ancestors' writes through
the reducer. That only works if every reducer here is a deterministic left fold, so
that replaying the writes in any batching gives the same value; nodes still see and
send the whole conversation.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, convert_to_messages
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

if TYPE_CHECKING:
    from arcana_loop.knowledge.types import Chunk

_MESSAGE_IDS = uuid.UUID("5d0b6c8e-9a57-4f4e-9a0c-6f0f2c1d7a31")


class ChunkMerge(TypedDict):
    """A write to ``chunks`` that merges newly found chunks instead of replacing the list."""

    merge: list[Chunk]
    cap: int


_SCORE = itemgetter("score")


def merge_chunks(existing: Sequence[Chunk], new: Sequence[Chunk], cap: int) -> list[Chunk]:
    """Merge newly found chunks into the accumulated ones.

    Deduplicated by id, keeping the higher-scored copy; sorted best first (a stable
    sort, so ties keep discovery order); capped at ``cap``, evicting the lowest scores.
    """
    best: dict[str, Chunk] = {}
    for chunk in [*existing, *new]:
        held = best.get(chunk["id"])
        if held is None or chunk["score"] > held["score"]:
            best[chunk["id"]] = chunk  # an existing key keeps its first-discovery slot
    ranked = sorted(best.values(), key=_SCORE, reverse=True)
    return ranked[: max(cap, 0)]


def fold_chunks(current: list[Chunk], writes: Sequence[list[Chunk] | ChunkMerge]) -> list[Chunk]:
    """Apply ``chunks`` writes in order: a list replaces the chunks, a `ChunkMerge` merges into them."""
    out = list(current)
    for write in writes:
        if isinstance(write, dict) and "merge" in write:
            out = merge_chunks(out, write["merge"], write["cap"])
        else:
            out = list(write)
    return out


def fold_appended(current: list[Any], writes: Sequence[Any]) -> list[Any]:
    """Append each write (a list of items, or one item) in order; a `replacing` write replaces the list.

    A new question on a thread starts its tool history afresh with ``{"replace": []}``:
    a small write, so the delta checkpoints stay linear (the earlier questions' entries
    stay in the checkpoints that wrote them).
    """
    out = list(current)
    for write in writes:
        if is_replacing(write):
            out = list(write["replace"])
        else:
            out.extend(write if isinstance(write, list) else [write])
    return out


def replacing(items: list[Any]) -> dict[str, list[Any]]:
    """Return the write that replaces an appended list with ``items``."""
    return {"replace": items}


def is_replacing(write: Any) -> bool:
    """Whether a write to an appended list replaces it (see `replacing`)."""
    return (
        isinstance(write, dict) and set(write) == {"replace"} and isinstance(write["replace"], list)
    )


USAGE_RESET = "__reset__"
"""A key of a ``usage`` write that starts the usage afresh (a new question) instead of adding to it."""


def add_usage(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Sum two usage records key by key (nested dicts are summed recursively)."""
    return _add_into(dict(left or {}), right)


def _add_into(out: dict[str, Any], right: dict[str, Any] | None) -> dict[str, Any]:
    """`add_usage` into ``out``, a record the caller owns (nested records are copied, not changed)."""
    for key, value in (right or {}).items():
        held = out.get(key)
        if isinstance(value, dict):
            out[key] = add_usage(held if isinstance(held, dict) else None, value)
        elif isinstance(value, int | float) and isinstance(held, int | float):
            out[key] = held + value
        else:
            out[key] = value
    return out


def fold_usage(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Sum two usage records key by key, unless ``right`` resets the usage (see `USAGE_RESET`)."""
    if right and right.get(USAGE_RESET):
        return {k: v for k, v in right.items() if k != USAGE_RESET}
    return add_usage(left, right)


def fold_usages(current: dict[str, Any], writes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Apply ``usage`` writes in order (`fold_usage`): the reducer of its delta channel.

    Every node adds its seconds to ``usage``; as a plain reducer channel the whole record
    was stored again at every step, as a delta channel a step stores what it adds.
    """
    out = dict(current)
    for write in writes:
        if write and write.get(USAGE_RESET):
            out = fold_usage(out, write)
        else:
            out = _add_into(out, write)  # `out` is this fold's own copy: added to in place
    return out


def fold_messages(current: list[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """`add_messages` over each write in order, giving id-less messages deterministic ids.

    `add_messages` gives an id-less message a random id, which a rebuild from stored
    writes would not reproduce; a stable id from the message's position and content does.
    """
    out: list[AnyMessage] = list(current)
    ids = {m.id for m in out}
    for write in writes:
        incoming = convert_to_messages(write if isinstance(write, list) else [write])
        stamped: list[Any] = [_with_id(m, len(out) + i) for i, m in enumerate(incoming)]
        if _appends_only(stamped, ids):
            out.extend(stamped)  # what add_messages does for new ids, without rebuilding its index
            ids.update(m.id for m in stamped)
        else:
            merged: Any = add_messages(
                list[Any](out), stamped
            )  # it returns messages when given messages
            out = merged
            ids = {m.id for m in out}
    return out


def _appends_only(messages: Sequence[BaseMessage], ids: set[str | None]) -> bool:
    """Whether merging ``messages`` only appends them: all new, distinct ids and no removals."""
    fresh = {m.id for m in messages}
    return (
        len(fresh) == len(messages)
        and fresh.isdisjoint(ids)
        and not any(isinstance(m, RemoveMessage) for m in messages)
    )


def _with_id(message: BaseMessage, position: int) -> BaseMessage:
    if message.id is not None:
        return message
    seed = f"{position}:{message.type}:{message.content!s}:{getattr(message, 'tool_call_id', '')}"
    return message.model_copy(update={"id": str(uuid.uuid5(_MESSAGE_IDS, seed))})
