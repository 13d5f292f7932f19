"""The built-in tools, one line each: a new built-in tool is a module of its own and a line here.

The order is the order the controller is offered them: the default tools first
(``DEFAULT_TOOLS``), then the optional ones the run's options offer. Everything that
would otherwise name a tool (the prompt, planning, routing, rendering, streaming)
asks here instead; the lookups read `TOOLS` when called, so a test can register a
tool of its own by replacing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from arcana_loop.core.state import TerminatedBy
from arcana_loop.tools import answer, explore, give_up, search
from arcana_loop.tools.base import LoopTool

TOOLS: tuple[LoopTool, ...] = (
    search.TOOL,
    answer.TOOL,
    give_up.TOOL,
    explore.TOOL,
)


def get(name: object) -> LoopTool | None:
    """Return the built-in tool of that name, or ``None``."""
    return _by_name(TOOLS).get(name) if isinstance(name, str) else None


@lru_cache(maxsize=4)
def _by_name(tools: tuple[LoopTool, ...]) -> dict[str, LoopTool]:
    # asked several times per call of every turn: a dict, remade only when `TOOLS` changes
    return {tool.name: tool for tool in tools}


def default_names() -> tuple[str, ...]:
    """Return the default tools' names, in the order the controller sees them."""
    return tuple(tool.name for tool in TOOLS if tool.default)


def control_names() -> tuple[str, ...]:
    """Return the names of the tools that end a run: no custom tool may take them."""
    return tuple(tool.name for tool in TOOLS if tool.ends_as is not None)


def ends_as(name: object) -> TerminatedBy | None:
    """Return how a valid call of the named tool ends the run (``None``: it does not)."""
    tool = get(name)
    return None if tool is None else tool.ends_as


def is_search(name: object) -> bool:
    """Whether the named tool searches the knowledge base (a custom tool of that name replaces it)."""
    tool = get(name)
    return tool is not None and tool.searches


def gathers(name: object) -> bool:
    """Whether a call of the named tool brings evidence: a built-in that gathers, or any other tool."""
    tool = get(name)
    return tool is None or tool.gathers


def offers_search(names: Iterable[str]) -> bool:
    """Whether any of the offered tools searches the knowledge base."""
    return any(is_search(name) for name in names)
