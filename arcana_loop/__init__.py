"""arcana-loop: an agentic RAG loop on LangGraph over a PostgreSQL + pgvector knowledge base.

The documented surface::

    from arcana_loop import run, arun, ground, LoopResult, KnowledgeBase

Installed, the repository's folders live under this one name (`arcana_loop.graph`,
`arcana_loop.knowledge`, ...). In a checkout they stay at the top of the repository
(`graph/`, `knowledge/`, ...): the lines below let this package find them there too.

The names are imported on first use (PEP 562): importing a submodule, such as the
command line's `arcana_loop.cli.main`, imports this package first, and the graph and
its dependencies take about a second and a half to import, which `arcana-loop
--version` has no use for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

_checkout = Path(__file__).parent.parent
if (_checkout / "graph" / "__init__.py").is_file() and not (
    Path(__file__).parent / "graph"
).exists():
    __path__.append(str(_checkout))  # a source checkout: the subpackages sit beside this folder

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` imports them
    from arcana_loop.graph import (
        DEFAULT_TOOLS,
        RUN_OPTIONS,
        LoopContext,
        LoopResult,
        Record,
        RunDiff,
        StaleAnswer,
        TraceStep,
        arun,
        build_graph,
        default_tools,
        diff_runs,
        fork,
        ground,
        record_of,
        replay,
        replay_record,
        resume,
        run,
        stale_answers,
        trace,
        verify_record,
    )
    from arcana_loop.knowledge import KnowledgeBase, KnowledgeBaseRetriever

    __version__: str

_FROM_KNOWLEDGE = ("KnowledgeBase", "KnowledgeBaseRetriever")
"""The names the knowledge base gives; every other one of `__all__` is the graph's."""


def __getattr__(name: str) -> Any:
    """Import a public name on first use, and keep it here for the next."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("arcana-loop")
        except PackageNotFoundError:  # a checkout that was never installed
            value = "0.0.0"
    elif name in __all__:
        home = "arcana_loop.knowledge" if name in _FROM_KNOWLEDGE else "arcana_loop.graph"
        value = getattr(importlib.import_module(home), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_TOOLS",
    "KnowledgeBase",
    "KnowledgeBaseRetriever",
    "LoopContext",
    "LoopResult",
    "RUN_OPTIONS",
    "Record",
    "RunDiff",
    "StaleAnswer",
    "TraceStep",
    "__version__",
    "arun",
    "build_graph",
    "default_tools",
    "diff_runs",
    "fork",
    "ground",
    "record_of",
    "replay",
    "replay_record",
    "resume",
    "run",
    "stale_answers",
    "trace",
    "verify_record",
]
