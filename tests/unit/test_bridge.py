"""The bridge between the loop's synchronous nodes and ``async def`` dependencies, probed from outside.

Each test drives `run` or `arun` the way a user would, with an asynchronous search
function, grounder, synthesizer, model function or tool, and checks where it ran:
on the caller's event loop in an async run, on one background loop in a sync run
(also when the sync run is called from inside a running loop, as in a notebook),
with the caller's context variables, and with failures and timeouts handled as
they are for synchronous dependencies.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from arcana_loop.graph import arun, run
from arcana_loop.nodes.ground import TIMED_OUT
from tests.fakes import ScriptedSearch, answer, calls, chunk, scripted, search, tool_call

GROUNDED = {"score": 0.75, "faithful_spans": [], "hallucinated_spans": [], "claims": []}
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


def two_searches() -> AIMessage:
    """A controller turn asking for two searches at once."""
    return calls(tool_call("search", query="slow"), tool_call("search", query="fast"))


async def through(runner: str, question: str = "Q?", **options: Any) -> Any:
    """Run a question with ``run`` (in a worker thread, so this loop stays free) or with ``arun``."""
    if runner == "arun":
        return await arun(question, **options)
    return await asyncio.to_thread(run, question, **options)


def tool_texts(result: Any) -> list[str]:
    return [str(m.content) for m in result.messages if isinstance(m, ToolMessage)]


class MeetingSearch:
    """An async search whose calls of one turn must all be in flight at once to finish.

    Its one event is bound to the loop that first waits on it (waiting on it from
    another loop raises), and cleared after each turn; with the loops it saw, it tells
    where the calls ran.
    """

    def __init__(self, expected: int = 2) -> None:
        self.expected = expected
        self.in_flight = 0
        self.met: asyncio.Event | None = None
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[threading.Thread] = []

    async def __call__(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.current_thread())
        self.met = self.met or asyncio.Event()
        self.in_flight += 1
        if self.in_flight == self.expected:
            self.met.set()
        await asyncio.wait_for(self.met.wait(), 5)
        await asyncio.sleep(0.05 if query == "slow" else 0)  # the first call finishes last
        self.in_flight -= 1
        if self.in_flight == 0:
            self.met.clear()
        return [chunk(f"c-{query}")]


# ----- 1. an async run: async dependencies run on the caller's loop -------------------------------


async def test_async_searches_run_on_the_callers_loop_and_overlap():
    lock = asyncio.Lock()  # bound to this loop: using it elsewhere would raise
    meeting = MeetingSearch()

    async def locked_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        async with lock:
            await asyncio.sleep(0)
        return await meeting(query, **kwargs)

    result = await arun(
        "Q?",
        controller_llm=scripted(two_searches(), answer("x")),
        search_fn=locked_search,
        max_parallel_searches=2,
    )
    assert set(meeting.loops) == {asyncio.get_running_loop()}
    assert [e["args"]["query"] for e in result.tool_history[:2]] == ["slow", "fast"]
    assert [e["returned_chunk_ids"] for e in result.tool_history[:2]] == [["c-slow"], ["c-fast"]]
    assert result.answer == "x"


# ----- 2. a sync run: async dependencies share one background loop --------------------------------


def test_sync_runs_share_one_background_loop_off_the_main_thread():
    meeting = MeetingSearch()
    for _ in range(2):
        result = run(
            "Q?",
            controller_llm=scripted(two_searches(), answer("x")),
            search_fn=meeting,
            max_parallel_searches=2,
        )
        assert [e["returned_chunk_ids"] for e in result.tool_history[:2]] == [
            ["c-slow"],
            ["c-fast"],
        ]
    # the event bound on the first run's loop was waited on again by the second run: one loop
    assert len(meeting.loops) == 4 and len(set(meeting.loops)) == 1
    assert all(t is not threading.main_thread() for t in meeting.threads)
    assert len(set(meeting.threads)) == 1


# ----- 3. a sync run called from inside a running loop (a notebook) -------------------------------


async def test_a_sync_run_inside_a_running_loop_completes():
    async def async_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        assert asyncio.get_running_loop() is not caller
        return [chunk("c-async")]

    caller = asyncio.get_running_loop()
    for search_fn, expected in [
        (ScriptedSearch([[chunk("c-sync")]]), "c-sync"),
        (async_search, "c-async"),
    ]:
        result = run("Q?", controller_llm=scripted(search("a"), answer("x")), search_fn=search_fn)
        assert (result.terminated_by, result.tool_history[0]["returned_chunk_ids"]) == (
            "answered",
            [expected],
        )


# ----- 4. async grounders -------------------------------------------------------------------------


def grounded_run(grounder: Any, **options: Any) -> dict[str, Any]:
    return {
        "controller_llm": scripted(search("snakes"), answer("Snakes bite.")),
        "search_fn": ScriptedSearch([[chunk("s1", "Snakes bite.")]]),
        "grounder": grounder,
        **options,
    }


class AsyncGrounder:
    """A grounder with ``aground`` only; it takes ``delay`` seconds and records a cancellation."""

    name = "async-test"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.cancelled = threading.Event()
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def aground(
        self, answer: str, chunks: list[dict[str, Any]], *, question: str, **opts: Any
    ) -> Any:
        self.loops.append(asyncio.get_running_loop())
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return GROUNDED


@pytest.mark.parametrize("runner", ["run", "arun"])
async def test_an_async_grounder_grounds_the_answer(runner):
    grounder = AsyncGrounder()
    result = await through(runner, "Snakes?", **grounded_run(grounder))
    assert result.grounding is not None and result.grounding["score"] == 0.75
    assert result.error is None
    assert (grounder.loops[0] is asyncio.get_running_loop()) == (runner == "arun")


@pytest.mark.parametrize("runner", ["run", "arun"])
async def test_a_slow_async_grounder_is_cancelled_and_the_answer_stands(runner):
    grounder = AsyncGrounder(delay=5)
    result = await through(runner, "Snakes?", **grounded_run(grounder, ground_timeout=0.2))
    assert grounder.cancelled.wait(2), "the timed-out grounder is cancelled, not left running"
    assert (result.terminated_by, result.answer, result.grounding) == (
        "answered",
        "Snakes bite.",
        None,
    )
    assert result.error == TIMED_OUT.format(seconds=0.2, limit="ground_timeout")


# ----- 5. async synthesizers and async model functions --------------------------------------------


@pytest.mark.parametrize("runner", ["run", "arun"])
async def test_an_async_synthesizer_writes_the_fallback_answer(runner):
    seen: list[int] = []

    async def synthesizer(messages: list[Any], opts: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        seen.append(len(messages))
        return "synthesized"

    result = await through(
        runner,
        controller_llm=scripted(search("a")),
        search_fn=ScriptedSearch([[chunk("c1")]]),
        synthesizer=synthesizer,
        max_iterations=1,
    )
    assert (result.terminated_by, result.answer, result.error) == (
        "max_iterations",
        "synthesized",
        None,
    )
    assert len(seen) == 1 and result.tool_history[-1]["tool"] == "synthesis"


def async_model(*replies: AIMessage) -> Callable[..., Any]:
    """A model given as an ``async def`` function, replying in order and recording the tools it was offered."""
    pending = list(replies)

    async def model(messages: list[Any], tools: list[Any], opts: dict[str, Any]) -> AIMessage:
        await asyncio.sleep(0)
        model.offered.append([t["function"]["name"] for t in tools])  # type: ignore[attr-defined]
        return pending.pop(0)

    model.offered = []  # type: ignore[attr-defined]
    return model


@pytest.mark.parametrize("runner", ["run", "arun"])
async def test_an_async_model_function_drives_the_loop(runner):
    model = async_model(search("a"), answer("from an async model"))
    result = await through(runner, controller_llm=model, search_fn=ScriptedSearch([[chunk("c1")]]))
    assert (result.terminated_by, result.answer, result.iterations) == (
        "answered",
        "from an async model",
        2,
    )
    assert len(model.offered) == 2 and "search" in model.offered[0]  # type: ignore[attr-defined]


# ----- 6. custom tools made from async and sync functions -----------------------------------------


@pytest.mark.parametrize("runner", ["run", "arun"])
async def test_a_custom_async_tool_is_awaited(runner):
    loops: list[asyncio.AbstractEventLoop] = []

    @tool
    async def lookup(term: str) -> str:
        """Look a term up."""
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return f"{term} means something"

    model = scripted(calls(tool_call("lookup", term="gil")), answer("x"))
    result = await through(runner, controller_llm=model, search_fn=ScriptedSearch(), tools=[lookup])
    assert tool_texts(result)[0] == "gil means something"
    assert (loops[0] is asyncio.get_running_loop()) == (runner == "arun")


async def test_a_custom_sync_tool_in_an_async_run_keeps_the_loop_free():
    ticks: list[int] = []
    ran_on: list[threading.Thread] = []

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.01)

    @tool
    def blocking(term: str) -> str:
        """Take a while, synchronously."""
        ran_on.append(threading.current_thread())
        before = len(ticks)
        threading.Event().wait(0.2)
        return f"ticks while blocked: {len(ticks) - before > 3}"

    ticking = asyncio.get_running_loop().create_task(ticker())
    try:
        model = scripted(calls(tool_call("blocking", term="t")), answer("x"))
        result = await arun(
            "Q?", controller_llm=model, search_fn=ScriptedSearch(), tools=[blocking]
        )
    finally:
        ticking.cancel()
    assert tool_texts(result)[0] == "ticks while blocked: True"
    assert ran_on[0] is not threading.main_thread()


# ----- 7. context variables -----------------------------------------------------------------------


def seeing(seen: list[str], asynchronous: bool) -> Callable[..., Any]:
    """A search function (sync or async) recording the caller's ``request_id``."""

    def sync_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        seen.append(request_id.get())
        return [chunk(f"c-{query}")]

    async def async_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        return sync_search(query, **kwargs)

    return async_search if asynchronous else sync_search


