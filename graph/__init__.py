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
    # `name as name` exports each name to type checkers: `__all__` is made from `_HOMES`
    from arcana_loop.core.context import LoopContext as LoopContext
    from arcana_loop.graph.build import build_graph as build_graph
    from arcana_loop.graph.build import make_deps as make_deps
    from arcana_loop.graph.diff import RunDiff as RunDiff
    from arcana_loop.graph.diff import diff_runs as diff_runs
    from arcana_loop.graph.replay import Record as Record
    from arcana_loop.graph.replay import fork as fork
    from arcana_loop.graph.replay import record_of as record_of
    from arcana_loop.graph.replay import replay as replay
    from arcana_loop.graph.replay import replay_record as replay_record
    from arcana_loop.graph.replay import resume as resume
    from arcana_loop.graph.replay import verify_record as verify_record
    from arcana_loop.graph.run import RUN_OPTIONS as RUN_OPTIONS
    from arcana_loop.graph.run import LoopResult as LoopResult
    from arcana_loop.graph.run import arun as arun
    from arcana_loop.graph.run import ground as ground
    from arcana_loop.graph.run import run as run
    from arcana_loop.graph.stale import StaleAnswer as StaleAnswer
    from arcana_loop.graph.stale import stale_answers as stale_answers
    from arcana_loop.graph.trace import TraceStep as TraceStep
    from arcana_loop.graph.trace import trace as trace
    from arcana_loop.tools.schemas import DEFAULT_TOOLS as DEFAULT_TOOLS
    from arcana_loop.tools.schemas import default_tools as default_tools

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


__all__ = sorted(_HOMES)
