"""What the page shows beside an answer, as data: numbered citations, claims, steps.

`evidence_view` reads a thread's state values as the LangGraph server returns them
(``GET /threads/{id}/state``, or the last ``values`` event of a streamed run) and
returns plain JSON for the page to render as text:

* ``answer``: the answer cut into text pieces and numbered citations. Where a citation
  is comes from the closing message's standard ``citation`` annotations
  (``start_index``/``end_index``, `graph.sources.answer_content`); an answer without
  them (a client that turned them off, an older thread) falls back to the ids of the
  question's chunks found in its text.
* ``citations``: per number, the chunk's title, source, section, pages and whole text,
  the span of that text to highlight (the chunk sentence sharing most content words
  with the answer sentence that cites it), and the search (turn and query) that first
  returned the chunk (`grounding.attribution.search_index`).
* ``claims``: per claim of the grounding (when it ran), its verdict, the citations
  inside it, and the search that first found its evidence.
* ``steps`` and ``totals``: the question's tool history (searches, chunks found) and
  its usage (tokens, seconds).
* ``conversation``: the thread's earlier questions and their answers, as text.

Nothing here renders HTML: every string is chunk or answer text, for ``textContent``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, convert_to_messages

from arcana_loop.graph.conversation import ANSWER_NAME, is_user_turn
from arcana_loop.graph.sources import answer_text
from arcana_loop.grounding.attribution import search_index
from arcana_loop.grounding.local import content_terms
from arcana_loop.grounding.sentences import split_sentences
from arcana_loop.knowledge.sections import document_title, page_label

_BRACKETED = re.compile(r"\s*\[[^\]\s]+\]")
"""A citation as an answer writes it (``[f0bd...]``): left out of a sentence before its words are compared."""


def _found_by(chunk_id: str, index: Mapping[str, tuple[int, str | None]]) -> dict[str, Any] | None:
    """The search that first returned a chunk, as the page shows it (turns count from 1)."""
    if chunk_id not in index:
        return None
    iteration, query = index[chunk_id]
    return {"turn": iteration + 1, "query": query}


def _closing(messages: Sequence[Any]) -> AIMessage | None:
    """The current question's closing message (the assistant message named ``answer``), once written."""
    for message in reversed(messages):
        if is_user_turn(message):
            return None  # the current question has not closed yet
        if isinstance(message, AIMessage) and message.name == ANSWER_NAME:
            return message
    return None


def _mentions(
    text: str, closing: AIMessage | None, chunks: Mapping[str, Mapping[str, Any]]
) -> list[tuple[int, int, str]]:
    """Where the answer cites a chunk: ``(start, end, chunk_id)``, in the order of the text."""
    content = closing.content if closing is not None else None
    first = content[0] if isinstance(content, list) and content else None
    annotations = first.get("annotations") if isinstance(first, Mapping) else None
    found: list[tuple[int, int, str]] = []
    if isinstance(annotations, list) and annotations:
        for note in annotations:
            extras = note.get("extras") or {} if isinstance(note, Mapping) else {}
            start, end = note.get("start_index"), note.get("end_index")
            if isinstance(start, int) and isinstance(end, int) and extras.get("chunk_id"):
                found.append((start, end, str(extras["chunk_id"])))
    else:
        for chunk_id in chunks:
            found += [
                (m.start(), m.end(), chunk_id) for m in re.finditer(re.escape(chunk_id), text)
            ]
    return sorted(found)


def _widened(text: str, start: int, end: int) -> tuple[int, int]:
    """A mention with the brackets around it, so ``[id]`` is replaced whole by its number."""
    if text[start - 1 : start] == "[" and text[end : end + 1] == "]":
        return start - 1, end + 1
    return start, end


def highlight(claim: str, passage: str) -> tuple[int, int] | None:
    """The sentence of ``passage`` sharing most content words with ``claim`` (its offsets), or ``None``."""
    terms = content_terms(_BRACKETED.sub("", claim))
    best, best_span = 0, None
    for sentence, start, end in split_sentences(passage):
        shared = len(terms & content_terms(sentence))
        if shared > best:
            best, best_span = shared, (start, end)
    return best_span


def _sentence_at(text: str, position: int) -> str:
    """The answer sentence holding ``position`` (the claim a citation backs)."""
    for sentence, start, end in split_sentences(text):
        if start <= position <= end:
            return sentence
    return text


