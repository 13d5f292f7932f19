"""Rules of the loop's design that a test can hold: one bridge, edges decide, one option surface, one result."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from arcana_loop.core.context import CONTEXT_FIELDS
from arcana_loop.core.state import RESULT_KEYS, LoopOutput
from arcana_loop.graph.build import make_deps
from arcana_loop.graph.run import RUN_OPTIONS, LoopResult, split_options
from tests.fixtures.source import ROOT, offenders

LOOP_RUNNERS = {"run", "run_coroutine_threadsafe", "new_event_loop", "run_until_complete", "Runner"}
"""What waits on a coroutine from synchronous code: only `core.bridge` may."""


def _loop_runner_calls(tree: ast.AST) -> list[str]:
    calls = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOOP_RUNNERS
        ):
            owner = node.func.value
            if node.func.attr == "run" and not (
                isinstance(owner, ast.Name) and owner.id == "asyncio"
            ):
                continue  # context.run, subprocess.run...: not an event loop
            calls.append(f"{ast.unparse(node.func)} (line {node.lineno})")
    return calls


def test_only_the_bridge_waits_on_coroutines_from_sync_code():
    assert offenders(_loop_runner_calls, skip={ROOT / "core" / "bridge.py"}) == {}
    assert _loop_runner_calls(
        ast.parse((ROOT / "core" / "bridge.py").read_text())
    )  # the check sees the bridge's


def test_the_check_catches_a_second_bridge():
    tree = ast.parse("import asyncio\nasyncio.run(f())\nloop.run_until_complete(g())\nctx.run(h)\n")
    assert _loop_runner_calls(tree) == ["asyncio.run (line 2)", "loop.run_until_complete (line 3)"]


def test_nodes_never_ask_the_routers():
    for path in (ROOT / "nodes").glob("*.py"):
        imported = {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom)
        }
        assert "arcana_loop.graph.routing" not in imported, path.name


def test_every_node_is_one_function_of_state_and_runtime():
    from arcana_loop.nodes import answerer, controller, finish, ground, start, synthesis, tools

    for module in (start, controller, tools, answerer, synthesis, ground, finish):
        node = getattr(module, module.__name__.rsplit(".", 1)[-1])
        assert inspect.isfunction(node) and not inspect.iscoroutinefunction(node)
        assert list(inspect.signature(node).parameters) == ["state", "runtime", "deps"]


def test_run_options_are_the_graphs_dependencies_and_the_contexts_fields():
    assert set(inspect.signature(make_deps).parameters) | CONTEXT_FIELDS == RUN_OPTIONS
    deps, context = split_options(
        {
            "controller_llm": "offline",
            "max_iterations": 3,
            "grounder": "local",
            "system_prompt": "Be brief.",
        }
    )
    assert (
        deps["controller_llm"] == "offline"
        and deps["grounder"] is None
        and deps["system_prompt"] == "Be brief."
    )
    assert context == {
        "max_iterations": 3,
        "controller_model": "offline",
        "grounder": "local",
        "system_prompt": "Be brief.",
    }


def test_the_result_is_declared_once():
    assert RESULT_KEYS == tuple(LoopOutput.__annotations__)
    extra = {"thread_id", "grounded_in_chunks"}  # what a result derives from the state
    assert {f.name for f in dataclasses.fields(LoopResult)} == set(RESULT_KEYS) | extra


RESULT_LAYOUT = {"FOUND_TEMPLATE", "CHUNK_TAG", "SHOWN_BEFORE", "COMPACTED_NOTE", "SEARCH_ERROR"}
"""The pieces of a tool result's text: only `tools.chunks`, `tools.execute` and the search tool write them, nobody reads them back."""
TEXT_READERS = {"startswith", "split", "partition", "rpartition", "splitlines", "find", "index"}


def _is_result_text(node: ast.AST) -> bool:
    """A message's ``content``, or a history entry's ``summary`` (the tool result the controller saw)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "content"
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "summary"
    )


def _reads_message_text(tree: ast.AST) -> list[str]:
    """Calls that take a result's text apart, and uses of the result layout's constants."""
    hits = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TEXT_READERS
            and _is_result_text(node.func.value)
        ):
            hits.append(f"{ast.unparse(node.func)} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module in (
            "arcana_loop.tools.chunks",
            "arcana_loop.tools.execute",
        ):
            hits.extend(
                f"imports {a.name} (line {node.lineno})"
                for a in node.names
                if a.name in RESULT_LAYOUT
            )
    return hits


def test_no_module_reads_back_the_text_of_the_loops_own_results():
    writers = {ROOT / "tools" / name for name in ("chunks.py", "execute.py", "search.py")}
    assert offenders(_reads_message_text, skip=writers) == {}


def test_the_text_reader_check_catches_a_parser():
    tree = ast.parse(
        "from arcana_loop.tools.chunks import FOUND_TEMPLATE\n"
        "if message.content.startswith('Found '):\n    pass\n"
        "failed = entry['summary'].startswith('search error')\n"
    )
    assert _reads_message_text(tree) == [
        "imports FOUND_TEMPLATE (line 1)",
        "message.content.startswith (line 2)",
        "entry['summary'].startswith (line 4)",
    ]


def test_only_the_start_node_opens_a_question():
    opening = {"new_question", "fresh_state"}
    openers = set()
    for path in (ROOT / "nodes").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and opening & {a.name for a in node.names}:
                openers.add(path.name)
    assert openers == {"start.py"}
