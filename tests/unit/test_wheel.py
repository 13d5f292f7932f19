"""The wheel installs one import name, arcana_loop, and works outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

DEMO = """
import sys
import arcana_loop
from arcana_loop import KnowledgeBase, LoopResult, run

assert arcana_loop.__file__.startswith(sys.argv[1]), arcana_loop.__file__
found = [{"id": "c1", "text": "asyncio.wait_for runs a coroutine with a timeout.", "score": 1.0}]
result = run("How do I run a coroutine with a timeout?", controller_llm="offline", search_fn=lambda q, **k: found)
assert isinstance(result, LoopResult) and result.terminated_by == "answered" and "[c1]" in result.answer
print(arcana_loop.__version__)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # built from a copy of the tracked files: a checkout's own build/ may hold stale modules
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",  # the build backend's own output, warnings included
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (out / "build.log").write_text(built.stdout + built.stderr)
    return next(out.glob("arcana_loop-*.whl"))


def test_the_wheel_builds_without_a_packaging_warning(wheel: Path) -> None:
    log = (wheel.parent / "build.log").read_text()
    assert "running bdist_wheel" in log  # the backend's output was captured
    warnings = [line for line in log.splitlines() if "Warning" in line]
    assert warnings == []


def test_the_wheel_installs_only_arcana_loop(wheel: Path) -> None:
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {n for n in names if not n.endswith(".dist-info")} == {"arcana_loop"}
    files = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "arcana_loop/py.typed",
        "arcana_loop/core/state.py",
        "arcana_loop/graph/build.py",
        "arcana_loop/nodes/models.py",
        "arcana_loop/knowledge/entities/search.py",
        "arcana_loop/evaluation/data/python_docs_realistic.json",
        "arcana_loop/ui/static/index.html",  # the page at /ui is served from the package
        "arcana_loop/ui/static/app.js",
        "arcana_loop/ui/static/app.css",
        "arcana_loop/ui/static/favicon.svg",
    } <= files


def test_the_installed_wheel_works_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "graph.py").write_text(
        "raise SystemExit('a user module named graph was imported')\n"
    )  # must not be
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run(
        [sys.executable, "-c", DEMO, str(target)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    version = subprocess.run(
        [sys.executable, "-m", "arcana_loop.cli.main", "--version"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        version.returncode == 0 and version.stdout.strip() == f"arcana-loop {done.stdout.strip()}"
    )
