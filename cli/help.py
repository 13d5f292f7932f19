"""The root command: readable placeholders in help, and usage errors on one line.

Typer's help prints every parameter's Python type (``<str>``, ``<list[str]>``),
a flag's too (``<bool>``, even for ``--help``), which reads as if the flag took a
value. The root command gives every parameter of the command tree, sub-apps
included, a placeholder when it first reads its parameters (before any help is
printed): none for a flag; for an option ``N`` for a number, ``PATH`` for a path,
else its name in capitals (``--model MODEL``); for an argument its name in
capitals (``QUESTION``, shown without its type). A parameter that names its own
placeholder keeps it.

A usage error (an unknown option, a missing argument, a bad value) is one line on
stderr and exit status 1, like every other error of the CLI, with a hint naming the
command's ``--help``; Typer would draw a box and exit with 2.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup


class FlagHelpGroup(TyperGroup):
    """The root command group: its help and every subcommand's show readable placeholders."""

    _placeholders_set = False

    def get_params(self, ctx: Any) -> Any:
        """Return the parameters, giving each parameter of the tree its placeholder first."""
        if not self._placeholders_set:
            _set_placeholders(self, ctx)
            self._placeholders_set = True
        return super().get_params(ctx)

    def invoke(self, ctx: Any) -> Any:
        """Run the command, then close the knowledge bases it opened."""
        from arcana_loop.cli.common import close_opened

        try:
            return super().invoke(ctx)
        finally:
            close_opened()

    def main(  # type: ignore[override]  # the same parameters, by keyword
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Run the CLI; a usage error is printed on one line and exits with status 1."""
        given: dict[str, Any] = {"args": args, "prog_name": prog_name, "complete_var": complete_var}
        if not standalone_mode:
            return super().main(**given, standalone_mode=False, **kwargs)
        from arcana_loop.cli.common import report

        try:
            status = super().main(**given, standalone_mode=False, **kwargs)
        except typer.Abort:
            report("aborted.")
            sys.exit(1)
        except Exception as exc:
            # Typer ships its own copy of click and exports only a few of its exception
            # classes; a click error is known by what every one of them has
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            context = getattr(exc, "ctx", None)
            path = getattr(context, "command_path", None) or _command_path(
                self, sys.argv[1:] if args is None else list(args), prog_name or "arcana-loop"
            )
            report(str(exc.format_message()).rstrip("."), f"see {path} --help")
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def _command_path(root: Any, args: list[str], prog_name: str) -> str:
    """The command the arguments name (``arcana-loop replay``), for an error that did not say.

    An option missing its value is reported with no command context; the command is
    then the longest run of words (flags aside) that name subcommands.
    """
    names, command = [prog_name], root
    for arg in args:
        if arg.startswith("-"):  # a flag before the subcommand (--verbose)
            continue
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            break
        names.append(arg)
        command = sub
    return " ".join(names)


TYPE_PLACEHOLDERS = {"int": "N", "float": "N", "path": "PATH"}
"""The placeholder of a parameter by its type; any other type shows the parameter's name."""


def placeholder(param: Any) -> str:
    """What help shows for the value a parameter takes (empty for a flag)."""
    if getattr(param, "is_flag", False):
        return ""
    if param.param_type_name == "argument":  # its name is all it has in help
        return str(param.name or "value").upper()
    # Typer's own label of the type (``int``, ``list[Path]``), from which it prints ``<int>``
    kind = param.bare_type().removeprefix("list[").removesuffix("]").lower()
    longest = max(param.opts, key=len)
    return TYPE_PLACEHOLDERS.get(kind) or longest.lstrip("-").replace("-", "_").upper()


def _set_placeholders(command: Any, ctx: Any) -> None:
    """Give every parameter of `command` and its subcommands that has none its placeholder."""
    # the help option is built lazily and then cached: build it now, so it is cleared too
    params = [*command.params, command.get_help_option(ctx)]
    for param in params:
        if param is not None and param.metavar is None:
            param.metavar = placeholder(param)
        if param is not None and param.param_type_name == "argument":
            # Typer prints an argument's Python type beside its name (``QUESTION <str>``)
            # whatever its placeholder, and has no setting for it: the name says enough
            param.display_type_rich = lambda ctx: None
    for sub in getattr(command, "commands", {}).values():
        _set_placeholders(sub, ctx)
