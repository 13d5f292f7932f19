"""The offline controller: a deterministic, tool-calling chat model that needs no network or key.

It follows the loop's protocol with plain text rules, as a baseline and for demos:
the first turn searches the question with filler words dropped (one search per
part of a multi-part question); when nothing relevant came back it tries once
more with only the key terms; then it answers extractively, per question part,
with the chunk sentences that score best (see `sentence_score`: meaning by
WordLlama similarity, shared content words, and the rank the search gave the
chunk), each led by the object its chunk documents and followed by its chunk
id; or it gives up when no sentence reaches `MIN_SCORE`. Without tools
(synthesis, answer rewrite) it replies with the same extractive text.

In a conversation it answers the last question, reading only that question's search
results. A follow-up that only makes sense with the question before it (it starts
with "and", "what about"..., or refers back with "it", "its", "they", "this"...) is
searched and answered with the earlier question's subject added: after "How do I run
a coroutine with a timeout?", "what about its exceptions?" searches "run a coroutine
with a timeout its exceptions".

`MIN_SCORE` and the weights were calibrated on the tuning half of the realistic
evaluation set (`evaluation/README.md`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

from arcana_loop.grounding.local import content_terms
from arcana_loop.grounding.sentences import split_sentences
from arcana_loop.tools.chunks import entry_text, is_search_artifact

MIN_SCORE = 0.4
"""A sentence scoring below this (see `sentence_score`) does not answer a part."""
MEANING_WEIGHT = 0.7
WORDS_WEIGHT = 0.2
RANK_WEIGHT = 0.1
MAX_ANSWER_SENTENCES = 3
"""Sentences quoted per question part."""

_FILLER = re.compile(
    r"\b(how (do|can|should) i|what (is|are|does)|can you|could you|please|tell me|explain|i want to|is there a way to)\b",
    re.IGNORECASE,
)
_PARTS = re.compile(
    r"\?\s+|;\s*|\s+and also\s+|,?\s+and (?:how|what|which|when|why)\s+", re.IGNORECASE
)
_FOLLOW_UP = re.compile(
    r"^\W*(?:and|also|but|so|then|what about|how about)\b|\b(?:it|its|it's|they|them|their|this|these|those)\b",
    re.IGNORECASE,
)
_LEAD = re.compile(r"^\W*(?:and|also|but|so|then|what about|how about)\b\s*", re.IGNORECASE)


def question_parts(question: str) -> list[str]:
    """Split a question into its parts and drop filler words from each."""
    parts = [
        p for p in (_FILLER.sub(" ", part).strip(" ?.!,") for part in _PARTS.split(question)) if p
    ]
    return [" ".join(p.split()) for p in parts] or [question.strip()]


@dataclass(frozen=True)
class Found:
    """A chunk as the controller read it in a search result."""

    id: str
    label: str
    """Where it comes from (source > section), as the result line showed it."""
    text: str
    rank: int
    """Its 0-based position in its result."""


def _results(messages: Sequence[BaseMessage]) -> list[Found]:
    """The chunks of every search result so far: text from where it was shown, best rank seen.

    Read from each result's artifact (what the loop rendered it from), never from its
    text: a document line shaped like a result entry is only text of its chunk.
    """
    texts: dict[str, tuple[str, str]] = {}
    ranks: dict[str, int] = {}
    for message in messages:
        if not isinstance(message, ToolMessage) or not is_search_artifact(message.artifact):
            continue
        content = message.content if isinstance(message.content, str) else ""
        for entry in message.artifact["entries"]:
            chunk_id, rank = entry["id"], entry["rank"]
            ranks[chunk_id] = min(rank, ranks.get(chunk_id, rank))
            text = entry_text(content, entry)
            if text is not None and text.strip():  # a later result points back instead
                label = " > ".join(p for p in (entry["source"], entry["section"]) if p)
                texts[chunk_id] = (label, text)
    return [Found(i, label, text, ranks[i]) for i, (label, text) in texts.items()]


def _overlap(part: str, text: str) -> float:
    terms = content_terms(part)
    return len(terms & content_terms(text)) / len(terms) if terms else 0.0


def _subject(label: str) -> str:
    """The object a chunk documents: the last step of its section path, else its source."""
    return label.rsplit(" > ", 1)[-1].split(":", 1)[-1].strip() if label else ""


def sentence_score(meaning: float, words: float, rank: int) -> float:
    """How well a sentence answers a question part: meaning, shared words and chunk rank, 0..1."""
    return MEANING_WEIGHT * max(0.0, meaning) + WORDS_WEIGHT * words + RANK_WEIGHT / (1 + rank)


_CITATION_SHAPED = re.compile(r"\s*\[[^\]\s]+\]")


def _cited(sentence: str, chunk_id: str, subject: str) -> str:
    """Lead with the subject unless the sentence names it; put the chunk id inside the sentence.

    A bracketed token quoted from the chunk (``[deadbeef]``) would read as a citation
    of a chunk no search returned: it is left out, so the only citation is the real one.
    """
    sentence = _CITATION_SHAPED.sub("", sentence).strip()
    lead = f"{subject}: " if subject and subject.rsplit(".", 1)[-1] not in sentence else ""
    if sentence[-1:] in ".!?":
        return f"{lead}{sentence[:-1]} [{chunk_id}]{sentence[-1]}"
    return f"{lead}{sentence} [{chunk_id}]"


def _similarities(parts: Sequence[str], sentences: Sequence[str]) -> Any:
    import numpy as np

    from arcana_loop.knowledge.embeddings import default_embeddings

    embedder = default_embeddings()
    q = np.asarray(embedder.embed_array(list(parts)))
    m = np.asarray(embedder.embed_array(list(sentences)))
    return q @ m.T


def extractive_answer(question: str, chunks: Sequence[Found]) -> str | None:
    """Return the best chunk sentences per question part with their chunk ids, or ``None``."""
    candidates = [
        (chunk, sentence, f"{_subject(chunk.label)} {sentence}")
        for chunk in chunks
        for sentence, _, _ in split_sentences(chunk.text)
        if len(sentence) > 15
    ]
    parts = question_parts(question)
    if not candidates:
        return None
    meaning = _similarities(parts, [c[2] for c in candidates])
    lines: list[str] = []
    for p, part in enumerate(parts):
        scored = sorted(
            (
                (
                    sentence_score(float(meaning[p][i]), _overlap(part, full), chunk.rank),
                    sentence,
                    chunk,
                )
                for i, (chunk, sentence, full) in enumerate(candidates)
            ),
            key=lambda s: s[0],
            reverse=True,
        )
        seen: set[str] = set()
        for score, sentence, chunk in scored:
            if score < MIN_SCORE or len(seen) >= MAX_ANSWER_SENTENCES:
                break
            if sentence not in seen:
                seen.add(sentence)
                lines.append(_cited(sentence, chunk.id, _subject(chunk.label)))
    return "\n".join(dict.fromkeys(lines)) or None


def is_follow_up(question: str) -> bool:
    """Whether a question refers back to an earlier one ("and its timeout?", "what about them?")."""
    return _FOLLOW_UP.search(question) is not None


def with_subject(question: str, earlier: str) -> str:
    """A follow-up with the earlier question's subject added (the question itself otherwise)."""
    if not earlier or not is_follow_up(question):
        return question
    subject = " ".join(question_parts(earlier))
    return f"{subject} {_LEAD.sub('', question)}".strip()


