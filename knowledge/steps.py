"""Run one search, written once, on a sync or an async connection.

A search is a generator of steps. It yields a statement and receives its rows,
yields `EMBED` and receives the query vector, or yields `Guarded(steps)` to run
nested steps in a transaction (or under a savepoint, inside one): an error in
them rolls it back and is raised at that `yield`, where the search may recover.
`run_sync` and `run_async` carry the steps out, so the sync and the async search
cannot drift apart: only the waiting differs. `read_sync` and `read_async` run
them with each statement outside `Guarded` a transaction of its own.
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


def together(*statements: Statement) -> Steps[list[Any]]:
    """Statements run in turn (as `Guarded(together(...))`, in one transaction); the last one's rows.

    For transaction-local settings and the statement they are for.
    """
    rows: list[Any] = []
    for statement in statements:
        rows = yield statement
    return rows


def read_sync(conn: Any, steps: Steps[T], embed: Callable[[], Any]) -> T:
    """`run_sync` for steps that only read: each statement outside `Guarded` commits on its own.

    A transaction around the whole search cost its BEGIN and its COMMIT, two round
    trips of 0.3-0.6 ms each on searches of a few milliseconds.
    """
    previous = conn.autocommit
    conn.autocommit = True
    try:
        return run_sync(conn, steps, embed)
    finally:
        if not conn.closed:
            conn.autocommit = previous


async def read_async(conn: Any, steps: Steps[T], embed: Callable[[], Awaitable[Any]]) -> T:
    """`read_sync` on an async psycopg connection."""
    previous = conn.autocommit
    await conn.set_autocommit(True)
    try:
        return await run_async(conn, steps, embed)
    finally:
        if not conn.closed:
            await conn.set_autocommit(previous)


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
