"""Conversations on a thread: questions one after another, each answered as an assistant message.

A thread holds one conversation. A run on a thread that already holds one starts a new
question in it when its input brings a new human message (chat clients send
``{"messages": [...]}``) or a ``question`` (programmatic callers), and also whenever the
thread's last question has ended (answered, given up, failed, out of budget): a
finished question is never continued, so a run never returns a stale answer. A run
on an interrupted question with the same question and scope (and no new message)
continues it, with the tool calls it was running when it stopped.

What a new question keeps and what starts fresh:

* ``messages`` keeps the whole conversation (tool calls and results included, for
  debugging). The models are sent the earlier questions compacted: their search
  results by chunk id and source only (`compact_earlier`), their answer-writing
  instructions dropped; each earlier answer is sent whole.
* A question's human message records the scope it was asked under (the collections it
  could read, ``additional_kwargs[SCOPE_KEY]``, the run's ``collection`` as a caller
  passes it). Everything after a question's text was written by the loop or a model
  that read its collections (queries, results, a give-up's reason, drafts, answers,
  other tools' results), so the rule is by scope, not by kind of message: an earlier
  question whose collections are not all within the new question's scope (its recorded
  scope, and any collection its search results came from) is sent to every model of the
  new question (controller, answer model, synthesis; the grounding judge reads only the
  new question's own answer and chunks) as its question text, which the user wrote, and
  `OUT_OF_SCOPE_ANSWER` for the rest. A question without a recorded scope (history a
  client sent, or one asked before scopes were recorded) counts as asked on every
  collection. An interrupted question is carried on only under the scope it was asked
  under, so that what it writes stays under the scope it is judged by.
* ``question``, ``answer``, ``terminated_by``, ``error``, ``grounding``, ``coverage``,
  ``repair``, ``iterations``, ``tool_history``, ``usage`` and ``chunks`` are the current
  question's. The earlier questions' chunks are not kept as evidence: a follow-up that
  needs their text searches again (their ids stay in the conversation), so a question's
  ``chunks`` and its grounding are what its own searches found.
* Budgets (``max_iterations``, ``max_tokens_total``, ``max_seconds``) apply per question;
  ``thread_usage`` sums every question's usage.

Each question ends with an assistant message holding the answer text, named
``answer`` (`ANSWER_NAME`): the answer tool's text, the answer model's or the synthesis'
reply, the controller's plain-text reply, or, without an answer, why there is none.

Streaming (``stream_mode="messages"``, ``"messages-tuple"`` on a server): the answer
model's and the synthesis' tokens carry the tag ``arcana_loop:answer`` in their
metadata's ``tags``, the controller's the tag ``arcana_loop:controller``
(``nodes.models``). A client that shows only the answer shows the chunks tagged
``arcana_loop:answer``, the controller's text chunks of a reply that has no tool
calls (a plain-text answer), and any complete assistant message named ``answer``
(the ``answer`` tool's text, a give-up or an error, which arrive whole, once); a
streamed answer keeps its id in the conversation, so it is never sent twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from arcana_loop.core.channels import USAGE_RESET, replacing
from arcana_loop.core.sources import Source, answer_content, answer_text
from arcana_loop.core.state import LoopState
from arcana_loop.core.text import MAX_QUESTION_CHARS
from arcana_loop.tools import registry
from arcana_loop.tools.chunks import compacted_search_result, is_search_artifact
from arcana_loop.tools.scoping import Scope, normalize_scope

ANSWER_NAME = "answer"
"""The ``name`` of the assistant message that closes each question with its answer."""
INSTRUCTION_ID_PREFIX = "do-not-render-"
"""Id prefix of the instructions the loop writes as human turns (answer rewrite, synthesis).

