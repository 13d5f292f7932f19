"""The ``arcana-loop`` entry point: the warm worker runs the command when it can, else this process.

See `cli.warm`: without a worker (or with ``ARCANA_LOOP_WARM_WORKER=0``) every command
runs here, as it always did. `--version` and `--help` always run here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

NOT_SERVED = ("--version", "--help", "-h")
"""Arguments that the entry point answers itself (before a ``--``)."""
NOT_SERVED_COMMANDS = ("server",)
"""Commands run here: ``server`` starts, shows and stops the worker."""


def is_served(argv: Sequence[str]) -> bool:
    """Whether the command `argv` (``sys.argv``) goes to the worker (on Linux: it needs ``SO_PEERCRED``)."""
    if not sys.platform.startswith("linux"):
        return False
    args = list(argv[1:])
    if "--" in args:
        args = args[: args.index("--")]
    if not args or any(arg in NOT_SERVED for arg in args):
        return False
    command = next((arg for arg in args if not arg.startswith("-")), None)
    return command is not None and command not in NOT_SERVED_COMMANDS


def main() -> None:
    """Run ``arcana-loop`` with ``sys.argv``."""
    code = _run_by_the_worker() if is_served(sys.argv) else None
    if code is None:
        from arcana_loop.cli.main import app

        app(prog_name="arcana-loop")
    sys.exit(code)


def _run_by_the_worker() -> int | None:
    """The command's exit code from the warm worker; None: run it here (see `cli.warm.served`)."""
    from arcana_loop.cli import warm
    from arcana_loop.cli.settings import WARM_WORKER
    from arcana_loop.settings import SettingError

    try:
        enabled = WARM_WORKER.read()
    except SettingError as exc:
        from arcana_loop.cli.common import report

        report(str(exc))
        sys.exit(1)
    return warm.served(sys.argv) if enabled else None


if __name__ == "__main__":
    main()
