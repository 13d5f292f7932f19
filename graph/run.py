"""The public entry points: `run` and `arun` a question through the loop, `ground` a result."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from arcana_loop.core.context import CONTEXT_FIELDS, MAX_OPTION_DEPTH, OPTIONS, LoopContext
from arcana_loop.core.sources import Source, readable_answer
from arcana_loop.core.state import (
    RESULT_KEYS,
    AnswerKind,
    BudgetStop,
    CollectionSpec,
    Coverage,
    EvidencePin,
    StaleEvidence,
    TerminatedBy,
    ToolEvent,
)
from arcana_loop.core.text import check_question, check_text, check_thread_id
from arcana_loop.graph.build import GRAPH_NAME, build_graph, make_deps
from arcana_loop.graph.checkpoints import (
    async_checkpointer,
    resolve_checkpointer,
    resolve_checkpointer_spec,
)
from arcana_loop.graph.streaming import AnswerTokens, OnToken
from arcana_loop.knowledge.types import Chunk
from arcana_loop.nodes.deps import ConfigurationError
from arcana_loop.nodes.lifecycle import exception_event
from arcana_loop.nodes.models import check_model_spec
from arcana_loop.tools.scoping import normalize_scope
from arcana_loop.tools.search import check_search_opts


@dataclass
class LoopResult:
    """What a run produced."""

    question: str
    answer: str | None
    terminated_by: TerminatedBy | None
    iterations: int
    tool_history: list[ToolEvent]
    chunks: list[Chunk]
    error: str | None = None
    grounding: dict[str, Any] | None = None
    messages: list[BaseMessage] = field(default_factory=list)
    thread_id: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    """Tokens per role and overall (``total``), and seconds per node (``node_seconds``)."""
    coverage: Coverage | None = None
    """With grounding: ``supported``, ``partially_supported`` or ``unsupported``."""
    repair: dict[str, Any] | None = None
    """When an under-supported answer went back to the controller: the scores before and after."""
    budget_stop: BudgetStop | None = None
    """For ``max_iterations`` runs: which budget ran out (``iterations``, ``tokens``, ``seconds``)."""
    grounded_in_chunks: bool = False
    """Whether the answer rests on retrieved chunks: the run answered (or synthesized) after gathering
    at least one. False for an answer from the model's memory, a give-up, an error, or a custom
    ``search`` tool (its text results are not chunks)."""
    question_index: int = 0
    """The 0-based number of this question in its thread's conversation."""
    thread_usage: dict[str, Any] = field(default_factory=dict)
    """``usage`` summed over every question of the thread (``usage`` is this question's)."""
    sources: list[Source] = field(default_factory=list)
    """The chunks the answer cites, in the order it first cites them (`core.sources`): ``sources[i]`` is ``[i + 1]`` in `readable_answer`."""
    answer_kind: AnswerKind | None = None
    """``extracted``: passages quoted as the searches found them, no model wrote them (the offline
    controller); ``written``: a model wrote the answer; ``None`` without an answer."""
    evidence: list[EvidencePin] = field(default_factory=list)
    """The chunks the answer rests on, cited first, with the versions it read (`nodes.pins`):
    what `stale_answers` later checks against the knowledge base."""
    stale_evidence: StaleEvidence | None = None
    """On a follow-up: that the previous answer's evidence has changed since, and which chunks."""

    @classmethod
    def from_state(cls, state: Mapping[str, Any], thread_id: str | None = None) -> LoopResult:
        """Build a result from graph state values."""
        return cls(
            question=state["question"],
            answer=state.get("answer"),
            terminated_by=state.get("terminated_by"),
            iterations=state.get("iterations", 0),
            tool_history=list(state.get("tool_history") or []),
            chunks=list(state.get("chunks") or []),
            error=state.get("error"),
            grounding=state.get("grounding"),
            messages=list(state.get("messages") or []),
            thread_id=thread_id,
            usage=dict(state.get("usage") or {}),
            coverage=state.get("coverage"),
            repair=state.get("repair"),
            budget_stop=state.get("budget_stop"),
            grounded_in_chunks=grounded_in_chunks(state),
            question_index=int(state.get("question_index") or 0),
            thread_usage=dict(state.get("thread_usage") or state.get("usage") or {}),
            sources=list(state.get("sources") or []),  # as `finish` cited them
            answer_kind=state.get("answer_kind"),
            evidence=list(state.get("evidence") or []),
            stale_evidence=state.get("stale_evidence"),
        )

    @property
    def readable_answer(self) -> str | None:
        """The answer as a person reads it: citations as ``[1]``, ``[2]``, then the sources they number."""
        return None if self.answer is None else readable_answer(self.answer, self.sources)

    def to_dict(self, *, messages: bool = False) -> dict[str, Any]:
        """Return the result as plain JSON-serialisable data (messages only when asked)."""
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "messages"
        }
        if messages:
            out["messages"] = [m.model_dump(mode="json") for m in self.messages]
        return out


