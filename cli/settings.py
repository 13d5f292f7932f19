"""The command line's own settings, each one `Setting` declaration (`arcana_loop.settings`).

Kept apart from `knowledge.settings` because the `arcana-loop` entry point reads them
before it imports anything else: importing that package would load the knowledge base.
"""

from __future__ import annotations

from arcana_loop.settings import Setting

__all__ = ["CLI_SETTINGS", "WARM_WORKER"]

WARM_WORKER = Setting(
    env="ARCANA_LOOP_WARM_WORKER",
    kind=bool,
    default=True,
    help="run commands in a resident process that has the loop imported (default on; `cli.warm`)",
)

CLI_SETTINGS = (WARM_WORKER,)
"""Every setting of the command line, in the order the README's table lists them."""
