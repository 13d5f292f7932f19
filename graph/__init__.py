"""The arcana-loop graph: an LLM controller searches a knowledge base until it can answer."""

from arcana_loop.graph.build import build_graph, make_deps
from arcana_loop.graph.context import LoopContext
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
from arcana_loop.graph.trace import TraceStep, trace
from arcana_loop.tools.schemas import DEFAULT_TOOLS, default_tools

__all__ = [
    "DEFAULT_TOOLS",
    "RUN_OPTIONS",
    "LoopContext",
    "LoopResult",
    "Record",
    "TraceStep",
    "arun",
    "build_graph",
    "default_tools",
    "fork",
    "ground",
    "make_deps",
    "record_of",
    "replay",
    "replay_record",
    "resume",
    "run",
    "trace",
    "verify_record",
]