@pytest.mark.parametrize("runner", ["run", "arun"])
@pytest.mark.parametrize("asynchronous", [True, False], ids=["async-search", "sync-search"])
@pytest.mark.parametrize("turn", [search("a"), two_searches()], ids=["one-search", "two-searches"])
async def test_the_callers_context_variables_reach_the_search(runner, asynchronous, turn):
    seen: list[str] = []

    async def with_request_id() -> Any:
        request_id.set("r-42")  # in this task's own context copy
        return await through(
            runner, controller_llm=scripted(turn, answer("x")), search_fn=seeing(seen, asynchronous)
        )

    result = await asyncio.get_running_loop().create_task(with_request_id())
    assert result.terminated_by == "answered"
    assert seen and set(seen) == {"r-42"}


# ----- 8. a failing async search ------------------------------------------------------------------


@pytest.mark.parametrize("runner", ["run", "arun"])
@pytest.mark.parametrize("asynchronous", [True, False], ids=["async-search", "sync-search"])
async def test_a_failing_search_becomes_a_search_error(runner, asynchronous):
    def sync_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        raise ValueError("index offline")

    async def async_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        return sync_search(query, **kwargs)

    model = scripted(search("a"), answer("x"))
    result = await through(
        runner, controller_llm=model, search_fn=async_search if asynchronous else sync_search
    )
    assert tool_texts(result)[0] == "search error: ValueError: index offline"
    assert result.tool_history[0]["summary"] == "search error: ValueError: index offline"
    assert result.tool_history[0]["error"] == "ValueError: index offline"  # the reason, as data
    assert result.answer == "x"


