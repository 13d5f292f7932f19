"""Tool execution: what each tool call of a controller turn does.

The error policy lives here. Nothing a controller sends crashes the run: a bad
call becomes a tool result that says what was wrong, and the loop goes on. Calls
are first *planned* (pure: arguments checked, scope resolved, terminating call
found), then the searches and custom tools are *run* (the only I/O, sync or async),
then the outcomes are *folded* into one state update by the ``tools`` node.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.tools import BaseTool

from arcana_loop.core import bridge
from arcana_loop.core.context import MAX_STORED_INT
from arcana_loop.core.sources import relative_sources
from arcana_loop.core.state import TerminatedBy
from arcana_loop.core.text import describe_error, scrub
from arcana_loop.knowledge.types import Chunk
from arcana_loop.tools import schemas, tracing
from arcana_loop.tools.chunks import (
    NO_RESULTS,
    SHOWN_PER_SEARCH,
    SearchArtifact,
    render_id,
    render_search_result,
    to_chunks,
)
from arcana_loop.tools.duplicates import PastSearch, find_duplicate, scope_key, search_key
from arcana_loop.tools.scoping import Scope, ScopeError

MAX_SEARCH_LIMIT = schemas.MAX_SEARCH_LIMIT
MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of a tool call's arguments the loop keeps (a checkpoint cannot store ~250 levels)."""
MAX_ARGUMENT_CHARS = 100_000
"""Most characters (string lengths plus one per value) in a tool call's arguments the loop keeps."""
KEPT_ARGUMENT_CHARS = 2_000
"""How much of refused arguments, as JSON text, the message and the tool history keep."""

SEARCH_ERROR = "search error: {reason}"
MISSING_QUERY = "missing :query argument"
TOOL_ERROR = "Tool error: {reason}"
UNKNOWN_TOOL = "Unknown tool: {name}"
INVALID_ARGUMENTS = "Tool error: the arguments of {name} are not valid JSON ({reason})"
REFUSED_ARGUMENTS = (
    "Tool error: the call to {name} was not run: {reason}. Send smaller, flatter arguments."
)
REFUSED_MARK = "arguments refused: "
"""How the controller marks, in an invalid call's ``error``, a call whose arguments it would not keep."""
MISSING_ANSWER_TEXT = "Tool error: answer needs a non-empty string `text` argument"
MISSING_GIVE_UP_REASON = "Tool error: give_up needs a non-empty string `reason` argument"
SKIPPED_AFTER_END = "Skipped: the run ended at an earlier tool call in this turn."
SKIPPED_TOO_MANY = "Skipped: more than {limit} tool calls in one turn."
SEARCH_FIRST = (
    "Not answered yet: you have not searched the knowledge base. Search it first and answer from what "
    "it returns; answer without searching only if the question needs nothing from the knowledge base."
)
"""The tool result of an ``answer`` sent back because no search came before it (see ``require_search``)."""
GIVE_UP_ANSWER = "Could not answer: {reason}"
ANSWERED_SUMMARY = "Answered."
GAVE_UP_SUMMARY = "Gave up: {answer}"

SearchFn = Callable[..., Any]
"""``search_fn(query, collection=<scope>, limit=<n>, **search_opts) -> list of chunks`` (sync or async)."""


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What one tool call did: its tool message, its history entry, what it found."""

    call_id: str
    name: str
    args: dict[str, Any]
    content: str
    summary: str
    returned_chunk_ids: list[str] = field(default_factory=list)
    found: list[Chunk] = field(default_factory=list)
    terminal: TerminatedBy | None = None
    answer: str | None = None
    recorded: bool = True
    """False for calls that were skipped: they get a tool message but no history entry."""
    duplicate: PastSearch | None = None
    """For a search not sent because it repeats this earlier one."""
    rendered: bool = True
    """False for search results whose text `render_turn` writes (it depends on what was shown before)."""
    entities: dict[str, Any] | None = None
    """For a search the knowledge graph took part in: ``{"used": True, "matched_entities": n, "entity_chunks": m}``."""
    ignored_args: tuple[str, ...] = ()
    """Arguments of a default tool's call that its offered schema does not have: never used."""
    sent_back: bool = False
    """An ``answer`` returned to the controller because no search came before it."""
    artifact: SearchArtifact | None = None
    """For a search result: the data its text was rendered from (the tool message's ``artifact``)."""
    error: str | None = None
    """For a search that failed: why (its text is `SEARCH_ERROR` with this reason)."""


@dataclass(frozen=True, slots=True)
class SearchCall:
    """A search ready to run."""

    call_id: str
    args: dict[str, Any]
    query: str
    collection: str | list[str] | None
    limit: int
    ignored_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CustomCall:
    """A custom tool call ready to run."""

    call_id: str
    args: dict[str, Any]
    tool: BaseTool


