"""Run one search, written once, on a sync or an async connection.

A search is a generator of steps. It yields a statement and receives its rows,
yields `EMBED` and receives the query vector, or yields `Guarded(steps)` to run
nested steps under a savepoint: an error in them rolls back to the savepoint
and is raised at that `yield`, where the search may recover. `run_sync` and
`run_async` carry the steps out, so the sync and the async search cannot
drift apart: only the waiting differs.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from psycopg import sql

T = TypeVar("T")

Statement = tuple[sql.Composable, dict[str, Any]]
"""What `queries` and `entities.search` build (this module imports neither, so both may use it)."""


class Embed(enum.Enum):
    """The step that asks for the query vector (computed only when a search needs it)."""

    EMBED = "embed"


EMBED = Embed.EMBED


@dataclass(frozen=True)
class Guarded(Generic[T]):
    """Nested steps run under a savepoint; their result, or their error, comes back at the `yield`."""

    steps: Steps[T]


Step = Statement | Embed | Guarded[Any]
Steps = Generator[Step, Any, T]
"""Yields steps, receives rows (a statement), a vector (`EMBED`) or a result (`Guarded`); returns `T`."""


@dataclass(frozen=True)
class _Outcome:
    """What the last step gave back to the steps: a value, or the error to raise in them."""

    value: Any = None
    error: Exception | None = None


@dataclass(frozen=True)
class _Done(Generic[T]):
    value: T


def _resume(steps: Steps[T], last: _Outcome) -> Step | _Done[T]:
    """Hand the last outcome to the steps; return their next step, or their result."""
    try:
        return steps.send(last.value) if last.error is None else steps.throw(last.error)
    except StopIteration as done:
        result: T = done.value
        return _Done(result)


def first(rows: list[Any]) -> Any:
    """Return the first row of a statement's rows, or `None` (what `fetchone` would give)."""
    return rows[0] if rows else None


def run_sync(conn: Any, steps: Steps[T], embed: Callable[[], Any]) -> T:
    """Carry out `steps` on a sync psycopg connection; `embed()` gives the query vector."""
    step = _resume(steps, _Outcome())
    while not isinstance(step, _Done):
        try:
            last = _Outcome(_sync_step(conn, step, embed))
        except Exception as exc:  # raised in the steps, at the yield that asked
            last = _Outcome(error=exc)
        step = _resume(steps, last)
    return step.value


def _sync_step(conn: Any, step: Step, embed: Callable[[], Any]) -> Any:
    if isinstance(step, Guarded):
        with conn.transaction():
            return run_sync(conn, step.steps, embed)
    if isinstance(step, Embed):
        return embed()
    cur = conn.execute(*step)
    return cur.fetchall() if cur.description is not None else []


async def run_async(conn: Any, steps: Steps[T], embed: Callable[[], Awaitable[Any]]) -> T:
    """`run_sync` on an async psycopg connection (`embed()` is awaited)."""
    step = _resume(steps, _Outcome())
    while not isinstance(step, _Done):
        try:
            last = _Outcome(await _async_step(conn, step, embed))
        except Exception as exc:  # as in run_sync
            last = _Outcome(error=exc)
        step = _resume(steps, last)
    return step.value


async def _async_step(conn: Any, step: Step, embed: Callable[[], Awaitable[Any]]) -> Any:
    if isinstance(step, Guarded):
        async with conn.transaction():
            return await run_async(conn, step.steps, embed)
    if isinstance(step, Embed):
        return await embed()
    cur = await conn.execute(*step)
    return await cur.fetchall() if cur.description is not None else []
