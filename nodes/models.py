"""Chat models: turn any accepted model spec into one calling convention, and every reply into one the loop can keep.

A spec is a ``"provider:model"`` string (LangChain's ``init_chat_model``), a
``("provider:model", {kwargs})`` pair, a LangChain chat model instance, or a
callable ``(messages, tools, opts) -> AIMessage`` (sync or async). Each becomes a
`ModelCaller` with ``invoke(messages, tools, opts)``.

This is the model boundary: whatever a model sends back is cleaned up here, once,
before any node reads it (`kept_reply`): lone surrogates scrubbed, every tool call
given a unique id, arguments too deep or too large to keep refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, InvalidToolCall
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config

from arcana_loop.core import bridge
from arcana_loop.core.text import scrub, scrub_deep
from arcana_loop.core.usage import streams_usage
from arcana_loop.providers import ProviderErrors, from_provider
from arcana_loop.settings import MODEL_SPEC, MODEL_SPEC_SHAPE
from arcana_loop.tools.arguments import (
    KEPT_ARGUMENT_CHARS,
    REFUSED_MARK,
    kept_arguments,
    oversized_arguments,
)
from arcana_loop.tools.base import ToolSchema

ModelSpec = str | tuple[Any, Mapping[str, Any]] | BaseChatModel | Callable[..., Any]

OFFLINE = "offline"
"""The model spec of the offline, deterministic controller (no network, no key)."""


class ModelSpecError(ValueError):
    """A model spec that cannot be turned into a model."""


class ModelReplyError(RuntimeError):
    """A model call that returned something other than an assistant message."""


EMPTY_REPLY = "the model returned an empty reply (no choices)"

_SCRUBBED_FIELDS = (
    "content",
    "tool_calls",
    "invalid_tool_calls",
    "additional_kwargs",
    "response_metadata",
)


def kept_reply(reply: Any, opts: Mapping[str, Any]) -> AIMessage:
    """Return a model's reply as the loop keeps it: scrubbed, every tool call with its own id, bounded.

    Raises:
        ModelReplyError: for a reply that is no assistant message (nor text).
    """
    if isinstance(reply, str):
        return AIMessage(content=scrub(reply))
    if not isinstance(reply, AIMessage):
        raise ModelReplyError(f"the model returned {type(reply).__name__}, expected an AIMessage")
    return bound_arguments(normalize_reply(scrub_reply(reply), int(opts.get("iterations") or 0)))


def scrub_reply(reply: AIMessage) -> AIMessage:
    """Return the reply with lone surrogates replaced by U+FFFD (see ``core.text``).

    A provider may send them as JSON escapes; stored as they are, they would break the
    checkpointer and the message ids. The reply itself is returned when it holds none.
    """
    update = {
        name: scrubbed
        for name in _SCRUBBED_FIELDS
        if (scrubbed := scrub_deep(value := getattr(reply, name))) is not value
    }
    for name in ("id", "name"):
        value = getattr(reply, name)
        if isinstance(value, str) and scrub(value) is not value:
            update[name] = scrub(value)
    return reply.model_copy(update=update) if update else reply


def normalize_reply(reply: AIMessage, iteration: int) -> AIMessage:
    """Give every tool call a unique, non-empty id, so each can be answered by a tool message."""
    seen: set[str] = set()
    fixed: list[dict[str, Any]] = []
    for index, call in enumerate([*reply.tool_calls, *reply.invalid_tool_calls]):
        call_id = call.get("id") or f"call_{iteration}_{index}"
        while call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        fixed.append({**call, "id": call_id})
    originals = [c.get("id") for c in [*reply.tool_calls, *reply.invalid_tool_calls]]
    if originals == [c["id"] for c in fixed]:
        return reply
    count = len(reply.tool_calls)
    return reply.model_copy(
        update={"tool_calls": fixed[:count], "invalid_tool_calls": fixed[count:]}
    )


def bound_arguments(reply: AIMessage) -> AIMessage:
    """Refuse tool calls whose arguments are too deep or too large to keep, keeping a bounded copy.

    Such a call becomes an invalid call (answered with a tool error, never run) whose
    arguments are bounded JSON text; the raw calls in ``additional_kwargs`` are bounded
    too. Kept whole, ~250 levels of nesting cannot be checkpointed and megabytes of
    arguments would be stored and sent again every turn. Ids must already be unique.
    """
    kept, refused = [], []
    for call in reply.tool_calls:
        reason = oversized_arguments(call["args"])
        if reason is None:
            kept.append(call)
        else:
            refused.append(
                invalid_tool_call(
                    name=call["name"],
                    args=kept_arguments(call["args"]),
                    id=call["id"],
                    error=REFUSED_MARK + reason,
                )
            )
    invalid = [_bounded_invalid(call) for call in reply.invalid_tool_calls]
    changed = [
        call
        for call, original in zip(invalid, reply.invalid_tool_calls, strict=True)
        if call is not original
    ]
    if not refused and not changed:
        return reply
    bounded_ids = {call["id"] for call in [*refused, *changed]}
    update: dict[str, Any] = {"tool_calls": kept, "invalid_tool_calls": [*refused, *invalid]}
    raw = reply.additional_kwargs.get("tool_calls")
    if isinstance(raw, list):
        update["additional_kwargs"] = {
            **reply.additional_kwargs,
            "tool_calls": [_bounded_raw(c, bounded_ids) for c in raw],
        }
    return reply.model_copy(update=update)


def _bounded_invalid(call: InvalidToolCall) -> InvalidToolCall:
    """An invalid call with its raw arguments and error cut to a bound (the same call when within it)."""
    args, error = call.get("args"), call.get("error")
    long_args = isinstance(args, str) and len(args) > KEPT_ARGUMENT_CHARS
    long_error = isinstance(error, str) and len(error) > KEPT_ARGUMENT_CHARS
    if not (long_args or long_error):
        return call
    return {
        **call,
        "args": kept_arguments(args) if long_args else args,
        "error": kept_arguments(error) if long_error else error,
    }


def _bounded_raw(call: Any, ids: set[str | None]) -> Any:
    """A provider's raw tool call, its arguments text bounded when the call was bounded."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("id") not in ids:
        return call
    return {
        **call,
        "function": {**function, "arguments": kept_arguments(function.get("arguments") or "")},
    }


