"""The benchmarks' instant chat model: its reply depends only on how many turns came before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from arcana_loop.nodes.replying import ReplyingChatModel


class TurnScriptedModel(ReplyingChatModel):
    """Replies ``script(turn)``, where ``turn`` counts the assistant messages already sent.

    Being stateless, one instance serves every run of every variant, with no reset.
    ``bind_tools`` returns the model itself, so no variant pays for a binding layer the
    others skip.
    """

    script: Callable[[int], AIMessage]

    @property
    def _llm_type(self) -> str:
        return "turn-scripted"

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> BaseMessage:
        return self.script(sum(isinstance(m, AIMessage) for m in messages))
