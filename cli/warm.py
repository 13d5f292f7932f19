"""The warm worker: a resident process with the loop imported, forking one child per command.

A command's own work is small beside importing LangGraph, LangChain and psycopg (about
1.2 s of a warm offline ``ask``), and a new process pays that import each time. The
worker pays it once: it imports the loop's modules (`PRELOAD`) and waits on a Unix
socket; the `arcana-loop` entry point (`cli.entry`) connects, passes its standard
input, output and error and its working directory as file descriptors (``SCM_RIGHTS``)
with its argv, environment, umask and stream encodings, and the worker forks a child
that takes them over (``dup2``, ``fchdir``, the environment replaced) and runs the
command line's `app` as the process would have. The worker sends the child's exit
status back; the client exits with it, or dies of the same signal.

Decisions:

* **Nothing runs before the fork but imports.** No database connection, no ONNX
  session, no thread of ours: a forked child gets only the forking thread, and a lock
  another thread held stays held. ``onnxruntime`` is left out of `PRELOAD` because
  importing it starts a thread; numpy's OpenBLAS pool (started by its import) stops
  and restarts itself around a fork (``pthread_atfork``). The command line's own
  modules are imported in the child: its consoles read the terminal and the
  environment when they are made. The one model loaded before the fork is the loop's
  WordLlama (`default_embeddings`: numpy arrays and a tokenizer that has not run, so no
  thread; 0.5 s of every offline ``ask``). The MiniLM file is not read ahead: the page
  cache holds it after a first run, and an ONNX session made from its bytes took as
  long as one made from the file (0.31 s against 0.29 s; the read is 15 ms).
* **Never worse than without it.** Whatever fails before the child starts the command
  (no worker, a dead one, one of another code version, a refused or slow answer) makes
  the entry point run the command in its own process, as without a worker, and start a
  worker for next time in the background. The child waits for the client's "go" before
  it runs anything, so a client that gave up never has its command run twice.
* **The code version** is a stamp of the interpreter, the newest modification time and
  the number of the package's modules, and of the site-packages folder: a worker asked
  by a client of another stamp refuses, stops taking commands and ends once its
  children have.
* **Signals.** The client forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the child (a
  Ctrl-C reaches the client, the foreground process); a child whose client is gone (its
  socket closed, however it ended) is sent SIGTERM, then SIGKILL a few seconds later.
* **One worker per user and installation**, beside the embedded server's default data
  directory (``warm-<tag>.sock``, ``warm-<tag>.lock`` held for the worker's life,
  ``warm-<tag>.json`` for ``arcana-loop server status``; the tag names the interpreter, so
  two checkouts used in turn do not replace each other's worker at every command): the
  environment is the command's, so one worker serves every data directory. Only its user can connect (the socket is ``0600`` and the peer's uid is
  checked). It ends after ``ARCANA_LOOP_SERVER_IDLE_SECONDS`` without a command, as
  the embedded server does, when its socket is removed, or on ``arcana-loop server
  stop``. ``ARCANA_LOOP_WARM_WORKER=0`` turns it off (every command runs in its own
  process, and none starts a worker).
* **Which commands** (`cli.entry`). All but ``--version``, ``--help`` (each answers in a fraction of a
  second anyway) and ``server`` (it starts and stops the worker).

This module imports only the standard library at its top: the entry point imports it
before deciding anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PACKAGES = ("core", "graph", "nodes", "tools", "grounding", "knowledge", "cli", "evaluation", "ui")
"""The package's folders whose modules make the code stamp."""
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals the client passes on to the child."""
ANSWER_WAIT = 5.0
"""Seconds the client waits for the worker to accept a command before running it itself."""
STOP_WAIT = 5.0
"""Seconds `stop_worker` waits for the worker to let go of its lock."""
MESSAGE_MAX = 1 << 18
"""The longest request (argv and environment, as JSON) a client may send."""
SOCKET_PATH_MAX = 107
"""The longest Unix socket path (sun_path without its NUL): a longer home has no worker."""
_FDS = 4  # stdin, stdout, stderr, working directory


class NotServed(Exception):
    """The worker did not take the command: run it in this process."""


# -- where -----------------------------------------------------------------------------------------


def home() -> Path:
    """The folder of the worker's socket, lock and state (the user's arcana-loop data folder)."""
    import platformdirs

    return platformdirs.user_data_path("arcana-loop")


def _named(suffix: str) -> Path:
    """The worker's file `suffix` in `home`, named after this installation's interpreter."""
    import hashlib

    tag = hashlib.sha1(sys.executable.encode(), usedforsecurity=False).hexdigest()[:8]
    return home() / f"warm-{tag}.{suffix}"


def socket_path() -> Path:
    """The worker's Unix socket."""
    return _named("sock")


def lock_path() -> Path:
    """The lock a worker holds for its whole life."""
    return _named("lock")


