"""The README's options table and the options' declarations name the same options, defaults and variables."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from arcana_loop.core.context import OPTIONS

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `(\w+)` \| `([^`]*)` \| `(ARCANA_LOOP_\w+)`")


def _table() -> dict[str, tuple[str, str]]:
    text = README.read_text()
    start = text.index("| option | default | environment | meaning |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        assert match is not None, f"an options row the table's layout does not fit: {line[:80]}"
        rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


def test_every_option_is_in_the_table_with_its_default_and_variable():
    table = _table()
    assert set(table) == set(OPTIONS)
    for name, setting in OPTIONS.items():
        default, env = table[name]
        assert env == setting.env, name
        assert ast.literal_eval(default) == setting.default, name