def _empty_reply(exc: IndexError) -> ModelReplyError:
    """The error for a reply with no generation: LangChain indexes the first one, and an empty list raises."""
    return ModelReplyError(f"{EMPTY_REPLY}: {type(exc).__name__}: {exc}")


CONTROLLER_TAG = "arcana_loop:controller"
"""The tag of the controller's model calls: its tokens are tool calls, or the answer in a plain-text reply."""
ANSWER_TAG = "arcana_loop:answer"
"""The tag of the calls that write the user-facing answer (the answer model's rewrite, the synthesis)."""


def stream_config(opts: Mapping[str, Any]) -> RunnableConfig:
    """The config of one model call: the node's, with the role's tag added.

    ``stream_mode="messages"`` puts the tags in each token's metadata (``metadata["tags"]``),
    so a client can tell the answer's tokens from the controller's. Only ``tags`` is set:
    callbacks and metadata stay the node's, as inherited.
    """
    tag = CONTROLLER_TAG if opts.get("role", "controller") == "controller" else ANSWER_TAG
    inherited = ensure_config().get("tags") or []
    return {"tags": [*inherited, tag]}


def _temperature_kwargs(opts: Mapping[str, Any]) -> dict[str, Any]:
    temperature = opts.get("temperature")
    return {} if temperature is None else {"temperature": temperature}


@dataclass
class ChatModelCaller:
    """Calls a LangChain chat model with the offered tools bound."""

    model: BaseChatModel
    name: str

    def _runnable(self, tools: Sequence[ToolSchema]) -> Runnable[Any, Any]:
        return self.model.bind_tools(list(tools)) if tools else self.model

    def invoke(
        self, messages: list[BaseMessage], tools: Sequence[ToolSchema], opts: Mapping[str, Any]
    ) -> AIMessage:
        """Call the model once.

        Raises:
            ModelReplyError: for a reply with no choices (``choices: []`` from an OpenAI-compatible provider).
        """
        try:
            reply = self._runnable(tools).invoke(
                messages, stream_config(opts), **_temperature_kwargs(opts)
            )
        except IndexError as exc:
            raise _empty_reply(exc) from exc
        return kept_reply(reply, opts)