Planned = CallOutcome | SearchCall | CustomCall


def _search_error(call_id: str, args: dict[str, Any], reason: str) -> CallOutcome:
    text = SEARCH_ERROR.format(reason=reason)
    return CallOutcome(call_id, schemas.SEARCH, args, text, text, error=reason)


@dataclass(frozen=True, slots=True)
class DuplicateGuard:
    """What the duplicate-search guard compares a new search with."""

    past: list[PastSearch]
    similarity: float | None = None


def _plan_search(
    call_id: str, args: dict[str, Any], scope: Scope, guard: DuplicateGuard | None, iteration: int
) -> CallOutcome | SearchCall:
    """Plan a search from the arguments its offered schema has (the caller drops the others)."""
    query = args.get("query")
    if query is None:
        return _search_error(call_id, args, MISSING_QUERY)
    if not isinstance(query, str) or not query.strip():
        return _search_error(call_id, args, "query must be a non-blank string")
    limit = schemas.effective_limit(args.get("limit"))
    if limit is None:
        return _search_error(
            call_id, args, f"limit must be a positive integer, got {args.get('limit')!r}"
        )
    try:
        collection = scope.resolve(args.get("collection"))
    except ScopeError as exc:
        return _search_error(call_id, args, str(exc))
    if collection == []:
        # Match-nothing is decided here, not left to the search function, which could
        # mistake an empty list for "no filter".
        return CallOutcome(call_id, schemas.SEARCH, args, NO_RESULTS, NO_RESULTS)
    if guard is not None:
        key = scope_key(collection)
        earlier = find_duplicate(query, key, guard.past, similarity=guard.similarity, limit=limit)
        if earlier is not None:
            return CallOutcome(
                call_id, schemas.SEARCH, args, "", "", duplicate=earlier, rendered=False
            )
        guard.past.append(
            PastSearch(query, search_key(query), key, iteration, call_id, limit=limit)
        )
    return SearchCall(call_id, args, query, collection, limit)


