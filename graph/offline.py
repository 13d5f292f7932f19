"""The offline controller: a deterministic, tool-calling chat model that needs no network or key.

It follows the loop's protocol with plain text rules, as a baseline and for demos:
the first turn searches the question with filler words dropped (one search per
part of a multi-part question); when nothing relevant came back it tries once
more with only the key terms; then it answers extractively with the chunk
sentences that share the most content words with the question, each followed by
its chunk id, or gives up when no chunk is relevant. Without tools (synthesis,
answer rewrite) it replies with the same extractive text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

from grounding.local import content_terms
from grounding.sentences import split_sentences

MIN_RELEVANCE = 0.34
"""Share of a part's content words a chunk must contain to count as relevant."""
MAX_ANSWER_SENTENCES = 3
"""Sentences quoted per question part."""

_FILLER = re.compile(
    r"\b(how (do|can|should) i|what (is|are|does)|can you|could you|please|tell me|explain|i want to|is there a way to)\b",
    re.IGNORECASE,
)
_PARTS = re.compile(r"\?\s+|;\s*|\s+and also\s+|,?\s+and (?:how|what|which|when|why)\s+", re.IGNORECASE)
_RESULT_ITEM = re.compile(r"^\d+\. \[([^\]]+)\]\n(.*?)(?=\n\n\d+\. \[|\Z)", re.DOTALL | re.MULTILINE)


def question_parts(question: str) -> list[str]:
    """Split a question into its parts and drop filler words from each."""
    parts = [p for p in (_FILLER.sub(" ", part).strip(" ?.!,") for part in _PARTS.split(question)) if p]
    return [" ".join(p.split()) for p in parts] or [question.strip()]


def _results(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, ToolMessage) and isinstance(message.content, str) and message.content.startswith("Found "):
            found.extend(_RESULT_ITEM.findall(message.content))
    return found


def _relevance(part: str, text: str) -> float:
    terms = content_terms(part)
    return len(terms & content_terms(text)) / len(terms) if terms else 0.0


def _cited(sentence: str, chunk_id: str) -> str:
    """Put the chunk id inside the sentence, so a sentence splitter keeps them together."""
    if sentence[-1:] in ".!?":
        return f"{sentence[:-1]} [{chunk_id}]{sentence[-1]}"
    return f"{sentence} [{chunk_id}]"


def extractive_answer(question: str, chunks: Sequence[tuple[str, str]]) -> str | None:
    """Return the most relevant chunk sentences per question part with their chunk ids, or ``None``."""
    lines: list[str] = []
    for part in question_parts(question):
        scored = []
        for chunk_id, text in chunks:
            for sentence, _, _ in split_sentences(text):
                score = _relevance(part, sentence)
                if score >= MIN_RELEVANCE:
                    scored.append((score, sentence, chunk_id))
        scored.sort(key=lambda s: s[0], reverse=True)
        seen: set[str] = set()
        for _, sentence, chunk_id in scored:
            if sentence not in seen and len(seen) < MAX_ANSWER_SENTENCES:
                seen.add(sentence)
                lines.append(_cited(sentence, chunk_id))
    return "\n".join(lines) or None


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
        question = next((str(m.content) for m in messages if isinstance(m, HumanMessage)), "")
        searches = sum(1 for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c["name"] == "search")
        found = _results(messages)
        text = extractive_answer(question, found)
        if not self.tools_offered:
            return AIMessage(content=text or "The gathered information does not answer the question.")
        if searches == 0:
            return AIMessage(content="", tool_calls=[_call("search", i, query=p) for i, p in enumerate(question_parts(question))])
        if text is None and searches <= len(question_parts(question)):
            terms = " ".join(sorted(content_terms(question)))
            return AIMessage(content="", tool_calls=[_call("search", searches, query=terms or question)])
        if text is None:
            return AIMessage(content="", tool_calls=[_call("give_up", searches, reason="no retrieved chunk matches the question's key terms")])
        return AIMessage(content="", tool_calls=[_call("answer", searches, text=text)])

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._decide(messages))])
