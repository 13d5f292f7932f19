"""The tool schemas the controller is offered, in OpenAI function-calling form.

Only the schema is here; what a call does is in ``tools.execute``. The ``search``
schema follows the scope: a ``collection`` parameter exists only when the
controller may pick among two or more collections, and then lists exactly those.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from tools import descriptions
from tools.scoping import Scope

SEARCH = "search"
ANSWER = "answer"
GIVE_UP = "give_up"
SYNTHESIS = "synthesis"
"""The history name of the fallback synthesis step (not a tool the controller can call)."""

DEFAULT_TOOL_NAMES = (SEARCH, ANSWER, GIVE_UP)
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


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSchema:
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


def custom_tool_schemas(tools: Sequence[BaseTool]) -> tuple[ToolSchema, ...]:
    """Return the schemas of custom tools, checking their names first.

    Raises:
        ValueError: when a custom tool reuses a default tool's name or another's.
    """
    seen: set[str] = set(DEFAULT_TOOL_NAMES)
    for tool in tools:
        if not isinstance(tool, BaseTool):
            raise TypeError(f"custom tools must be LangChain BaseTool instances, got {type(tool).__name__}")
        if tool.name in seen:
            raise ValueError(f"tool name {tool.name!r} is already taken (the default tools are {DEFAULT_TOOL_NAMES})")
        seen.add(tool.name)
    return tuple(convert_to_openai_tool(t) for t in tools)


@lru_cache(maxsize=256)
def _default_tools(scope: Scope) -> tuple[ToolSchema, ...]:
    return (search_schema(scope), ANSWER_SCHEMA, GIVE_UP_SCHEMA)


def controller_tools(scope: Scope, custom: Sequence[ToolSchema] = ()) -> list[ToolSchema]:
    """Return every schema the controller is offered: the defaults, then custom tools.

    The default schemas are cached per scope and shared: callers must not mutate them.
    """
    return [*_default_tools(scope), *custom]


def tool_name(schema: ToolSchema) -> str:
    """Return the name in a schema."""
    return str(schema["function"]["name"])