agent-chat-ui hides messages with this id prefix, and a new question is never read from them."""
CLOSING_ID_PREFIX = "answer-"
"""Id prefix of the closing messages the loop writes itself (a model's reply keeps its own id)."""
NO_QUESTION = "the run input needs a 'question' (a non-empty string) or 'messages' ending with a human message with text"
NOT_RUN = "Not run: the question was left unfinished."
UNFINISHED = "The question was left unfinished: the run stopped before an answer."
MAX_SENT_MESSAGE_CHARS = MAX_QUESTION_CHARS
"""Longest message text a model is sent; a longer one (only a client can send one) is cut."""
CUT_MESSAGE = "[... cut: {more:,} more characters]"
CARRIED_CONVERSATION_CHARS = 40_000
"""How much of the earlier questions (compacted) a model is sent; older ones are left out first."""
OUT_OF_SCOPE_ANSWER = (
    "(Earlier answer withheld: that question was asked on collections outside this one's scope.)"
)
"""What an earlier question on collections outside the new question's scope is sent as, after its text."""
SCOPE_KEY = "arcana_loop_scope"
"""The key, in a question's human message's ``additional_kwargs``, of the scope it was asked under."""
_QUESTION_IDS = uuid.UUID("a3f1c2d4-5b6e-4f70-8a9b-0c1d2e3f4a5b")

NO_ANSWER = {
    "gave_up": "I could not find an answer in the knowledge base: {reason}",
    "error": "The run failed before an answer: {error}",
    "max_iterations": "No answer within the run's budget ({stop}).",
}


def instruction(text: str) -> HumanMessage:
    """Return an answer-writing instruction as a human turn the chat clients hide."""
    return HumanMessage(content=text, id=f"{INSTRUCTION_ID_PREFIX}{uuid.uuid4()}")


def is_instruction(message: BaseMessage) -> bool:
    """Whether a message is one of the loop's own instructions (not the user's)."""
    return isinstance(message.id, str) and message.id.startswith(INSTRUCTION_ID_PREFIX)


def is_user_turn(message: BaseMessage) -> bool:
    """Whether a message is a question of the user's."""
    return isinstance(message, HumanMessage) and not is_instruction(message)


def opening_index(messages: Sequence[BaseMessage], opening_id: str | None) -> int | None:
    """The position of the current question's human message, or ``None``."""
    if opening_id is None:
        return None
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id == opening_id:
            return index
    return None


@dataclass(frozen=True)
class NewQuestion:
    """A question a run starts on its thread."""

    text: str
    message: HumanMessage
    """Its human message, recording the scope it is asked under (`SCOPE_KEY`)."""
    appended: bool
    """Whether the message is new to the conversation (a ``question``); a chat client's is
    in it already, and this copy of it replaces it."""
    index: int
    """Its 0-based number in the thread."""

    @property
    def message_id(self) -> str:
        """The id of its human message."""
        return str(self.message.id)


def new_question(state: LoopState, scope: Scope) -> NewQuestion | None:
    """Return the question a run under ``scope`` starts, or ``None`` when it continues the current one.

    Raises:
        ValueError: when a question must start and the input holds none.
    """
    messages: list[AnyMessage] = list(state.get("messages") or [])
    opening_id = state.get("question_message_id")
    opening = opening_index(messages, opening_id)
    index = int(state.get("question_index") or 0) + 1 if opening_id is not None else 0
    start = 0 if opening is None else opening + 1
    asked = [m for m in messages[start:] if isinstance(m, HumanMessage) and is_user_turn(m)]
    if asked:  # a chat client's message: it is in the conversation already
        return NewQuestion(asked[-1].text, _asked_under(asked[-1], scope), False, index)
    question = state.get("question")
    if (
        opening is not None
        and state.get("terminated_by") is None
        and question == messages[opening].text
        # what it wrote so far read its own scope's collections: carried on under another,
        # later questions would judge it by the wrong one
        and _readable(scope) == asked_scope(messages[opening])
    ):
        return None  # an interrupted question, asked again: carry on
    if not isinstance(question, str):
        if "question" in state and question is not None:
            raise TypeError(f"question must be a string, got {type(question).__name__}")
        raise ValueError(NO_QUESTION)
    message = HumanMessage(
        content=question, id=str(uuid.uuid5(_QUESTION_IDS, f"{len(messages)}:{question}"))
    )
    return NewQuestion(question, _asked_under(message, scope), True, index)


def _asked_under(message: HumanMessage, scope: Scope) -> HumanMessage:
    """A question's human message recording ``scope`` (whatever a client sent under that key is replaced)."""
    kwargs = {**message.additional_kwargs, SCOPE_KEY: scope.to_value()}
    return message.model_copy(update={"additional_kwargs": kwargs})


def asked_scope(message: BaseMessage) -> frozenset[str] | None:
    """The collections a question could read, from its human message; ``None`` for every one.

    A message without a valid recorded scope counts as asked on every collection: what
    followed it may hold any collection's text.
    """
    if not is_user_turn(message) or SCOPE_KEY not in message.additional_kwargs:
        return None
    try:
        return _readable(normalize_scope(message.additional_kwargs[SCOPE_KEY]))
    except (TypeError, ValueError):
        return None


def _readable(scope: Scope | None) -> frozenset[str] | None:
    """The collections a scope reads; ``None`` for every one."""
    if scope is None or scope.kind == "all":
        return None
    return frozenset(scope.names)


QUESTION_DEFAULTS: dict[str, Any] = {
    "iterations": 0,
    "terminated_by": None,
    "answer": None,
    "error": None,
    "grounding": None,
    "coverage": None,
    "repair": None,
    "repairs": 0,
    "budget_stop": None,
    "search_nudged": False,
    "evidence": [],
    "stale_evidence": None,
}
"""The per-question fields as a question starts (besides its tool history, chunks and usage)."""


def fresh_state(asked: NewQuestion, state: LoopState) -> dict[str, Any]:
    """Return the writes that start a question: its text and opening, and every per-question field afresh.

    Only fields that hold something are written, which keeps a long conversation's
    checkpoints small (a result field no step wrote is written once a thread, by the
    first question's `finish`).
    An earlier question left unfinished (a process killed mid-run) is closed first: its
    unanswered tool calls get a tool message each and it gets a closing message, so the
    conversation stays valid for OpenAI-style APIs and every question ends with an
    assistant message.
    """
    messages = list(state.get("messages") or [])
    writes: dict[str, Any] = {
        "question": asked.text,
        "question_message_id": asked.message_id,
        "question_index": asked.index,
        # a chat client's message is replaced in place by its copy with the scope
        "messages": [*_left_unfinished(messages, asked), asked.message],
        "usage": {USAGE_RESET: True},
        "started_at": time.time(),
    }
    writes.update(
        {key: value for key, value in QUESTION_DEFAULTS.items() if state.get(key, value) != value}
    )
    if state.get("tool_history"):
        writes["tool_history"] = replacing([])
    if state.get("chunks"):
        writes["chunks"] = []
    return writes


def _left_unfinished(messages: Sequence[BaseMessage], asked: NewQuestion) -> list[BaseMessage]:
    """The messages that close an unfinished earlier question: its unanswered tool calls, then why it has no answer.

    A chat client's message is already after the unfinished question, where nothing can
    go before it: `compact_earlier` answers those tool calls in what the models are sent.
    """
    if not asked.appended or not any(is_user_turn(m) for m in messages):
        return []
    last = messages[-1]
    if isinstance(last, AIMessage) and last.name == ANSWER_NAME:
        return []
    return [
        *_unanswered(last, messages),
        AIMessage(content=UNFINISHED, name=ANSWER_NAME, id=f"{CLOSING_ID_PREFIX}{uuid.uuid4()}"),
    ]


def _unanswered(message: BaseMessage, messages: Sequence[BaseMessage]) -> list[AnyMessage]:
    """A tool message for each tool call of ``message`` that no tool message answers."""
    if not isinstance(message, AIMessage):
        return []
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    calls = [
        c for c in [*message.tool_calls, *message.invalid_tool_calls] if c.get("id") not in answered
    ]
    return [
        ToolMessage(content=NOT_RUN, tool_call_id=str(c.get("id")), name=str(c.get("name")))
        for c in calls
    ]


def compact_earlier(
    messages: Sequence[AnyMessage], opening_id: str | None, scope: Scope | None = None
) -> list[AnyMessage]:
    """Return the conversation as a model is sent it: the earlier questions compacted, all of it bounded.

    Before the current question's human message, a search result is rewritten from
    its artifact (the data the loop rendered it from, never its text) as its chunks'
    ids and labels: the text goes, since it would be sent again every turn of every
    later question; the loop's own instructions are dropped. An earlier question that
    could read a collection outside ``scope`` (``None``: every collection) is sent as
    its question text and `OUT_OF_SCOPE_ANSWER` (`_within`). Earlier questions beyond
    `CARRIED_CONVERSATION_CHARS` are left out, oldest first. The current question's
    messages are sent as they are, save for what no model may be sent (`sendable`).
    """
    opening = opening_index(messages, opening_id)
    if not opening:
        return sendable(messages)
    readable = _readable(scope)
    questions = [
        [_compacted(m) for m in q if not is_instruction(m)]
        if _within(q, readable)
        else _withheld(q)
        for q in _questions(messages[:opening])
    ]
    earlier: list[AnyMessage] = []
    for question in _carried(questions):
        if earlier:  # a question left mid-turn: keep the conversation valid
            earlier.extend(_unanswered(earlier[-1], messages))
        earlier.extend(question)
    if earlier:
        earlier.extend(_unanswered(earlier[-1], messages))
    return sendable([*earlier, *messages[opening:]])


def _within(question: Sequence[AnyMessage], readable: frozenset[str] | None) -> bool:
    """Whether every collection an earlier question could read is one ``readable`` holds (``None``: all).

    What it could read is its recorded scope (`asked_scope`) and, should a search function
    have strayed outside it, any collection its search results came from.
    """
    if readable is None:
        return True
    asked = asked_scope(question[0])
    return (
        asked is not None
        and asked <= readable
        and all(
            entry["collection"] is None or entry["collection"] in readable
            for message in question
            if isinstance(message, ToolMessage) and is_search_artifact(message.artifact)
            for entry in message.artifact["entries"]
        )
    )


def _withheld(question: Sequence[AnyMessage]) -> list[AnyMessage]:
    """An earlier question as its question text (the user's) and `OUT_OF_SCOPE_ANSWER` for all that followed.

    New messages, not edited copies: nothing the loop or a model wrote (tool calls'
    arguments, raw provider fields in ``additional_kwargs``, artifacts) can ride along.
    """
    first = question[0]
    kept: list[AnyMessage] = (
        [HumanMessage(content=first.content, id=first.id)] if is_user_turn(first) else []
    )
    if len(question) > len(kept):
        kept.append(AIMessage(content=OUT_OF_SCOPE_ANSWER, name=ANSWER_NAME))
    return kept


def _carried(questions: list[list[AnyMessage]]) -> list[list[AnyMessage]]:
    """The newest earlier questions whose text fits in `CARRIED_CONVERSATION_CHARS` (at least the last one)."""
    kept: list[list[AnyMessage]] = []
    size = 0
    for question in reversed(questions):
        size += sum(len(message_text(m)) for m in question)
        if kept and size > CARRIED_CONVERSATION_CHARS:
            break
        kept.append(question)
    return kept[::-1]


def sendable(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """Return messages as any chat model may be sent them.

    * A client's system message is dropped: the run's system prompt is the only
      system text (an operator's setting a client cannot override).
    * A tool message that answers no tool call before it (an orphan a client sent)
      is dropped: OpenAI-style APIs refuse the whole request over one.
    * A message longer than `MAX_SENT_MESSAGE_CHARS` is cut, saying so: a client can
      send any message in a conversation, and it would be re-sent every turn.
    * An earlier answer that carries its citations (`core.sources`) is sent as its
      text alone: annotations and the sources list are for people, and not every
      provider accepts annotations back.
    * A question's recorded scope (`SCOPE_KEY`) is the loop's bookkeeping, not the
      user's words.
    """
    called: set[str] = set()
    sent: list[AnyMessage] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, AIMessage):
            called.update(
                str(c.get("id")) for c in [*message.tool_calls, *message.invalid_tool_calls]
            )
            if message.name == ANSWER_NAME and not isinstance(message.content, str):
                message = message.model_copy(update={"content": answer_text(message.content)})
        elif isinstance(message, ToolMessage) and message.tool_call_id not in called:
            continue
        elif isinstance(message, HumanMessage) and SCOPE_KEY in message.additional_kwargs:
            kwargs = {k: v for k, v in message.additional_kwargs.items() if k != SCOPE_KEY}
            message = message.model_copy(update={"additional_kwargs": kwargs})
        sent.append(_bounded(message))
    return sent


def message_text(message: BaseMessage) -> str:
    """A message's text: its content's, and its tool calls' arguments (what a model is sent of it)."""
    calls = getattr(message, "tool_calls", None) or []
    return message.text + "".join(str(c.get("args")) for c in calls)


def _bounded(message: AnyMessage) -> AnyMessage:
    content = message.content
    # the common case, read without `.text` (a copy of every message, every turn)
    if isinstance(content, str) and len(content) <= MAX_SENT_MESSAGE_CHARS:
        return message
    text = message.text
    if len(text) <= MAX_SENT_MESSAGE_CHARS and len(str(content)) <= 2 * MAX_SENT_MESSAGE_CHARS:
        return message
    kept = text[:MAX_SENT_MESSAGE_CHARS]
    note = CUT_MESSAGE.format(more=len(text) - len(kept))
    return message.model_copy(update={"content": f"{kept}\n{note}"})


def _questions(messages: Sequence[AnyMessage]) -> list[list[AnyMessage]]:
    """Split a conversation into its questions, each from its user turn to the next one."""
    questions: list[list[AnyMessage]] = []
    for message in messages:
        if is_user_turn(message) or not questions:
            questions.append([])
        questions[-1].append(message)
    return questions


def _compacted(message: AnyMessage) -> AnyMessage:
    if isinstance(message, ToolMessage) and is_search_artifact(message.artifact):
        return message.model_copy(update={"content": compacted_search_result(message.artifact)})
    return message


def closing_message(
    view: Mapping[str, Any], sources: Sequence[Source], *, sources_footer: bool = False
) -> AIMessage | None:
    """Return the assistant message that ends a question, or ``None`` when the conversation ends with it.

    The answer, when there is one; otherwise why there is none (a give-up's reason, the
    error, the spent budget). Named `ANSWER_NAME`, so a client can tell it apart: a
    reply that already holds the answer (the controller's plain text, the answer model's
    or the synthesis' reply) is named under its own id, so it replaces itself and a
    streaming client, which has its tokens under that id, gets no second copy. An
    answer that cites chunks carries ``sources`` (the chunks it cites, `core.sources`)
    as citation annotations, and with ``sources_footer`` a plain-text list after it.
    """
    text = closing_text(view)
    content: str | list[Any] = (
        answer_content(text, sources, footer=sources_footer) if sources else text
    )
    messages = view.get("messages") or []
    last = messages[-1] if messages else None
    if (
        isinstance(last, AIMessage)
        and not (last.tool_calls or last.invalid_tool_calls)
        and answer_text(last.content) == text
    ):
        if last.name == ANSWER_NAME and last.content == content:
            return None
        return last.model_copy(update={"name": ANSWER_NAME, "content": content})
    return AIMessage(content=content, name=ANSWER_NAME, id=f"{CLOSING_ID_PREFIX}{uuid.uuid4()}")


def is_closing(message: BaseMessage) -> bool:
    """Whether a message is a closing message the loop wrote itself (no model's reply)."""
    return isinstance(message.id, str) and message.id.startswith(CLOSING_ID_PREFIX)


def closing_text(view: Mapping[str, Any]) -> str:
    """The text that ends a question: its answer, else why it has none."""
    answer = view.get("answer")
    if isinstance(answer, str) and answer.strip():
        return answer
    outcome = view.get("terminated_by")
    if outcome == "gave_up":
        history = view.get("tool_history") or []
        reason = next(
            (
                str(e["args"].get("reason") or "")
                for e in reversed(history)
                if registry.ends_as(e.get("tool")) == "gave_up"
            ),
            "",
        )
        return NO_ANSWER["gave_up"].format(reason=reason or "no reason given")
    if outcome == "max_iterations":
        stop = view.get("error") or view.get("budget_stop") or "iterations"
        return NO_ANSWER["max_iterations"].format(stop=stop)
    return NO_ANSWER["error"].format(error=view.get("error") or "unknown error")
