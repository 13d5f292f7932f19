"""What the page shows beside an answer, as data: numbered citations, claims, steps.

`evidence_view` reads a thread's state values as the LangGraph server returns them
(``GET /threads/{id}/state``, or the last ``values`` event of a streamed run) and
returns plain JSON for the page to render as text:

* ``answer``: the answer cut into text pieces and numbered citations. Where a citation
  is comes from the closing message's standard ``citation`` annotations
  (``start_index``/``end_index``, `core.sources.answer_content`); an answer without
  them (a client that turned them off, an older thread) falls back to the ids of the
  question's chunks found in its text.
* ``citations``: per number, the chunk's title, source, section, pages and whole text,
  the span of that text to highlight (the chunk sentence sharing most content words
  with the answer sentence that cites it), and the search (turn and query) that first
  returned the chunk (`grounding.attribution.search_index`).
* ``claims``: per claim of the grounding (when it ran), its verdict, the cited passages
  that back it (each with the sentence closest to the claim highlighted), and the search
  that first found its evidence.
* ``steps`` and ``totals``: the question's tool history (searches, chunks found) and
  its usage (tokens, seconds).
* ``earlier``: the thread's earlier questions, each answer with its citations numbered
  from its annotations (title, source, section, pages and the first 300 characters of
  the passage: an earlier question's chunks are not kept in the thread's state).

Nothing here renders HTML: every string is chunk or answer text, for ``textContent``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, convert_to_messages

from arcana_loop.core.sources import answer_text
from arcana_loop.grounding.attribution import search_index
from arcana_loop.grounding.local import content_terms
from arcana_loop.grounding.sentences import split_sentences
from arcana_loop.knowledge.sections import document_title, page_label
from arcana_loop.nodes.conversation import ANSWER_NAME, is_user_turn

_BRACKETED = re.compile(r"\s*\[[^\]\s,;]+(?:\s*[,;]\s*[^\]\s,;]+)*\]")
"""A citation as an answer writes it (``[f0bd...]``, ``[1, 2]``): left out of a sentence before its words are compared."""


def _found_by(chunk_id: str, index: Mapping[str, tuple[int, str | None]]) -> dict[str, Any] | None:
    """The search that first returned a chunk, as the page shows it (turns count from 1)."""
    if chunk_id not in index:
        return None
    iteration, query = index[chunk_id]
    return {"turn": iteration + 1, "query": query}


def _annotations(closing: AIMessage | None) -> list[Mapping[str, Any]]:
    """The citation annotations of a closing message's answer block (`core.sources.answer_content`)."""
    content = closing.content if closing is not None else None
    first = content[0] if isinstance(content, list) and content else None
    notes = first.get("annotations") if isinstance(first, Mapping) else None
    return [
        n
        for n in notes or []
        if isinstance(n, Mapping)
        and isinstance(n.get("start_index"), int)
        and isinstance(n.get("end_index"), int)
        and isinstance(n.get("extras"), Mapping)
        and n["extras"].get("chunk_id")
    ]


def _mentions(
    text: str, notes: Sequence[Mapping[str, Any]], chunk_ids: Sequence[str]
) -> list[tuple[int, int, str]]:
    """Where the answer cites a chunk: ``(start, end, chunk_id)``, in the order of the text."""
    if notes:
        return sorted(
            (n["start_index"], n["end_index"], str(n["extras"]["chunk_id"])) for n in notes
        )
    return sorted(
        (m.start(), m.end(), chunk_id)
        for chunk_id in chunk_ids
        for m in re.finditer(re.escape(chunk_id), text)
    )


def _from_chunk(chunk: Mapping[str, Any]) -> dict[str, Any]:
    """What a citation shows of a chunk the question gathered: its whole text and where it is."""
    metadata = chunk.get("metadata") or {}
    source = metadata.get("source")
    return {
        "title": document_title(str(source or chunk.get("collection") or ""), metadata),
        "source": str(source) if source else None,
        "section": metadata.get("section") or None,
        "pages": page_label(metadata),
        "collection": chunk.get("collection"),
        "text": str(chunk.get("text") or ""),
        "partial": False,
    }


