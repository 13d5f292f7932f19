"""What a built-in tool is: one object that owns everything the loop knows of it.

A built-in tool (``tools/search.py``, ``tools/answer.py``, ...) is a `LoopTool`: its
name, its schema and description (what the model sees), its line in the system prompt,
how a call is checked and run, and the text and artifact of its result. The registry
(``tools/registry.py``) lists them; the prompt, the planning, the routing and the
rendering ask it, never a tool by name.

A call goes through three stages (``tools.execute``): *planned* (pure: arguments
checked, the scope resolved), *run* (the only I/O, for a step that needs it) and
*rendered* (a result whose text depends on the turn, such as a search's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from langchain_core.tools import BaseTool

from arcana_loop.core import bridge
from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import TerminatedBy, ToolEvent
from arcana_loop.core.text import scrub
from arcana_loop.knowledge.types import Chunk
from arcana_loop.tools.chunks import SearchArtifact
from arcana_loop.tools.scoping import Scope

ToolSchema = dict[str, Any]

SearchFn = Callable[..., Any]
"""``search_fn(query, collection=<scope>, limit=<n>, **search_opts) -> list of chunks`` (sync or async)."""

TOOL_ERROR = "Tool error: {reason}"


def function_schema(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> ToolSchema:
    """Return a tool schema in OpenAI function-calling form."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


@dataclass(frozen=True, slots=True)
class RunEnv:
    """What running a planned call may use: the search function and the run's search options."""

    search_fn: SearchFn
    search_opts: Mapping[str, Any]


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
    duplicate: Any = None
    """For a search not sent because it repeats an earlier one: that search (``nodes.duplicates.PastSearch``)."""
    rendered: bool = True
    """False for results whose text the tool's `LoopTool.render` writes (it depends on what was shown before)."""
    entities: dict[str, Any] | None = None
    """For a search the knowledge graph took part in: ``{"used": True, "matched_entities": n, "entity_chunks": m}``."""
    ignored_args: tuple[str, ...] = ()
    """Arguments of a built-in tool's call that its offered schema does not have: never used."""
    sent_back: bool = False
    """An ``answer`` returned to the controller because no search came before it."""
    artifact: SearchArtifact | None = None
    """For a search result: the data its text was rendered from (the tool message's ``artifact``)."""
    error: str | None = None
    """For a search that failed: why (its text is ``search error: `` and this reason)."""
    unmatched: tuple[str, ...] = ()
    """For a search: the query's words no chunk of its scope holds (`knowledge.types.SearchResults`)."""

    concurrent: ClassVar[bool] = False

    def run(self, env: RunEnv) -> CallOutcome:
        """A call settled when planned needs no run."""
        return self


@dataclass(frozen=True, slots=True)
class CustomCall:
    """A call of a LangChain tool (a caller's own, or one a built-in tool runs through), ready to run."""

    call_id: str
    args: dict[str, Any]
    tool: BaseTool

    concurrent: ClassVar[bool] = False

    def run(self, env: RunEnv) -> CallOutcome:
        """Invoke the tool; its text is the result, an exception a `TOOL_ERROR` (the tool boundary)."""
        try:
            text = _tool_text(_invoke_tool(self.tool, self.args))
        except Exception as exc:  # the tool boundary: a failing tool is a tool result
            text = TOOL_ERROR.format(reason=str(exc) or type(exc).__name__)
        text = scrub(text)  # a tool's output is stored and sent like a model reply
        return CallOutcome(self.call_id, self.tool.name, self.args, text, text)


def _invoke_tool(tool: BaseTool, args: dict[str, Any]) -> Any:
    """Invoke a tool; one made from an ``async def`` alone (no sync function) is awaited through the bridge."""
    if getattr(tool, "coroutine", None) is not None and getattr(tool, "func", None) is None:
        return bridge.wait(tool.ainvoke(args))
    return tool.invoke(args)