@dataclass
class FunctionCaller:
    """Calls a plain function ``(messages, tools, opts) -> AIMessage``, sync or async."""

    fn: Callable[..., Any]
    name: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def _opts(self, opts: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.extra, **opts}

    def invoke(
        self, messages: list[BaseMessage], tools: Sequence[ToolSchema], opts: Mapping[str, Any]
    ) -> AIMessage:
        """Call the function; an ``async def`` one is awaited through `core.bridge`."""
        return kept_reply(bridge.call(self.fn, messages, list(tools), self._opts(opts)), opts)


ModelCaller = ChatModelCaller | FunctionCaller


MODEL_SPEC_ERRORS = ProviderErrors(
    ModelSpecError,
    missing_package="model spec {spec} needs a provider package that is not installed: {exc}",
    unusable="model spec {spec} is not usable: {exc}",
    # provider clients raise their own types, e.g. for a missing API key
    failed="model {spec} could not be created: {kind}: {exc}",
)
"""How a chat model that cannot be made from its spec is said: always a `ModelSpecError`."""


def check_model_spec(spec: str) -> None:
    """Raise `ModelSpecError` for a string that names no model: not 'provider:model' nor 'offline'."""
    if not MODEL_SPEC.fullmatch(spec):
        raise ModelSpecError(f"model spec {spec!r} is not of the form {MODEL_SPEC_SHAPE}")


def _init_chat_model(spec: str, kwargs: Mapping[str, Any]) -> BaseChatModel:
    if spec == OFFLINE:
        from arcana_loop.nodes.offline import OfflineController

        offline: BaseChatModel = OfflineController(**kwargs)
        return offline
    check_model_spec(spec)
    from langchain.chat_models import init_chat_model

    model: BaseChatModel = from_provider(init_chat_model, spec, kwargs, MODEL_SPEC_ERRORS)
    return model


def resolve_model(spec: ModelSpec) -> ModelCaller:
    """Turn a model spec into a `ModelCaller`.

    Raises:
        ModelSpecError: for a malformed string, an unknown provider or a client that
            cannot be created (a missing API key, for instance).
        TypeError: for a value that is no model spec at all.
    """
    if isinstance(spec, BaseChatModel):
        return ChatModelCaller(streams_usage(spec), name=type(spec).__name__)
    if isinstance(spec, str):
        return ChatModelCaller(streams_usage(_init_chat_model(spec, {})), name=spec)
    if isinstance(spec, tuple):
        pair: tuple[Any, ...] = spec
        if len(pair) != 2 or not isinstance(pair[1], Mapping):
            raise TypeError("a model pair must be ('provider:model', {kwargs})")
        target, kwargs = spec
        if isinstance(target, str):
            return ChatModelCaller(streams_usage(_init_chat_model(target, kwargs)), name=target)
        if callable(target) and not isinstance(target, BaseChatModel):
            return FunctionCaller(
                target, name=getattr(target, "__name__", "function"), extra=dict(kwargs)
            )
        raise TypeError(
            "the first item of a model pair must be a 'provider:model' string or a function"
        )
    if callable(spec):
        return FunctionCaller(spec, name=getattr(spec, "__name__", type(spec).__name__))
    raise TypeError(
        "a model must be a 'provider:model' string, a (spec, kwargs) pair, a LangChain chat model "
        f"or a function (messages, tools, opts) -> AIMessage; got {type(spec).__name__}"
    )


_cache: dict[str, ModelCaller] = {}
_cache_lock = threading.Lock()


def cached_model(spec: str) -> ModelCaller:
    """Resolve a model spec string once per process (server runs name models by string)."""
    caller = _cache.get(spec)
    if caller is None:
        with _cache_lock:
            caller = _cache.get(spec) or resolve_model(spec)
            _cache[spec] = caller
    return caller


def default_controller_spec() -> str:
    """Return the controller used when none is configured.

    ``openai:gpt-4o-mini`` when ``OPENAI_API_KEY`` is set (``OPENAI_BASE_URL`` is
    honoured by the client), otherwise the offline controller.
    """
    import os

    return "openai:gpt-4o-mini" if os.environ.get("OPENAI_API_KEY") else OFFLINE
