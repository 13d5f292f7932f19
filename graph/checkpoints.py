"""Checkpointers by object or by short spec.

``"memory"`` is one process-wide in-memory saver. ``"sqlite:<path>"`` is a SQLite
file. ``"postgres"`` is the knowledge base's PostgreSQL (the embedded server or
``DATABASE_URL``) on a connection pool set up as that library requires; its tables are
created once per process. `run` gets the sync savers, cached per process; `arun` gets
async ones through `async_checkpointer`: ``AsyncPostgresSaver`` cached per event loop
(an async pool belongs to the loop that opened it), ``AsyncSqliteSaver`` per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

_savers: dict[str, BaseCheckpointSaver[Any]] = {}
_lock = threading.Lock()


def _sqlite(path: str) -> BaseCheckpointSaver[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    try:
        # check_same_thread=False: LangGraph writes checkpoints from a background thread
        conn = sqlite3.connect(path, check_same_thread=False)
    except (
        sqlite3.Error
    ) as exc:  # sqlite's own message ("unable to open database file") omits the path
        raise ValueError(f"cannot open the SQLite checkpointer file {path!r}: {exc}") from exc
    return SqliteSaver(conn)


def _postgres() -> BaseCheckpointSaver[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from arcana_loop.knowledge.server import database_url

    pool: ConnectionPool[Any] = ConnectionPool(
        database_url(),
        min_size=1,
        max_size=4,
        open=True,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # the saver lives for the process: a connection the server dropped must be replaced, not lent out
        check=ConnectionPool.check_connection,
    )
    saver = PostgresSaver(pool)
    saver.setup()
    return saver


def resolve_checkpointer_spec(spec: Any) -> str:
    """Return a valid checkpointer spec string, or raise a clear error.

    Raises:
        ValueError: for an unknown spec, a blank SQLite path, or one whose directory
            does not exist (both named in the message).
    """
    if not isinstance(spec, str) or not (
        spec in ("memory", "postgres") or (spec.startswith("sqlite:") and len(spec) > 7)
    ):
        raise ValueError(
            f"unknown checkpointer {spec!r}: expected a LangGraph checkpointer, 'memory', 'sqlite:<path>' or 'postgres'"
        )
    if spec.startswith("sqlite:"):
        _check_sqlite_path(spec.split(":", 1)[1])
    return spec


def _check_sqlite_path(path: str) -> None:
    """Refuse what SQLite would turn into a stray file (a blank name) or a message without the path."""
    if not path.strip():
        raise ValueError(
            f"the SQLite checkpointer path {path!r} is blank: expected 'sqlite:<path>'"
        )
    if path == ":memory:":
        return
    target = Path(path)  # as sqlite3 opens it: no ~ expansion
    if target.is_dir():
        raise ValueError(f"the SQLite checkpointer path {path!r} is a directory, not a file")
    if not target.parent.is_dir():
        raise ValueError(
            f"the SQLite checkpointer path {path!r} is in a directory that does not exist ({target.parent})"
        )


def resolve_checkpointer(spec: Any) -> BaseCheckpointSaver[Any] | None:
    """Return a checkpointer for ``None``, a saver object, ``"memory"``, ``"sqlite:<path>"`` or ``"postgres"``.

    Savers made from a spec are created once per process and reused.

    Raises:
        ValueError: for an unknown spec.
    """
    if spec is None or isinstance(spec, BaseCheckpointSaver):
        return spec
    resolve_checkpointer_spec(spec)
    with _lock:
        saver = _savers.get(spec)
        if saver is None:
            if spec == "memory":
                from langgraph.checkpoint.memory import InMemorySaver

                saver = InMemorySaver()
            elif spec == "postgres":
                saver = _postgres()
            else:
                saver = _sqlite(spec.split(":", 1)[1])
            _savers[spec] = saver
    return saver


def thread_collection(checkpointer: Any, thread_id: str) -> Any:
    """The collection a thread's last question searched, as it was given; ``None`` for a thread the checkpointer does not hold.

    What a follow-up searches when its caller names no collection (``ask --thread-id``,
    ``chat --thread-id``): the conversation goes on over the documents it started on.

    Raises:
        ValueError: for an unknown checkpointer spec.
    """
    saver = resolve_checkpointer(checkpointer)
    if saver is None:
        return None
    found = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    return None if found is None else found.checkpoint["channel_values"].get("collection")


_async_setup_done: set[str] = set()
_loop_savers: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, BaseCheckpointSaver[Any]]
] = weakref.WeakKeyDictionary()
_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def _open_async(spec: str) -> BaseCheckpointSaver[Any]:
    if spec == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        from arcana_loop.knowledge.server import database_url

        url = database_url()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=4,
            open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            check=AsyncConnectionPool.check_connection,
        )
        await pool.open()
        saver = AsyncPostgresSaver(pool)
        if url not in _async_setup_done:
            await saver.setup()
            _async_setup_done.add(url)
        return saver
    raise ValueError(f"no shared async saver for {spec!r}")


@contextlib.asynccontextmanager
async def async_checkpointer(spec: Any) -> AsyncIterator[BaseCheckpointSaver[Any] | None]:
    """Yield a saver usable on the running event loop for ``spec`` (see the module docstring).

    The PostgreSQL saver is shared by every run on the same event loop (50 concurrent runs
    share one pool of at most 4 connections); a SQLite saver is opened for the call.

    Raises:
        ValueError: for an unknown spec.
    """
    if spec is None or isinstance(spec, BaseCheckpointSaver) or spec == "memory":
        yield resolve_checkpointer(spec)
        return
    resolve_checkpointer_spec(spec)
    if spec.startswith("sqlite:"):
        # opened and closed per call: aiosqlite's worker thread is not a daemon, and a cached
        # connection would keep the interpreter from exiting
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(spec.split(":", 1)[1]) as sqlite_saver:
            yield sqlite_saver
        return
    loop = asyncio.get_running_loop()
    lock = _loop_locks.setdefault(loop, asyncio.Lock())
    async with lock:
        savers = _loop_savers.setdefault(loop, {})
        saver = savers.get(spec)
        if saver is None:
            saver = savers[spec] = await _open_async(spec)
    yield saver