def _tool_text(result: Any) -> str:
    content = getattr(result, "content", result)  # a tool may return a ToolMessage
    if isinstance(content, str):
        return content
    try:
        return json.dumps(content, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(content)


@dataclass(frozen=True, slots=True)
class Turn:
    """What planning a call of this turn may read."""

    scope: Scope
    iteration: int
    search_fn: SearchFn | None = None
    """The run's own search function, or ``None`` for the default knowledge base."""


@dataclass(frozen=True, slots=True)
class Offer:
    """What decides whether an optional built-in tool is offered to a run."""

    ctx: LoopContext | None
    scope: Scope
    search_fn: SearchFn | None
    custom: frozenset[str] = frozenset()
    """The names of the run's custom tools: a custom tool of a built-in's name wins."""


@dataclass(frozen=True, slots=True)
class RenderView:
    """What rendering a turn's results may read: the history before it, the chunks the run holds."""

    history: Sequence[ToolEvent]
    iteration: int
    show_once: bool
    known: Sequence[Chunk] = ()


class Planned(Protocol):
    """A planned call: a `CallOutcome` (settled), a `CustomCall`, or a tool's own step (a dataclass)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    concurrent: ClassVar[bool]
    """Whether it may run in a thread beside the turn's other concurrent steps (searches)."""

    @property
    def call_id(self) -> str:
        """The tool call it answers."""
        ...

    def run(self, env: RunEnv) -> CallOutcome:
        """Run it: the only I/O of a call; a failure becomes the outcome's text."""
        ...


class LoopTool:
    """A built-in tool: subclass it in a module of its own and list it in ``tools/registry.py``."""

    name: ClassVar[str]
    description: ClassVar[str]
    """What the model reads about the tool: when to call it, and when not."""
    guidance: ClassVar[str | None] = None
    """The tool's line in the system prompt; ``None``: its name and the first line of its description."""
    prompt_slots: ClassVar[Mapping[str, str]] = {}
    """Slots of the default system prompt the tool fills while it is offered (``nodes.prompts.SLOT_DEFAULTS``)."""
    ends_as: ClassVar[TerminatedBy | None] = None
    """For a control tool, how a valid call ends the run; no custom tool may take its name."""
    gathers: ClassVar[bool] = True
    """Whether a call brings evidence (search-before-answer lets an answer through after one)."""
    searches: ClassVar[bool] = False
    """Whether it searches the knowledge base (the search function); counted as a search."""
    default: ClassVar[bool] = True
    """One of the default tools (``DEFAULT_TOOLS``); otherwise offered when `offered` says so."""
    streamed_argument: ClassVar[str | None] = None
    """The argument whose text is the answer, streamed as the model writes it."""

    def schema(self, scope: Scope) -> ToolSchema:
        """Return the tool's schema in a scope (what the controller is offered)."""
        properties, required = self.parameters(scope)
        return function_schema(self.name, self.description, properties, required)

    def parameters(self, scope: Scope) -> tuple[dict[str, Any], list[str]]:
        """Return the schema's properties and required names."""
        return {}, []

    def offered(self, offer: Offer) -> bool:
        """Whether an optional tool is offered to this run (the default tools follow ``tools=``)."""
        return self.default

    def plan(self, call_id: str, args: dict[str, Any], turn: Turn) -> Planned:
        """Check a call's arguments (only those its schema offers) and return its outcome or step."""
        raise NotImplementedError

    def render(self, outcomes: list[CallOutcome], view: RenderView) -> list[CallOutcome]:
        """Write the text of this tool's results that need the turn to be written; the rest as they are."""
        return outcomes

    def line(self) -> str:
        """Return the tool's line in the system prompt."""
        return (
            self.guidance
            if self.guidance is not None
            else guidance_line(self.name, self.description)
        )


MISSING_ARGUMENT = "Tool error: {name} needs a non-empty string `{argument}` argument"
"""The result of a control tool's call without its argument (the run goes on)."""


class ControlTool(LoopTool):
    """A tool that ends the run: one required, non-blank string argument, and no evidence."""

    gathers = False
    argument: ClassVar[str]
    argument_description: ClassVar[str]
    answer_template: ClassVar[str]
    """The run's answer, with the argument in the slot of its name (``{text}``)."""
    summary_template: ClassVar[str]
    """The history entry of a valid call, with the answer in ``{answer}``."""

    def parameters(self, scope: Scope) -> tuple[dict[str, Any], list[str]]:
        """The one argument, required."""
        return {self.argument: {"type": "string", "description": self.argument_description}}, [
            self.argument
        ]

    def plan(self, call_id: str, args: dict[str, Any], turn: Turn) -> CallOutcome:
        """End the run with the answer the argument gives, or say that it is missing."""
        value = args.get(self.argument)
        if not isinstance(value, str) or not value.strip():
            missing = MISSING_ARGUMENT.format(name=self.name, argument=self.argument)
            return CallOutcome(call_id, self.name, args, missing, missing)
        answer = self.answer_template.format_map({self.argument: value})
        summary = self.summary_template.format(answer=answer)
        return CallOutcome(
            call_id, self.name, args, answer, summary, terminal=self.ends_as, answer=answer
        )


CUSTOM_TOOL_GUIDANCE = "- `{name}`: {description}"
"""The system prompt's line for a tool without a line of its own: its name and the first line of its description."""


def guidance_line(name: str, description: str) -> str:
    """Return the system prompt's line for a tool from its description."""
    described = description.strip()
    first_line = described.splitlines()[0] if described else "a tool you may call"
    return CUSTOM_TOOL_GUIDANCE.format(name=name, description=first_line)
