"""Chunks as the loop keeps them: normalised from any search result, and shown (``core.channels`` merges them)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypeGuard
from xml.sax.saxutils import quoteattr

from typing_extensions import TypedDict

from arcana_loop.core.text import frame_text, scrub
from arcana_loop.knowledge.sections import page_label
from arcana_loop.knowledge.types import Chunk

SHOWN_PER_SEARCH = 5
"""How many chunks of one search result the controller reads in full."""

NO_RESULTS = "No results."
UNMATCHED_NOTE = "No document searched contains: {words}."
"""The last line of a result whose query has words the scope never uses (a name it does not know)."""
FOUND_TEMPLATE = "Found {total} chunks. Top {shown}:"
MAX_CHUNK_CHARS = 100_000
"""Longest chunk text the loop keeps; a longer one is cut (it would be checkpointed with every merge)."""
SHOWN_CHUNK_CHARS = 4_000
"""Longest chunk text the controller reads in a search result; the rest is summarised by its length."""
TRUNCATED = "[... truncated: {more:,} more characters]"
CHUNK_TAG = "chunk"
"""The element a search result frames each chunk in."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _is_mapping(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, a plain dict told without the ABC check (every field of every result)."""
    return isinstance(value, dict) or isinstance(value, Mapping)


def _fields(obj: Any) -> Callable[[str], Any]:
    """Return how to read a search result's fields: a mapping's keys, else an object's attributes.

    Decided once per result, not once per field: ``isinstance(obj, Mapping)`` is an ABC
    check, and it ran seven times for each chunk of every search.
    """
    if _is_mapping(obj):
        return obj.get
    return lambda name: getattr(obj, name, None)


def _score(value: Any) -> float:
    if isinstance(value, bool):
        return 0.0
    try:
        score = float(value)
    except (
        TypeError,
        ValueError,
        OverflowError,
    ):  # OverflowError: an int past float range, e.g. 10**400
        return 0.0
    return score if math.isfinite(score) else 0.0


