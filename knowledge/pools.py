"""Connection pools that say promptly when the server is gone.

A plain pool whose server died makes every checkout wait its whole timeout
(30 s) and then raise `PoolTimeout`, which says nothing about why. These pools
wait `PROBE_AFTER` seconds for a connection; if none came, they try one direct
connection: when that fails the server is down and `DatabaseUnavailable` (with
libpq's reason) is raised at once; when it succeeds the pool was only busy, and
the checkout waits out the rest of its timeout as before.
"""

from __future__ import annotations

import select
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from arcana_loop.knowledge.errors import DatabaseUnavailable
from arcana_loop.knowledge.redact import describe

PROBE_AFTER = 2.0
"""Seconds a checkout waits for a pooled connection before checking the server is up."""
PROBE_CONNECT_TIMEOUT = 3
"""libpq `connect_timeout` (whole seconds) of that check, for a host that never answers."""

# SQLSTATEs of a server that shut down or is starting up (class 57P); class 08 is a lost connection
_SERVER_GONE = {"57P01", "57P02", "57P03"}


def unavailable(exc: BaseException, conninfo: str) -> DatabaseUnavailable:
    """Return the `DatabaseUnavailable` for a connection error, its password masked.

    Raise it `from None`: the original error may repeat the connection string.
    """
    return DatabaseUnavailable(f"cannot connect to PostgreSQL: {describe(exc, conninfo)}")


def connection_lost(exc: psycopg.Error) -> bool:
    """Tell whether `exc` means the server went away (not a failing statement)."""
    state = exc.sqlstate
    return isinstance(exc, psycopg.OperationalError) and (
        state is None or state.startswith("08") or state in _SERVER_GONE
    )


@contextmanager
def autocommitted(pool: ConnectionPool[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection in autocommit mode, for statements that each stand alone.

    A pooled connection opens a transaction before its first statement and commits
    it when returned: a lone read costs three round trips (BEGIN, the statement,
    COMMIT), here one. The connection goes back to the pool as it came, not in
    autocommit.
    """
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            if not conn.closed:
                conn.autocommit = False


def check_connection(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection before it hands it out (raises if it is gone).

    A server that ends a connection (a restart, an idle kill, ``pg_terminate_backend``)
    says so on its socket, which then has something to read: only then is the
    connection asked to answer (`ConnectionPool.check_connection`, a round trip). A
    connection whose socket is quiet is handed out as it is: asking each one cost
    every checkout a round trip (four of an edit's, one of a search's).
    """
    if conn.closed or _has_news(conn):
        ConnectionPool.check_connection(conn)


async def check_async_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """`check_connection` for the async pool."""
    if conn.closed or _has_news(conn):
        await AsyncConnectionPool.check_connection(conn)


def _has_news(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether the server sent the idle connection anything (a farewell, a closed socket)."""
    try:
        descriptor = conn.fileno()
    except psycopg.Error:  # no socket: let the full check say what is wrong
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(descriptor, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    return bool(select.select([descriptor], [], [], 0)[0])


def _probe_kwargs(kwargs: Any) -> dict[str, Any]:
    return {
        **(kwargs if isinstance(kwargs, dict) else {}),
        "connect_timeout": PROBE_CONNECT_TIMEOUT,
    }


def _busy(total: float) -> DatabaseUnavailable:
    return DatabaseUnavailable(
        f"no PostgreSQL connection came free within {total:g} s: every pooled connection is busy"
    )


class FailFastPool(ConnectionPool[Any]):
    """A `ConnectionPool` whose checkouts fail fast with `DatabaseUnavailable` once the server is down."""

    def getconn(self, timeout: float | None = None) -> Any:
        """Return a connection; see the module docstring for how long this waits.

        Raises:
            DatabaseUnavailable: if the server is down, or the pool stayed busy for the timeout.
        """
        total = self.timeout if timeout is None else timeout
        try:
            return super().getconn(timeout=min(total, PROBE_AFTER))
        except PoolTimeout:
            if total <= PROBE_AFTER:
                raise _busy(total) from None
        self._probe()
        try:
            return super().getconn(timeout=total - PROBE_AFTER)
        except PoolTimeout:
            raise _busy(total) from None

    def _probe(self) -> None:
        conninfo = self.conninfo if isinstance(self.conninfo, str) else ""
        try:
            psycopg.connect(conninfo, **_probe_kwargs(self.kwargs)).close()
        except psycopg.OperationalError as exc:
            raise unavailable(exc, conninfo) from None


class AsyncFailFastPool(AsyncConnectionPool[Any]):
    """The async twin of `FailFastPool`."""

    async def getconn(self, timeout: float | None = None) -> Any:
        """Return a connection; see the module docstring for how long this waits.

        Raises:
            DatabaseUnavailable: if the server is down, or the pool stayed busy for the timeout.
        """
        total = self.timeout if timeout is None else timeout
        try:
            return await super().getconn(timeout=min(total, PROBE_AFTER))
        except PoolTimeout:
            if total <= PROBE_AFTER:
                raise _busy(total) from None
        await self._probe()
        try:
            return await super().getconn(timeout=total - PROBE_AFTER)
        except PoolTimeout:
            raise _busy(total) from None

    async def _probe(self) -> None:
        conninfo = self.conninfo if isinstance(self.conninfo, str) else ""
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, **_probe_kwargs(self.kwargs))
        except psycopg.OperationalError as exc:
            raise unavailable(exc, conninfo) from None
        await conn.close()
