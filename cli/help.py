"""Help that shows an on/off option as a flag: ``--json``, not ``--json <bool>``.

Typer's help prints every option's type, a flag's too (``<bool>``, even for
``--help``), which reads as if the flag took a value. The root command clears the
type shown for every flag of the command tree, sub-apps included, when it first
reads its parameters (before any help is printed).
"""

from __future__ import annotations

from typing import Any

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


def _clear_flag_types(command: Any, ctx: Any) -> None:
    """Give every flag of `command` and its subcommands an empty metavar (what help shows as its type)."""
    # the help option is built lazily and then cached: build it now, so it is cleared too
    params = [*command.params, command.get_help_option(ctx)]
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _clear_flag_types(sub, ctx)