def current_question(messages: Sequence[BaseMessage]) -> tuple[str, int]:
    """The question to answer, follow-ups completed with the earlier subject, and where it was asked.

    The question is the last human message that is the user's (not one of the loop's
    own instructions); the position is that message's, so only later results count.
    """
    from arcana_loop.graph.conversation import is_user_turn

    question, position, earlier = "", 0, ""
    for index, message in enumerate(messages):
        if is_user_turn(message):
            text = message.text
            question, position, earlier = (
                with_subject(text, earlier),
                index,
                with_subject(text, earlier),
            )
    return question, position


def _call(name: str, index: int, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"offline_{index}_{name}", "type": "tool_call"}


class OfflineController(BaseChatModel):
    """Deterministic controller following the search, refine, answer or give up protocol."""

    tools_offered: bool = False

    @property
    def _llm_type(self) -> str:
        return "offline"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        """Return this model with tool calling on (the schemas are the loop's own)."""
        return self.model_copy(update={"tools_offered": bool(tools)})

    def _decide(self, messages: list[BaseMessage]) -> AIMessage:
        question, asked = current_question(messages)
        messages = messages[asked:]  # this question's turns only
        searches = sum(
            1
            for m in messages
            if isinstance(m, AIMessage)
            for c in m.tool_calls
            if c["name"] == "search"
        )
        found = _results(messages)
        text = extractive_answer(question, found)
        if not self.tools_offered:
            return AIMessage(
                content=text or "The gathered information does not answer the question."
            )
        if searches == 0:
            return AIMessage(
                content="",
                tool_calls=[
                    _call("search", i, query=p) for i, p in enumerate(question_parts(question))
                ],
            )
        if text is None and searches <= len(question_parts(question)):
            terms = " ".join(sorted(content_terms(question)))
            return AIMessage(
                content="", tool_calls=[_call("search", searches, query=terms or question)]
            )
        if text is None:
            return AIMessage(
                content="",
                tool_calls=[
                    _call(
                        "give_up",
                        searches,
                        reason="no retrieved chunk matches the question's key terms",
                    )
                ],
            )
        return AIMessage(content="", tool_calls=[_call("answer", searches, text=text)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._decide(messages))])