def _from_annotation(note: Mapping[str, Any]) -> dict[str, Any]:
    """What a citation shows of an earlier question's chunk: its annotation (the text's start only)."""
    extras = note["extras"]
    return {
        "title": note.get("title"),
        "source": extras.get("source"),
        "section": extras.get("section"),
        "pages": extras.get("pages"),
        "collection": None,
        "text": str(note.get("cited_text") or ""),
        "partial": True,  # an earlier question's chunks are not kept (nodes/conversation.py)
    }


_SEPARATOR = re.compile(r"\s*[,;]\s*")


def _spans(
    text: str, mentions: Sequence[tuple[int, int, str]]
) -> list[tuple[int, int, list[tuple[int, int, str]]]]:
    """The stretches of text a citation replaces, each with its mentions.

    Mentions side by side in one pair of brackets (``[1, 2]``, ``[id]``) are one stretch,
    brackets and separators included, so each number shows once as itself; a mention
    outside brackets is its own stretch, and the text around it stays.
    """
    groups: list[list[tuple[int, int, str]]] = []
    for mention in mentions:
        if groups and mention[0] < groups[-1][-1][1]:
            continue  # overlapping annotations: the first one wins
        if groups and _SEPARATOR.fullmatch(text[groups[-1][-1][1] : mention[0]]):
            groups[-1].append(mention)
        else:
            groups.append([mention])
    spans = []
    for group in groups:
        start, end = group[0][0], group[-1][1]
        if text[start - 1 : start] == "[" and text[end : end + 1] == "]":
            spans.append((start - 1, end + 1, group))
        else:
            spans += [(s, e, [(s, e, c)]) for s, e, c in group]
    return spans


_HEADING_BREAK = re.compile(r"(?<![,;:(\-])\n(?=\s*[A-Z0-9\-*•])")
"""A line break that ends a line of its own (a PDF page's heading, a list item), not a wrapped sentence."""


def _pieces(passage: str) -> list[tuple[str, int, int]]:
    """The passage's sentences, each cut again where a line ends on its own (`_HEADING_BREAK`)."""
    pieces = []
    for sentence, start, _ in split_sentences(passage):
        cuts = [0, *(m.end() for m in _HEADING_BREAK.finditer(sentence)), len(sentence) + 1]
        for left, right in itertools.pairwise(cuts):
            line = sentence[left : right - 1] if right > len(sentence) else sentence[left:right]
            if line.strip():
                lead = len(line) - len(line.lstrip())
                first = start + left + lead
                pieces.append((line.strip(), first, first + len(line.strip())))
    return pieces


_MARKDOWN_HEADING = re.compile(r"#{1,6}(?:\s|$)")


