"""Run options: the JSON-able knobs of one run, with their defaults and environment fallbacks.

Every field can be set per run (``run(...)`` keyword arguments, or the ``context``
of a LangGraph server run). A field not given falls back to an environment
variable ``ARCANA_LOOP_<FIELD>`` (for example ``ARCANA_LOOP_MAX_ITERATIONS=6``),
then to the default below: explicit > environment > default. The environment is
read when a context is created, never inside a node.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

ENV_PREFIX = "ARCANA_LOOP_"
OPERATOR_ONLY = ("system_prompt", "answer_prompt", "synthesis_prompt")
"""Options whose environment value is the operator's, never shown to a client.

A run records its options in the thread's state, which any client of a server can
read; a prompt that came from the server's environment is recorded only by name,
under `OPERATOR_SET`, and a replay takes it from the environment again. A prompt a
caller passed is the caller's own and is recorded as given."""
OPERATOR_SET = "set_by_operator"

RequireSearch = Literal["off", "on", "auto"]
REQUIRE_SEARCH_VALUES: tuple[RequireSearch, ...] = ("off", "on", "auto")


def _parse_env(name: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is dict:
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError(raw)
            return value
        return raw
    except ValueError:
        raise ValueError(
            f"environment variable {ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind.__name__}"
        ) from None


def _env(name: str, default: Any, kind: type) -> Any:
    def factory() -> Any:
        raw = os.environ.get(ENV_PREFIX + name.upper())
        if raw is None or raw == "":
            return dict(default) if isinstance(default, dict) else default
        return _parse_env(name, raw, kind)

    return factory


def _opt(name: str, default: Any, kind: type, description: str) -> Any:
    return field(
        default_factory=_env(name, default, kind),
        metadata={
            "description": description,
            "documented_default": default,
            "env": ENV_PREFIX + name.upper(),
        },
    )


@dataclass(kw_only=True)
class LoopContext:
    """Options of one loop run. Every field has a default; see the module docstring for precedence."""

    controller_model: Annotated[str | None, {"__template_metadata__": {"kind": "llm"}}] = _opt(
        "controller_model",
        None,
        str,
        "Model of the controller that picks a tool each turn, as 'provider:model' (e.g. 'openai:gpt-4o-mini') or 'offline'.",
    )
    answer_model: Annotated[str | None, {"__template_metadata__": {"kind": "llm"}}] = _opt(
        "answer_model",
        None,
        str,
        "Optional stronger model that rewrites the final answer and writes the fallback synthesis.",
    )
    max_iterations: int = _opt(
        "max_iterations",
        10,
        int,
        "Most controller turns before the run stops (then synthesis runs).",
    )
    chunk_cap: int = _opt(
        "chunk_cap", 30, int, "Most chunks kept across searches; the lowest scores are evicted."
    )
    system_prompt: str | None = _opt(
        "system_prompt",
        None,
        str,
        "Replaces the default system prompt, used as given (pass a function to run() to build it from the options).",
    )
    answer_prompt: str | None = _opt(
        "answer_prompt", None, str, "Replaces the instruction sent to the answer model."
    )
    synthesis_prompt: str | None = _opt(
        "synthesis_prompt", None, str, "Replaces the instruction of the fallback synthesis call."
    )
    fallback_synthesis: bool = _opt(
        "fallback_synthesis",
        True,
        bool,
        "Write an answer from the gathered chunks when max_iterations is hit.",
    )
    temperature: float | None = _opt(
        "temperature", None, float, "Temperature of every model call, unless a role's own is set."
    )
    controller_temperature: float | None = _opt(
        "controller_temperature", None, float, "Temperature of the controller's calls."
    )
    answer_temperature: float | None = _opt(
        "answer_temperature", None, float, "Temperature of the answer model's rewrite."
    )
    fallback_temperature: float | None = _opt(
        "fallback_temperature", None, float, "Temperature of the fallback synthesis call."
    )
    grounder: str | None = _opt(
        "grounder",
        None,
        str,
        "Grounder that scores the answer: 'local' (offline heuristic) or 'llm_judge'.",
    )
    judge_model: Annotated[str | None, {"__template_metadata__": {"kind": "llm"}}] = _opt(
        "judge_model",
        None,
        str,
        "Model of the 'llm_judge' grounder (defaults to the answer model, then the controller).",
    )
    search_opts: dict[str, Any] = _opt(
        "search_opts",
        {},
        dict,
        "Extra keyword options for every search call (e.g. mode, threshold).",
    )
    max_tool_calls_per_turn: int = _opt(
        "max_tool_calls_per_turn",
        16,
        int,
        "Tool calls of one turn past this many are answered as skipped, not run.",
    )
    max_parallel_searches: int = _opt(
        "max_parallel_searches",
        4,
        int,
        "Searches of one turn that run at once (worker threads in run(), tasks in arun()).",
    )
    budget_ledger: bool = _opt(
        "budget_ledger",
        True,
        bool,
        "Show the controller its budget status (turns, searches, chunks, tokens, time) every turn.",
    )
    max_tokens_total: int | None = _opt(
        "max_tokens_total",
        None,
        int,
        "End the loop (with synthesis) once the models have used this many tokens.",
    )
    max_seconds: float | None = _opt(
        "max_seconds",
        None,
        float,
        "End the loop (with synthesis) once this many seconds have passed; grounding gets only the time left.",
    )
    ground_timeout: float = _opt(
        "ground_timeout",
        60.0,
        float,
        "Seconds the grounder may take; past them (or past max_seconds) grounding is None and error says so.",
    )
    duplicate_guard: bool = _opt(
        "duplicate_guard",
        True,
        bool,
        "Answer a repeated search from the history instead of sending it again.",
    )
    duplicate_similarity: float | None = _opt(
        "duplicate_similarity",
        None,
        float,
        "Also treat a query as repeated when its embedding's cosine similarity to an earlier one is at least this.",
    )
    show_chunks_once: bool = _opt(
        "show_chunks_once",
        True,
        bool,
        "Show a chunk's full text only in the first result that returned it.",
    )
    min_support: float | None = _opt(
        "min_support",
        None,
        float,
        "Send an answer whose grounding score is below this back to the controller once.",
    )
    max_repairs: int = _opt(
        "max_repairs", 1, int, "Most times an under-supported answer goes back to the controller."
    )
    repair_turns: int = _opt("repair_turns", 2, int, "Extra controller turns each repair is given.")
    explore_tool: bool = _opt(
        "explore_tool",
        False,
        bool,
        "Offer the controller an 'explore' tool over the knowledge graph (an entity's description, neighbours and community).",
    )
    sources_footer: bool = _opt(
        "sources_footer",
        True,
        bool,
        "End the closing message with a plain-text list of the sources it cites, for clients that show "
        "text only; run() and the CLI turn it off (they have LoopResult.sources).",
    )
    require_search: RequireSearch = _opt(
        "require_search",
        "auto",
        str,
        "Send an answer made before any search back once with a note to search first: 'on', 'off', or 'auto' "
        "(on unless the question is small talk: a greeting, thanks, 'who are you').",
    )

    def __post_init__(self) -> None:  # noqa: C901  # a flat list of checks, one per option group
        """Reject values of the wrong type or range before anything runs."""
        for name in ("max_iterations", "chunk_cap", "max_repairs", "repair_turns"):
            _check_int(name, getattr(self, name), minimum=0)
        if self.max_tokens_total is not None:
            _check_int("max_tokens_total", self.max_tokens_total, minimum=1)
        for name in ("max_seconds", "duplicate_similarity", "min_support"):
            _check_number(name, getattr(self, name))
        ground_timeout: Any = (
            self.ground_timeout
        )  # typed as a float, but server clients send any JSON
        _check_number("ground_timeout", ground_timeout)
        if ground_timeout is None or ground_timeout == 0:
            raise ValueError(
                f"ground_timeout must be a number of seconds > 0, got {ground_timeout!r}"
            )
        for name in ("duplicate_similarity", "min_support"):
            value = getattr(self, name)
            if value is not None and value > 1:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        for name in ("max_tool_calls_per_turn", "max_parallel_searches"):
            _check_int(name, getattr(self, name), minimum=1)
        for name in (
            "temperature",
            "controller_temperature",
            "answer_temperature",
            "fallback_temperature",
        ):
            _check_number(name, getattr(self, name))
        for name in (
            "controller_model",
            "answer_model",
            "system_prompt",
            "answer_prompt",
            "synthesis_prompt",
            "grounder",
            "judge_model",
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string or None, got {type(value).__name__}")
        for name in (
            "fallback_synthesis",
            "budget_ledger",
            "duplicate_guard",
            "show_chunks_once",
            "explore_tool",
            "sources_footer",
        ):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        require_search: Any = (
            self.require_search
        )  # typed as a Literal, but server clients send any JSON
        if require_search not in REQUIRE_SEARCH_VALUES:
            raise ValueError(
                f"require_search must be one of {', '.join(REQUIRE_SEARCH_VALUES)}, got {require_search!r}"
            )
        search_opts: Any = self.search_opts  # typed as a dict, but server clients send any JSON
        if not isinstance(search_opts, dict) or not all(isinstance(k, str) for k in search_opts):
            raise TypeError("search_opts must be a dict with string keys")
        if "filter" in search_opts:
            # the knowledge base's metadata filter: one it would refuse is refused now, before
            # the first model call, rather than by every search of the run
            from arcana_loop.knowledge.filters import check_filter

            check_filter(search_opts["filter"])
        check_storable("search_opts", search_opts)

    def as_options(self) -> dict[str, Any]:
        """Return the options as a JSON-ready dict (what a run records in its state).

        Like `dataclasses.asdict`, with nested values copied, but without its recursive
        walk over every scalar field (this runs on every run's first turn).
        """
        options = {
            f.name: copy.deepcopy(value)
            if isinstance(value := getattr(self, f.name), dict | list)
            else value
            for f in fields(self)
            if not self._operator_set(f.name)
        }
        operator_set = [name for name in OPERATOR_ONLY if self._operator_set(name)]
        if operator_set:
            options[OPERATOR_SET] = operator_set
        return options

    def _operator_set(self, name: str) -> bool:
        """Whether an operator-only option holds what the server's environment set (see `OPERATOR_ONLY`)."""
        if name not in OPERATOR_ONLY:
            return False
        raw = os.environ.get(ENV_PREFIX + name.upper())
        return bool(raw) and getattr(self, name) == raw

    def role_temperature(self, role: str) -> float | None:
        """Return the temperature for ``controller``, ``answer`` or ``fallback``: the role's own, else the shared one."""
        own = getattr(self, f"{role}_temperature")
        return own if own is not None else self.temperature


MAX_OPTION_DEPTH = 100
"""Deepest nesting of lists and dicts in an option (copied and checkpointed recursively, a
deeper one failed as a recursion error)."""
MAX_STORED_INT = 2**63 - 1
"""The largest integer a checkpoint holds (msgpack's 64 bits): a larger one in a run's options
or messages failed the run when its state was stored."""


def check_storable(name: str, value: Any) -> None:
    """Raise `ValueError` for JSON-like data a checkpoint cannot store.

    That is data nested deeper than `MAX_OPTION_DEPTH`, or holding an integer beyond
    64 bits; it is walked without recursion, so any depth is measured safely.
    """
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, int) and not -MAX_STORED_INT - 1 <= node <= MAX_STORED_INT:
            raise ValueError(
                f"{name} holds an integer beyond 64 bits, which a checkpoint cannot store"
            )
        if not isinstance(node, dict | list | tuple):
            continue
        if depth > MAX_OPTION_DEPTH:
            raise ValueError(f"{name} is nested more than {MAX_OPTION_DEPTH} levels deep")
        stack.extend(
            (child, depth + 1) for child in (node.values() if isinstance(node, dict) else node)
        )


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}: {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _check_number(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__}: {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")


CONTEXT_FIELDS = frozenset(f.name for f in fields(LoopContext))


def context_defaults() -> dict[str, Any]:
    """Return each option's documented default (the environment ignored)."""
    return {f.name: f.metadata["documented_default"] for f in fields(LoopContext)}
