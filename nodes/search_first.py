"""Search before answering: an answer that rests on no search is sent back once (the `SearchFirst` policy).

A small model asked a factual question often answers from its own memory without
searching; a loop that accepts that is no retrieval engine. With ``require_search``
``"on"``, an ``answer`` call or a plain-text reply that comes before any evidence tool
(``search`` or a custom tool) goes back to the controller once with a note to search first; if the model answers again
without searching, that answer is taken (the result's ``grounded_in_chunks`` then says
it rests on no chunk). ``"auto"`` (the default) does the same unless the question is
small talk (a greeting, thanks, "who are you"), which needs no search; ``"off"``
accepts any answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import SYNTHESIS, LoopState
from arcana_loop.nodes import prompts
from arcana_loop.nodes.budget import turn_limit
from arcana_loop.nodes.policy import Policy, PolicyView
from arcana_loop.tools import registry
from arcana_loop.tools.base import CallOutcome

SEARCH_FIRST = (
    "Not answered yet: you have not searched the knowledge base. Search it first and answer from what "
    "it returns; answer without searching only if the question needs nothing from the knowledge base."
)
"""The tool result of an answer call sent back because no search came before it."""

_GREETING = r"(?:hi|hello|hey|hiya|howdy|yo|greetings|good (?:morning|afternoon|evening|day))(?: there| all| everyone| you)?"
_THANKS = r"(?:thanks|thank you|thx|ty|cheers|many thanks)(?: (?:a lot|so much|very much|again))?(?: for (?:your|the|all the) help)?"
_IDENTITY = r"(?:who|what) are you|what(?: is|s) your name|how are you(?: doing)?|what can you do|nice to meet you"
_FAREWELL = r"(?:bye|goodbye|see you|ok(?:ay)?|great|cool|nice)"
_SMALL_TALK = re.compile(rf"(?:(?:{_GREETING}|{_THANKS}|{_IDENTITY}|{_FAREWELL})\s*)+")
_NOT_WORDS = re.compile(r"[^\w\s']+")
MAX_SMALL_TALK_WORDS = 12
"""A longer question is never small talk, whatever it starts with."""


def is_small_talk(question: str) -> bool:
    """Whether a question is only greetings, thanks or questions about the assistant itself.

    ``"Hello!"``, ``"thanks a lot"``, ``"Hi, who are you?"`` are; ``"hi, what is asyncio?"`` is not.
    """
    words = _NOT_WORDS.sub(" ", question.casefold().replace("\u2019", "'")).replace("'", "").split()
    if not words or len(words) > MAX_SMALL_TALK_WORDS:
        return False
    return _SMALL_TALK.fullmatch(" ".join(words) + " ") is not None


def search_required(ctx: LoopContext, question: str) -> bool:
    """Whether this run's answers must come after a search (``require_search``, with ``auto`` read for this question)."""
    match ctx.require_search:
        case "off":
            return False
        case "on":
            return True
        case _:
            return not is_small_talk(question)


def has_gathered(history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the controller has called an evidence tool in this run: ``search`` or a custom one.

    Only the control tools (``answer``, ``give_up``) and the synthesis step gather nothing; a custom
    tool (a ``web_search``, a database lookup) brings evidence as a search does. A
    failed or repeated call counts: it tried.
    """
    return any(entry["tool"] != SYNTHESIS and registry.gathers(entry["tool"]) for entry in history)


def should_send_back(view: PolicyView) -> bool:
    """Whether an answer made now, with no search before it, goes back to the controller.

    Only once per run, only when ``search`` is offered, and only when at least two
    turns are left (one to search, one to answer): sent back with fewer, the answer
    would be lost to the turn budget.
    """
    state = view.state
    return (
        registry.offers_search(view.offered)
        and not state.get("search_nudged")
        and not has_gathered(state.get("tool_history") or [])
        and turn_limit(state, view.ctx) - view.turn >= 2
        and search_required(view.ctx, state["question"])
    )


def sent_back_last_turn(state: LoopState) -> bool:
    """Whether the last turn's plain-text reply was sent back to search first (it is the last message)."""
    messages = state.get("messages") or []
    return (
        bool(state.get("search_nudged"))
        and bool(messages)
        and isinstance(messages[-1], AIMessage)
        and not (messages[-1].tool_calls or messages[-1].invalid_tool_calls)
    )


class SearchFirst(Policy):
    """An answer before any evidence goes back once: a plain-text reply, or the turn's first answer call."""

    def after_model(self, view: PolicyView, reply: AIMessage) -> dict[str, Any] | None:
        """A plain-text answer sent back: no outcome, and the next turn is told to search first."""
        return {"search_nudged": True} if should_send_back(view) else None

    def prompt_note(self, view: PolicyView) -> str:
        """After a plain-text answer was sent back, the system prompt says so.

        A note there, not a forged user turn, keeps the conversation the user's.
        """
        return prompts.SEARCH_FIRST_NOTE if sent_back_last_turn(view.state) else ""

    def before_tools(
        self, view: PolicyView, calls: Sequence[Mapping[str, Any]], builtins: frozenset[str]
    ) -> Mapping[str, CallOutcome]:
        """The turn's first answer call, unless a search comes before it, goes back (`SEARCH_FIRST`).

        Any search, a custom one included, lets a later answer through; an answer the
        model sends again after that is taken.
        """
        if not should_send_back(view):
            return {}
        for call in calls:
            name = str(call["name"])
            if registry.is_search(name):
                return {}
            if name in builtins and registry.ends_as(name) == "answered":
                call_id = str(call["id"])
                args = dict(call.get("args") or {})
                return {
                    call_id: CallOutcome(
                        call_id, name, args, SEARCH_FIRST, SEARCH_FIRST, sent_back=True
                    )
                }
        return {}
