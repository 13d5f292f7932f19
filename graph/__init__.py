"""The arcana-loop graph: an LLM controller searches a knowledge base until it can answer."""

from graph.build import build_graph, make_deps
from graph.context import LoopContext
from graph.replay import Record, fork, record_of, replay, replay_record, resume, verify_record
from graph.run import LoopResult, arun, ground, run
from graph.trace import TraceStep, trace
from tools.schemas import DEFAULT_TOOLS, default_tools

__all__ = [
    "DEFAULT_TOOLS", "LoopContext", "LoopResult", "Record", "TraceStep", "arun", "build_graph", "default_tools",
    "fork", "ground", "make_deps", "record_of", "replay", "replay_record", "resume", "run", "trace", "verify_record",
]
