"""The one bridge between the loop's synchronous nodes and asynchronous dependencies.

Nodes are plain functions: what they wait on (a model reply, a search) goes through
synchronous clients, so one body serves ``invoke``/``run`` and ``ainvoke``/``arun``/the
server alike (LangGraph, and `graph.routing.Node`, run a node in a worker thread for
async callers). A dependency may still be asynchronous (an ``async def`` search
function, grounder, synthesizer, model function or tool); `call` runs it:

* in an async run, on the caller's event loop (where its connections were opened),
  which `caller_loop` records for the node's worker thread;
* in a sync run, on one background event loop shared by every sync run of the
  process, so loop-bound resources (an async connection pool, an HTTP client) live
  on a single loop instead of a new one per call.

The awaitable runs with the node's context, so callbacks, tracing and
``get_runtime`` see the run as the node does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_caller: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar("arcana_loop_caller_loop", default=None)
_background: asyncio.AbstractEventLoop | None = None
_background_lock = threading.Lock()


@contextlib.contextmanager
def caller_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Record the event loop of an async caller while a node runs for it in a worker thread."""
    token = _caller.set(loop)
    try:
        yield
    finally:
        _caller.reset(token)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``, synchronous or asynchronous, from a node; return its result, awaited when it is awaitable."""
    result = fn(*args, **kwargs)
    return wait(result) if inspect.isawaitable(result) else result


def wait(awaitable: Awaitable[T], timeout: float | None = None) -> T:
    """Wait for an awaitable from synchronous code, on the caller's loop or the background one.

    Raises:
        TimeoutError: when ``timeout`` seconds pass first (the awaitable is cancelled).
    """
    loop = _caller.get()
    if loop is None or loop.is_closed() or _runs_here(loop):
        # a sync run; or a sync call made on the caller's own loop thread, which would deadlock
        loop = _background_loop()
    future = asyncio.run_coroutine_threadsafe(_in_context(awaitable, contextvars.copy_context()), loop)
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise


def _runs_here(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _in_context(awaitable: Awaitable[T], context: contextvars.Context) -> T:
    return await asyncio.get_running_loop().create_task(_as_coroutine(awaitable), context=context)


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _background_loop() -> asyncio.AbstractEventLoop:
    """Return the process's background event loop, started on first use in a daemon thread."""
    global _background
    with _background_lock:
        if _background is None or _background.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="arcana-loop-async", daemon=True).start()
            _background = loop
        return _background
