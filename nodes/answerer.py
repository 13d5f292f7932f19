"""The ``answerer`` node: a stronger model rewrites the controller's draft answer.

Runs only after the controller called ``answer`` and an answer model is set. On
an error or an empty reply the draft stays: the user always gets an answer.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import LoopState
from arcana_loop.core.text import describe_error
from arcana_loop.nodes import prompts
from arcana_loop.nodes.budget import usage_of
from arcana_loop.nodes.common import (
    logger,
    loop_opts,
    render_instruction,
    system_message,
)
from arcana_loop.nodes.conversation import ANSWER_NAME, compact_earlier
from arcana_loop.nodes.conversation import instruction as instruction_message
from arcana_loop.nodes.deps import LoopDeps
from arcana_loop.nodes.models import ModelCaller
from arcana_loop.tools.scoping import scope_of


class AnswererUpdate(TypedDict, total=False):
    """What the answerer changes."""

    messages: list[BaseMessage]
    answer: str
    usage: dict[str, Any]


def _prepare(
    deps: LoopDeps, state: LoopState, ctx: LoopContext
) -> tuple[ModelCaller | None, list[BaseMessage], HumanMessage, dict[str, Any]]:
    opts = loop_opts(ctx, state, [], "answer")
    note = instruction_message(
        render_instruction(
            deps.answer_prompt, ctx.answer_prompt, prompts.ANSWER_PROMPT, opts, "answer_prompt"
        )
    )
    conversation = compact_earlier(
        state["messages"], state.get("question_message_id"), scope_of(state)
    )
    sent: list[BaseMessage] = [system_message(deps, ctx, state, opts), *conversation, note]
    try:
        model = deps.answerer(ctx)
    except Exception as exc:  # an answer model that cannot be created: keep the draft
        logger.warning("answer model unavailable, keeping the draft: %s", describe_error(exc))
        model = None
    return model, sent, note, opts


def _rewritten(instruction: HumanMessage, reply: AIMessage | BaseException) -> AnswererUpdate:
    if isinstance(reply, BaseException):
        logger.warning("answer model failed, keeping the draft: %s", describe_error(reply))
        return {}
    text = reply.text.strip()
    if not text:
        logger.warning("answer model returned no text, keeping the draft")
        return {}
    # the reply's id: a streaming client has its tokens under it
    # the reply's metadata says how it was made (an extracted answer: `core.sources.answer_kind`)
    written = AIMessage(
        content=text, id=reply.id, name=ANSWER_NAME, response_metadata=reply.response_metadata
    )
    return {
        "messages": [instruction, written],
        "answer": text,
        "usage": usage_of("answerer", reply),
    }


def answerer(state: LoopState, runtime: Runtime[LoopContext], *, deps: LoopDeps) -> AnswererUpdate:
    """Rewrite the draft answer with the answer model; on a failure or an empty reply the draft stays."""
    model, sent, instruction, opts = _prepare(deps, state, runtime.context)
    if model is None:
        return {}
    try:
        reply: AIMessage | BaseException = model.invoke(sent, [], opts)
    except Exception as exc:  # the draft is the fallback
        reply = exc
    return _rewritten(instruction, reply)