def state_path() -> Path:
    """The running worker's state, for ``arcana-loop server status``."""
    return _named("json")


def code_stamp() -> str:
    """The code version a worker must share with its client (see the module docstring)."""
    import sysconfig

    import arcana_loop

    newest, count = 0, 0
    for entry in map(Path, arcana_loop.__path__):
        folders = [entry / name for name in PACKAGES]
        for path in [*entry.glob("*.py"), *(p for f in folders for p in f.rglob("*.py"))]:
            with contextlib.suppress(OSError):
                newest, count = max(newest, path.stat().st_mtime_ns), count + 1
    libraries = Path(sysconfig.get_paths()["purelib"])
    with contextlib.suppress(OSError):
        newest = max(newest, libraries.stat().st_mtime_ns)
    return f"{sys.executable}|{newest}|{count}"


# -- the client ------------------------------------------------------------------------------------


def served(argv: Sequence[str]) -> int | None:
    """Run the command `argv` in the worker and return its exit code; None: run it here.

    None comes back only when the command has not started: no worker (one is started
    in the background for next time), a stale or unreachable one, or a refusal.
    """
    stamp = code_stamp()
    path = socket_path()
    try:
        sock = _connect(path)
    except OSError:
        start_worker(stamp)
        return None
    with sock:
        try:
            child = _hand_over(sock, argv, stamp)
        except NotServed:
            start_worker(stamp)
            return None
        except OSError:
            return None
        return _wait_for(sock, child)


def _connect(path: Path) -> socket.socket:
    if len(str(path)) > SOCKET_PATH_MAX:
        raise OSError(f"{path} is too long for a Unix socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(ANSWER_WAIT)
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def _hand_over(sock: socket.socket, argv: Sequence[str], stamp: str) -> int:
    """Send the command with this process's streams and directory; the child's PID once it may run."""
    mask = os.umask(0o022)
    os.umask(mask)
    request = {
        "stamp": stamp,
        "argv": list(argv),
        "env": dict(os.environ),
        "umask": mask,
        "streams": [_stream_shape(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    }
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2, here])
    finally:
        os.close(here)
    answer = _receive(sock)
    if "pid" not in answer:
        raise NotServed(answer.get("refused", "no answer"))
    sock.send(b'{"go": true}')  # from here on the command runs there, whatever happens
    return int(answer["pid"])


def _stream_shape(stream: Any) -> list[str] | None:
    """The encoding and error handler of one standard stream (None when it is closed)."""
    return None if stream is None else [stream.encoding, stream.errors]


def _receive(sock: socket.socket) -> dict[str, Any]:
    data = sock.recv(MESSAGE_MAX)
    if not data:
        raise NotServed("the worker closed the connection")
    answer: dict[str, Any] = json.loads(data)
    return answer


def _wait_for(sock: socket.socket, child: int) -> int:
    """Forward this process's signals to the child until the worker sends its exit status."""
    sock.settimeout(None)

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            sock.send(json.dumps({"signal": signum}).encode())

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:
        status = _receive(sock)
    except (NotServed, OSError, ValueError):
        print(
            f"arcana-loop: the warm worker went away during the command (PID {child})",
            file=sys.stderr,
        )
        return 1
    if "signal" in status:  # die as the child did, as the command would have here
        died_of = int(status["signal"])
        signal.signal(died_of, signal.SIG_DFL)
        os.kill(os.getpid(), died_of)
        return 128 + died_of
    return int(status["exit"])


def start_worker(stamp: str) -> None:
    """Start a worker in the background (unless one is starting or running); never waits for it."""
    import subprocess

    folder = home()
    if len(str(socket_path())) > SOCKET_PATH_MAX:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not _lock_is_free():
            return  # one is starting (or runs and refused: it ends once its children have)
        with open(_named("log"), "ab") as log:
            subprocess.Popen(
                [sys.executable, "-P", "-m", "arcana_loop.cli.worker", stamp],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd="/",
                start_new_session=True,  # no terminal's signals, and it outlives this process
            )
    except OSError:
        return  # no worker then: every command runs in its own process


def _lock_is_free() -> bool:
    fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def worker_state() -> dict[str, Any] | None:
    """The running worker's state (pid, since, idle_seconds, socket), or None without one."""
    if not lock_path().exists() or _lock_is_free():
        return None
    try:
        state: dict[str, Any] = json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None  # starting: its imports come first
    return state


def stop_worker() -> int | None:
    """Ask the worker to take no more commands and end; its PID, or None when none listened.

    Commands it runs finish first; this waits up to `STOP_WAIT` seconds for it to go.
    """
    try:
        with _connect(socket_path()) as sock:
            sock.send(b'{"stop": true}')
            pid = int(_receive(sock)["stopping"])
    except (OSError, NotServed, KeyError, ValueError):
        return None
    deadline = time.monotonic() + STOP_WAIT
    while worker_state() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid
