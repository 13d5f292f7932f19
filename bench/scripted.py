"""The benchmarks' instant chat model: its reply depends only on how many turns came before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class TurnScriptedModel(BaseChatModel):
    """Replies ``script(turn)``, where ``turn`` counts the assistant messages already sent.

    Being stateless, one instance serves every run of every variant, with no reset.
    ``bind_tools`` returns the model itself, so no variant pays for a binding layer the
    others skip.
    """

    script: Callable[[int], AIMessage]

    @property
    def _llm_type(self) -> str:
        return "turn-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # the script knows its tools
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        return ChatResult(generations=[ChatGeneration(message=self.script(turn))])
