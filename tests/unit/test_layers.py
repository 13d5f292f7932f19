"""No two of the project's top-level folders import each other both ways."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Mapping

from tests.fixtures.source import ROOT


def _folders() -> list[str]:
    """The folders that install as ``arcana_loop.<folder>``, read from the packaging map."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return sorted(
        name.split(".")[1]
        for name in mapping["package-dir"]
        if name.count(".") == 1 and name.startswith("arcana_loop.")
    )


def _imported_folders(tree: ast.AST, folders: Iterable[str]) -> set[str]:
    """The top-level folders one file imports, at module level or inside a function."""
    known = set(folders)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "arcana_loop":  # from arcana_loop import knowledge
                modules = [f"arcana_loop.{alias.name}" for alias in node.names]
            else:
                modules = [node.module]
        else:
            continue  # the project writes no relative imports; one would stay in its folder
        for module in modules:
            parts = module.split(".")
            if len(parts) > 1 and parts[0] == "arcana_loop" and parts[1] in known:
                found.add(parts[1])
    return found


def _imports_by_folder(folders: list[str]) -> dict[str, set[str]]:
    return {
        folder: set().union(
            *(
                _imported_folders(ast.parse(path.read_text()), folders)
                for path in sorted((ROOT / folder).rglob("*.py"))
            )
        )
        - {folder}
        for folder in folders
    }


def _both_ways(imports: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (a, b)
        for a, targets in imports.items()
        for b in targets
        if a < b and a in imports.get(b, ())
    )


def test_no_two_folders_import_each_other():
    folders = _folders()
    assert {"core", "graph", "nodes", "tools", "grounding", "knowledge", "ui"} <= set(folders)
    assert _both_ways(_imports_by_folder(folders)) == []


def test_the_check_sees_function_level_imports_and_names_the_pair():
    tools = ast.parse("from arcana_loop.core import bridge\nimport arcana_loop.knowledge.types\n")
    core = ast.parse("def f():\n    from arcana_loop import tools\n    return tools\n")
    folders = ["core", "knowledge", "tools"]
    assert _imported_folders(tools, folders) == {"core", "knowledge"}
    assert _imported_folders(core, folders) == {"tools"}
    imports = {"tools": {"core", "knowledge"}, "core": {"tools"}, "knowledge": set()}
    assert _both_ways(imports) == [("core", "tools")]
