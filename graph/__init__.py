"""The arcana-loop graph: an LLM controller searches a knowledge base until it can answer."""

from graph.build import build_graph, make_deps
from graph.context import LoopContext
from graph.run import LoopResult, arun, ground, run

__all__ = ["LoopContext", "LoopResult", "arun", "build_graph", "ground", "make_deps", "run"]