def grounded_in_chunks(state: Mapping[str, Any]) -> bool:
    """Whether a run's answer came after at least one chunk was gathered (an answer or a synthesis, not a give-up)."""
    return (
        state.get("answer") is not None
        and state.get("terminated_by") in ("answered", "max_iterations")
        and bool(state.get("chunks"))
    )


def _check_texts(collection: Any, context: LoopContext) -> None:
    """Refuse lone surrogates in the collection names and string options; they would break storage mid-run."""
    for name in (
        [collection]
        if isinstance(collection, str)
        else collection
        if isinstance(collection, list)
        else []
    ):
        check_text("collection", name)
    for option in CONTEXT_FIELDS:
        value = getattr(context, option)
        if option == "search_opts":
            _check_nested("search_opts", value)
        else:
            check_text(option, value)


def _check_nested(name: str, value: Any, depth: int = 0) -> None:
    # every level: `LoopContext` has refused options nested deeper than MAX_OPTION_DEPTH
    if isinstance(value, dict) and depth < MAX_OPTION_DEPTH:
        for key, item in value.items():
            check_text(name, key)
            _check_nested(name, item, depth + 1)
    elif isinstance(value, list | tuple) and depth < MAX_OPTION_DEPTH:
        for item in value:
            _check_nested(name, item, depth + 1)
    else:
        check_text(name, value)


class _CompiledGraphs:
    """A small cache of compiled graphs, keyed by the identity of their dependencies.

    Compiling costs more than a fast run, and callers usually pass the same models
    and functions every time. Entries hold the dependencies themselves, so an id in
    a key cannot be reused by another object while the entry lives.
    """

    def __init__(self, size: int = 32) -> None:
        self._entries: OrderedDict[
            tuple[Any, ...], tuple[Pregel[Any, Any, Any, Any], tuple[Any, ...]]
        ] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, deps_kwargs: dict[str, Any], checkpointer: Any) -> Pregel[Any, Any, Any, Any]:
        values = (*deps_kwargs.values(), checkpointer)
        key = tuple(_identity(v) for v in values)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        compiled = build_graph(make_deps(**deps_kwargs), run_input=True).compile(
            checkpointer=checkpointer, name=GRAPH_NAME
        )
        with self._lock:
            self._entries[key] = (compiled, values)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return compiled


