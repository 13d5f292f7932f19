"""The answer's text as a model writes it: tokens picked out of LangGraph's ``messages`` stream.

A run streamed with ``stream_mode="messages"`` yields every model token with the tags
of its call (`nodes.models`): the answer model's rewrite and the synthesis are tagged
``arcana_loop:answer`` and are the answer as written; the controller's calls are tagged
``arcana_loop:controller``, and hold the answer in two places, the ``text`` argument of
an ``answer`` tool call (streamed as JSON fragments) or the text of a reply that calls no
tool. `AnswerTokens` turns that stream into plain text deltas.

What streams is the answer as it is being written, which is not always the answer the
run ends with: an answer sent back to search first, or for a repair, is written again,
and text a model writes before calling a tool is no answer at all. A caller that shows
tokens compares what it showed with the result's answer when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessageChunk
from langchain_core.utils.json import parse_partial_json

from arcana_loop.core.text import scrub
from arcana_loop.nodes.models import ANSWER_TAG, CONTROLLER_TAG
from arcana_loop.tools import registry

OnToken = Callable[[str], None]
"""Told each new piece of the answer's text, in order."""


@dataclass
class _ToolCallText:
    """One streamed tool call: its name (from its first chunk), its argument text so far, the text told."""

    name: str | None = None
    arguments: str = ""
    told: str = ""


@dataclass
class AnswerTokens:
    """Picks the answer's tokens out of a run's ``messages`` stream and tells them to ``on_token``.

    Args:
        on_token: told each new piece of text.
        rewritten: an answer model rewrites the controller's answer, so only the
            calls tagged ``arcana_loop:answer`` are the answer (the controller's is a draft).
    """

    on_token: OnToken
    rewritten: bool = False
    _calls: dict[tuple[str | None, int], _ToolCallText] = field(default_factory=dict)

    def take(self, chunk: Any, metadata: Mapping[str, Any]) -> None:
        """Read one item of the ``messages`` stream (a complete message is no token, and is left)."""
        if not isinstance(chunk, AIMessageChunk):
            return
        tags = metadata.get("tags") or ()
        if ANSWER_TAG in tags:
            self._tell(chunk.text)
        elif CONTROLLER_TAG in tags and not self.rewritten:
            for piece in chunk.tool_call_chunks:
                self._tool_call(chunk.id, piece)
            if not chunk.tool_call_chunks:
                self._tell(chunk.text)

    def _tool_call(self, message_id: str | None, piece: Mapping[str, Any]) -> None:
        index = piece.get("index")
        call = self._calls.setdefault(
            (message_id, index if isinstance(index, int) else 0), _ToolCallText()
        )
        call.name = call.name or piece.get("name")
        call.arguments += piece.get("args") or ""
        tool = registry.get(call.name)
        argument = None if tool is None else tool.streamed_argument
        if argument is None:
            return
        parsed = parse_partial_json(call.arguments) if call.arguments else None
        text = parsed.get(argument) if isinstance(parsed, dict) else None
        if isinstance(text, str) and text and "\ud800" <= text[-1] <= "\udbff":
            # the arguments stop between the two escapes of a surrogate pair (``\\ud83d\\ude00``):
            # half a character is no text to tell, the pair's second half completes it
            text = text[:-1]
        if isinstance(text, str) and text.startswith(call.told) and len(text) > len(call.told):
            self._tell(text[len(call.told) :])
            call.told = text

    def _tell(self, text: str) -> None:
        if text:
            self.on_token(scrub(text))  # as the reply is kept: a lone surrogate cannot be printed
