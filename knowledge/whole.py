"""A hit read whole: the section (a documented member, a Markdown section, a PDF's page) it belongs to.

Chunks stay small for ranking: a short chunk that answers is not diluted by the
rest of its section. But the answer a question needs is often in the chunk beside
the hit (``dataclasses.field`` is cut in two: its signature ranks, its
``default_factory`` sentence does not), and a reader of the hit alone never sees
it. So a search returns, for each hit, the section it belongs to (its chunks of the
same document under the same section path), up to a character budget, with the
hit's own span marked; the search's other hits in that section are merged into it,
so each section appears once, at the rank of its best hit.

The result keeps the hit's id, score, position and metadata (``start_index`` is
still the hit's offset in its document), and adds to the metadata:

* ``hit_start`` and ``hit_end``: where the hit's text is in the result's text;
* ``section_chunks``: the ids of the chunks the text holds, in document order;
* ``merged_hits``: the ids of the search's other hits in this section, best first;
* ``section_complete``: whether the text holds the whole section (else it was cut at
  the budget: the hit, the search's other hits, the section's first chunk, then
  the chunks nearest the hit; a left-out stretch, or one of another section between
  two parts of this one, reads ``[...]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arcana_loop.knowledge.types import Chunk

DEFAULT_SECTION_CHARS = 2000
"""Most characters a result holds when its section is longer (its hits are never cut).

Measured on the realistic set's tune half (`evaluation/README.md`, "Whole sections"): 800
to 2,000 characters found the same questions, more found one more for 8-11 % more text;
2,000 reads 99 % of the demo corpus's members whole, and stays under what the controller is
shown of one result (4,000 characters)."""
MAX_SECTION_CHARS = 100_000
"""The largest budget a search takes (the loop keeps no longer text, `tools.chunks`)."""
SIBLING_WINDOW = 16
"""Chunks read on each side of a hit: enough to fill any budget but with tiny chunks,
and a bound on what one search reads of a long section."""
ROWS_PER_RESULT = 3
"""Ranked chunks fetched per result asked for: several may fall in one section."""
GAP = "\n\n[...]\n\n"
"""What stands in the text for a stretch of the section left out at the budget."""
_JOIN = "\n\n"
SectionKey = tuple[str, str]
"""A section: the document's id and the section path (see `section_key`)."""


@dataclass(frozen=True)
class Piece:
    """One chunk of a section, as the search statement reads it."""

    id: str
    text: str
    position: int
    start_index: int | None


@dataclass(frozen=True)
class Section:
    """The chunks of a hit's section the search read (a window of them around the hit)."""

    pieces: tuple[Piece, ...]
    total: int
    """How many chunks the whole section has."""


def rows_to_fetch(limit: int) -> int:
    """Ranked chunks to fetch for `limit` whole-section results."""
    return limit * ROWS_PER_RESULT


def check_budget(value: object) -> int:
    """Return a section budget in characters, or raise `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SECTION_CHARS:
        raise ValueError(f"section_chars must be an int in 1..{MAX_SECTION_CHARS}, got {value!r}")
    return value


def section_of(value: Any) -> Section | None:
    """Read the section column of a search row (``[[id, text, position, start_index, total], ...]``)."""
    if not value:
        return None
    pieces = tuple(
        Piece(id=str(i), text=str(t), position=int(p), start_index=None if s is None else int(s))
        for i, t, p, s, _ in value
    )
    return Section(pieces=pieces, total=int(value[0][4]))


def section_key(chunk: Mapping[str, Any]) -> SectionKey:
    """What makes two hits one result: the same document, section path and page.

    A PDF has no section path: its pages are its sections, so a hit on page 3 is read
    with page 3, and is cited as page 3.
    """
    metadata = chunk.get("metadata") or {}
    section = metadata.get("section")
    path = section if isinstance(section, str) else ""
    page = metadata.get("page")
    if page is not None:
        path = f"{path}\x00{page}"
    return str(chunk.get("document_id") or chunk["id"]), path


def _groups(hits: Sequence[Chunk], limit: int) -> dict[SectionKey, list[Chunk]]:
    """The hits of the first `limit` sections, by section, best first."""
    groups: dict[SectionKey, list[Chunk]] = {}
    for hit in hits:
        key = section_key(hit)
        if key in groups or len(groups) < limit:
            groups.setdefault(key, []).append(hit)
    return groups


def unread(hits: Sequence[Chunk], sections: Mapping[SectionKey, Section], limit: int) -> list[str]:
    """The best hit of each result's section the search has not read yet (found outside its text ranking)."""
    return [g[0]["id"] for key, g in _groups(hits, limit).items() if key not in sections]