def _identity(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return (type(value).__name__, value)
    if isinstance(value, tuple | list):
        return tuple(_identity(v) for v in value)
    return ("id", id(value))


_graphs = _CompiledGraphs()


def recursion_limit(context: LoopContext) -> int:
    """LangGraph's step limit for a run: about four supersteps per turn, with room for the ending."""
    return 4 * context.max_iterations + 20


Durability = Literal["sync", "async", "exit"]
DURABILITIES: tuple[Durability, ...] = ("sync", "async", "exit")
DEPS_OPTIONS = frozenset(inspect.signature(make_deps).parameters)
"""The run options that are objects a graph is built with (`make_deps`'s keywords)."""
RUN_OPTIONS = DEPS_OPTIONS | CONTEXT_FIELDS
"""Every keyword option of `run` and `arun`: `make_deps`'s keywords and `LoopContext`'s fields."""
_NAMED_IN_CONTEXT = {
    "controller_llm": "controller_model",
    "grounder": "grounder",
    "system_prompt": "system_prompt",
    "answer_prompt": "answer_prompt",
    "synthesis_prompt": "synthesis_prompt",
}
"""Dependencies that may be given as a string: the string travels in the context, under this field."""


@dataclass(frozen=True)
class _Call:
    """One run, checked and ready to invoke."""

    compiled: Pregel[Any, Any, Any, Any]
    inputs: dict[str, Any]
    config: RunnableConfig
    context: LoopContext
    thread_id: str | None
    durability: Durability | None

    def invoke_kwargs(self) -> dict[str, Any]:
        # version="v2" streams only the values; v1 also maps every step's updates, to find interrupts
        return {
            "context": self.context,
            "output_keys": list(RESULT_KEYS),
            "durability": self.durability,
            "version": "v2",
        }

    def stream_kwargs(self, *, events: bool, tokens: bool) -> dict[str, Any]:
        modes = [*(["custom"] if events else []), *(["messages"] if tokens else []), "values"]
        return {"context": self.context, "stream_mode": modes, "durability": self.durability}


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split run options into `make_deps` keywords (objects) and `LoopContext` fields (JSON).

    A model, grounder or prompt given as a string is a context field (a grounder name is
    checked now); ``None`` means "not given", so the context's environment fallback applies.

    Raises:
        TypeError: for an unknown option or a ``search_opts`` that is no mapping.
    """
    unknown = set(options) - RUN_OPTIONS
    if unknown:
        raise TypeError(
            f"unknown run option(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(RUN_OPTIONS))}"
        )
    deps = {name: options.get(name) for name in DEPS_OPTIONS}
    context = {
        name: value
        for name, value in options.items()
        if name not in DEPS_OPTIONS and value is not None
    }
    for name, field_name in _NAMED_IN_CONTEXT.items():
        given = deps[name]
        if isinstance(given, str):
            if name == "controller_llm":  # said as the argument it is, naming no option
                check_model_spec(given)
            context[field_name] = given
    if isinstance(deps["grounder"], str):
        from arcana_loop.grounding.resolve import resolve_grounder

        resolve_grounder(deps["grounder"])  # an unknown name fails now, with the known names
        deps["grounder"] = None  # named grounders are resolved per run from the context
    if deps["tools"] is not None:
        deps["tools"] = tuple(deps["tools"])
    if "search_opts" in context:
        if not isinstance(context["search_opts"], Mapping):
            raise TypeError("search_opts must be a mapping of keyword options")
        context["search_opts"] = dict(context["search_opts"])
    return deps, context


def _checked_context(collection: Any, deps: dict[str, Any], options: dict[str, Any]) -> LoopContext:
    """Check everything a run is given but its question and return its context; raises before anything runs."""
    normalize_scope(collection)  # raises on a malformed collection before anything runs
    context = LoopContext(**options)
    _check_texts(collection, context)
    check_search_opts(deps.get("search_fn"), context.search_opts)
    if context.grounder is not None:
        from arcana_loop.grounding.resolve import resolve_grounder

        resolve_grounder(
            context.grounder
        )  # a name from the environment is checked like an argument
    if deps["controller_llm"] is None and context.controller_model is None:
        raise ConfigurationError(
            "run() needs a controller: pass controller_llm= (a 'provider:model' string, a chat model or a "
            f"function) or set {OPTIONS['controller_model'].env}"
        )
    if context.min_support is not None and deps["grounder"] is None and context.grounder is None:
        raise ConfigurationError(
            "min_support needs a grounder (grounder='local', 'llm_judge' or an object)"
        )
    return context


def _checked_call(
    question: Any,
    collection: Any,
    thread_id: str | None,
    on_event: Any,
    on_token: Any,
    durability: Any,
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], LoopContext]:
    """Check a run's arguments; return its dependencies and context."""
    deps, context_options = _checked_inputs(thread_id, on_event, on_token, durability, options)
    check_question(question)
    return deps, _checked_context(collection, deps, context_options)


def _check_thread_kept(checkpointer: Any, thread_id: str | None) -> None:
    """A thread id names a conversation kept by a checkpointer: without one it would be dropped unsaid."""
    if thread_id is not None and checkpointer is None:
        raise ValueError(
            "thread_id needs a checkpointer to keep the thread in: pass checkpointer="
            "'postgres', 'sqlite:PATH', 'memory' or a saver"
        )


def _check_listener(name: str, takes: str, listener: Any) -> None:
    """Refuse a listener that is no plain function.

    It is called from the loop's own thread, where nothing awaits: an ``async def``
    one would make a coroutine per event that never runs, and its events would be lost.
    """
    if listener is None:
        return
    if not callable(listener):
        raise TypeError(f"{name} must be a function of {takes}, got {type(listener).__name__}")
    if inspect.iscoroutinefunction(listener):
        raise TypeError(
            f"{name} must be a plain function of {takes}: an async one would never be awaited"
        )


def _checked_inputs(
    thread_id: str | None,
    on_event: Any,
    on_token: Any,
    durability: Any,
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a run's listeners, durability, thread id and options; return its dependencies and context fields."""
    _check_listener("on_event", "one event dict", on_event)
    _check_listener("on_token", "one text piece", on_token)
    if durability is not None and durability not in DURABILITIES:
        raise ValueError(f"durability must be one of {', '.join(DURABILITIES)}, got {durability!r}")
    check_thread_id(thread_id)
    deps, context_options = split_options(options)
    if "sources_footer" not in context_options and OPTIONS["sources_footer"].given() is None:
        # the list is for clients that show text only; run()'s caller has LoopResult.sources
        context_options["sources_footer"] = False
    return deps, context_options


def check_run_options(
    *,
    collection: CollectionSpec = "all",
    checkpointer: Any = None,
    thread_id: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    on_token: OnToken | None = None,
    durability: Durability | None = None,
    **options: Any,
) -> None:
    """Raise what `run` would raise for these arguments before its first step, without running.

    For a caller that asks many questions with the same arguments (a chat): a bad one is
    said once, before the first question. The graph's dependencies are made as `run` makes
    them, so a model given by spec that cannot be created (a bad spec, a provider without
    its key) fails here too; a checkpointer spec is checked, not opened.

    Raises:
        TypeError, ValueError: for a bad collection, checkpointer, thread id or option.
        ConfigurationError: when no controller is configured.
        ModelSpecError: for a model that cannot be created.
    """
    _check_thread_kept(checkpointer, thread_id)
    deps, context_options = _checked_inputs(thread_id, on_event, on_token, durability, options)
    _checked_context(collection, deps, context_options)
    if checkpointer is not None and not isinstance(checkpointer, BaseCheckpointSaver):
        resolve_checkpointer_spec(checkpointer)
    make_deps(**deps)


def _call(
    question: str,
    collection: Any,
    deps: dict[str, Any],
    context: LoopContext,
    saver: Any,
    thread_id: str | None,
    durability: Durability | None,
) -> _Call:
    compiled = _graphs.get(deps, saver)
    config: RunnableConfig = {"recursion_limit": recursion_limit(context)}
    # the options travel with the input, so the input checkpoint holds them before any model call:
    # a process that dies during the first turn resumes with them, not with the defaults
    inputs = {"question": question, "collection": collection, "options": context.as_options()}
    if saver is None:  # no thread, and no durability: LangGraph warns of one without a checkpointer
        return _Call(compiled, inputs, config, context, None, None)
    thread_id = thread_id or str(uuid.uuid4())
    config["configurable"] = {"thread_id": thread_id}
    return _Call(compiled, inputs, config, context, thread_id, durability or "sync")


def run(
    question: str,
    *,
    collection: CollectionSpec = "all",
    checkpointer: Any = None,
    thread_id: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    on_token: OnToken | None = None,
    durability: Durability | None = None,
    **options: Any,
) -> LoopResult:
    """Answer a question with the agentic loop.

    ``options`` are `make_deps`'s keywords (``controller_llm``, ``answer_llm``, ``search_fn``,
    ``tools``, ``synthesizer``, ``grounder``, the prompts) and `LoopContext`'s fields
    (``max_iterations``, ``chunk_cap``, temperatures...; ``RUN_OPTIONS`` lists them all). One
    left out or ``None`` takes its ``ARCANA_LOOP_*`` environment value, else its default (see
    the README). ``durability`` is when checkpoints are written: ``"sync"`` (the default with a
    checkpointer: each step is stored before the next starts, so a killed process loses at most
    the step under way), ``"async"`` (stored while the next step runs) or ``"exit"`` (only the
    final state). ``on_event`` receives each live event as it happens (``loop_start``, one
    ``tool_call`` per history entry, ``ground_start``/``ground_stop``, ``loop_stop``;
    ``loop_exception``, with ``error_type`` and ``error``, when the run raises instead of stopping).
    ``on_token`` receives the answer's text piece by piece as a model streams it
    (`graph.streaming`; nothing for a model that does not stream): the answer as it is being
    written, which the result's ``answer`` may differ from when it is written again.

    Raises:
        TypeError, ValueError: for a bad question, collection or option, before anything runs.
        ConfigurationError: when no controller is configured.
    """
    _check_thread_kept(checkpointer, thread_id)
    deps, context = _checked_call(
        question, collection, thread_id, on_event, on_token, durability, options
    )
    call = _call(
        question,
        collection,
        deps,
        context,
        resolve_checkpointer(checkpointer),
        thread_id,
        durability,
    )
    if on_event is None and on_token is None:
        return LoopResult.from_state(
            call.compiled.invoke(call.inputs, call.config, **call.invoke_kwargs()).value,
            call.thread_id,
        )
    listener = _Listener(on_event, _answer_tokens(on_token, deps, context))
    kwargs = call.stream_kwargs(events=on_event is not None, tokens=on_token is not None)
    try:
        for mode, chunk in call.compiled.stream(call.inputs, call.config, **kwargs):
            listener.take(mode, chunk)
    except BaseException as exc:  # re-raised: the event only closes the run's span
        listener.raised(context, question, exc)
        raise
    return LoopResult.from_state(listener.state, call.thread_id)


async def arun(
    question: str,
    *,
    collection: CollectionSpec = "all",
    checkpointer: Any = None,
    thread_id: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    on_token: OnToken | None = None,
    durability: Durability | None = None,
    **options: Any,
) -> LoopResult:
    """Answer a question with the agentic loop, on the running event loop (see `run`).

    A checkpointer spec gets an async saver opened for this call (see ``graph.checkpoints``).
    """
    _check_thread_kept(checkpointer, thread_id)
    deps, context = _checked_call(
        question, collection, thread_id, on_event, on_token, durability, options
    )
    if checkpointer is not None and not isinstance(checkpointer, BaseCheckpointSaver):
        resolve_checkpointer_spec(checkpointer)  # a bad spec fails before a connection opens
    async with async_checkpointer(checkpointer) as saver:
        call = _call(question, collection, deps, context, saver, thread_id, durability)
        if on_event is None and on_token is None:
            output = await call.compiled.ainvoke(call.inputs, call.config, **call.invoke_kwargs())
            return LoopResult.from_state(output.value, call.thread_id)
        listener = _Listener(on_event, _answer_tokens(on_token, deps, context))
        kwargs = call.stream_kwargs(events=on_event is not None, tokens=on_token is not None)
        try:
            async for mode, chunk in call.compiled.astream(call.inputs, call.config, **kwargs):
                listener.take(mode, chunk)
        except BaseException as exc:  # cancellation included; re-raised, as in run
            listener.raised(context, question, exc)
            raise
    return LoopResult.from_state(listener.state, call.thread_id)


def _answer_tokens(
    on_token: OnToken | None, deps: Mapping[str, Any], context: LoopContext
) -> AnswerTokens | None:
    if on_token is None:
        return None
    return AnswerTokens(
        on_token, rewritten=deps["answer_llm"] is not None or context.answer_model is not None
    )


@dataclass
class _Listener:
    """What a streamed run tells its caller: live events, answer tokens; and the latest state."""

    on_event: Callable[[dict[str, Any]], None] | None
    tokens: AnswerTokens | None
    state: Any = field(default_factory=dict)

    def take(self, mode: Any, chunk: Any) -> None:
        """Hand a custom event to ``on_event`` and a message chunk to the tokens; keep the values."""
        if mode == "custom":
            if self.on_event is not None:
                self.on_event(chunk)
        elif mode == "messages":
            if self.tokens is not None:
                self.tokens.take(*chunk)
        else:
            self.state = chunk

    def raised(self, context: LoopContext, question: str, exc: BaseException) -> None:
        """Tell ``on_event`` the run raised; a listener that fails on it again cannot hide the run's own error."""
        if self.on_event is None:
            return
        state = self.state
        iterations = state.get("iterations", 0) if isinstance(state, Mapping) else 0
        with contextlib.suppress(Exception):
            self.on_event(exception_event(question, context.max_iterations, iterations, exc))


def ground(
    result: LoopResult | Mapping[str, Any],
    grounder: Any = "local",
    *,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    **opts: Any,
) -> Any:
    """Score a finished result's answer against its chunks; the same as the graph's ``ground`` node.

    Args:
        result: a `LoopResult`, or a state mapping with ``question``, ``answer``,
            ``chunks``, ``tool_history``, ``error`` and ``terminated_by``.
        grounder: a grounder object, a function, or a name (``"local"``, ``"llm_judge"``).
        on_event: receives ``ground_start`` and ``ground_stop`` (``question``, ``grounder``,
            ``score``, ``hallucinated_span_count``, ``faithful_span_count``), as the graph's
            node sends them, when grounding applies.
        **opts: options for the grounder (``judge_model=``, ``threshold=``, ``timeout=``...).

    Returns:
        A copy of ``result`` (same type) with ``grounding`` set, or ``None`` when
        grounding did not apply (no answer, no chunks, an error, a give-up) or failed.
    """
    from arcana_loop.grounding.apply import ground_answer
    from arcana_loop.grounding.resolve import resolve_grounder

    _check_listener("on_event", "one event dict", on_event)
    timeout = opts.pop("timeout", None)
    resolved = (
        resolve_grounder(grounder, **opts)
        if isinstance(grounder, str)
        else resolve_grounder(grounder)
    )
    state = result.to_dict() if isinstance(result, LoopResult) else dict(result)
    grounding = ground_answer(
        question=state["question"],
        answer=state.get("answer"),
        chunks=state.get("chunks") or [],
        tool_history=state.get("tool_history") or [],
        error=state.get("error"),
        terminated_by=state.get("terminated_by"),
        grounder=resolved,
        timeout=timeout,
        emit=on_event,
        **({} if isinstance(grounder, str) else opts),
    )
    if isinstance(result, LoopResult):
        return dataclasses.replace(result, grounding=grounding)
    return {**state, "grounding": grounding}
