"""The root command: flags shown as flags in help, and usage errors on one line.

Typer's help prints every option's type, a flag's too (``<bool>``, even for
``--help``), which reads as if the flag took a value. The root command clears the
type shown for every flag of the command tree, sub-apps included, when it first
reads its parameters (before any help is printed).

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
    """The root command group: its help and every subcommand's show flags without a type."""

    _flags_cleared = False

    def get_params(self, ctx: Any) -> Any:
        """Return the parameters, clearing the type shown for each flag of the tree first."""
        if not self._flags_cleared:
            _clear_flag_types(self, ctx)
            self._flags_cleared = True
        return super().get_params(ctx)

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


def _clear_flag_types(command: Any, ctx: Any) -> None:
    """Give every flag of `command` and its subcommands an empty metavar (what help shows as its type)."""
    # the help option is built lazily and then cached: build it now, so it is cleared too
    params = [*command.params, command.get_help_option(ctx)]
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _clear_flag_types(sub, ctx)
