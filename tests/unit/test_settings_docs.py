"""The documented environment variables are the declared settings, with their defaults and meanings."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from arcana_loop.cli.settings import CLI_SETTINGS
from arcana_loop.knowledge.settings import KNOWLEDGE_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(ARCANA_LOOP_\w+)` \|(?: `([^`]*)` \|)? (.*) \|$")


def _rows(path: Path, header: str) -> list[tuple[str, str | None, str]]:
    lines = path.read_text().splitlines()
    rows = []
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        if match is not None:
            rows.append((match.group(1), match.group(2), match.group(3)))
    return rows


def test_the_knowledge_readme_lists_every_setting_with_its_default_and_meaning():
    rows = _rows(ROOT / "knowledge" / "README.md", "| environment | default | meaning |")
    assert [env for env, _, _ in rows] == [s.env for s in KNOWLEDGE_SETTINGS]
    for (_, default, meaning), setting in zip(rows, KNOWLEDGE_SETTINGS, strict=True):
        assert default is not None and ast.literal_eval(default) == setting.default, setting.env
        assert meaning == setting.help, setting.env


def test_the_readme_names_settings_as_declared() -> None:
    rows = _rows(ROOT / "README.md", "| environment | meaning |")
    declared = {s.env: s.help for s in (*KNOWLEDGE_SETTINGS, *CLI_SETTINGS)}
    assert rows
    for env, _, meaning in rows:
        assert declared.get(env) == meaning, env
