"""A loop option's flag is made from its declaration: type, name, help, and only the flags given reach the command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.testing import CliRunner

from arcana_loop.cli.flags import FROM_FLAGS, RUN_FLAGS, Flag, flag_group, loop_flags
from arcana_loop.cli.main import app as main_app
from arcana_loop.core.context import OPTIONS

received: list[dict[str, Any]] = []


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @loop_flags(
        Flag("max_iterations"),
        Flag("duplicate_guard"),
        Flag("min_support"),
        Flag("controller_model", "--model", "The controller.", keyword="controller_llm"),
    )
    def go(name: str, options: dict[str, Any] = FROM_FLAGS, loud: bool = False) -> None:
        received.append({"name": name, "loud": loud, **options})

    return app


def test_the_flags_given_reach_the_command_typed_and_keyed_by_their_keyword():
    received.clear()
    args = ["x", "--max-iterations", "3", "--no-duplicate-guard", "--min-support", "0.5"]
    done = CliRunner().invoke(_app(), [*args, "--model", "offline", "--loud"])
    assert done.exit_code == 0, done.output
    assert received == [
        {
            "name": "x",
            "loud": True,
            "max_iterations": 3,
            "duplicate_guard": False,
            "min_support": 0.5,
            "controller_llm": "offline",
        }
    ]


def test_flags_not_given_are_left_out_so_the_environment_and_defaults_apply():
    received.clear()
    assert CliRunner().invoke(_app(), ["x"]).exit_code == 0
    assert received == [{"name": "x", "loud": False}]


def test_a_value_of_the_wrong_type_is_refused_by_the_flag():
    done = CliRunner().invoke(_app(), ["x", "--max-iterations", "many"])
    assert done.exit_code != 0 and "Invalid value for '--max-iterations'" in done.output


def test_help_comes_from_the_declaration_unless_the_command_words_its_own():
    shown = " ".join(CliRunner().invoke(_app(), ["--help"], env={"COLUMNS": "250"}).output.split())
    assert OPTIONS["max_iterations"].help in shown
    assert "--duplicate-guard --no-duplicate-guard" in shown
    assert "The controller." in shown


def test_every_command_that_runs_the_loop_offers_the_run_flags():
    for command in (["ask"], ["chat"], ["mcp"]):
        shown = CliRunner().invoke(main_app, [*command, "--help"], env={"COLUMNS": "250"}).output
        for flag in RUN_FLAGS:
            assert (flag.name or "--" + flag.option.replace("_", "-")) in shown, (command, flag)


@dataclass(frozen=True)
class _Pick:
    path: Annotated[str | None, typer.Option("--path", help="Where from.")] = None
    size: Annotated[int, typer.Option("--size", help="How many.")] = 3


def _group_app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @loop_flags(Flag("max_iterations"))
    @flag_group(_Pick)
    def go(
        pick: _Pick = FROM_FLAGS, options: dict[str, Any] = FROM_FLAGS, loud: bool = False
    ) -> None:
        received.append({"pick": pick, "loud": loud, **options})

    return app


def test_a_flag_group_offers_its_fields_as_flags_and_passes_them_as_one_object():
    received.clear()
    args = ["--path", "here", "--max-iterations", "2", "--loud"]
    done = CliRunner().invoke(_group_app(), args)
    assert done.exit_code == 0, done.output
    assert received == [{"pick": _Pick("here", 3), "loud": True, "max_iterations": 2}]
    shown = " ".join(
        CliRunner().invoke(_group_app(), ["--help"], env={"COLUMNS": "250"}).output.split()
    )
    assert shown.index("--path") < shown.index("--size") < shown.index("--max-iterations")
    assert "Where from." in shown and "How many." in shown
    bad = CliRunner().invoke(_group_app(), ["--size", "many"])
    assert bad.exit_code != 0 and "Invalid value for '--size'" in bad.output