def highlight(claim: str, passage: str) -> tuple[int, int] | None:
    """The sentence of ``passage`` sharing most content words with ``claim`` (its offsets), or ``None``."""
    terms = content_terms(_BRACKETED.sub("", claim))
    best, best_span = 0.0, None
    for sentence, start, end in _pieces(passage):
        if _MARKDOWN_HEADING.match(sentence):
            continue  # a heading names a section: the claim it leads in an answer is no evidence
        words = content_terms(sentence)
        # shared words first; of two sentences sharing as many, the one with fewer others
        shared = len(terms & words) - 0.01 * len(words - terms)
        if len(terms & words) and shared > best:
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
    shown: Mapping[str, dict[str, Any]],
    index: Mapping[str, tuple[int, str | None]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The answer as pieces (text and citation numbers), and one citation per cited chunk."""
    numbers: dict[str, int] = {}
    citations: list[dict[str, Any]] = []
    pieces: list[dict[str, Any]] = []
    cursor = 0
    for start, end, group in _spans(text, mentions):
        if start > cursor:
            pieces.append({"text": text[cursor:start]})
        for _, _, chunk_id in group:
            if chunk_id not in numbers:
                numbers[chunk_id] = len(numbers) + 1
                where = shown.get(chunk_id) or _from_chunk({})
                claim = _sentence_at(text, start)
                passage = where["text"]
                citations.append(
                    {
                        "n": numbers[chunk_id],
                        "chunk_id": chunk_id,
                        **where,
                        "highlight": highlight(claim, passage) if passage else None,
                        "claim": _BRACKETED.sub("", claim).strip(),
                        "found_by": _found_by(chunk_id, index),
                    }
                )
            pieces.append({"cite": numbers[chunk_id], "chunk_id": chunk_id})
        cursor = end
    if cursor < len(text):
        pieces.append({"text": text[cursor:]})
    return pieces, citations


def _claims(
    grounding: Mapping[str, Any] | None, citations: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each grounded claim: its verdict, the cited passages that back it, the search that first found its evidence.

    A claim's evidence is each citation inside it and the cited chunk the grounder scored
    highest as its source, with the passage's sentence closest to this claim highlighted.
    """
    cited = {c["chunk_id"]: c for c in citations}
    claims = []
    for claim in (grounding or {}).get("claims") or []:
        sources = [s for s in claim.get("sources") or [] if s.get("search_iteration") is not None]
        first = min(sources, key=lambda s: s["search_iteration"], default=None)
        raw = str(claim.get("text") or "")
        # a claim's offsets are in the answer as written (chunk ids), not in the closing
        # text people read (numbers): its citations are the ids it holds
        inside = [c for c in cited if re.search(rf"(?<!\w){re.escape(c)}(?!\w)", raw)]
        # the grounder's best-scoring source; a heuristic grounder names every chunk sharing a
        # tenth of the claim's words, too many to read as "backed by"
        scored = sorted(claim.get("sources") or [], key=lambda s: -float(s.get("score") or 0))
        named = [str(s.get("chunk_id")) for s in scored[:1]]
        text = _BRACKETED.sub("", raw).strip()
        evidence = [
            {"n": cited[c]["n"], "highlight": highlight(text, cited[c]["text"])}
            for c in dict.fromkeys([*inside, *named])
            if c in cited
        ]
        claims.append(
            {
                "text": text,
                "verdict": claim.get("verdict"),
                "evidence": sorted(evidence, key=lambda e: e["n"]),
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


def _earlier(question: str, closing: AIMessage | None) -> dict[str, Any]:
    """An earlier question of the thread: its answer with numbered citations, from its annotations alone."""
    if closing is None:
        return {"question": question, "answer": [], "citations": []}
    text = answer_text(closing.content)
    notes = _annotations(closing)
    shown = {str(n["extras"]["chunk_id"]): _from_annotation(n) for n in notes}
    pieces, citations = _citations(text, _mentions(text, notes, []), shown, {})
    return {"question": question, "answer": pieces, "citations": citations}


def evidence_view(values: Mapping[str, Any]) -> dict[str, Any]:
    """The page's view of a thread's state: its questions, and the last one's evidence and steps."""
    messages = convert_to_messages(values.get("messages") or [])
    asked: list[tuple[str, AIMessage | None]] = []
    for message in messages:
        if is_user_turn(message):
            asked.append((message.text, None))
        elif isinstance(message, AIMessage) and message.name == ANSWER_NAME and asked:
            asked[-1] = (asked[-1][0], message)
    closing = asked[-1][1] if asked else None
    # the closing message holds the answer, or why there is none (a give-up, a failure)
    text = answer_text(closing.content) if closing is not None else values.get("answer") or ""
    chunks = {str(c["id"]): c for c in values.get("chunks") or [] if c.get("id")}
    mentions = _mentions(text, _annotations(closing), list(chunks)) if closing else []
    shown = {chunk_id: _from_chunk(chunk) for chunk_id, chunk in chunks.items()}
    index = search_index(values.get("tool_history") or [])
    pieces, citations = _citations(text, mentions, shown, index)
    grounding = values.get("grounding")
    question = values.get("question") or (asked[-1][0] if asked else None)
    return {
        "question": question,
        "terminated_by": values.get("terminated_by"),
        "budget_stop": values.get("budget_stop"),
        "error": values.get("error"),
        "coverage": values.get("coverage"),
        "score": grounding.get("score") if isinstance(grounding, Mapping) else None,
        "answer": pieces,
        "citations": citations,
        "claims": _claims(grounding, citations),
        "steps": _steps(values.get("tool_history") or []),
        "totals": _totals(values),
        "answer_kind": values.get("answer_kind"),
        "stale_note": _stale_note(values.get("stale_evidence")),
        "earlier": [_earlier(q, c) for q, c in asked[:-1]],
    }


def _stale_note(stale: Any) -> str | None:
    """What a follow-up says first when the previous answer's evidence changed since (`nodes.pins`)."""
    note = stale.get("note") if isinstance(stale, Mapping) else None
    return note if isinstance(note, str) and note else None
