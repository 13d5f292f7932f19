"""Run options: the JSON-able knobs of one run, each declared once as a `LoopContext` field.

A field is the option's one declaration: its name and type, and in `option(...)` its
default, help text and bounds or choices. From it follow the environment variable
(``ARCANA_LOOP_<FIELD>``, for example ``ARCANA_LOOP_MAX_ITERATIONS=6``), its reading and
checking (`arcana_loop.settings.Setting`, as the knowledge base's settings), the validation of
a value however it came, the CLI flags (`cli.flags`) and the README's options table (a test
keeps it in step).

Every field can be set per run (``run(...)`` keyword arguments, or the ``context`` of a
LangGraph server run). A field not given falls back to its environment variable, then to
its default: explicit > environment > default. "Not given" is a field left out of the
constructor (its default factory runs), never a value equal to the default. The
environment is read when a context is created, never inside a node.
"""

from __future__ import annotations

import copy
from dataclasses import Field, dataclass, field, fields
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from arcana_loop.settings import ENV_PREFIX, MODEL_SPEC, MODEL_SPEC_SHAPE, Setting

Options = TypeVar("Options", bound=type[Any])

OPERATOR_ONLY = ("system_prompt", "answer_prompt", "synthesis_prompt")
"""Options whose environment value is the operator's, never shown to a client.

A run records its options in the thread's state, which any client of a server can
read; a prompt that came from the server's environment is recorded only by name,
under `OPERATOR_SET`, and a replay takes it from the environment again. A prompt a
caller passed is the caller's own and is recorded as given."""
OPERATOR_SET = "set_by_operator"

RequireSearch = Literal["off", "on", "auto"]
"""The values of ``require_search``: its field's type is its one list of choices."""


class _FromEnvironment:
    """A field's default factory: its environment value, else its default (`declare` binds it)."""

    setting: Setting

    def __init__(self, default: Any, help: str, bounds: dict[str, Any]) -> None:
        self.default, self.help, self.bounds = default, help, bounds

    def __call__(self) -> Any:
        return self.setting.read()


def option(default: Any, help: str, **bounds: Any) -> Any:
    """Declare a `LoopContext` field: its default, its help, and `Setting` bounds or choices.

    The name and the type are the field's own; `declare` makes the `Setting` from them.
    """
    return field(
        default_factory=_FromEnvironment(default, help, bounds), metadata={"description": help}
    )


def _kind(hint: Any) -> tuple[type, tuple[str, ...]]:
    """The value type of a field's annotation (``None`` aside), and a ``Literal``'s choices."""
    if get_origin(hint) in (Union, UnionType):
        (hint,) = (arg for arg in get_args(hint) if arg is not type(None))
    if get_origin(hint) is Literal:
        return str, tuple(get_args(hint))
    return get_origin(hint) or hint, ()


def declare(cls: Options) -> Options:
    """Bind each field of an options dataclass to its `Setting`, made from the field's declaration."""
    hints = get_type_hints(cls)
    for f in fields(cls):
        factory = f.default_factory
        assert isinstance(factory, _FromEnvironment), f"{f.name} is not declared with option()"
        kind, choices = _kind(hints[f.name])
        factory.setting = Setting(
            env=ENV_PREFIX + f.name.upper(),
            kind=kind,
            default=factory.default,
            help=factory.help,
            choices=choices,
            **factory.bounds,
        )
    return cls


