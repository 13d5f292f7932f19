"""An option is one declaration: the environment is read there only, with explicit > environment > default."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from arcana_loop.core.context import OPTIONS, LoopContext
from arcana_loop.settings import ENV_PREFIX

ROOT = Path(__file__).resolve().parents[2]
DECLARATIONS = {
    "arcana_loop.settings",
    "arcana_loop.core.context",
    "arcana_loop.knowledge.settings",
    "arcana_loop.cli.settings",
}
"""The mechanism and the modules that declare options and settings: the only ones naming variables."""


def package_modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name, from pyproject's package-dir."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    modules = {}
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        for path in (ROOT / folder).glob("*.py"):
            modules[f"{package}.{path.stem}"] = path
    return modules


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (text for people, not a read)."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    found.add(id(statement.value))
    return found


def variables_named(path: Path) -> list[int]:
    """The lines where a module's code (not its docstrings) names an ``ARCANA_LOOP_`` variable."""
    tree = ast.parse(path.read_text())
    skipped = _docstrings(tree)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and ENV_PREFIX in node.value
        and id(node) not in skipped
    ]


def test_no_module_but_the_declarations_names_an_arcana_loop_variable():
    modules = package_modules()
    assert DECLARATIONS <= set(modules)
    named = [
        where
        for name, path in sorted(modules.items())
        if name not in DECLARATIONS
        for where in (f"{path.relative_to(ROOT)}:{line}" for line in variables_named(path))
    ]
    assert named == []


def test_the_scan_finds_a_variable_read_in_code(tmp_path: Path):
    module = tmp_path / "reads.py"
    module.write_text(
        '"""Mentions ARCANA_LOOP_X in its docstring."""\nimport os\n'
        'LIMIT = os.environ.get("ARCANA_LOOP_LIMIT")\nNAME = f"ARCANA_LOOP_{1}"\n'
    )
    assert variables_named(module) == [3, 4]


def test_every_field_is_declared_with_its_variable_type_and_default():
    assert list(OPTIONS) == [f for f in LoopContext.__dataclass_fields__]
    assert OPTIONS["max_iterations"].env == "ARCANA_LOOP_MAX_ITERATIONS"
    assert OPTIONS["max_iterations"].kind is int and OPTIONS["max_iterations"].default == 10
    assert OPTIONS["require_search"].choices == ("off", "on", "auto")
    assert OPTIONS["controller_model"].kind is str and OPTIONS["controller_model"].default is None


def test_every_declared_default_passes_its_own_check():
    # a context takes a field holding its declared default without checking it again
    for name, setting in OPTIONS.items():
        setting.check(name, setting.default)


def test_a_bad_value_equal_but_not_identical_to_no_default_is_still_refused():
    with pytest.raises(TypeError, match="max_iterations must be an integer"):
        LoopContext(max_iterations=10.0)  # type: ignore[arg-type]  # == the default 10, not an int
    with pytest.raises(TypeError, match="must be a dict"):
        LoopContext(search_opts={1: "x"})  # type: ignore[dict-item]


def test_explicit_beats_environment_beats_default_even_when_explicit_equals_the_default(
    monkeypatch: pytest.MonkeyPatch,
):
    assert LoopContext().max_iterations == 10
    monkeypatch.setenv("ARCANA_LOOP_MAX_ITERATIONS", "3")
    monkeypatch.setenv("ARCANA_LOOP_DUPLICATE_GUARD", "off")
    assert LoopContext().max_iterations == 3 and LoopContext().duplicate_guard is False
    explicit = LoopContext(max_iterations=10, duplicate_guard=True)
    assert explicit.max_iterations == 10 and explicit.duplicate_guard is True


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"max_iterations": "3"}, TypeError, "max_iterations must be an integer, got str: '3'"),
        ({"chunk_cap": -1}, ValueError, "chunk_cap must be at least 0, got -1"),
        ({"min_support": 1.5}, ValueError, "min_support must be between 0 and 1, got 1.5"),
        ({"ground_timeout": 0}, ValueError, "ground_timeout must be a number > 0, got 0"),
        ({"temperature": float("nan")}, ValueError, "temperature must be a finite number >= 0"),
        ({"budget_ledger": 1}, TypeError, "budget_ledger must be True or False, got 1"),
        ({"grounder": 3}, TypeError, "grounder must be a string or None, got int"),
        ({"require_search": "always"}, ValueError, "require_search must be one of off, on, auto"),
        ({"search_opts": []}, TypeError, "search_opts must be a dict with string keys"),
    ],
)
def test_a_value_an_option_cannot_take_is_one_line_naming_it(given, error, message):
    with pytest.raises(error) as caught:
        LoopContext(**given)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
