"""The command answers at once: `--version` and `--help` import neither the graph nor LangChain."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("arcana_loop.graph", "arcana_loop.knowledge", "langchain", "langchain_core", "langgraph")

PROBE = """
import json, sys
from arcana_loop.cli.main import app
try:
    app(sys.argv[1:], prog_name="arcana-loop")
except SystemExit:
    pass
heavy = tuple(json.loads(sys.stdin.read()))
print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))), file=sys.stderr)
"""


def imported_by(*args: str) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        input=json.dumps(HEAVY),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["ask", "--help"],
        ["documents", "--help"],
        ["documents", "show", "--help"],
        ["mcp", "--help"],
        ["doctor", "--help"],
    ],
)
def test_version_and_help_import_no_graph(args: list[str]) -> None:
    printed, heavy = imported_by(*args)
    assert "arcana-loop" in printed or "Usage" in printed, printed
    assert heavy == []


def test_the_package_imports_its_names_on_first_use() -> None:
    code = (
        "import sys, arcana_loop\n"
        "assert not any(m.startswith(('arcana_loop.graph', 'langgraph')) for m in sys.modules)\n"
        "from arcana_loop import run, arun, ground, LoopResult, KnowledgeBase, __version__\n"
        "r = sys.modules['arcana_loop.graph.run']\n"
        "assert run is r.run and LoopResult is r.LoopResult and __version__\n"
        "assert 'run' in dir(arcana_loop)\n"
        "try:\n"
        "    from arcana_loop import no_such_name\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "cannot import name 'no_such_name'" in done.stdout


def test_each_module_of_the_loop_imports_on_its_own() -> None:
    # the graph package no longer imports the whole loop first, so no order is needed
    for module in (
        "arcana_loop.tools.chunks",
        "arcana_loop.nodes.controller",
        "arcana_loop.graph.run",
    ):
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr


def test_run_trace_and_replay_are_the_functions_whichever_loads_first() -> None:
    # each names a module of the graph too; importing the module first must not hide the function
    code = (
        "import sys, types\n"
        "from arcana_loop.graph.run import check_run_options\n"
        "import arcana_loop.graph.trace, arcana_loop.graph.replay\n"
        "from arcana_loop.graph import run, trace, replay\n"
        "from arcana_loop import run as top\n"
        "assert all(callable(f) and not isinstance(f, types.ModuleType) for f in (run, trace, replay))\n"
        "assert run is top is sys.modules['arcana_loop.graph.run'].run\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