@declare
@dataclass(kw_only=True)
class LoopContext:
    """Options of one loop run. Every field has a default; see the module docstring for precedence."""

    controller_model: Annotated[str | None, {"__template_metadata__": {"kind": "llm"}}] = option(
        None,
        "Model of the controller that picks a tool each turn, as 'provider:model' (e.g. 'openai:gpt-4o-mini') or 'offline'.",
        pattern=MODEL_SPEC,
        shape=MODEL_SPEC_SHAPE,
    )
    answer_model: Annotated[str | None, {"__template_metadata__": {"kind": "llm"}}] = option(
        None,
        "Optional stronger model that rewrites the final answer and writes the fallback synthesis.",
        pattern=MODEL_SPEC,
        shape=MODEL_SPEC_SHAPE,
    )
    max_iterations: int = option(
        10, "Most controller turns before the run stops (then synthesis runs).", minimum=0
    )
    chunk_cap: int = option(
        30, "Most chunks kept across searches; the lowest scores are evicted.", minimum=0
    )
    system_prompt: str | None = option(
        None,
        "Replaces the default system prompt, used as given (pass a function to run() to build it from the options).",
    )
    answer_prompt: str | None = option(None, "Replaces the instruction sent to the answer model.")
    synthesis_prompt: str | None = option(
        None, "Replaces the instruction of the fallback synthesis call."
    )
    fallback_synthesis: bool = option(
        True, "Write an answer from the gathered chunks when max_iterations is hit."
    )
    temperature: float | None = option(
        None, "Temperature of every model call, unless a role's own is set.", minimum=0
    )
    controller_temperature: float | None = option(
        None, "Temperature of the controller's calls.", minimum=0
    )
    answer_temperature: float | None = option(
        None, "Temperature of the answer model's rewrite.", minimum=0
    )
    fallback_temperature: float | None = option(
        None, "Temperature of the fallback synthesis call.", minimum=0
    )
    grounder: str | None = option(
        None, "Grounder that scores the answer: 'local' (offline heuristic) or 'llm_judge'."
    )
    judge_model: Annotated[str | None, {"__template_metadata__": {"kind": "llm"}}] = option(
        None,
        "Model of the 'llm_judge' grounder (defaults to the answer model, then the controller).",
        pattern=MODEL_SPEC,
        shape=MODEL_SPEC_SHAPE,
    )
    search_opts: dict[str, Any] = option(
        {}, "Extra keyword options for every search call (e.g. mode, threshold)."
    )
    max_tool_calls_per_turn: int = option(
        16, "Tool calls of one turn past this many are answered as skipped, not run.", minimum=1
    )
    max_parallel_searches: int = option(
        4,
        "Searches of one turn that run at once (worker threads in run(), tasks in arun()).",
        minimum=1,
    )
    budget_ledger: bool = option(
        True,
        "Show the controller its budget status (turns, searches, chunks, tokens, time) every turn.",
    )
    max_tokens_total: int | None = option(
        None, "End the loop (with synthesis) once the models have used this many tokens.", minimum=1
    )
    max_seconds: float | None = option(
        None,
        "End the loop (with synthesis) once this many seconds have passed; grounding gets only the time left.",
        minimum=0,
    )
    ground_timeout: float = option(
        60.0,
        "Seconds the grounder may take; past them (or past max_seconds) grounding is None and error says so.",
        positive=True,
    )
    duplicate_guard: bool = option(
        True, "Answer a repeated search from the history instead of sending it again."
    )
    duplicate_similarity: float | None = option(
        None,
        "Also treat a query as repeated when its embedding's cosine similarity to an earlier one is at least this.",
        minimum=0,
        maximum=1,
    )
    show_chunks_once: bool = option(
        True, "Show a chunk's full text only in the first result that returned it."
    )
    min_support: float | None = option(
        None,
        "Send an answer whose grounding score is below this back to the controller once.",
        minimum=0,
        maximum=1,
    )
    max_repairs: int = option(
        1, "Most times an under-supported answer goes back to the controller.", minimum=0
    )
    repair_turns: int = option(2, "Extra controller turns each repair is given.", minimum=0)
    explore_tool: bool = option(
        False,
        "Offer the controller an 'explore' tool over the knowledge graph (an entity's description, neighbours and community).",
    )
    sources_footer: bool = option(
        True,
        "End the closing message with a plain-text list of the sources it cites, for clients that show "
        "text only; run() and the CLI turn it off (they have LoopResult.sources).",
    )
    require_search: RequireSearch = option(
        "auto",
        "Send an answer made before any search back once with a note to search first: 'on', 'off', or 'auto' "
        "(on unless the question is small talk: a greeting, thanks, 'who are you').",
    )

    def __post_init__(self) -> None:
        """Reject values of the wrong type or range before anything runs (server clients send any JSON)."""
        for name, setting in OPTIONS.items():
            value = getattr(self, name)
            if value is not setting.default:  # a declared default is valid (a test checks each)
                setting.check(name, value)
        if "filter" in self.search_opts:
            # the knowledge base's metadata filter: one it would refuse is refused now, before
            # the first model call, rather than by every search of the run
            from arcana_loop.knowledge.filters import check_filter

            check_filter(self.search_opts["filter"])
        check_storable("search_opts", self.search_opts)

    def as_options(self) -> dict[str, Any]:
        """Return the options as a JSON-ready dict (what a run records in its state).

        Like `dataclasses.asdict`, with nested values copied, but without its recursive
        walk over every scalar field (this runs on every run's first turn).
        """
        options = {
            name: copy.deepcopy(value)
            if isinstance(value := getattr(self, name), dict | list)
            else value
            for name in OPTIONS
        }
        operator_set = [name for name in OPERATOR_ONLY if self._operator_set(name)]
        for name in operator_set:
            del options[name]
        if operator_set:
            options[OPERATOR_SET] = operator_set
        return options

    def _operator_set(self, name: str) -> bool:
        """Whether an operator-only option holds what the server's environment set (see `OPERATOR_ONLY`)."""
        value = getattr(self, name)
        # unset: nothing to hide, and no environment read (two per run and option)
        if value is None:
            return False
        raw = OPTIONS[name].given()
        return raw is not None and value == raw

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


def _setting(f: Field[Any]) -> Setting:
    factory = f.default_factory
    assert isinstance(factory, _FromEnvironment)
    return factory.setting


OPTIONS: dict[str, Setting] = {f.name: _setting(f) for f in fields(LoopContext)}
"""Every run option's declaration, by field name, in the order of the fields."""
CONTEXT_FIELDS = frozenset(OPTIONS)


def option_setting(name: str) -> Setting:
    """The declaration of the run option `name` (its variable, type, default, help, bounds)."""
    return OPTIONS[name]


def context_defaults() -> dict[str, Any]:
    """Return each option's declared default (the environment ignored)."""
    return {name: setting.default for name, setting in OPTIONS.items()}
