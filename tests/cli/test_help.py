"""Help reads as a command line: placeholders (QUESTION, --model MODEL, --max-iterations N), no Python types."""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app


def command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            found += command_paths(sub, (*path, name))
    return found


def every_command() -> list[tuple[str, ...]]:
    import typer.main

    return command_paths(typer.main.get_command(app))


@pytest.mark.parametrize("path", every_command(), ids=" ".join)
def test_help_shows_placeholders_not_python_types(path: tuple[str, ...]) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    assert not re.search(r"<(str|int|float|bool|path|Path|list\[[^>]*)>", shown.output), (
        shown.output
    )
    assert "[[" not in shown.output  # an optional argument in brackets once


def test_ask_help_names_what_each_option_takes() -> None:
    shown = CliRunner().invoke(app, ["ask", "--help"], terminal_width=120).output
    assert re.search(r"ask \[OPTIONS\] \{?QUESTION\}?", shown)
    assert re.search(r"--collection\s+-c\s+COLLECTION\s", shown)
    assert re.search(r"--max-iterations\s+N\s", shown)
    assert re.search(r"--where\s+KEY=VALUE\s", shown)
    assert re.search(r"--json\s+Print the whole result", shown)  # a flag takes nothing