# ----- 9. a cancelled async run cancels what its nodes wait on ------------------------------------


async def test_cancelling_an_async_run_cancels_its_async_search():
    started, cancelled, searched = asyncio.Event(), asyncio.Event(), []

    async def hanging_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        searched.append(query)
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return []

    turn = calls(tool_call("search", query="first"), tool_call("search", query="second"))
    running = asyncio.ensure_future(
        arun(
            "Q?",
            controller_llm=scripted(turn, answer("x")),
            search_fn=hanging_search,
            max_parallel_searches=1,
        )
    )
    await asyncio.wait_for(started.wait(), 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.wait_for(cancelled.wait(), 2)  # not left running on this loop for its 10 s
    await asyncio.sleep(0.1)
    assert searched == ["first"]  # the node's next search is not started once the run is cancelled


async def test_cancelling_an_async_run_cancels_its_parallel_searches_and_starts_no_more():
    in_flight, cancelled, searched = asyncio.Event(), [], []

    async def hanging_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        searched.append(query)
        if len(searched) == 2:
            in_flight.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(query)
            raise
        return []

    turn = calls(*(tool_call("search", query=q) for q in ("first", "second", "third")))
    running = asyncio.ensure_future(
        arun(
            "Q?",
            controller_llm=scripted(turn, answer("x")),
            search_fn=hanging_search,
            max_parallel_searches=2,
        )
    )
    await asyncio.wait_for(in_flight.wait(), 5)  # two at once, the third waits for a slot
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.sleep(0.2)
    assert sorted(cancelled) == sorted(searched) == ["first", "second"]


# ----- 10. a sync run made from inside an async dependency (a sub-question) -----------------------


def finishes(target: Callable[[], Any], seconds: float = 10) -> Any:
    """Call ``target`` in a daemon thread and return its result; fail, rather than hang, on a deadlock."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(target()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "deadlocked"
    return outcome[0]


async def async_search(query: str, **kwargs: Any) -> list[dict[str, Any]]:
    await asyncio.sleep(0)
    return [chunk(f"c-{query}")]


def sub_question() -> str:
    """A whole sync run of two async searches, as a dependency might make for a sub-question."""
    result = run(
        "inner?",
        controller_llm=scripted(two_searches(), answer("inner answer")),
        search_fn=async_search,
    )
    return f"{result.answer} from {sorted(c['id'] for c in result.chunks)}"


def test_a_sync_run_inside_an_async_tool_of_an_async_run_completes():
    @tool
    async def ask(question: str) -> str:
        """Answer a sub-question (blocking this loop while it runs)."""
        return sub_question()

    async def outer() -> Any:
        model = scripted(calls(tool_call("ask", question="inner?")), answer("x"))
        return await arun("Q?", controller_llm=model, search_fn=async_search, tools=[ask])

    result = finishes(lambda: asyncio.run(outer()))
    assert tool_texts(result)[0] == "inner answer from ['c-fast', 'c-slow']"


def test_a_sync_run_inside_an_async_search_of_a_sync_run_completes():
    async def searching_deeper(query: str, **kwargs: Any) -> list[dict[str, Any]]:
        return [chunk("c-outer", sub_question())]

    result = finishes(
        lambda: run(
            "Q?", controller_llm=scripted(search("a"), answer("x")), search_fn=searching_deeper
        )
    )
    assert result.chunks[0]["text"] == "inner answer from ['c-fast', 'c-slow']"
