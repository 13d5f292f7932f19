"""The one bridge between the loop's synchronous nodes and asynchronous dependencies.

Nodes are plain functions: what they wait on (a model reply, a search) goes through
synchronous clients, so one body serves ``invoke``/``run`` and ``ainvoke``/``arun``/the
server alike (LangGraph, and `graph.routing.Node`, run a node in a worker thread for
async callers). A dependency may still be asynchronous (an ``async def`` search
function, grounder, synthesizer, model function or tool); `call` runs it:

* in an async run, on the caller's event loop (where its connections were opened),
  which `caller_loop` records for the node's worker thread; when the caller stops
  waiting (a cancelled run), what the node still waits on there is cancelled;
* in a sync run, on one background event loop shared by every sync run of the
  process, so loop-bound resources (an async connection pool, an HTTP client) live
  on a single loop instead of a new one per call.

A loop whose thread is blocked is never waited on: a sync run made from inside an
asynchronous dependency (a tool that runs a sub-question with `run`) blocks the loop
that dependency runs on, so the sub-run's own asynchronous dependencies go to a
background loop that is not that one.

The awaitable runs with the node's context, so callbacks, tracing and
``get_runtime`` see the run as the node does.

The other way round, `in_thread` runs a synchronous call in a thread of its own with
the node's context: several searches of one turn at once, or a grounder given a
timeout. The thread is a daemon, so a call that never returns is abandoned there
and keeps neither the run nor the interpreter's exit waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class _Caller:
    """An async caller's event loop, and what a node waits on there for it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._stopped = False
        self._lock = threading.Lock()

    def start(
        self, awaitable: Awaitable[T], context: contextvars.Context
    ) -> concurrent.futures.Future[T]:
        """Schedule the awaitable on the caller's loop, unless the caller stopped waiting.

        Raises:
            concurrent.futures.CancelledError: when the caller already stopped waiting.
        """
        with self._lock:
            if self._stopped:
                _discard(awaitable)
                raise concurrent.futures.CancelledError()
            future = asyncio.run_coroutine_threadsafe(_in_context(awaitable, context), self.loop)
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def stop(self) -> None:
        """Cancel what is still pending, and anything started later."""
        with self._lock:
            self._stopped = True
            pending, self._pending = self._pending, set()
        for future in pending:
            future.cancel()


_caller: contextvars.ContextVar[_Caller | None] = contextvars.ContextVar(
    "arcana_loop_caller", default=None
)
_blocked: contextvars.ContextVar[frozenset[asyncio.AbstractEventLoop]] = contextvars.ContextVar(
    "arcana_loop_blocked_loops", default=frozenset()
)
"""The loops whose thread a synchronous call made here would block: those the current dependency runs on."""
_background: list[asyncio.AbstractEventLoop] = []
_background_lock = threading.Lock()


@contextlib.contextmanager
def caller_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Record the event loop of an async caller while a node runs for it in a worker thread.

    On leaving (the node's result, or the caller cancelled), what the node still waits
    on in that loop is cancelled, and it starts nothing more there.
    """
    caller = _Caller(loop)
    caller_token = _caller.set(caller)
    blocked_token = _blocked.set(
        _blocked.get() - {loop}
    )  # the caller awaits the node: its loop is free
    try:
        yield
    finally:
        _blocked.reset(blocked_token)
        _caller.reset(caller_token)
        caller.stop()


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``, synchronous or asynchronous, from a node; return its result, awaited when it is awaitable."""
    result = fn(*args, **kwargs)
    return wait(result) if inspect.isawaitable(result) else result


def wait(awaitable: Awaitable[T], timeout: float | None = None) -> T:
    """Wait for an awaitable from synchronous code, on the caller's loop or a background one.

    Raises:
        TimeoutError: when ``timeout`` seconds pass first (the awaitable is cancelled).
        concurrent.futures.CancelledError: when the async caller stopped waiting (a cancelled run).
    """
    caller, avoid = _caller.get(), _blocked.get() | _running_here()
    if caller is not None and (caller.loop.is_closed() or caller.loop in avoid):
        caller = None  # a sync call made on the caller's own loop thread, directly or not, would deadlock
    context = contextvars.copy_context()
    if caller is not None:
        context.run(_blocked.set, avoid | {caller.loop})
        future = caller.start(awaitable, context)
    else:
        loop = _background_loop(avoid)
        context.run(_blocked.set, avoid | {loop})
        future = asyncio.run_coroutine_threadsafe(_in_context(awaitable, context), loop)
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise


def in_thread(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """Start ``fn(*args)`` in a daemon thread, with the caller's context, and return its future."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(context.run(fn, *args))
        except BaseException as exc:  # handed to the waiting caller, who decides
            future.set_exception(exc)

    threading.Thread(target=target, name="arcana-loop-worker", daemon=True).start()
    return future


def _running_here() -> frozenset[asyncio.AbstractEventLoop]:
    try:
        return frozenset({asyncio.get_running_loop()})
    except RuntimeError:
        return frozenset()


def _discard(awaitable: Awaitable[Any]) -> None:
    """Close a coroutine that will never run (no "never awaited" warning)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


async def _in_context(awaitable: Awaitable[T], context: contextvars.Context) -> T:
    return await asyncio.get_running_loop().create_task(_as_coroutine(awaitable), context=context)


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _background_loop(avoid: frozenset[asyncio.AbstractEventLoop]) -> asyncio.AbstractEventLoop:
    """Return the first background event loop not in ``avoid``, starting one in a daemon thread when none is.

    Sync runs share the first; another starts only for a sync run made from inside an
    asynchronous dependency that runs on the first (whose thread it blocks).
    """
    with _background_lock:
        _background[:] = [loop for loop in _background if not loop.is_closed()]
        for loop in _background:
            if loop not in avoid:
                return loop
        loop = asyncio.new_event_loop()
        name = "arcana-loop-async" + (f"-{len(_background) + 1}" if _background else "")
        threading.Thread(target=loop.run_forever, name=name, daemon=True).start()
        _background.append(loop)
        return loop