def _json_safe(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if value is None or isinstance(value, int | float | bool):
        return value
    if _is_mapping(value):
        return {scrub(str(k)): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return scrub(str(value))


def _text(value: str) -> str:
    """A chunk text or id as the loop keeps it: valid UTF-8, the text cut at `MAX_CHUNK_CHARS`."""
    return scrub(value[:MAX_CHUNK_CHARS])


def to_chunk(obj: Any) -> Chunk | None:
    """Normalise one search result into a `Chunk`, or ``None`` when it is not a chunk at all.

    A result may be a mapping or an object with attributes. A missing text becomes
    ``""``; a missing id becomes a stable id derived from the text (``anon-`` plus a
    hash), so the same text always deduplicates; a missing, non-numeric or non-finite
    score becomes ``0.0``.
    """
    if obj is None or isinstance(obj, str | bytes | int | float):
        return None
    field = _fields(obj)
    text = field("text")
    text = _text(text if isinstance(text, str) else ("" if text is None else str(text)))
    raw_id = field("id")
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        chunk_id = "anon-" + hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
    else:
        chunk_id = scrub(str(raw_id))
    chunk: Chunk = {"id": chunk_id, "text": text, "score": _score(field("score"))}
    for key in ("collection", "document_id"):
        value = field(key)
        if value is not None:
            chunk[key] = scrub(str(value))
    position = field("position")
    if isinstance(position, int) and not isinstance(position, bool):
        chunk["position"] = position
    metadata = field("metadata")
    if _is_mapping(metadata):
        chunk["metadata"] = _json_safe(metadata)
    return chunk


def to_chunks(results: Iterable[Any], limit: int | None = None) -> list[Chunk]:
    """Normalise a search result list, dropping entries that are not chunks.

    Args:
        results: what the search returned.
        limit: keep at most this many chunks (the search's limit; a search function
            may return more than it was asked for); the rest is not even read.
    """
    chunks = (c for c in (to_chunk(r) for r in results) if c is not None)
    return list(itertools.islice(chunks, limit))


def render_id(chunk_id: str) -> str:
    """Return a chunk id as plain text shows it: as is, or JSON-quoted when it could break the layout."""
    if chunk_id.isprintable() and "[" not in chunk_id and "]" not in chunk_id:
        return chunk_id
    return json.dumps(chunk_id, ensure_ascii=True)


def shown_text(text: str) -> str:
    """Return a chunk text as the controller reads it: cut at `SHOWN_CHUNK_CHARS`, saying how much was left out."""
    if len(text) <= SHOWN_CHUNK_CHARS:
        return text
    return f"{text[:SHOWN_CHUNK_CHARS]}\n{TRUNCATED.format(more=len(text) - SHOWN_CHUNK_CHARS)}"


SHOWN_BEFORE = "in the search result of iteration {iteration} above"
COMPACTED_NOTE = "(texts left out: an earlier question's result; search again to read them)"
_LABEL_CHARS = 160


class ResultEntry(TypedDict):
    """One chunk of a search result, as the loop wrote it (the tool message's artifact holds these).

    ``text_start``/``text_end`` locate the chunk's text in the message content when it
    was shown in full; ``shown_in`` is the iteration of the earlier result that showed
    it instead.
    """

    id: str
    rank: int
    """0-based position in the result."""
    score: float
    collection: str | None
    source: str | None
    section: str | None
    pages: str | None
    """``"3"`` or ``"2–3"`` for a chunk of a paged document (PDF)."""
    shown_in: int | None
    text_start: int | None
    text_end: int | None


class SearchArtifact(TypedDict):
    """What a search result's tool message carries besides its text: the data it was rendered from.

    The model never sees it. Compaction, the offline controller and the tests read
    it; no module reads a search result back from its text.
    """

    kind: Literal["search"]
    total: int
    """How many chunks the search returned (``entries`` holds the shown ones)."""
    entries: list[ResultEntry]
    unmatched: NotRequired[list[str]]
    """The query's words no chunk of the scope holds (absent from results written before it existed)."""


def is_search_artifact(value: Any) -> bool:
    """Whether a tool message's artifact is a search result the loop wrote."""
    return isinstance(value, Mapping) and value.get("kind") == "search"


def _label(value: Any) -> str | None:
    """A source or section as a result shows it: one line, bounded (control characters become spaces)."""
    if not isinstance(value, str) or not value.strip():
        return None
    label = _CONTROL.sub(" ", value).strip()
    return label if len(label) <= _LABEL_CHARS else label[: _LABEL_CHARS - 3] + "..."


# quoteattr writes line breaks and tabs as character references: an id stays exact
_ATTRIBUTE_ENTITIES = {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
_NOTHING_TO_QUOTE = re.compile(r'[^&<>"\n\r\t]*')


def _quoted(value: str) -> str:
    """Return an attribute value as `quoteattr` writes it.

    A value holding none of the characters it escapes (most ids, sources and numbers)
    is that value in double quotes: written so here, without its seven replaces, since
    every chunk of every search result has two to five attributes.
    """
    if _NOTHING_TO_QUOTE.fullmatch(value):
        return f'"{value}"'
    return quoteattr(value, _ATTRIBUTE_ENTITIES)


def _attributes(entry: ResultEntry, **extra: str) -> str:
    pairs = {
        "n": str(entry["rank"] + 1),
        "id": entry["id"],
        **{k: v for k in ("source", "section", "pages") if (v := entry[k]) is not None},
        **extra,
    }
    return " ".join(f"{k}={_quoted(v)}" for k, v in pairs.items())


def _opening(entry: ResultEntry) -> str:
    if entry["shown_in"] is not None:
        return f"<{CHUNK_TAG} {_attributes(entry, text=SHOWN_BEFORE.format(iteration=entry['shown_in']))}/>"
    return f"<{CHUNK_TAG} {_attributes(entry)}>"


def _entry(rank: int, chunk: Chunk, shown_in: int | None) -> ResultEntry:
    metadata = chunk.get("metadata") or {}
    return {
        "id": chunk["id"],
        "rank": rank,
        "score": chunk["score"],
        "collection": chunk.get("collection"),
        "source": _label(metadata.get("source")),
        "section": _label(metadata.get("section")),
        "pages": page_label(metadata),
        "shown_in": shown_in,
        "text_start": None,
        "text_end": None,
    }


def render_search_result(
    chunks: Sequence[Chunk],
    shown_before: Mapping[str, int] | None = None,
    unmatched: Sequence[str] = (),
) -> tuple[str, SearchArtifact | None]:
    """Render a search result as the controller reads it, and the artifact it was rendered from.

    The top `SHOWN_PER_SEARCH` chunks appear in search order, each framed in a
    ``<chunk n=... id=... source=... section=...>`` element whose attributes are
    quoted and whose text cannot close it or open another (`frame_text`), so a
    document line shaped like an entry stays inside its chunk.

    Args:
        chunks: the result, in the order the search returned it.
        shown_before: chunk id -> iteration of the result that already showed its
            full text; those chunks appear by id with a pointer instead.
        unmatched: the query's words no chunk of the scope holds: named on a last line
            (`UNMATCHED_NOTE`), since a controller should not go on searching for them.
    """
    note = f"\n\n{UNMATCHED_NOTE.format(words=', '.join(unmatched))}" if unmatched else ""
    if not chunks:
        if not unmatched:
            return NO_RESULTS, None
        return NO_RESULTS + note, {
            "kind": "search",
            "total": 0,
            "entries": [],
            "unmatched": list(unmatched),
        }
    earlier = shown_before or {}
    shown = chunks[:SHOWN_PER_SEARCH]
    text = FOUND_TEMPLATE.format(total=len(chunks), shown=len(shown))
    entries: list[ResultEntry] = []
    for rank, chunk in enumerate(shown):
        entry = _entry(rank, chunk, earlier.get(chunk["id"]))
        text += "\n\n" + _opening(entry)
        if entry["shown_in"] is None:
            body = frame_text(shown_text(chunk["text"]), CHUNK_TAG)
            start = len(text) + 1  # after the line break that ends the opening tag
            entry["text_start"], entry["text_end"] = start, start + len(body)
            text += f"\n{body}\n</{CHUNK_TAG}>"
        entries.append(entry)
    artifact: SearchArtifact = {"kind": "search", "total": len(chunks), "entries": entries}
    if unmatched:
        artifact["unmatched"] = list(unmatched)
    return text + note, artifact


def entry_text(content: str, entry: ResultEntry) -> str | None:
    """The text a result showed for one of its entries (``None`` for a pointer to an earlier result)."""
    start, end = entry["text_start"], entry["text_end"]
    if start is None or end is None:
        return None
    return content[start:end]


def compacted_search_result(artifact: SearchArtifact) -> str:
    """Render an earlier question's search result as later questions are sent it: ids and labels, no text."""
    return "\n".join(
        [
            f"{FOUND_TEMPLATE.format(total=artifact['total'], shown=len(artifact['entries']))} {COMPACTED_NOTE}",
            *(f"<{CHUNK_TAG} {_attributes(e)}/>" for e in artifact["entries"]),
        ]
    )
