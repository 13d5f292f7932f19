"""Token estimates for controllers that report no usage, such as the offline controller.

The offline controller never calls a model, so it has no token counts. To compare
options that change what the controller is sent (chunks shown once, the budget
ledger), `EstimatingOfflineController` attaches an *estimate* to each reply: about
four characters per token (the usual rule of thumb for English with BPE
tokenizers) over the message texts, tool calls and tool schemas a provider would
bill as input. The estimate is consistent across runs, not exact for any model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable

from arcana_loop.nodes.offline import OfflineController

CHARS_PER_TOKEN = 4
ESTIMATED_CONTROLLER = "offline-estimated"
"""Controller name in reports: the offline controller with estimated token usage."""


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of a text at `CHARS_PER_TOKEN` characters per token."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def message_tokens(message: BaseMessage) -> int:
    """Estimate the tokens of one message: its text plus any tool calls, as sent to a provider."""
    content = (
        message.content
        if isinstance(message.content, str)
        else json.dumps(message.content, default=str)
    )
    calls = getattr(message, "tool_calls", None) or []
    return estimate_tokens(content) + (
        estimate_tokens(json.dumps(calls, default=str)) if calls else 0
    )


class EstimatingOfflineController(OfflineController):
    """The offline controller, with estimated ``usage_metadata`` on every reply."""

    tool_schemas: list[Any] = []

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        """Return this model bound as the offline controller binds, keeping the schemas to count them as input."""
        bound = cast(EstimatingOfflineController, super().bind_tools(tools, **kwargs))
        return bound.model_copy(update={"tool_schemas": list(tools)})

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        """The offline controller's reply, carrying the estimated usage of the call."""
        reply = super()._reply(messages)
        schemas = (
            estimate_tokens(json.dumps(self.tool_schemas, default=str)) if self.tool_schemas else 0
        )
        input_tokens = sum(message_tokens(m) for m in messages) + schemas
        output_tokens = message_tokens(reply)
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
        return AIMessage(content=reply.content, tool_calls=reply.tool_calls, usage_metadata=usage)
