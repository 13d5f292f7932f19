"""The ``answerer`` node: a stronger model rewrites the controller's draft answer.

Runs only after the controller called ``answer`` and an answer model is set. On
an error or an empty reply the draft stays: the user always gets an answer.
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.graph import prompts
from arcana_loop.graph.budget import usage_of
from arcana_loop.graph.context import LoopContext
from arcana_loop.graph.conversation import ANSWER_NAME, compact_earlier
from arcana_loop.graph.conversation import instruction as instruction_message
from arcana_loop.graph.deps import LoopDeps
from arcana_loop.graph.models import ModelCaller
from arcana_loop.graph.routing import Routers
from arcana_loop.graph.state import LoopState
from arcana_loop.nodes.common import (
    describe_error,
    logger,
    loop_opts,
    message_text,
    render_instruction,
    system_message,
)
from arcana_loop.nodes.lifecycle import close_if_final

NAME = "answerer"


class AnswererUpdate(TypedDict, total=False):
    """What the answerer changes."""

    messages: list[BaseMessage]
    answer: str
    usage: dict[str, Any]


class Answerer:
    """The ``answerer`` node's sync and async functions."""

    def __init__(self, deps: LoopDeps, routers: Routers) -> None:
        self.deps = deps
        self.routers = routers

    def _prepare(self, state: LoopState, runtime: Runtime[LoopContext]) -> tuple[ModelCaller | None, list[BaseMessage], HumanMessage, dict[str, Any]]:
        ctx = runtime.context
        opts = loop_opts(ctx, state, [], "answer")
        note = instruction_message(render_instruction(self.deps.answer_prompt, ctx.answer_prompt, prompts.ANSWER_PROMPT, opts, "answer_prompt"))
        conversation = compact_earlier(state["messages"], state.get("question_message_id"))
        sent: list[BaseMessage] = [system_message(self.deps, ctx, state, opts), *conversation, note]
        try:
            model = self.deps.answerer(ctx)
        except Exception as exc:  # an answer model that cannot be created: keep the draft
            logger.warning("answer model unavailable, keeping the draft: %s", describe_error(exc))
            model = None
        return model, sent, note, opts

    def _finish(self, state: LoopState, runtime: Runtime[LoopContext], instruction: HumanMessage, reply: AIMessage | BaseException | None) -> AnswererUpdate:
        update: AnswererUpdate = {}
        if isinstance(reply, BaseException):
            logger.warning("answer model failed, keeping the draft: %s", describe_error(reply))
        elif reply is not None:
            text = message_text(reply.content).strip()
            if text:
                # the reply's id: a streaming client has its tokens under it
                written = AIMessage(content=text, id=reply.id, name=ANSWER_NAME)
                update = {"messages": [instruction, written], "answer": text, "usage": usage_of("answerer", reply)}
            else:
                logger.warning("answer model returned no text, keeping the draft")
        view = {**state, **update, "messages": [*state["messages"][-1:], *update.get("messages", [])]}
        return cast(AnswererUpdate, close_if_final(self.deps, runtime, cast(dict[str, Any], update), view, self.routers.finish(state)))

    def sync(self, state: LoopState, runtime: Runtime[LoopContext]) -> AnswererUpdate:
        """Rewrite the answer."""
        model, sent, instruction, opts = self._prepare(state, runtime)
        reply: AIMessage | BaseException | None = None
        if model is not None:
            try:
                reply = model.invoke(sent, [], opts)
            except Exception as exc:  # the draft is the fallback
                reply = exc
        return self._finish(state, runtime, instruction, reply)

    async def async_(self, state: LoopState, runtime: Runtime[LoopContext]) -> AnswererUpdate:
        """Rewrite the answer on the event loop."""
        model, sent, instruction, opts = self._prepare(state, runtime)
        reply: AIMessage | BaseException | None = None
        if model is not None:
            try:
                reply = await model.ainvoke(sent, [], opts)
            except Exception as exc:  # the draft is the fallback
                reply = exc
        return self._finish(state, runtime, instruction, reply)
