"""Checkpointers by object or by short spec.

``"memory"`` is one process-wide in-memory saver. ``"sqlite:<path>"`` is a SQLite
file (``SqliteSaver`` for `run`; `arun` needs an async saver object, e.g.
``AsyncSqliteSaver``). ``"postgres"`` is the knowledge base's PostgreSQL (the
embedded server or ``DATABASE_URL``) through ``PostgresSaver`` on a connection pool
set up as that library requires; its tables are created once per process.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

_savers: dict[str, BaseCheckpointSaver[Any]] = {}
_lock = threading.Lock()


def _sqlite(path: str) -> BaseCheckpointSaver[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    # check_same_thread=False: LangGraph writes checkpoints from a background thread
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


def _postgres() -> BaseCheckpointSaver[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from knowledge.server import database_url

    pool: ConnectionPool[Any] = ConnectionPool(
        database_url(), min_size=1, max_size=4, open=True,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    saver = PostgresSaver(pool)
    saver.setup()
    return saver


def resolve_checkpointer(spec: Any) -> BaseCheckpointSaver[Any] | None:
    """Return a checkpointer for ``None``, a saver object, ``"memory"``, ``"sqlite:<path>"`` or ``"postgres"``.

    Savers made from a spec are created once per process and reused.

    Raises:
        ValueError: for an unknown spec.
    """
    if spec is None or isinstance(spec, BaseCheckpointSaver):
        return spec
    if not isinstance(spec, str) or not (spec in ("memory", "postgres") or (spec.startswith("sqlite:") and len(spec) > 7)):
        raise ValueError(f"unknown checkpointer {spec!r}: expected a LangGraph checkpointer, 'memory', 'sqlite:<path>' or 'postgres'")
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
