"""The test command's import-contract step runs as scripts/test writes it, with no deprecation warning."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_run_without_a_deprecation_warning() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    line = next(line for line in script.splitlines() if "lint-imports" in line)
    installed = sorted(ROOT.glob("build/__editable__.arcana_loop-*"))
    if not installed:
        pytest.skip("no editable install's link tree to read the package from")
    # the arguments as the script gives them, with its variables filled in
    command = line.split('lint-imports"', 1)[1].rstrip(")").replace("$root", str(ROOT))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), *shlex.split(command)],
        cwd=installed[0],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert "Contracts:" in output, output
    assert "deprecated" not in output.lower()
