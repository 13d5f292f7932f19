"""Scripted chat models and searches for tests: no network, every call recorded."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from pydantic import ConfigDict, Field

from arcana_loop.nodes.replying import ReplyingChatModel

_ids = itertools.count()


def tool_call(name: str, call_id: str | None = None, **args: Any) -> dict[str, Any]:
    """A tool call as LangChain represents it."""
    return {"name": name, "args": args, "id": call_id or f"call_{next(_ids)}", "type": "tool_call"}


def calls(*tool_calls: dict[str, Any], text: str = "") -> AIMessage:
    """An assistant message asking for tools."""
    return AIMessage(content=text, tool_calls=list(tool_calls))


def search(query: str, **args: Any) -> AIMessage:
    return calls(tool_call("search", query=query, **args))


def answer(text: str) -> AIMessage:
    return calls(tool_call("answer", text=text))


def give_up(reason: str) -> AIMessage:
    return calls(tool_call("give_up", reason=reason))


class ScriptedChatModel(ReplyingChatModel):
    """A chat model that replies from a script, one response per call.

    A response may be an `AIMessage`, a string (a plain text reply), an exception
    (raised), or a function of the received messages. Every call is recorded with
    the messages, the bound tools and the call's keyword arguments (temperature...).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responses: list[Any] = Field(default_factory=list)
    calls: list[dict[str, Any]] = Field(default_factory=list)
    bound_tools: list[Any] = Field(default_factory=list)
    repeat_last: bool = False

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:  # type: ignore[override]
        return _Bound(self, list(tools))

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        tools = kwargs.pop("tools", [])
        self.calls.append({"messages": list(messages), "tools": tools, "kwargs": kwargs})
        if not self.responses:
            raise AssertionError("the scripted model ran out of responses")
        response = (
            self.responses[0]
            if (self.repeat_last and len(self.responses) == 1)
            else self.responses.pop(0)
        )
        if callable(response) and not isinstance(response, BaseMessage):
            response = response(messages)
        if isinstance(response, BaseException):
            raise response
        if isinstance(response, str):
            return AIMessage(content=response)
        return response.model_copy()


def scripted(*responses: Any) -> ScriptedChatModel:
    """A scripted model replying with `responses`, one per call, in order."""
    return ScriptedChatModel(responses=list(responses))


class _Bound:
    """What `bind_tools` returns: invokes the model with the tools recorded."""

    def __init__(self, model: ScriptedChatModel, tools: list[Any]) -> None:
        self.model = model
        self.tools = tools
        model.bound_tools.append(tools)

    def invoke(self, messages: Any, config: Any = None, **kwargs: Any) -> Any:
        return self.model.invoke(messages, config, tools=self.tools, **kwargs)

    async def ainvoke(self, messages: Any, config: Any = None, **kwargs: Any) -> Any:
        return await self.model.ainvoke(messages, config, tools=self.tools, **kwargs)


def chunk(
    chunk_id: str, text: str | None = None, score: float = 0.5, **extra: Any
) -> dict[str, Any]:
    return {
        "id": chunk_id,
        "text": text if text is not None else f"text of {chunk_id}",
        "score": score,
        **extra,
    }


class ScriptedSearch:
    """A search function returning scripted results per call (or per query), recording each call."""

    def __init__(self, results: Sequence[Any] | Callable[..., Any] | dict[str, Any] = ()) -> None:
        self.results = results if callable(results) or isinstance(results, dict) else list(results)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, query: str, **kwargs: Any) -> Any:
        self.calls.append({"query": query, **kwargs})
        if callable(self.results):
            return self.results(query, **kwargs)
        if isinstance(self.results, dict):
            value = self.results.get(query, [])
        else:
            value = self.results.pop(0) if self.results else []
        if isinstance(value, BaseException):
            raise value
        return value
