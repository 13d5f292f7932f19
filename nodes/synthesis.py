"""The ``synthesis`` node: one tool-less call that writes an answer when the turn budget ran out.

The writer is, in order: the ``synthesizer(messages, opts) -> str`` function given,
the answer model, the controller. A failure leaves ``answer`` as ``None``.
"""

from __future__ import annotations

import asyncio
import inspect
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
from arcana_loop.graph.routing import Routers
from arcana_loop.graph.state import LoopState, ToolEvent
from arcana_loop.nodes.common import (
    describe_error,
    emit,
    logger,
    loop_opts,
    message_text,
    render_instruction,
    system_message,
)
from arcana_loop.nodes.lifecycle import close_if_final, tool_call_event
from arcana_loop.tools.schemas import SYNTHESIS

NAME = "synthesis"
SUMMARY = "Synthesized from {count} chunks"


class SynthesisUpdate(TypedDict, total=False):
    """What the synthesis changes."""

    messages: list[BaseMessage]
    answer: str
    tool_history: list[ToolEvent]
    usage: dict[str, Any]
    error: str


SYNTHESIS_FAILED = "fallback synthesis failed: {reason}"
SYNTHESIS_EMPTY = "fallback synthesis returned no text"


class Synthesis:
    """The ``synthesis`` node's sync and async functions."""

    def __init__(self, deps: LoopDeps, routers: Routers) -> None:
        self.deps = deps
        self.routers = routers

    def _prepare(self, state: LoopState, runtime: Runtime[LoopContext]) -> tuple[list[BaseMessage], HumanMessage, dict[str, Any]]:
        ctx = runtime.context
        opts = loop_opts(ctx, state, [], "fallback")
        note = instruction_message(render_instruction(self.deps.synthesis_prompt, ctx.synthesis_prompt, prompts.SYNTHESIS_PROMPT, opts, "synthesis_prompt"))
        conversation = compact_earlier(state["messages"], state.get("question_message_id"))
        return [system_message(self.deps, ctx, state, opts), *conversation, note], note, opts

    def _writer(self, ctx: LoopContext) -> Any:
        return self.deps.answerer(ctx) or self.deps.controller(ctx)

    def _finish(self, state: LoopState, runtime: Runtime[LoopContext], instruction: HumanMessage, text: Any) -> SynthesisUpdate:
        update: SynthesisUpdate = {}
        if isinstance(text, BaseException):
            # the run ends without an answer; error says why (terminated_by stays max_iterations)
            update = {"error": SYNTHESIS_FAILED.format(reason=describe_error(text))}
            logger.warning("%s", update["error"])
        else:
            written = (message_text(text.content) if isinstance(text, AIMessage) else text) or ""
            if isinstance(written, str) and written.strip():
                count = len(state.get("chunks") or [])
                entry: ToolEvent = {
                    "tool": SYNTHESIS,
                    "args": {"text": written},
                    "iteration": state.get("iterations", 0),
                    "summary": SUMMARY.format(count=count),
                    "returned_chunk_ids": [],
                }
                # the reply's id: a streaming client has its tokens under it
                reply_id = text.id if isinstance(text, AIMessage) else None
                update = {
                    "messages": [instruction, AIMessage(content=written, id=reply_id, name=ANSWER_NAME)],
                    "answer": written,
                    "tool_history": [entry],
                    "usage": usage_of("synthesis", text),
                }
                emit(runtime, tool_call_event(entry, len(state.get("tool_history") or []) + 1))
            else:
                update = {"error": SYNTHESIS_EMPTY}
                logger.warning("%s", SYNTHESIS_EMPTY)
        view = {**state, **update, "messages": [*state["messages"][-1:], *update.get("messages", [])]}
        return cast(SynthesisUpdate, close_if_final(self.deps, runtime, cast(dict[str, Any], update), view, self.routers.finish(state)))

    def sync(self, state: LoopState, runtime: Runtime[LoopContext]) -> SynthesisUpdate:
        """Write the fallback answer."""
        sent, instruction, opts = self._prepare(state, runtime)
        result: Any
        try:
            if self.deps.synthesizer is not None:
                result = self.deps.synthesizer(sent, opts)
                if inspect.isawaitable(result):
                    result = asyncio.run(_await(result))
            else:
                result = self._writer(runtime.context).invoke(sent, [], opts)
        except Exception as exc:  # a failed synthesis leaves the answer unset
            result = exc
        return self._finish(state, runtime, instruction, result)

    async def async_(self, state: LoopState, runtime: Runtime[LoopContext]) -> SynthesisUpdate:
        """Write the fallback answer on the event loop."""
        sent, instruction, opts = self._prepare(state, runtime)
        result: Any
        try:
            if self.deps.synthesizer is not None:
                if inspect.iscoroutinefunction(self.deps.synthesizer):
                    result = await self.deps.synthesizer(sent, opts)
                else:
                    result = await asyncio.to_thread(self.deps.synthesizer, sent, opts)
            else:
                result = await self._writer(runtime.context).ainvoke(sent, [], opts)
        except Exception as exc:  # a failed synthesis leaves the answer unset
            result = exc
        return self._finish(state, runtime, instruction, result)


async def _await(value: Any) -> Any:
    return await value
