"""A chat model with no provider: each call answered by one message of the subclass's making.

The offline controller, the replay of a record, and the scripted models of tests and
benchmarks are all such models; LangChain asks each for the same `_generate`, written
here once.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class ReplyingChatModel(BaseChatModel):
    """A chat model that answers each call with one message of its own making, no provider.

    Subclasses write `_reply`. `bind_tools` returns the model itself: a recorded or
    scripted reply does not depend on the tools offered. The replay's model is one; the
    scripted models of tests and benchmarks build on it too.
    """

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """Return the model itself: the tools do not change its replies."""
        return self

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> BaseMessage:
        """The reply to one call, given its messages and the call's keyword arguments."""
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, **kwargs))])
