"""The tool schemas the controller is offered, in OpenAI function-calling form.

Only the schema is here; what a call does is in ``tools.execute``. The ``search``
schema follows the scope: a ``collection`` parameter exists only when the
controller may pick among two or more collections, and then lists exactly those.

The default tools are also public objects (`DEFAULT_TOOLS`), so that a caller's
``tools=`` list can name them: a list holding any of them is the whole toolset,
in its order; a list of custom tools only is added to the defaults. ``answer``
and ``give_up`` are control tools the graph interprets by name and cannot be
replaced; a custom tool named ``search`` replaces the built-in search.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from arcana_loop.core.state import ANSWER as ANSWER  # the tool names are the state's vocabulary
from arcana_loop.core.state import GIVE_UP as GIVE_UP
from arcana_loop.core.state import SEARCH as SEARCH
from arcana_loop.tools import descriptions
from arcana_loop.tools.scoping import Scope

SYNTHESIS = "synthesis"
"""The history name of the fallback synthesis step (not a tool the controller can call)."""

DEFAULT_TOOL_NAMES = (SEARCH, ANSWER, GIVE_UP)
CONTROL_TOOL_NAMES = (ANSWER, GIVE_UP)
"""The tools that end a run: the graph reads their calls by name, so no custom tool may take these names."""
DEFAULT_SEARCH_LIMIT = 5
MAX_SEARCH_LIMIT = 50
"""A larger ``limit`` is searched as this one."""


def effective_limit(limit: object) -> int | None:
    """Return the number of results a search asks for, or ``None`` for a ``limit`` that is no positive integer."""
    if limit is None:
        return DEFAULT_SEARCH_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return None
    return min(limit, MAX_SEARCH_LIMIT)


ToolSchema = dict[str, Any]


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> ToolSchema:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def search_schema(scope: Scope) -> ToolSchema:
    """Return the ``search`` schema for a scope."""
    description = descriptions.SEARCH_DESCRIPTION
    properties: dict[str, Any] = {
        "query": {"type": "string", "description": descriptions.SEARCH_QUERY_DESCRIPTION},
    }
    if scope.kind == "pick":
        allowed = scope.allowed_text
        properties["collection"] = {
            "type": "string",
            "enum": list(scope.names),
            "description": descriptions.SEARCH_COLLECTION_DESCRIPTION.format(allowed=allowed),
        }
        description += descriptions.SEARCH_COLLECTIONS_PARAGRAPH.format(allowed=allowed)
    properties["limit"] = {
        "type": "integer",
        "minimum": 1,
        "default": DEFAULT_SEARCH_LIMIT,
        "description": descriptions.SEARCH_LIMIT_DESCRIPTION,
    }
    return _function(SEARCH, description, properties, ["query"])


ANSWER_SCHEMA = _function(
    ANSWER,
    descriptions.ANSWER_DESCRIPTION,
    {"text": {"type": "string", "description": descriptions.ANSWER_TEXT_DESCRIPTION}},
    ["text"],
)
GIVE_UP_SCHEMA = _function(
    GIVE_UP,
    descriptions.GIVE_UP_DESCRIPTION,
    {"reason": {"type": "string", "description": descriptions.GIVE_UP_REASON_DESCRIPTION}},
    ["reason"],
)


class BuiltinTool(BaseTool):
    """A default tool as an object a ``tools=`` list can hold; the loop itself runs its calls.

    Its schema is the loop's own (the ``search`` schema follows the run's scope), so
    the object only names the tool. Invoking it directly is an error.
    """

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"the {self.name!r} tool is run by the loop; it cannot be called on its own"
        )


def _builtin(schema: ToolSchema) -> BuiltinTool:
    function = schema["function"]
    # a copy: the schemas the controller is offered are shared and must never change
    return BuiltinTool(
        name=function["name"],
        description=function["description"],
        args_schema=copy.deepcopy(function["parameters"]),
    )


def search_schema_unscoped() -> ToolSchema:
    """Return the ``search`` schema of an unrestricted run (what the public ``search`` tool object shows)."""
    return search_schema(Scope("all"))


DEFAULT_TOOLS: tuple[BuiltinTool, ...] = (
    _builtin(search_schema_unscoped()),
    _builtin(ANSWER_SCHEMA),
    _builtin(GIVE_UP_SCHEMA),
)
"""The default tools, in the order the controller sees them: ``search``, ``answer``, ``give_up``."""


def default_tools() -> list[BaseTool]:
    """Return a new list of the default tools, to extend, filter or reorder and pass as ``tools=``."""
    return list(DEFAULT_TOOLS)


@dataclass(frozen=True)
class Toolset:
    """The tools a graph offers, resolved from a ``tools=`` argument."""

    layout: tuple[str, ...] = DEFAULT_TOOL_NAMES
    """Tool names in the order the controller sees them (before run options add ``explore``)."""
    builtins: frozenset[str] = frozenset(DEFAULT_TOOL_NAMES)
    """The default tools the loop runs itself; a name outside it is a custom tool's or unknown."""
    custom: Mapping[str, BaseTool] = field(default_factory=dict)
    custom_schemas: Mapping[str, ToolSchema] = field(default_factory=dict)