def _citations(
    text: str,
    mentions: Sequence[tuple[int, int, str]],
    chunks: Mapping[str, Mapping[str, Any]],
    index: Mapping[str, tuple[int, str | None]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The answer as pieces (text and citation numbers), and one citation per cited chunk."""
    numbers: dict[str, int] = {}
    citations: list[dict[str, Any]] = []
    pieces: list[dict[str, Any]] = []
    cursor = 0
    for start, end, chunk_id in mentions:
        start, end = _widened(text, start, end)
        if start < cursor:
            continue  # overlapping annotations: the first one wins
        if chunk_id not in numbers:
            numbers[chunk_id] = len(numbers) + 1
            chunk = chunks.get(chunk_id) or {}
            metadata = chunk.get("metadata") or {}
            passage = str(chunk.get("text") or "")
            claim = _sentence_at(text, start)
            source = metadata.get("source")
            citations.append(
                {
                    "n": numbers[chunk_id],
                    "chunk_id": chunk_id,
                    "title": document_title(str(source or chunk.get("collection") or ""), metadata),
                    "source": str(source) if source else None,
                    "section": metadata.get("section") or None,
                    "pages": page_label(metadata),
                    "collection": chunk.get("collection"),
                    "text": passage,
                    "highlight": highlight(claim, passage) if passage else None,
                    "claim": _BRACKETED.sub("", claim).strip(),
                    "found_by": _found_by(chunk_id, index),
                }
            )
        if start > cursor:
            pieces.append({"text": text[cursor:start]})
        pieces.append({"cite": numbers[chunk_id], "chunk_id": chunk_id})
        cursor = end
    if cursor < len(text):
        pieces.append({"text": text[cursor:]})
    return pieces, citations


def _claims(
    grounding: Mapping[str, Any] | None,
    mentions: Sequence[tuple[int, int, str]],
    numbers: Mapping[str, int],
) -> list[dict[str, Any]]:
    """Each grounded claim with its verdict, the citations inside it and the search that first found its evidence."""
    claims = []
    for claim in (grounding or {}).get("claims") or []:
        sources = [s for s in claim.get("sources") or [] if s.get("search_iteration") is not None]
        first = min(sources, key=lambda s: s["search_iteration"], default=None)
        start, end = claim.get("start"), claim.get("end")
        inside = (
            [numbers[c] for s, _, c in mentions if start <= s < end and c in numbers]
            if isinstance(start, int) and isinstance(end, int)
            else []
        )
        claims.append(
            {
                "text": _BRACKETED.sub("", str(claim.get("text") or "")).strip(),
                "verdict": claim.get("verdict"),
                "citations": list(dict.fromkeys(inside)),
                "found_by": None
                if first is None
                else {"turn": first["search_iteration"] + 1, "query": first.get("search_query")},
            }
        )
    return claims


def _steps(tool_history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per tool call of the question: its turn, tool, query and chunks found."""
    return [
        {
            "turn": int(entry.get("iteration", 0)) + 1,
            "tool": entry.get("tool"),
            "query": (entry.get("args") or {}).get("query"),
            "chunks": len(entry.get("returned_chunk_ids") or []),
            "duplicate_of": None
            if entry.get("duplicate_of") is None
            else int(entry["duplicate_of"]) + 1,
            "error": entry.get("error"),
        }
        for entry in tool_history
    ]


def _totals(values: Mapping[str, Any]) -> dict[str, Any]:
    usage = values.get("usage") or {}
    history = values.get("tool_history") or []
    return {
        "turns": values.get("iterations") or 0,
        "searches": sum(1 for e in history if e.get("tool") == "search"),
        "chunks": len(values.get("chunks") or []),
        "tokens": (usage.get("total") or {}).get("total_tokens", 0),
        "seconds": round(sum((usage.get("node_seconds") or {}).values()), 3),
    }


def _conversation(messages: Sequence[Any]) -> list[dict[str, str | None]]:
    """The thread's questions in order, each with its answer's text (``None`` while unanswered)."""
    turns: list[dict[str, str | None]] = []
    for message in messages:
        if is_user_turn(message):
            turns.append({"question": message.text, "answer": None})
        elif isinstance(message, AIMessage) and message.name == ANSWER_NAME and turns:
            turns[-1]["answer"] = answer_text(message.content)
    return turns


def evidence_view(values: Mapping[str, Any]) -> dict[str, Any]:
    """The page's view of a thread's state: the last question's answer, evidence and steps."""
    messages = convert_to_messages(values.get("messages") or [])
    closing = _closing(messages)
    chunks = {str(c["id"]): c for c in values.get("chunks") or [] if c.get("id")}
    # the closing message holds the answer, or why there is none (a give-up, a failure)
    text = answer_text(closing.content) if closing is not None else values.get("answer") or ""
    mentions = _mentions(text, closing, chunks) if values.get("terminated_by") else []
    index = search_index(values.get("tool_history") or [])
    pieces, citations = _citations(text, mentions, chunks, index)
    grounding = values.get("grounding")
    numbers = {c["chunk_id"]: c["n"] for c in citations}
    return {
        "question": values.get("question"),
        "terminated_by": values.get("terminated_by"),
        "budget_stop": values.get("budget_stop"),
        "error": values.get("error"),
        "coverage": values.get("coverage"),
        "score": grounding.get("score") if isinstance(grounding, Mapping) else None,
        "answer": pieces,
        "citations": citations,
        "claims": _claims(grounding, mentions, numbers),
        "steps": _steps(values.get("tool_history") or []),
        "totals": _totals(values),
        "conversation": _conversation(messages),
    }
