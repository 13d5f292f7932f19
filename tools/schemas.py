"""The toolset: which tools a run offers the controller, and their schemas (OpenAI function-calling form).

Each built-in tool owns its schema (``tools/registry.py`` lists them); a caller's own
tools come with theirs. The default tools are also public objects (`DEFAULT_TOOLS`), so
that a caller's ``tools=`` list can name them: a list holding any of them is the whole
toolset, in its order; a list of custom tools only is added to the defaults. The
control tools (``answer``, ``give_up``) are read by the loop and cannot be replaced; a
custom tool of another built-in's name (``search``) replaces it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from arcana_loop.tools import registry
from arcana_loop.tools.base import LoopTool, ToolSchema
from arcana_loop.tools.scoping import Scope


class BuiltinTool(BaseTool):
    """A default tool as an object a ``tools=`` list can hold; the loop itself runs its calls.

    Its schema is the loop's own (the ``search`` schema follows the run's scope), so
    the object only names the tool. Invoking it directly is an error.
    """

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"the {self.name!r} tool is run by the loop; it cannot be called on its own"
        )


def _builtin(tool: LoopTool) -> BuiltinTool:
    function = tool.schema(Scope("all"))["function"]  # an unrestricted run's schema
    return BuiltinTool(
        name=function["name"],
        description=function["description"],
        args_schema=copy.deepcopy(function["parameters"]),
    )


DEFAULT_TOOLS: tuple[BuiltinTool, ...] = tuple(_builtin(t) for t in registry.TOOLS if t.default)
"""The default tools, in the order the controller sees them: ``search``, ``answer``, ``give_up``."""


def default_tools() -> list[BaseTool]:
    """Return a new list of the default tools, to extend, filter or reorder and pass as ``tools=``."""
    return list(DEFAULT_TOOLS)


@dataclass(frozen=True)
class Toolset:
    """The tools a graph offers, resolved from a ``tools=`` argument."""

    layout: tuple[str, ...] = field(default_factory=registry.default_names)
    """Tool names in the order the controller sees them (before run options add optional built-ins)."""
    builtins: frozenset[str] = field(default_factory=lambda: frozenset(registry.default_names()))
    """The built-in tools the loop runs itself; a name outside it is a custom tool's or unknown."""
    custom: Mapping[str, BaseTool] = field(default_factory=dict)
    custom_schemas: Mapping[str, ToolSchema] = field(default_factory=dict)


def _check_tool(tool: Any, seen: set[str]) -> None:
    if not isinstance(tool, BaseTool):
        raise TypeError(f"tools must be LangChain BaseTool instances, got {type(tool).__name__}")
    defaults = registry.default_names()
    if isinstance(tool, BuiltinTool) and tool.name not in defaults:
        raise ValueError(f"{tool.name!r} is not a default tool (the default tools are {defaults})")
    control = registry.control_names()
    if not isinstance(tool, BuiltinTool) and tool.name in control:
        raise ValueError(
            f"a custom tool cannot be named {tool.name!r}: {control} are control tools the loop "
            "interprets by name (leave the default one out of tools= to not offer it)"
        )
    if tool.name in seen:
        raise ValueError(f"tool name {tool.name!r} appears twice in tools=")
    seen.add(tool.name)


def resolve_tools(tools: Sequence[BaseTool] | None) -> Toolset:
    """Resolve a ``tools=`` argument into the graph's toolset.

    ``None`` or a list of custom tools only: the defaults, then the custom tools (a
    custom tool of a default tool's name takes its place). A list holding any default
    tool object (`DEFAULT_TOOLS`): exactly those tools, in that order.

    Raises:
        TypeError: for an item that is not a LangChain tool.
        ValueError: for a custom tool named like a control tool, or a name given twice.
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
    defaults = registry.default_names()
    appended = tuple(name for name in custom if name not in defaults)
    builtins = frozenset(n for n in defaults if n not in custom)
    return Toolset((*defaults, *appended), builtins, custom, schemas)


@lru_cache(maxsize=256)
def builtin_schema(tool: LoopTool, scope: Scope) -> ToolSchema:
    """Return a built-in tool's schema in a scope (cached and shared: do not mutate)."""
    return tool.schema(scope)


def offered_parameters(tool: LoopTool, scope: Scope) -> frozenset[str]:
    """Return the argument names a built-in tool's schema offers in a scope (``search`` has ``collection`` only to pick)."""
    return frozenset(builtin_schema(tool, scope)["function"]["parameters"]["properties"])


def controller_tools(scope: Scope, toolset: Toolset, names: Sequence[str]) -> list[ToolSchema]:
    """Return the schemas of the tools offered, by name in order: a custom tool's own, else the built-in's.

    The built-in schemas are cached per scope and shared: callers must not mutate them.
    """
    schemas = []
    for name in names:
        tool = registry.get(name)
        if name in toolset.custom_schemas or tool is None:
            schemas.append(toolset.custom_schemas[name])
        else:
            schemas.append(builtin_schema(tool, scope))
    return schemas


def tool_name(schema: ToolSchema) -> str:
    """Return the name in a schema."""
    return str(schema["function"]["name"])
