"""arcana-loop: an agentic RAG loop on LangGraph over a PostgreSQL + pgvector knowledge base.

The documented surface::

    from arcana_loop import run, arun, ground, LoopResult, KnowledgeBase

Installed, the repository's folders live under this one name (`arcana_loop.graph`,
`arcana_loop.knowledge`, ...). In a checkout they stay at the top of the repository
(`graph/`, `knowledge/`, ...): the lines below let this package find them there too.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

_checkout = Path(__file__).parent.parent
if (_checkout / "graph" / "__init__.py").is_file() and not (
    Path(__file__).parent / "graph"
).exists():
    __path__.append(str(_checkout))  # a source checkout: the subpackages sit beside this folder

from arcana_loop.graph import (  # noqa: E402  # after the path above
    DEFAULT_TOOLS,
    RUN_OPTIONS,
    LoopContext,
    LoopResult,
    Record,
    TraceStep,
    arun,
    build_graph,
    default_tools,
    fork,
    ground,
    record_of,
    replay,
    replay_record,
    resume,
    run,
    trace,
    verify_record,
)
from arcana_loop.knowledge import KnowledgeBase, KnowledgeBaseRetriever  # noqa: E402

try:
    __version__ = version("arcana-loop")
except PackageNotFoundError:  # a checkout that was never installed
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_TOOLS",
    "KnowledgeBase",
    "KnowledgeBaseRetriever",
    "LoopContext",
    "LoopResult",
    "RUN_OPTIONS",
    "Record",
    "TraceStep",
    "__version__",
    "arun",
    "build_graph",
    "default_tools",
    "fork",
    "ground",
    "record_of",
    "replay",
    "replay_record",
    "resume",
    "run",
    "trace",
    "verify_record",
]