def _check_tool(tool: Any, seen: set[str]) -> None:
    if not isinstance(tool, BaseTool):
        raise TypeError(f"tools must be LangChain BaseTool instances, got {type(tool).__name__}")
    if isinstance(tool, BuiltinTool) and tool.name not in DEFAULT_TOOL_NAMES:
        raise ValueError(
            f"{tool.name!r} is not a default tool (the default tools are {DEFAULT_TOOL_NAMES})"
        )
    if not isinstance(tool, BuiltinTool) and tool.name in CONTROL_TOOL_NAMES:
        raise ValueError(
            f"a custom tool cannot be named {tool.name!r}: {CONTROL_TOOL_NAMES} are control tools the loop "
            "interprets by name (leave the default one out of tools= to not offer it)"
        )
    if tool.name in seen:
        raise ValueError(f"tool name {tool.name!r} appears twice in tools=")
    seen.add(tool.name)


def resolve_tools(tools: Sequence[BaseTool] | None) -> Toolset:
    """Resolve a ``tools=`` argument into the graph's toolset.

    ``None`` or a list of custom tools only: the defaults, then the custom tools (a
    custom ``search`` takes the built-in one's place). A list holding any default tool
    object (`DEFAULT_TOOLS`): exactly those tools, in that order.

    Raises:
        TypeError: for an item that is not a LangChain tool.
        ValueError: for a custom tool named ``answer`` or ``give_up``, or a name given twice.
    """
    listed = list(tools or [])
    seen: set[str] = set()
    for tool in listed:
        _check_tool(tool, seen)
    custom = {t.name: t for t in listed if not isinstance(t, BuiltinTool)}
    schemas = {name: convert_to_openai_tool(t) for name, t in custom.items()}
    if any(isinstance(t, BuiltinTool) for t in listed):
        layout = tuple(t.name for t in listed)
        builtins = frozenset(t.name for t in listed if isinstance(t, BuiltinTool))
        return Toolset(layout, builtins, custom, schemas)
    appended = tuple(name for name in custom if name != SEARCH)
    builtins = frozenset(n for n in DEFAULT_TOOL_NAMES if n not in custom)
    return Toolset((*DEFAULT_TOOL_NAMES, *appended), builtins, custom, schemas)


def custom_tool_schemas(tools: Sequence[BaseTool]) -> tuple[ToolSchema, ...]:
    """Return the schemas of custom tools, checked as `resolve_tools` checks them."""
    return tuple(resolve_tools(tools).custom_schemas.values())


@lru_cache(maxsize=256)
def _default_tools(scope: Scope) -> tuple[ToolSchema, ...]:
    return (search_schema(scope), ANSWER_SCHEMA, GIVE_UP_SCHEMA)


@lru_cache(maxsize=256)
def builtin_schemas(scope: Scope) -> Mapping[str, ToolSchema]:
    """Return the default tools' schemas for a scope, by name (cached and shared: do not mutate)."""
    return dict(zip(DEFAULT_TOOL_NAMES, _default_tools(scope), strict=True))


def offered_parameters(name: str, scope: Scope) -> frozenset[str]:
    """Return the argument names a default tool's schema offers in a scope (``search`` has ``collection`` only to pick)."""
    return frozenset(builtin_schemas(scope)[name]["function"]["parameters"]["properties"])


def controller_tools(
    scope: Scope, custom: Sequence[ToolSchema] = (), toolset: Toolset | None = None
) -> list[ToolSchema]:
    """Return every schema the controller is offered: the toolset's, in its order, then ``custom`` ones.

    The default schemas are cached per scope and shared: callers must not mutate them.
    """
    if toolset is None:
        return [*_default_tools(scope), *custom]
    defaults = builtin_schemas(scope)
    return [
        toolset.custom_schemas[n] if n in toolset.custom_schemas else defaults[n]
        for n in toolset.layout
    ] + list(custom)


def tool_name(schema: ToolSchema) -> str:
    """Return the name in a schema."""
    return str(schema["function"]["name"])
