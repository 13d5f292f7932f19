"""The arcana-loop graph: an LLM controller searches a knowledge base until it can answer.

This package assembles the nodes and holds the entry points. The names below are
imported on first use (PEP 562), so importing one module of the package
(`arcana_loop.graph.checkpoints`, say, from the command line) does not import the
whole loop first.

`run`, `trace` and `replay` each name a module and the function it defines; the
package's attribute is the function, whichever of the two is imported first.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` imports them
    from arcana_loop.core.context import LoopContext
    from arcana_loop.graph.build import build_graph, make_deps
    from arcana_loop.graph.diff import RunDiff, diff_runs
    from arcana_loop.graph.replay import (
        Record,
        fork,
        record_of,
        replay,
        replay_record,
        resume,
        verify_record,
    )
    from arcana_loop.graph.run import RUN_OPTIONS, LoopResult, arun, ground, run
    from arcana_loop.graph.stale import StaleAnswer, stale_answers
    from arcana_loop.graph.trace import TraceStep, trace
    from arcana_loop.tools.schemas import DEFAULT_TOOLS, default_tools

_HOMES = {
    "build_graph": "arcana_loop.graph.build",
    "make_deps": "arcana_loop.graph.build",
    "LoopContext": "arcana_loop.core.context",
    "RunDiff": "arcana_loop.graph.diff",
    "diff_runs": "arcana_loop.graph.diff",
    "StaleAnswer": "arcana_loop.graph.stale",
    "stale_answers": "arcana_loop.graph.stale",
    **dict.fromkeys(
        ["Record", "fork", "record_of", "replay", "replay_record", "resume", "verify_record"],
        "arcana_loop.graph.replay",
    ),
    **dict.fromkeys(
        ["RUN_OPTIONS", "LoopResult", "arun", "ground", "run"], "arcana_loop.graph.run"
    ),
    "TraceStep": "arcana_loop.graph.trace",
    "trace": "arcana_loop.graph.trace",
    "DEFAULT_TOOLS": "arcana_loop.tools.schemas",
    "default_tools": "arcana_loop.tools.schemas",
}
"""Each public name and the module it comes from."""


_SHADOWED = frozenset(name for name, home in _HOMES.items() if home == f"{__name__}.{name}")
"""The public names that are also the names of their modules (`run`, `trace`, `replay`)."""


class _GraphPackage(types.ModuleType):
    """This package, whose `run`, `trace` and `replay` stay the functions when their modules load.

    The import system binds each submodule to its package as it is imported
    (``setattr(package, "run", <module>)``), which would hide the function
    `__getattr__` gives; the data model's way to customise a module's attribute
    setting is a `types.ModuleType` subclass as its ``__class__``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return  # the module stays in sys.modules; the attribute is the function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _GraphPackage


def __getattr__(name: str) -> Any:
    """Import a public name on first use, and keep it here for the next."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "DEFAULT_TOOLS",
    "RUN_OPTIONS",
    "LoopContext",
    "LoopResult",
    "Record",
    "RunDiff",
    "StaleAnswer",
    "TraceStep",
    "arun",
    "build_graph",
    "default_tools",
    "diff_runs",
    "fork",
    "ground",
    "make_deps",
    "record_of",
    "replay",
    "replay_record",
    "resume",
    "run",
    "stale_answers",
    "trace",
    "verify_record",
]
