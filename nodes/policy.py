"""What a policy is: one rule of the loop as one object with named hooks around the model call and the tools.

The graph is built with its policies listed once (``graph/build.py``: the budget
ledger, the duplicate-search guard, search-before-answer and the evidence repair);
the ``controller``, ``tools`` and ``ground`` nodes call the hooks of every policy, in
that order, and never one policy by name. Every hook does nothing by default, so a
policy overrides only the moments it acts at:

- ``before_model``: before the controller's call, an update that ends the turn instead;
- ``prompt_slots`` and ``prompt_note``: what it adds to the system prompt;
- ``after_model``: after a plain-text reply, an update that keeps the loop going instead of answering;
- ``before_tools``: tool calls it settles itself, before they are planned;
- ``after_plan``: the turn's planned calls, as it changes them before they run;
- ``after_ground``: what it adds to the ``ground`` node's update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from langchain_core.messages import AIMessage

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopState
from arcana_loop.tools.base import CallOutcome, Planned
from arcana_loop.tools.scoping import Scope, scope_of


@dataclass(frozen=True)
class PolicyView:
    """What a hook reads: the state, the run's options, the turn (counting the one under way), the tools offered."""

    state: LoopState
    ctx: LoopContext
    turn: int
    offered: Sequence[str] = ()

    @cached_property
    def scope(self) -> Scope:
        """The question's scope."""
        return scope_of(self.state)


class Policy:
    """A rule of the loop: override the hooks it acts at (see the module's docstring)."""

    def before_model(self, view: PolicyView) -> dict[str, Any] | None:
        """Return an update that ends the turn before the controller is called, or ``None``."""
        return None

    def prompt_slots(self, view: PolicyView) -> Mapping[str, str]:
        """Return the slots of the default system prompt it fills (``nodes.prompts.SLOT_DEFAULTS``)."""
        return {}

    def prompt_note(self, view: PolicyView) -> str:
        """Return text added to the end of the system prompt, whichever prompt the run uses."""
        return ""

    def after_model(self, view: PolicyView, reply: AIMessage) -> dict[str, Any] | None:
        """Return an update that keeps the loop going instead of taking a plain-text reply as the answer."""
        return None

    def before_tools(
        self, view: PolicyView, calls: Sequence[Mapping[str, Any]], builtins: frozenset[str]
    ) -> Mapping[str, CallOutcome]:
        """Return the outcomes of tool calls it settles itself, by call id (``builtins``: the built-ins offered)."""
        return {}

    def after_plan(self, view: PolicyView, planned: list[Planned]) -> list[Planned]:
        """Return the turn's planned calls as they should run."""
        return planned

    def after_ground(self, view: PolicyView, grounding: dict[str, Any] | None) -> dict[str, Any]:
        """Return what it adds to the ``ground`` node's update."""
        return {}


def first_update(updates: Any) -> dict[str, Any] | None:
    """Return the first update a hook gave over the policies (later policies are not asked)."""
    return next((update for update in updates if update is not None), None)
