"""``arcana-loop server``: start, look at and stop the embedded PostgreSQL.

The embedded server stays up between commands and its keeper stops it once nobody has
used it for ``ARCANA_LOOP_SERVER_IDLE_SECONDS`` (see `knowledge.server`); these verbs
act on it at once. With ``DATABASE_URL`` set there is no embedded server to act on.
"""

from __future__ import annotations

import json
import os
import time
from typing import Annotated

import typer

from arcana_loop.cli.common import database_errors, fail, out

server_app = typer.Typer(
    help="Start, show or stop the embedded PostgreSQL (it stays up between commands).",
    no_args_is_help=True,
)

_EXTERNAL = "DATABASE_URL is set: arcana-loop uses that server and runs no embedded one"


def _worker_line() -> str:
    from arcana_loop.cli.warm import worker_state

    state = worker_state()
    if state is None:
        return "  warm worker: none (the next command starts one; see arcana-loop's README)"
    return f"  warm worker: PID {state['pid']}, stops after {state['idle_seconds']:g} s without a command"


def _embedded_only() -> None:
    from arcana_loop.knowledge.server import DATABASE_URL_ENV

    if os.environ.get(DATABASE_URL_ENV):
        fail(_EXTERNAL)


@server_app.command()
def start() -> None:
    """Start the embedded server now (a later command finds it up)."""
    _embedded_only()
    from arcana_loop.knowledge.server import embedded_server_status, embedded_server_url

    with database_errors("could not start the embedded PostgreSQL"):
        embedded_server_url()
    status = embedded_server_status()
    out.print(f"The embedded PostgreSQL runs in {status.pgdata} (PID {status.postmaster_pid}).")


@server_app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    """Say whether the embedded server runs, where, since when, and when it stops."""
    _embedded_only()
    from arcana_loop.cli.warm import worker_state
    from arcana_loop.knowledge.server import embedded_server_status

    status = embedded_server_status()
    since = status.started_at.isoformat(timespec="seconds") if status.started_at else None
    if as_json:
        fields = {
            "running": status.running,
            "pgdata": str(status.pgdata),
            "cluster": str(status.cluster),
            "pid": status.postmaster_pid,
            "since": since,
            "socket_dir": str(status.socket_dir) if status.socket_dir else None,
            "keeper_pid": status.keeper_pid,
            "idle_seconds": status.idle_seconds,
            "in_use": status.in_use,
            "warm_worker_pid": (worker_state() or {}).get("pid"),
        }
        out.print_json(json.dumps(fields))
        return
    if not status.running:
        out.print(f"The embedded PostgreSQL of {status.pgdata} is not running.")
        out.print(_worker_line())
        return
    out.print(f"The embedded PostgreSQL runs in {status.pgdata}")
    if status.cluster != status.pgdata:
        out.print(f"  cluster:  {status.cluster}")
    out.print(f"  since:    {since} (PID {status.postmaster_pid})")
    out.print(f"  socket:   {status.socket_dir}")
    if status.keeper_pid is None:
        out.print("  keeper:   none (nothing will stop it when idle; the next command starts one)")
    else:
        users = "in use now" if status.in_use else "unused now"
        idle = f"{status.idle_seconds:g} s" if status.idle_seconds is not None else "?"
        out.print(f"  keeper:   PID {status.keeper_pid}, stops it after {idle} unused ({users})")
    out.print(_worker_line())


@server_app.command()
def stop() -> None:
    """Stop the warm worker and the embedded server now (a process still using it starts it again when it needs it)."""
    from arcana_loop.cli.warm import stop_worker

    worker = stop_worker()
    if worker is not None:
        out.print(f"Stopped the warm worker (PID {worker}); the commands it runs finish first.")
    _embedded_only()
    from arcana_loop.knowledge.server import pgdata_dir, stop_embedded_server

    started = time.monotonic()
    if stop_embedded_server():
        out.print(
            f"Stopped the embedded PostgreSQL of {pgdata_dir()} in {time.monotonic() - started:.1f} s."
        )
    else:
        out.print(f"The embedded PostgreSQL of {pgdata_dir()} was not running.")