def _offered_only(
    name: str, args: dict[str, Any], scope: Scope
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Split a default tool's arguments into those its schema offers and the names of the others.

    A model may send an argument the schema does not have (a ``collection`` in an
    unrestricted or locked run); it is never used, so the schema alone says what a call can do.
    """
    offered = schemas.offered_parameters(name, scope)
    ignored = tuple(sorted(k for k in args if k not in offered))
    if not ignored:
        return args, ()
    return {k: v for k, v in args.items() if k in offered}, ignored


def _plan_builtin(
    call_id: str,
    name: str,
    args: dict[str, Any],
    scope: Scope,
    guard: DuplicateGuard | None,
    iteration: int,
) -> Planned:
    """Plan a call of a default tool on its offered arguments, recording the ignored ones."""
    used, ignored = _offered_only(name, args, scope)
    step = (
        _plan_search(call_id, used, scope, guard, iteration)
        if name == schemas.SEARCH
        else _plan_terminal(call_id, name, used)
    )
    # the history keeps the arguments as sent; what was ignored is listed beside them
    return replace(step, args=args, ignored_args=ignored) if ignored else step


def _plan_terminal(call_id: str, name: str, args: dict[str, Any]) -> CallOutcome:
    key, missing = (
        ("text", MISSING_ANSWER_TEXT)
        if name == schemas.ANSWER
        else ("reason", MISSING_GIVE_UP_REASON)
    )
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        return CallOutcome(call_id, name, args, missing, missing)
    if name == schemas.ANSWER:
        return CallOutcome(
            call_id, name, args, value, ANSWERED_SUMMARY, terminal="answered", answer=value
        )
    answer = GIVE_UP_ANSWER.format(reason=value)
    return CallOutcome(
        call_id,
        name,
        args,
        answer,
        GAVE_UP_SUMMARY.format(answer=answer),
        terminal="gave_up",
        answer=answer,
    )


def plan_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    invalid_calls: Sequence[Mapping[str, Any]],
    *,
    scope: Scope,
    custom_tools: Mapping[str, BaseTool],
    max_calls: int,
    iteration: int = 0,
    guard: DuplicateGuard | None = None,
    builtins: frozenset[str] = frozenset(schemas.DEFAULT_TOOL_NAMES),
    search_first: bool = False,
) -> list[Planned]:
    """Plan a turn's tool calls in order, stopping execution at the first terminating call.

    Every call gets an entry (so every call gets a tool message); calls after a
    terminating one, and calls beyond ``max_calls``, are planned as skipped. With a
    ``guard``, a search that repeats an earlier one is planned as a duplicate. A
    custom tool (``search`` included) runs as such; a default tool runs only when it
    is among ``builtins``, the ones offered. With ``search_first``, the first
    ``answer`` not preceded by a search in this turn is sent back (`SEARCH_FIRST`).
    """
    planned: list[Planned] = []
    ended = False
    for index, call in enumerate(tool_calls):
        call_id, name = str(call["id"]), str(call["name"])
        args = dict(call.get("args") or {})
        if ended or index >= max_calls:
            content = SKIPPED_AFTER_END if ended else SKIPPED_TOO_MANY.format(limit=max_calls)
            planned.append(CallOutcome(call_id, name, args, content, content, recorded=False))
            continue
        step: Planned
        if name == schemas.SEARCH:
            search_first = False  # any search, a custom one included, lets a later answer through
        if name in custom_tools:
            step = CustomCall(call_id, args, custom_tools[name])
        elif name == schemas.ANSWER and search_first and name in builtins:
            step = CallOutcome(call_id, name, args, SEARCH_FIRST, SEARCH_FIRST, sent_back=True)
            search_first = False  # sent back once; an answer the model insists on is taken
        elif name in builtins:
            step = _plan_builtin(call_id, name, args, scope, guard, iteration)
            ended = isinstance(step, CallOutcome) and step.terminal is not None
        else:
            text = UNKNOWN_TOOL.format(name=name)
            step = CallOutcome(call_id, name, args, text, text)
        planned.append(step)
    for call in invalid_calls:
        name = str(call.get("name") or "unknown")
        error = str(call.get("error") or "unparseable")
        if error.startswith(REFUSED_MARK):
            text = REFUSED_ARGUMENTS.format(name=name, reason=error.removeprefix(REFUSED_MARK))
        else:
            text = INVALID_ARGUMENTS.format(name=name, reason=error)
        raw = call.get("args")
        planned.append(
            CallOutcome(
                str(call["id"]), name, {"raw_arguments": raw}, text, text, recorded=not ended
            )
        )
    return planned


def oversized_arguments(args: Any) -> str | None:
    """Return why a tool call's arguments cannot be kept (too deep, too large, an integer past 64 bits), or ``None``.

    Walks the arguments without recursion, so any depth is measured safely, and stops
    as soon as a bound is crossed.
    """
    pending: list[tuple[Any, int]] = [(args, 1)]
    size = 0
    while pending:
        value, depth = pending.pop()
        size += len(value) if isinstance(value, str) else 1
        if size > MAX_ARGUMENT_CHARS:
            return f"the arguments are larger than {MAX_ARGUMENT_CHARS:,} characters"
        if isinstance(value, int) and not -MAX_STORED_INT - 1 <= value <= MAX_STORED_INT:
            # kept in the reply, it would fail the run when the state is checkpointed
            return "the arguments hold an integer beyond 64 bits"
        if isinstance(value, dict | list | tuple):
            if depth > MAX_ARGUMENT_DEPTH:
                return f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)
    return None


def kept_arguments(args: Any) -> str:
    """Return refused arguments as bounded JSON text, what the message and the history keep of them."""
    try:
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
    except (RecursionError, TypeError, ValueError):
        text = f"<{type(args).__name__} that cannot be shown>"
    if len(text) > KEPT_ARGUMENT_CHARS:
        text = (
            text[:KEPT_ARGUMENT_CHARS]
            + f"... [{len(text) - KEPT_ARGUMENT_CHARS:,} more characters]"
        )
    return scrub(text)  # parts nested too deep for the reply's scrubbing may hold lone surrogates


def _search_outcome(call: SearchCall, results: Any) -> CallOutcome:
    if not isinstance(results, list | tuple):
        return _failed_search(
            call, f"the search returned {type(results).__name__}, not a list of chunks"
        )
    # bounded: a search may return far more than it was asked for; no machine path is kept
    found = relative_sources(to_chunks(results, call.limit))
    ids = [c["id"] for c in found]
    return CallOutcome(
        call.call_id,
        schemas.SEARCH,
        call.args,
        "",
        "",
        ids,
        found,
        rendered=False,
        entities=entity_usage(found),
        ignored_args=call.ignored_args,
    )


def _failed_search(call: SearchCall, reason: str) -> CallOutcome:
    return replace(_search_error(call.call_id, call.args, reason), ignored_args=call.ignored_args)


def entity_usage(found: Sequence[Chunk]) -> dict[str, Any] | None:
    """Read from the chunks' metadata whether the knowledge graph took part in a search."""
    marks = [
        c["metadata"]
        for c in found
        if isinstance(c.get("metadata", {}).get("matched_entities"), int)
    ]
    if not marks:
        return None
    return {
        "used": True,
        "matched_entities": marks[0]["matched_entities"],
        "entity_chunks": sum(1 for m in marks if m.get("entity_enhanced") is True),
    }


def _tool_text(result: Any) -> str:
    content = getattr(result, "content", result)  # a tool may return a ToolMessage
    if isinstance(content, str):
        return content
    try:
        return json.dumps(content, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(content)


def _custom_outcome(
    call: CustomCall, result: Any = None, error: BaseException | None = None
) -> CallOutcome:
    text = (
        TOOL_ERROR.format(reason=str(error) or type(error).__name__)
        if error
        else _tool_text(result)
    )
    text = scrub(text)  # a tool's output is stored and sent like a model reply
    return CallOutcome(call.call_id, call.tool.name, call.args, text, text)


def run_planned(step: Planned, search_fn: SearchFn, search_opts: Mapping[str, Any]) -> CallOutcome:
    """Run one planned call: a search (sync or async function) or a custom tool; failures become tool results."""
    if isinstance(step, CallOutcome):
        return step
    if isinstance(step, SearchCall):
        traced = tracing.start_search(step.query, step.collection, step.limit)
        try:
            results = bridge.call(
                search_fn, step.query, collection=step.collection, limit=step.limit, **search_opts
            )
        except Exception as exc:  # the tool boundary: a failing search is a tool result
            tracing.search_failed(traced, exc)
            return _failed_search(step, describe_error(exc))
        outcome = _search_outcome(step, results)
        tracing.end_search(
            traced,
            outcome.found,
            None if outcome.found or outcome.error is None else outcome.summary,
        )
        return outcome
    try:
        return _custom_outcome(step, _invoke_tool(step.tool, step.args))
    except Exception as exc:  # the tool boundary: a failing custom tool is a tool result
        return _custom_outcome(step, error=exc)


def _invoke_tool(tool: BaseTool, args: dict[str, Any]) -> Any:
    """Invoke a custom tool; one made from an ``async def`` alone (no sync function) is awaited through the bridge."""
    if getattr(tool, "coroutine", None) is not None and getattr(tool, "func", None) is None:
        return bridge.wait(tool.ainvoke(args))
    return tool.invoke(args)


DUPLICATE_SEARCH = (
    "Not searched again: you already searched {query!r} at iteration {iteration}, and it returned {ids}. "
    "Rephrase the query to look for something new, or answer with what you have."
)


def shown_chunks(history: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Return, per chunk id, the iteration of the search result that showed its full text."""
    shown: dict[str, int] = {}
    for entry in history:
        if entry["tool"] == schemas.SEARCH and "duplicate_of" not in entry:
            for chunk_id in entry["returned_chunk_ids"][:SHOWN_PER_SEARCH]:
                shown.setdefault(chunk_id, entry["iteration"])
    return shown


def render_turn(
    outcomes: Sequence[CallOutcome],
    history: Sequence[Mapping[str, Any]],
    iteration: int,
    *,
    show_once: bool,
    known: Sequence[Mapping[str, Any]] = (),
) -> list[CallOutcome]:
    """Write the text of the turn's search results, in call order.

    With ``show_once``, a chunk whose full text an earlier result already showed
    appears by id with a pointer to that result, so the conversation does not grow
    with repeats; unless ``known`` (the chunks the run holds) or an earlier result of
    this turn has a different text under that id: a search function that reuses an id
    for new text gets the new text shown. A duplicate search gets the ids its earlier
    twin returned.
    """
    shown = shown_chunks(history) if show_once else {}
    texts = {c["id"]: c["text"] for c in known}
    by_call = {o.call_id: o for o in outcomes}
    rendered = []
    for outcome in outcomes:
        if outcome.rendered:
            rendered.append(outcome)
            continue
        artifact = None
        if outcome.duplicate is not None:
            earlier = outcome.duplicate
            ids = list(earlier.returned_chunk_ids)
            if earlier.call_id is not None and earlier.call_id in by_call:
                ids = by_call[earlier.call_id].returned_chunk_ids
            text = DUPLICATE_SEARCH.format(
                query=earlier.query,
                iteration=earlier.iteration,
                ids=", ".join(map(render_id, ids)) or "no chunks",
            )
        else:
            # an id shown before with another text points nowhere useful: show this text in full
            changed = {c["id"] for c in outcome.found if texts.get(c["id"], c["text"]) != c["text"]}
            pointers = {k: v for k, v in shown.items() if k not in changed} if changed else shown
            text, artifact = render_search_result(outcome.found, pointers if show_once else None)
            for chunk in outcome.found[:SHOWN_PER_SEARCH]:
                shown[chunk["id"]] = (
                    iteration if chunk["id"] in changed else shown.get(chunk["id"], iteration)
                )
                texts[chunk["id"]] = chunk["text"]
        rendered.append(
            replace(outcome, content=text, summary=text, rendered=True, artifact=artifact)
        )
    return rendered