def read_whole(
    hits: Sequence[Chunk], sections: Mapping[SectionKey, Section], *, limit: int, budget: int
) -> list[Chunk]:
    """Merge ranked hits into at most `limit` results, one per section, each read whole.

    Args:
        hits: the ranked chunks, best first.
        sections: by `section_key`, the chunks of each section the search read (a
            section without them is read as its hits alone).
        limit: most results.
        budget: most characters a result holds, unless its hit alone is longer.
    """
    return [_result(g, sections.get(key), budget) for key, g in _groups(hits, limit).items()]


def _result(group: Sequence[Chunk], section: Section | None, budget: int) -> Chunk:
    best = group[0]
    known = {p.id: p for p in section.pieces} if section else {}
    for hit in group:  # a hit outside the window read (or with no section read) still counts
        known.setdefault(hit["id"], _piece(hit))
    pieces = sorted(known.values(), key=lambda p: p.position)
    kept = _choose(pieces, [h["id"] for h in group], budget)
    text, spans = _joined([p for p in pieces if p.id in kept], pieces)
    total = section.total if section else len(pieces)
    metadata = dict(best.get("metadata") or {})
    metadata.update(
        hit_start=spans[best["id"]][0],
        hit_end=spans[best["id"]][1],
        section_chunks=[p.id for p in pieces if p.id in kept],
        merged_hits=[h["id"] for h in group[1:]],
        section_complete=len(kept) == total,
    )
    return {**best, "text": text, "metadata": metadata}


def _piece(hit: Chunk) -> Piece:
    start = (hit.get("metadata") or {}).get("start_index")
    position = hit.get("position")
    return Piece(
        id=hit["id"],
        text=hit["text"],
        position=position if isinstance(position, int) else 0,
        start_index=start if isinstance(start, int) and not isinstance(start, bool) else None,
    )


def _choose(pieces: Sequence[Piece], hit_ids: Sequence[str], budget: int) -> set[str]:
    """The pieces a result holds: all that fit, else the hits, the section's start, the nearest.

    The search's hits are always kept, whatever the budget: one left out would take
    a ranked chunk out of the result (measured: at 800 characters, the tune half's
    hit@5 fell below that of chunks alone).
    """
    if sum(len(p.text) + len(_JOIN) for p in pieces) - len(_JOIN) <= budget:
        return {p.id for p in pieces}
    by_id = {p.id: p for p in pieces}
    first = by_id[hit_ids[0]]
    nearest = sorted(pieces, key=lambda p: (abs(p.position - first.position), -p.position))
    kept = set(hit_ids)
    size = sum(len(by_id[i].text) + len(GAP) for i in hit_ids) - len(GAP)
    for piece in [pieces[0], *nearest]:
        cost = len(piece.text) + len(GAP)
        if piece.id not in kept and size + cost <= budget:
            kept.add(piece.id)
            size += cost
    return kept


def _joined(
    kept: Sequence[Piece], pieces: Sequence[Piece]
) -> tuple[str, dict[str, tuple[int, int]]]:
    """The kept pieces as one text, and where each one is in it.

    Neighbours are joined as the document had them: a chunk cut from a long block
    overlaps the one before it (`chunk_overlap`), and its repeated start is dropped.
    """
    index = {p.id: n for n, p in enumerate(pieces)}
    text = ""
    spans: dict[str, tuple[int, int]] = {}
    previous: Piece | None = None
    for piece in kept:
        body = piece.text
        if previous is not None:
            # a chunk read but left out, or a stretch of the document under another section
            # (a heading repeated further down), stands between them
            if index[piece.id] != index[previous.id] + 1 or piece.position != previous.position + 1:
                text += GAP
            else:
                overlap = _overlap(previous, piece)
                body = body[overlap:]
                text += "" if overlap else _JOIN
        start = len(text) - (len(piece.text) - len(body))
        text += body
        spans[piece.id] = (start, len(text))
        previous = piece
    return text, spans


def _overlap(before: Piece, after: Piece) -> int:
    """How many leading characters of `after` repeat the end of `before` (by their offsets)."""
    if before.start_index is None or after.start_index is None:
        return 0
    shared = before.start_index + len(before.text) - after.start_index
    if 0 < shared < len(after.text) and before.text.endswith(after.text[:shared]):
        return shared
    return 0
