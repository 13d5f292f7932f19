"""Chunks as the loop keeps them: normalised from any search result, merged, capped, shown."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from arcana_loop.graph.channels import merge_chunks
from arcana_loop.graph.text import scrub
from arcana_loop.knowledge.types import Chunk

__all__ = ["merge_chunks"]

SHOWN_PER_SEARCH = 5
"""How many chunks of one search result the controller reads in full."""

NO_RESULTS = "No results."
FOUND_TEMPLATE = "Found {total} chunks. Top {shown}:"
MAX_CHUNK_CHARS = 100_000
"""Longest chunk text the loop keeps; a longer one is cut (it would be checkpointed with every merge)."""
SHOWN_CHUNK_CHARS = 4_000
"""Longest chunk text the controller reads in a search result; the rest is summarised by its length."""
TRUNCATED = "[... truncated: {more:,} more characters]"


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


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
    if isinstance(value, Mapping):
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
    text = _field(obj, "text")
    text = _text(text if isinstance(text, str) else ("" if text is None else str(text)))
    raw_id = _field(obj, "id")
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        chunk_id = "anon-" + hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]
    else:
        chunk_id = scrub(str(raw_id))
    chunk: Chunk = {"id": chunk_id, "text": text, "score": _score(_field(obj, "score"))}
    for key in ("collection", "document_id"):
        value = _field(obj, key)
        if value is not None:
            chunk[key] = scrub(str(value))
    position = _field(obj, "position")
    if isinstance(position, int) and not isinstance(position, bool):
        chunk["position"] = position
    metadata = _field(obj, "metadata")
    if isinstance(metadata, Mapping):
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
    """Return a chunk id as a search result shows it: as is, or JSON-quoted when it could break the layout.

    An id with a line break or a bracket could otherwise start a forged result entry.
    """
    if chunk_id.isprintable() and "[" not in chunk_id and "]" not in chunk_id:
        return chunk_id
    return json.dumps(chunk_id, ensure_ascii=True)


def shown_text(text: str) -> str:
    """Return a chunk text as the controller reads it: cut at `SHOWN_CHUNK_CHARS`, saying how much was left out."""
    if len(text) <= SHOWN_CHUNK_CHARS:
        return text
    return f"{text[:SHOWN_CHUNK_CHARS]}\n{TRUNCATED.format(more=len(text) - SHOWN_CHUNK_CHARS)}"


SHOWN_BEFORE = "(full text in the search result of iteration {iteration} above)"


_WHERE_CHARS = 160
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def where(chunk: Chunk) -> str:
    """Where a chunk comes from, for its result line: `` pydoc:tempfile > tempfile.mkstemp``.

    The document's source and the chunk's section path (set at ingest) tell the
    controller which object a chunk from the middle of a long text documents.
    Control characters become spaces, so the label cannot start a new entry.
    """
    metadata = chunk.get("metadata") or {}
    parts = [
        str(metadata[k])
        for k in ("source", "section")
        if isinstance(metadata.get(k), str) and metadata[k]
    ]
    label = _CONTROL.sub(" ", " > ".join(parts)).strip()
    if not label:
        return ""
    return " " + (label if len(label) <= _WHERE_CHARS else label[: _WHERE_CHARS - 3] + "...")


def format_search_result(
    chunks: Sequence[Chunk], shown_before: Mapping[str, int] | None = None
) -> str:
    """Render a search result as the controller reads it: full text, stable ids, search order.

    Args:
        chunks: the result, in the order the search returned it.
        shown_before: chunk id -> iteration of the result that already showed its
            full text; those chunks appear by id with a pointer instead.
    """
    if not chunks:
        return NO_RESULTS
    shown = chunks[:SHOWN_PER_SEARCH]
    earlier = shown_before or {}
    body = "\n\n".join(
        f"{i}. [{render_id(c['id'])}] " + SHOWN_BEFORE.format(iteration=earlier[c["id"]])
        if c["id"] in earlier
        else f"{i}. [{render_id(c['id'])}]{where(c)}\n{shown_text(c['text'])}"
        for i, c in enumerate(shown, start=1)
    )
    return f"{FOUND_TEMPLATE.format(total=len(chunks), shown=len(shown))}\n\n{body}"
