"""A document's structure, read by real parsers, and the chunks packed from it.

A document becomes a list of `Block`s (a paragraph, a list, a code block, a table),
each under the headings above it:

* Markdown through markdown-it-py (CommonMark, plus pipe tables): headings are
  heading tokens, so a ``# comment`` inside a fenced block is code, never a heading;
* reStructuredText through docutils: sections are the doctree's sections, code is
  its literal blocks, tables are its tables (rendered as pipe tables);
* plain text (and the text of a PDF, page by page) as paragraphs with no headings:
  a line of plain text is never taken for a heading.

`pack` then fills chunks block by block within one section. A chunk boundary never
falls inside a code block or a table: a block too long for one chunk is split, a
code block at line boundaries with each piece fenced again, a table at row
boundaries with its header row repeated, a paragraph by the recursive character
splitter (with the configured overlap). A chunk never runs on across a PDF page
break, however short: a fact is cited on the page it is on.

A section path holds headings only: the text of heading nodes, nothing else.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import json
import re
import zlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

import numpy as np
from langchain_text_splitters import RecursiveCharacterTextSplitter

BlockKind = Literal["heading", "text", "code", "table"]
MAX_HEADING_CHARS = 120
"""A heading longer than this is cut in the section path (headings are titles, not prose)."""
_HEADING_MARKS = re.compile(r"[\s¶§#]+$|^[\s¶§#]+")
_FENCE_OPEN = re.compile(r"^(`{3,}|~{3,})")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Block:
    """One unit of a document that a chunk boundary must not cut: a paragraph, a list, code, a table."""

    kind: BlockKind
    text: str
    section: tuple[str, ...]
    """The headings above the block, outermost first."""
    start: int | None = None
    """Offset of `text` in the document's text, when `text` is a verbatim slice of it."""
    page: int | None = None
    """The page the block is on (PDF), 1-based."""


@dataclass(frozen=True)
class Piece:
    """The text of one chunk and where it sits."""

    text: str
    section: tuple[str, ...]
    start: int | None
    page: int | None = None
    page_end: int | None = None


def heading_text(text: str) -> str:
    """A heading as a section path holds it: one line, no anchor marks (``¶``, ``§``), bounded."""
    one_line = " ".join(text.split())
    return _HEADING_MARKS.sub("", one_line)[:MAX_HEADING_CHARS].strip()


def heading_words(source: str) -> str:
    """A Markdown heading's source as its section path holds it: inline markup dropped, `heading_text`.

    ``Deploying `zorbulon` `` gives ``Deploying zorbulon``, the words a chunk's
    section path names, so a document titled by its heading names it alike.
    """
    if not _INLINE_MARKUP.search(source):
        return heading_text(source)
    tokens = _inline_parser().parseInline(source)
    return heading_text(_heading_words(tokens[0]) if tokens else source)


# -- Markdown -------------------------------------------------------------------------------


def markdown_blocks(text: str) -> list[Block]:
    """The blocks of a Markdown document, each under its ATX or setext headings.

    Each block's text is the verbatim source of a top-level block token (so a
    table keeps its pipes and a code block its fences and info string).
    """
    return parse_markdown(text).blocks


class _Found(NamedTuple):
    """One block as the parser found it, placed within its segment (a heading also when its title is empty)."""

    kind: BlockKind
    start: int
    """Offset of its source from the start of its segment."""
    length: int
    level: int
    """A heading's level (1-6), which decides the headings it closes; 0 for other blocks."""
    title: str


class _Segment(NamedTuple):
    """The source from one top-level block's first line to the next one's, and the blocks found in it."""

    length: int
    digest: bytes
    found: tuple[_Found, ...]


_KIND_CODES: tuple[BlockKind, ...] = ("heading", "text", "code", "table")
_DIGEST_BYTES = 16
GROUP_SEGMENTS = 32
"""Segments checked at once where a text still matches its stored map (`MarkdownMap.groups`)."""
_COLUMNS = "<u4"
_NARROW_COLUMNS = "<u2"
"""How a map's columns are stored when every value fits (most documents: segments and blocks
under 64 KB): half the bytes to compress on every edit."""


def _column(values: Any) -> np.ndarray[Any, Any]:
    return np.asarray(values, dtype=np.int64)


class _ByValue:
    """Compared by value: its other fields (`scalars`) and its integer columns (`columns`)."""

    def columns(self) -> tuple[np.ndarray[Any, Any], ...]:
        """The integer columns, in the order they are stored."""
        raise NotImplementedError

    def scalars(self) -> tuple[Any, ...]:
        """The fields that are not columns."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return False
        assert isinstance(other, _ByValue)
        mine, theirs = self.columns(), other.columns()
        return self.scalars() == other.scalars() and all(
            np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True)
        )

    __hash__ = None  # type: ignore[assignment]  # arrays inside: compared by value


@dataclass(frozen=True, eq=False)
class Packing(_ByValue):
    """How a Markdown document's blocks were packed into chunks, run by run.

    A run is a stretch of consecutive blocks under one section path: `pack` ends a
    chunk where the section changes, so a run's chunks depend on its blocks alone.
    An edited copy takes a run's chunks from here, moved with its text, when the run
    is the same blocks under the same section path; only the other runs are packed.
    """

    chunk_size: int
    chunk_overlap: int
    run_first: np.ndarray[Any, Any]
    """The (map-wide) index of each run's first block in the map's blocks."""
    run_last: np.ndarray[Any, Any]
    """The index of each run's last block."""
    run_pieces: np.ndarray[Any, Any]
    """How many pieces each run made."""
    piece_starts: np.ndarray[Any, Any]
    """Each piece's offset from its run's first block, plus one; 0 for a piece that is not a
    slice of the text (of a split code block or table): its run is packed again."""
    piece_lengths: np.ndarray[Any, Any]
    keys: bytes = b""
    """`KEY_BYTES` per piece that the caller gives them (`loading` keeps each chunk's id
    there, and zeros for a blank piece); taken over with a run's pieces."""
    label: str = ""
    """What the keys belong to (`loading`: the document and its title)."""
    again: bytes = b""
    """What else the caller keeps of some pieces, stored after the keys (`loading`: the
    ids of identical chunks after the first, whose keys are the first one's)."""
    placed: bytes = b""
    """What else the caller keeps with the packing, stored last and uncompressed, so it can
    be replaced without writing the map again (`loading`: where each chunk's row places it)."""

    def columns(self) -> tuple[np.ndarray[Any, Any], ...]:
        """The integer columns, in the order they are stored."""
        return (
            self.run_first,
            self.run_last,
            self.run_pieces,
            self.piece_starts,
            self.piece_lengths,
        )

    def scalars(self) -> tuple[Any, ...]:
        """The fields that are not columns."""
        return (self.chunk_size, self.chunk_overlap, self.keys, self.label, self.again, self.placed)


KEY_BYTES = 16
"""Bytes a piece's key takes in `Packing.keys`."""


@dataclass(frozen=True, eq=False)
class MarkdownMap(_ByValue):
    """Where a Markdown document's top-level blocks start, with a digest of the source between.

    Stored with the document, it lets `parse_markdown` parse an edited copy in part:
    the parser reads a top-level block from its first line with nothing carried over
    from the blocks before it (markdown-it resets its block state between them),
    and decides where the block ends by reading at most up to the first line of the
    block after next. So a block whose source and the two segments after it are
    unchanged parses as before, and only the rest is parsed again.

    Held as columns (one entry per segment, one per block found), so a map is read,
    spliced and written without an object per block; `packing` records the chunks
    packed from it (`pack_markdown`).
    """

    lengths: np.ndarray[Any, Any]
    """Each segment's length in characters."""
    digests: bytes
    """Each segment's digest (`_DIGEST_BYTES` each)."""
    counts: np.ndarray[Any, Any]
    """Blocks found in each segment."""
    starts: np.ndarray[Any, Any]
    """Each block's offset from the start of its segment."""
    spans: np.ndarray[Any, Any]
    """Each block's length."""
    codes: np.ndarray[Any, Any]
    """Each block's kind (index in `_KIND_CODES`) times 8, plus a heading's level."""
    titles: tuple[str, ...]
    """The title of each heading, in order."""
    groups: bytes = b""
    """A digest of each whole group of `GROUP_SEGMENTS` segments: an unchanged stretch is
    checked a group at a time, not a segment at a time."""
    packing: Packing | None = None

    def columns(self) -> tuple[np.ndarray[Any, Any], ...]:
        """The integer columns, in the order they are stored."""
        return (self.lengths, self.counts, self.starts, self.spans, self.codes)

    def scalars(self) -> tuple[Any, ...]:
        """The fields that are not columns."""
        return (self.digests, self.groups, self.titles, self.packing)

    @classmethod
    def of(cls, segments: Sequence[_Segment]) -> MarkdownMap:
        """The map of freshly parsed segments."""
        found = [f for s in segments for f in s.found]
        return cls(
            lengths=_column([s.length for s in segments]),
            digests=b"".join(s.digest for s in segments),
            counts=_column([len(s.found) for s in segments]),
            starts=_column([f.start for f in found]),
            spans=_column([f.length for f in found]),
            codes=_column([_KIND_CODES.index(f.kind) * 8 + f.level for f in found]),
            titles=tuple(f.title for f in found if f.kind == "heading"),
        )

    def dump(self) -> bytes:
        """The map as stored: compressed columns, tagged with the parser that made it."""
        packing = self.packing
        header = {
            "parser": _parser_version(),
            "segments": len(self.lengths),
            "found": len(self.starts),
            "titles": list(self.titles),
            "packing": None
            if packing is None
            else [
                packing.chunk_size,
                packing.chunk_overlap,
                len(packing.run_first),
                len(packing.piece_starts),
                packing.label,
                len(packing.keys),
                len(packing.placed),
                len(packing.again),
            ],
        }
        columns = [*self.columns(), *(packing.columns() if packing is not None else ())]
        narrow = all(int(c.max(initial=0)) <= np.iinfo(_NARROW_COLUMNS).max for c in columns)
        if narrow:
            header["narrow"] = True
        head = json.dumps(header, separators=(",", ":")).encode()
        stored_as = _NARROW_COLUMNS if narrow else _COLUMNS
        body = b"".join(c.astype(stored_as).tobytes() for c in columns)
        packed = zlib.compress(len(head).to_bytes(4, "little") + head + body, 1)
        # the digests are random bytes: stored as they are (compressing them only cost time)
        kept = packing.keys + packing.again + packing.placed if packing is not None else b""
        tail = self.digests + self.groups + kept
        return len(packed).to_bytes(4, "little") + packed + tail

    @classmethod
    def load(cls, data: bytes) -> MarkdownMap | None:
        """A stored map; `None` for one another parser version made, or one that cannot be read."""
        try:
            packed = int.from_bytes(data[:4], "little")
            raw = zlib.decompress(data[4 : 4 + packed])
            size = int.from_bytes(raw[:4], "little")
            header = json.loads(raw[4 : 4 + size])
            if header["parser"] != _parser_version():
                return None
            return _read_map(header, raw[4 + size :], data[4 + packed :])
        except (zlib.error, ValueError, TypeError, KeyError, IndexError):
            return None


def _read_map(header: dict[str, Any], body: bytes, tail: bytes) -> MarkdownMap:
    """A stored map from its columns and digests (see `MarkdownMap.dump`), checked to hold together."""
    segments, found = int(header["segments"]), int(header["found"])
    titles = tuple(str(t) for t in header["titles"])
    packed = header["packing"]
    runs, pieces = (int(packed[2]), int(packed[3])) if packed is not None else (0, 0)
    sizes = [segments, segments, found, found, found]
    if packed is not None:
        sizes += [runs, runs, runs, pieces, pieces]
    stored_as = _NARROW_COLUMNS if header.get("narrow") else _COLUMNS
    width = np.dtype(stored_as).itemsize
    keys = int(packed[5]) if packed is not None else 0
    placed = int(packed[6]) if packed is not None else 0
    again = int(packed[7]) if packed is not None else 0
    digests = _DIGEST_BYTES * (segments + segments // GROUP_SEGMENTS) + keys + again + placed
    if min(sizes, default=0) < 0 or len(body) != width * sum(sizes) or len(tail) != digests:
        raise ValueError("a stored map of the wrong size")
    columns, at = [], 0
    for count in sizes:
        columns.append(
            np.frombuffer(body, dtype=stored_as, count=count, offset=at).astype(np.int64)
        )
        at += width * count
    lengths, counts, starts, spans, codes = columns[:5]
    if int(counts.sum()) != found or (found and int(codes.max()) >= 8 * len(_KIND_CODES)):
        raise ValueError("a stored map's blocks do not add up")
    if np.any(starts + spans > np.repeat(lengths, counts)):
        raise ValueError("a segment of a stored map does not hold its blocks")
    if int(np.count_nonzero(codes < 8)) != len(titles):
        raise ValueError("a stored map's headings do not match its titles")
    packing = None
    if packed is not None:
        first, last, made, piece_starts, piece_lengths = columns[5:]
        if (
            int(made.sum()) != pieces
            or keys not in (0, KEY_BYTES * pieces)
            or placed < 0
            or again < 0
            or np.any(first > last)
            or (runs and int(last.max()) >= found)
        ):
            raise ValueError("a stored map's chunks do not add up")
        packing = Packing(
            chunk_size=int(packed[0]),
            chunk_overlap=int(packed[1]),
            run_first=first,
            run_last=last,
            run_pieces=made,
            keys=tail[_DIGEST_BYTES * (segments + segments // GROUP_SEGMENTS) :][:keys],
            again=tail[len(tail) - placed - again : len(tail) - placed],
            placed=tail[len(tail) - placed :] if placed else b"",
            label=str(packed[4]),
            piece_starts=piece_starts,
            piece_lengths=piece_lengths,
        )
    return MarkdownMap(
        lengths=lengths,
        digests=tail[: _DIGEST_BYTES * segments],
        groups=tail[
            _DIGEST_BYTES * segments : _DIGEST_BYTES * (segments + segments // GROUP_SEGMENTS)
        ],
        counts=counts,
        starts=starts,
        spans=spans,
        codes=codes,
        titles=titles,
        packing=packing,
    )


@dataclass(frozen=True)
class MarkdownParse:
    """A Markdown document's blocks, and the map to store for its next version."""

    blocks: list[Block]
    map: MarkdownMap


WINDOW_CHARS = 2048
"""Characters parsed at a time where an edit is found (doubled until blocks settle in the window)."""
_SETTLED_AFTER = 3
"""Block starts that must follow a block in a window before it is taken as the whole text parses it."""
_MAX_CANDIDATES = 4
"""Stored segments of one digest tried where the parse might pick up the stored map again."""


def parse_markdown(text: str, previous: MarkdownMap | None = None) -> MarkdownParse:
    """Parse a Markdown document, reusing what `previous` (an earlier version's map) still holds.

    The result equals a parse of the whole text: a stored segment is reused only
    where its digest, and those of the two after it, match the text at that place;
    elsewhere the text is parsed again, a window at a time from a block boundary,
    keeping the blocks a window settles, until the stored map matches again.
    """
    spliced = _splice(text, previous, _Reparse(text, previous).run())
    layout = _Layout(spliced.map)
    blocks = [
        Block(_KIND_CODES[code // 8], text[start : start + span], layout.sections[section], start)
        for code, start, span, section, kept in zip(
            spliced.map.codes.tolist(),
            layout.starts.tolist(),
            spliced.map.spans.tolist(),
            layout.section_of.tolist(),
            layout.is_block.tolist(),
            strict=True,
        )
        if kept
    ]
    return MarkdownParse(blocks, spliced.map)


@dataclass(frozen=True)
class PackedMarkdown:
    """A Markdown document's pieces, as packed anew or taken over from an earlier version's map."""

    pieces: list[Piece]
    """The pieces packed anew, in order."""
    source: np.ndarray[Any, Any]
    """For every piece of the document, in order: its index in the earlier packing, or -1
    for one of `pieces`."""
    starts: np.ndarray[Any, Any]
    """Where every piece starts in the text (-1: not a slice of it)."""
    sections: list[tuple[str, ...]]
    """Every piece's section path."""
    map: MarkdownMap
    """The map to store, its packing without keys (the caller's to give)."""


def pack_markdown(
    text: str, previous: MarkdownMap | None, *, chunk_size: int, chunk_overlap: int
) -> PackedMarkdown:
    """Parse and pack a Markdown document, redoing only what changed since `previous`.

    The pieces, in order, equal `pack(parse_markdown(text).blocks, text, ...)`. A run
    of blocks under one section path (see `Packing`) whose blocks all come, unchanged
    and in one stretch, from `previous`, under the same section path and with the same
    chunk size and overlap, takes its stored pieces moved with its text: it is
    neither turned into blocks nor packed again.
    """
    spliced = _splice(text, previous, _Reparse(text, previous).run())
    layout = _Layout(spliced.map)
    stored = previous.packing if previous is not None else None
    if stored is not None and (stored.chunk_size, stored.chunk_overlap) != (
        chunk_size,
        chunk_overlap,
    ):
        stored = None
    taken = _taken_runs(layout, spliced, previous, stored) if stored is not None else None
    codes, spans = spliced.map.codes.tolist(), spliced.map.spans.tolist()
    starts, is_block = layout.starts.tolist(), layout.is_block.tolist()
    firsts, lasts = layout.run_first.tolist(), layout.run_last.tolist()
    runs = len(firsts)
    made = np.zeros(runs, dtype=np.int64)
    if taken is not None and stored is not None:
        made[taken >= 0] = stored.run_pieces[taken[taken >= 0]]
    pieces: list[Piece] = []
    packed_at: list[int] = []  # the run of each piece of `pieces`
    for run in np.flatnonzero(taken < 0).tolist() if taken is not None else range(runs):
        section = layout.sections[int(layout.run_section[run])]
        blocks = [
            Block(
                _KIND_CODES[codes[f] // 8],
                text[starts[f] : starts[f] + spans[f]],
                section,
                starts[f],
            )
            for f in range(firsts[run], lasts[run] + 1)
            if is_block[f]
        ]
        packed = pack(blocks, text, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        pieces.extend(packed)
        packed_at.extend([run] * len(packed))
        made[run] = len(packed)
    total = int(made.sum())
    offsets = np.concatenate(([0], np.cumsum(made)))
    source = np.full(total, -1, dtype=np.int64)
    piece_starts = np.zeros(total, dtype=np.int64)
    piece_lengths = np.zeros(total, dtype=np.int64)
    base = layout.starts[layout.run_first] if runs else _column([])
    if taken is not None and stored is not None and np.any(taken >= 0):
        runs_taken = np.flatnonzero(taken >= 0)
        at, kept = _ranges(offsets[runs_taken], made[runs_taken])
        stored_at = np.concatenate(([0], np.cumsum(stored.run_pieces)))
        old, _ = _ranges(stored_at[taken[runs_taken]], made[runs_taken])
        source[at] = old
        piece_starts[at] = stored.piece_starts[old]
        piece_lengths[at] = stored.piece_lengths[old]
    if pieces:
        at = (offsets[packed_at] + _rank(packed_at)).astype(np.int64)
        piece_starts[at] = [
            p.start - int(base[r]) + 1 if p.start is not None else 0
            for p, r in zip(pieces, packed_at, strict=True)
        ]
        piece_lengths[at] = [len(p.text) for p in pieces]
    run_of_piece = np.repeat(np.arange(runs), made)
    new_starts = np.where(piece_starts > 0, base[run_of_piece] + piece_starts - 1, -1)
    packing = Packing(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        run_first=layout.run_first,
        run_last=layout.run_last,
        run_pieces=made,
        piece_starts=piece_starts,
        piece_lengths=piece_lengths,
    )
    section_of = layout.run_section[run_of_piece].tolist()
    paths = [layout.sections[number] for number in section_of]
    return PackedMarkdown(pieces, source, new_starts, paths, replace(spliced.map, packing=packing))


def _ranges(
    starts: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The indexes of the ranges ``starts[i] .. starts[i] + counts[i]``, concatenated, and each one's range."""
    owner = np.repeat(np.arange(len(counts)), counts)
    before = np.concatenate(([0], np.cumsum(counts)))[:-1]
    within = np.arange(int(counts.sum())) - before[owner]
    return (starts[owner] + within).astype(np.int64), owner


def _rank(values: list[int]) -> np.ndarray[Any, Any]:
    """For each value of a sorted list, how many equal ones come before it."""
    array = np.asarray(values, dtype=np.int64)
    first = np.searchsorted(array, array, side="left")
    return np.arange(len(array)) - first


def _taken_runs(
    layout: _Layout, spliced: _Spliced, previous: MarkdownMap | None, stored: Packing
) -> np.ndarray[Any, Any]:
    """For each run of the new text, the stored run it is unchanged from, or -1.

    Unchanged: the same blocks (one stretch of stored segments, from the stored run's
    first block to its last), under the same section path, every piece a slice of the text.
    """
    runs = len(layout.run_first)
    if previous is None or runs == 0 or len(stored.run_first) == 0:
        return np.full(runs, -1, dtype=np.int64)
    before = _Layout(previous, like=layout)
    if not (
        np.array_equal(before.run_first, stored.run_first)
        and np.array_equal(before.run_last, stored.run_last)
    ):
        return np.full(runs, -1, dtype=np.int64)  # a packing that is not of this map
    first, last = layout.run_first, layout.run_last
    source_first, source_last = spliced.source[first], spliced.source[last]
    run_at = np.full(len(previous.starts), -1, dtype=np.int64)
    run_at[stored.run_first] = np.arange(len(stored.run_first))
    candidate = np.where(source_first >= 0, run_at[np.maximum(source_first, 0)], -1)
    known = np.maximum(candidate, 0)
    if before.sections is layout.sections:  # the same headings (`_Layout`'s `like`)
        same_section = np.arange(len(layout.sections), dtype=np.int64)
    else:
        same_section = np.asarray(
            [layout.section_ids.get(section, -1) for section in before.sections], dtype=np.int64
        )
    piece_at = np.concatenate(([0], np.cumsum(stored.run_pieces)))
    unsliced = np.concatenate(([0], np.cumsum(stored.piece_starts == 0)))
    ok = (
        (candidate >= 0)
        & (spliced.stretch[first] == spliced.stretch[last])
        & (stored.run_last[known] == source_last)
        & (same_section[before.run_section[known]] == layout.run_section)
        & (unsliced[piece_at[known + 1]] == unsliced[piece_at[known]])
    )
    return np.where(ok, candidate, -1)


def _walk_headings(
    levels: list[int], titles: tuple[str, ...]
) -> tuple[dict[tuple[str, ...], int], list[tuple[str, ...]], list[int]]:
    """The section paths a document's headings open: the paths by number, and each heading's.

    The one loop over a document's headings, as a stack: a heading closes those of its
    level and deeper; one without a title only closes them.
    """
    stack_levels: list[int] = []
    stack_titles: list[str] = []
    ids: dict[tuple[str, ...], int] = {(): 0}
    sections: list[tuple[str, ...]] = [()]
    after: list[int] = []
    for level, title in zip(levels, titles, strict=True):
        while stack_levels and stack_levels[-1] >= level:
            stack_levels.pop()
            stack_titles.pop()
        if title:
            stack_levels.append(level)
            stack_titles.append(title)
        section = tuple(stack_titles)
        number = ids.get(section)
        if number is None:
            number = ids[section] = len(sections)
            sections.append(section)
        after.append(number)
    return ids, sections, after


class _Layout:
    """Where a map's blocks are in the text, the section path each is under, and its runs."""

    def __init__(self, map: MarkdownMap, like: _Layout | None = None) -> None:
        """Lay `map` out; the section paths are taken over from `like` when its headings are the same.

        The paths depend on the headings alone (their levels and titles, in order), and an
        edit seldom touches one: the map before and after it then share them, and only one
        of the two walks the headings (0.3 ms at 659 sections).
        """
        segment_starts = np.concatenate(([0], np.cumsum(map.lengths)[:-1])).astype(np.int64)
        self.starts: np.ndarray[Any, Any] = (
            np.repeat(segment_starts, map.counts) + map.starts if len(map.starts) else _column([])
        )
        heading = map.codes < 8
        at = np.flatnonzero(heading)
        self.levels: list[int] = (map.codes[at] % 8).tolist()
        self.titles = map.titles
        self.section_ids: dict[tuple[str, ...], int]
        self.sections: list[tuple[str, ...]]
        self.after: list[int]
        if like is not None and like.titles == map.titles and like.levels == self.levels:
            self.section_ids, self.sections, self.after = (
                like.section_ids,
                like.sections,
                like.after,
            )
        else:
            self.section_ids, self.sections, self.after = _walk_headings(self.levels, map.titles)
        after = self.after
        # each block is under the section its last heading (itself, for a heading) left open
        latest = np.maximum.accumulate(np.where(heading, np.arange(len(heading)), -1))
        opened = np.zeros(len(heading), dtype=np.int64)
        opened[at] = after
        self.section_of: np.ndarray[Any, Any] = np.where(
            latest >= 0, opened[np.maximum(latest, 0)], 0
        )
        titled = np.ones(len(heading), dtype=bool)
        titled[at] = [bool(t) for t in map.titles]
        self.is_block: np.ndarray[Any, Any] = titled  # a heading without a title is no block
        blocks = np.flatnonzero(titled)
        sections = self.section_of[blocks]
        change = np.flatnonzero(sections[1:] != sections[:-1]) + 1
        first = np.concatenate(([0], change)).astype(np.int64) if len(blocks) else _column([])
        last = (
            np.concatenate((change - 1, [len(blocks) - 1])).astype(np.int64)
            if len(blocks)
            else _column([])
        )
        self.run_first: np.ndarray[Any, Any] = blocks[first]
        self.run_last: np.ndarray[Any, Any] = blocks[last]
        self.run_section: np.ndarray[Any, Any] = sections[first]


@dataclass(frozen=True)
class _Spliced:
    """A new map, and where each of its blocks came from."""

    map: MarkdownMap
    source: np.ndarray[Any, Any]
    """For each block, its index in the stored map, or -1 for a block parsed again."""
    stretch: np.ndarray[Any, Any]
    """For each block, which unbroken stretch of stored segments it came from (-1: parsed)."""


def _add(out: list[range | _Segment], part: range) -> None:
    """Append a stretch of stored segments, joined to the one before when it goes on from it."""
    last = out[-1] if out else None
    if isinstance(last, range) and last.stop == part.start:
        out[-1] = range(last.start, part.stop)
    else:
        out.append(part)


def _splice(text: str, stored: MarkdownMap | None, parts: list[range | _Segment]) -> _Spliced:
    """The map of `text`: stretches of stored segments (``range``s) and parsed segments."""
    columns: tuple[list[np.ndarray[Any, Any]], ...] = tuple([] for _ in range(8))
    lengths, counts, starts, spans, codes, source, stretch, taken = columns
    digests: list[bytes] = []
    titles: list[str] = []
    parsed: list[_Segment] = []
    if stored is not None:
        found_at = np.concatenate(([0], np.cumsum(stored.counts))).tolist()
        titles_at = np.concatenate(([0], np.cumsum(stored.codes < 8))).tolist()

    def flush() -> None:
        if parsed:
            fresh = MarkdownMap.of(parsed)
            for column, values in zip(
                (lengths, counts, starts, spans, codes), fresh.columns(), strict=True
            ):
                column.append(values)
            digests.append(fresh.digests)
            titles.extend(fresh.titles)
            source.append(np.full(len(fresh.starts), -1, dtype=np.int64))
            stretch.append(source[-1])
            taken.append(np.full(len(parsed), -1, dtype=np.int64))
            parsed.clear()

    for number, part in enumerate(parts):
        if isinstance(part, _Segment):
            parsed.append(part)
            continue
        flush()
        assert stored is not None  # ranges index a stored map
        a, b = part.start, part.stop
        f, g = found_at[a], found_at[b]
        lengths.append(stored.lengths[a:b])
        counts.append(stored.counts[a:b])
        starts.append(stored.starts[f:g])
        spans.append(stored.spans[f:g])
        codes.append(stored.codes[f:g])
        digests.append(stored.digests[a * _DIGEST_BYTES : b * _DIGEST_BYTES])
        titles.extend(stored.titles[titles_at[f] : titles_at[g]])
        source.append(np.arange(f, g, dtype=np.int64))
        stretch.append(np.full(g - f, number, dtype=np.int64))
        taken.append(np.arange(a, b, dtype=np.int64))
    flush()

    def joined(parts: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        return np.concatenate(parts).astype(np.int64) if parts else _column([])

    segment_lengths = joined(lengths)
    new = MarkdownMap(
        lengths=segment_lengths,
        digests=b"".join(digests),
        groups=_group_digests(text, segment_lengths, stored, joined(taken)),
        counts=joined(counts),
        starts=joined(starts),
        spans=joined(spans),
        codes=joined(codes),
        titles=tuple(titles),
    )
    return _Spliced(new, joined(source), joined(stretch))


def _group_digests(
    text: str,
    lengths: np.ndarray[Any, Any],
    stored: MarkdownMap | None = None,
    taken: np.ndarray[Any, Any] | None = None,
) -> bytes:
    """The digest of each whole group of `GROUP_SEGMENTS` consecutive segments of `text`.

    `taken`: for each segment, the stored segment it is (-1: parsed again). A group
    that is a whole stored group, unchanged, has its digest: only the others are hashed.
    """
    bounds = np.concatenate(([0], np.cumsum(lengths)))[::GROUP_SEGMENTS].tolist()
    same = _same_groups(stored, taken, len(bounds) - 1)
    if not same:
        return b"".join(_digest(text[a:b]) for a, b in itertools.pairwise(bounds))
    assert stored is not None
    digests = []
    for group, (a, b) in enumerate(itertools.pairwise(bounds)):
        at = same.get(group)
        if at is None:
            digests.append(_digest(text[a:b]))
        else:
            digests.append(stored.groups[at * _DIGEST_BYTES : (at + 1) * _DIGEST_BYTES])
    return b"".join(digests)


def _same_groups(
    stored: MarkdownMap | None, taken: np.ndarray[Any, Any] | None, groups: int
) -> dict[int, int]:
    """Each new group (by number) that is a whole stored group, with that group's number."""
    if stored is None or taken is None or groups == 0:
        return {}
    whole = taken[: groups * GROUP_SEGMENTS].reshape(groups, GROUP_SEGMENTS)
    first = whole[:, 0]
    same = (
        (first >= 0)
        & (first % GROUP_SEGMENTS == 0)
        & np.all(whole - first[:, None] == np.arange(GROUP_SEGMENTS), axis=1)
        & (first // GROUP_SEGMENTS < len(stored.groups) // _DIGEST_BYTES)
    )
    at = np.flatnonzero(same)
    return dict(zip(at.tolist(), (first[at] // GROUP_SEGMENTS).tolist(), strict=True))


class _Reparse:
    """One pass over a text: the stored segments that still match it, the rest parsed again."""

    def __init__(self, text: str, stored: MarkdownMap | None) -> None:
        self.text = text
        self.stored = stored
        self.lengths: list[int] = stored.lengths.tolist() if stored is not None else []
        self.offsets: list[int] = np.concatenate(([0], np.cumsum(self.lengths))).tolist()
        self.digests = stored.digests if stored is not None else b""
        self.groups = stored.groups if stored is not None else b""
        self.count = len(self.lengths)
        self.found_at: list[int] | None = None
        self.titles_at: list[int] = []

    def run(self) -> list[range | _Segment]:
        """The new text as stretches of stored segments and segments parsed again, in order."""
        text = self.text
        if not self.count:
            return list(_parse_window(text, 0, len(text), True)[0])
        out: list[range | _Segment] = []
        pos = 0
        at: int | None = 0  # the stored segment expected at `pos`
        checked = 0  # stored segments from `at` on known to match the text from `pos` on
        size: int | None = None
        while pos < len(text):
            if at is not None:
                checked = self._extend(pos, at, checked)
                # a matched segment is settled once two more follow it, or it ends the text
                take = checked if at + checked == self.count else checked - (_SETTLED_AFTER - 1)
                if take > 0:
                    _add(out, range(at, at + take))
                    pos += self.offsets[at + take] - self.offsets[at]
                    at, checked = at + take, checked - take
                    continue
            size = size or self._window(at)
            end = _line_end(text, pos + size)
            parsed, settled = _parse_window(text, pos, end, end >= len(text))
            hint, at, checked = at, None, 0
            for index in range(settled):
                if hint is not None and self._unchanged(hint + index, parsed[index]):
                    # parsed again only for want of lines after it: still the stored segment
                    _add(out, range(hint + index, hint + index + 1))
                else:
                    out.append(parsed[index])
                pos += parsed[index].length
                following = parsed[index + 1] if index + 1 < len(parsed) else None
                at, checked = self._resync(pos, following, hint)
                if at is not None:
                    break
            # a window that settles nothing (an unclosed fence, say) or picks up nothing
            # stored (text rewritten) is followed by a larger one: a rewrite costs no more
            # than about two whole parses
            size = None if at is not None else size * 2
        return out

    def _unchanged(self, index: int, segment: _Segment) -> bool:
        """Whether stored segment `index` is `segment`: the same source, the same blocks found in it."""
        stored = self.stored
        if stored is None or index >= self.count or self.lengths[index] != segment.length:
            return False
        if self.digests[index * _DIGEST_BYTES : (index + 1) * _DIGEST_BYTES] != segment.digest:
            return False
        if self.found_at is None:
            self.found_at = np.concatenate(([0], np.cumsum(stored.counts))).tolist()
            self.titles_at = np.concatenate(([0], np.cumsum(stored.codes < 8))).tolist()
        first, end = self.found_at[index], self.found_at[index + 1]
        titles = iter(stored.titles[self.titles_at[first] : self.titles_at[end]])
        found = tuple(
            _Found(kind, start, span, code % 8, next(titles) if kind == "heading" else "")
            for kind, start, span, code in (
                (_KIND_CODES[code // 8], start, span, code)
                for start, span, code in zip(
                    stored.starts[first:end].tolist(),
                    stored.spans[first:end].tolist(),
                    stored.codes[first:end].tolist(),
                    strict=True,
                )
            )
        )
        return found == segment.found

    def _window(self, at: int | None) -> int:
        """Characters to parse where the text stops matching stored segment `at`.

        What the stored map had there, five segments (the changed one, the block starts
        after it that settle it, and one more for what the edit added), up to
        `WINDOW_CHARS`: parsing costs about 0.4 ms a kilobyte, and most edits change one
        block. Six parsed 16 % more of a 1 % edit of the lifecycle bench's document
        (0.25 ms), and on random edits of this project's Markdown files the two parsed
        alike (0.4 % apart); four failed to settle more often, each failure a window
        parsed again at twice the size.
        """
        if at is None:
            return WINDOW_CHARS
        expected = self.offsets[min(at + _SETTLED_AFTER + 2, self.count)] - self.offsets[at]
        return max(1, min(WINDOW_CHARS, expected + 64))

    def _with_digest(self, digest: bytes, first: int) -> list[int]:
        """The first few stored segments from `first` on whose digest is `digest`."""
        found: list[int] = []
        at = self.digests.find(digest, first * _DIGEST_BYTES)
        while at >= 0 and len(found) < _MAX_CANDIDATES:
            if at % _DIGEST_BYTES == 0:  # not a match straddling two digests
                found.append(at // _DIGEST_BYTES)
            at = self.digests.find(digest, at + 1)
        return found

    def _match(self, index: int, step: int, place: int) -> int | None:
        """Where stored segments `index` to `index + step` end in the text if they match it from `place`.

        One segment is checked by its digest, a whole group (`GROUP_SEGMENTS`) by the group's.
        """
        end = place + self.offsets[index + step] - self.offsets[index]
        if end > len(self.text) or (index + step == self.count and end != len(self.text)):
            return None
        digests, number = (self.groups, index // step) if step > 1 else (self.digests, index)
        stored = digests[number * _DIGEST_BYTES : (number + 1) * _DIGEST_BYTES]
        return end if _digest(self.text[place:end]) == stored else None

    def _extend(self, pos: int, at: int, checked: int) -> int:
        """How many stored segments from `at` on match the text from `pos` on.

        `checked` of them are known to match already. The last stored segment
        counts only if the text ends with it, as it did.
        """
        index = at + checked
        place = pos + self.offsets[index] - self.offsets[at]
        while index < self.count:
            if index % GROUP_SEGMENTS == 0 and index + GROUP_SEGMENTS <= self.count:
                end = self._match(index, GROUP_SEGMENTS, place)
                if end is not None:
                    place, index = end, index + GROUP_SEGMENTS
                    continue
            end = self._match(index, 1, place)
            if end is None:
                break
            place, index = end, index + 1
        return index - at

    def _resync(
        self, pos: int, following: _Segment | None, hint: int | None
    ) -> tuple[int | None, int]:
        """The stored segment the text picks up again at `pos`, if one does, and how many match from it."""
        if pos >= len(self.text):
            return None, 0
        candidates: list[int] = []
        if hint is not None and hint < self.count:
            candidates.append(hint)  # text replaced in place: the map goes on where it stopped
        if following is not None:
            later = self._with_digest(following.digest, hint or 0)
            candidates.extend(later or self._with_digest(following.digest, 0))
        for index in candidates:
            checked = self._extend(pos, index, 0)
            if checked >= _SETTLED_AFTER or index + checked == self.count:
                return index, checked
        return None, 0


def _digest(source: str) -> bytes:
    # SHA-256 cut to 16 bytes: where the CPU has SHA instructions it hashes 2.3 times as
    # fast as BLAKE2b (0.7 against 1.7 ms a megabyte here), and every edit hashes the
    # unchanged text to check it
    return hashlib.sha256(source.encode("utf-8")).digest()[:_DIGEST_BYTES]


def _line_end(text: str, pos: int) -> int:
    """The end of the line holding `pos` (after its line break), or the text's end."""
    found = _LINE_BREAK.search(text, pos) if pos < len(text) else None
    return found.end() if found is not None else len(text)


def _parse_window(text: str, start: int, end: int, final: bool) -> tuple[list[_Segment], int]:
    """The segments of `text[start:end]` parsed alone, and how many of them are settled.

    `start` is a block boundary of the whole text. A segment is settled when the
    window ends the text (`final`), or when `_SETTLED_AFTER` block starts follow it
    in the window: the parser then decided where it ends from lines the window holds.
    """
    if start >= end:
        return [], 0
    window = text[start:end]
    tokens = _markdown_parser().parse(window)
    line_starts = _line_starts(window)
    bounds: list[int] = [0]
    found: list[_Found] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token.nesting == -1 or token.map is None:
            continue
        first, last = token.map
        if token.level == 0 and line_starts[first] > bounds[-1]:
            bounds.append(line_starts[first])
        # a top-level list is read item by item, so a long list is cut between items
        item = token.type == "list_item_open" and token.level == 1
        if (token.level != 0 and not item) or token.type in _LISTS:
            continue
        begin = line_starts[first]
        stop = line_starts[last] if last < len(line_starts) else len(window)
        source = window[begin:stop].rstrip()
        if token.type == "heading_open":
            inline = tokens[index] if index < len(tokens) else None
            title = heading_text(_heading_words(inline))
            found.append(_Found("heading", begin, len(source), int(token.tag[1]), title))
        elif source.strip():
            found.append(_Found(_BLOCK_KINDS.get(token.type, "text"), begin, len(source), 0, ""))
    segments = []
    position = 0
    for begin, stop in zip(bounds, [*bounds[1:], len(window)], strict=True):
        inside = []
        while position < len(found) and found[position].start < stop:
            inside.append(found[position]._replace(start=found[position].start - begin))
            position += 1
        segments.append(_Segment(stop - begin, _digest(window[begin:stop]), tuple(inside)))
    settled = len(segments) if final else max(0, len(segments) - _SETTLED_AFTER)
    return segments, settled


_LISTS = frozenset({"bullet_list_open", "ordered_list_open"})
_BLOCK_KINDS: dict[str, BlockKind] = {"fence": "code", "code_block": "code", "table_open": "table"}


@functools.cache
def _parser_version() -> str:
    """Names the parser a stored map was made by: another version may read blocks otherwise."""
    import markdown_it

    return f"blocks-map-3 markdown-it-py {markdown_it.__version__}"


@functools.cache
def _markdown_parser() -> Any:
    """A CommonMark parser (with tables) that reads blocks only.

    Inline markup is parsed for headings alone (`_heading_words`): a block's text is
    its verbatim source, so parsing every paragraph's links and emphasis cost a third
    of the parse and changed nothing.
    """
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").disable("inline")


@functools.cache
def _inline_parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True})


_INLINE_MARKUP = re.compile(r"[\\`*_\[\]<>!&\r\n]")
"""Characters that can start CommonMark inline markup; a heading without them is its own words."""


def _heading_words(inline: Any) -> str:
    """The words of a heading's inline token: text and code spans, without markup."""
    if inline is None or inline.type != "inline":
        return ""
    if not _INLINE_MARKUP.search(inline.content):
        # most headings are plain words: skip the inline parse (a quarter of parsing a
        # Markdown file of many short sections)
        return str(inline.content)
    parsed = _inline_parser().parseInline(inline.content)
    children = parsed[0].children if parsed else None
    if not children:
        return str(inline.content)
    parts = []
    for child in children:
        if child.type in ("text", "code_inline", "html_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts)


_LINE_BREAK = re.compile(r"\r\n?|\n")
"""A line break as markdown-it counts lines: CR LF, a lone CR, or LF."""


def _line_starts(text: str) -> list[int]:
    return [0, *(match.end() for match in _LINE_BREAK.finditer(text))]


# -- reStructuredText -----------------------------------------------------------------------


def rst_blocks(text: str) -> list[Block]:
    """The blocks of a reStructuredText document, each under its section titles.

    Parsed by docutils with file inclusion and raw output off and every message
    silenced (a document with markup errors still yields its text). Sphinx's
    cross-reference roles (``:func:`x```) read as literal text, and its
    ``versionadded``-style directives keep their content.
    """
    from docutils import nodes
    from docutils.core import publish_doctree

    _register_sphinx_markup()
    doctree = publish_doctree(
        text,
        settings_overrides={
            "report_level": 5,
            "halt_level": 5,
            "warning_stream": io.StringIO(),
            "file_insertion_enabled": False,
            "raw_enabled": False,
            "doctitle_xform": False,  # the title stays a section, as a Markdown H1 does
            "_disable_config": True,
        },
    )
    blocks: list[Block] = []
    _walk_rst(doctree, (), blocks, nodes)
    return blocks


_SKIPPED_RST = (
    "system_message",
    "comment",
    "target",
    "substitution_definition",
    "raw",
    "pending",
    "title",
)


def _walk_rst(node: Any, section: tuple[str, ...], blocks: list[Block], nodes: Any) -> None:
    for child in node.children:
        if isinstance(child, nodes.section):
            title = next((c for c in child.children if isinstance(c, nodes.title)), None)
            heading = heading_text(title.astext()) if title is not None else ""
            inner = (*section, heading) if heading else section
            if heading:
                blocks.append(Block("heading", heading, inner))
            _walk_rst(child, inner, blocks, nodes)
        elif child.tagname in _SKIPPED_RST:
            continue
        elif isinstance(child, nodes.topic) and "contents" in child.get("classes", []):
            continue  # a table of contents repeats the headings
        elif isinstance(child, nodes.literal_block | nodes.doctest_block):
            language = next((c for c in child.get("classes", []) if c != "code"), "")
            body = child.astext().rstrip("\n")
            blocks.append(Block("code", f"```{language}\n{body}\n```", section))
        elif isinstance(child, nodes.table):
            blocks.append(Block("table", _rst_table(child, nodes), section))
        elif isinstance(child, nodes.container | nodes.compound):
            _walk_rst(child, section, blocks, nodes)
        else:
            rendered = _rst_text(child, nodes).strip()
            if rendered:
                blocks.append(Block("text", rendered, section))


def _rst_text(node: Any, nodes: Any) -> str:
    """A body element as plain text: list items marked, admonitions and fields named."""
    if isinstance(node, nodes.bullet_list | nodes.enumerated_list):
        return "\n".join(f"- {' '.join(item.astext().split())}" for item in node.children)
    if isinstance(node, nodes.field_list):
        lines = []
        for field in node.children:
            name, body = field.children[0].astext(), field.children[1].astext()
            lines.append(f"{name}: {' '.join(body.split())}")
        return "\n".join(lines)
    if isinstance(node, nodes.Admonition):
        titled = [c for c in node.children if isinstance(c, nodes.title)]
        label = titled[0].astext() if titled else node.tagname.replace("_", " ").capitalize()
        body = "\n\n".join(
            c.astext() for c in node.children if not isinstance(c, nodes.title)
        ).strip()
        return f"{label}: {body}"
    return str(node.astext())


def _rst_table(table: Any, nodes: Any) -> str:
    """A docutils table as a pipe table: the header rows, a separator, the body rows."""
    head = [row for group in table.findall(nodes.thead) for row in group.findall(nodes.row)]
    body = [row for group in table.findall(nodes.tbody) for row in group.findall(nodes.row)]

    def line(row: Any) -> str:
        cells = [" ".join(entry.astext().split()) for entry in row.findall(nodes.entry)]
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    header = [line(row) for row in head] or [line(body.pop(0))] if (head or body) else []
    width = header[0].count(" | ") + 1 if header else 1
    separator = "|" + "---|" * width
    return "\n".join([*header, separator, *(line(row) for row in body)])


_sphinx_registered = False
SPHINX_ROLES = (
    "func", "meth", "class", "mod", "attr", "exc", "data", "const", "obj", "ref", "doc",
    "term", "option", "envvar", "file", "program", "command", "kbd", "samp", "py:func",
    "py:meth", "py:class", "py:mod", "py:attr", "py:exc", "py:data", "py:const", "py:obj",
)  # fmt: skip
"""Sphinx roles read as literal text (docutils alone would report them as unknown)."""
SPHINX_DIRECTIVES = {
    "versionadded": "Added in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
    "seealso": "See also",
    "todo": "To do",
}
"""Sphinx directives whose content is kept, introduced as Sphinx renders them."""


def _register_sphinx_markup() -> None:
    global _sphinx_registered
    if _sphinx_registered:
        return
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives, roles
    from docutils.statemachine import StringList

    class _Noted(Directive):
        """``.. versionadded:: 2.1`` and its kin: a line naming the directive, then its content."""

        has_content = True
        optional_arguments = 1
        final_argument_whitespace = True

        def run(self) -> list[Any]:
            # as in Sphinx, text right below the directive line continues its argument
            version, _, rest = (self.arguments[0] if self.arguments else "").partition("\n")
            label = SPHINX_DIRECTIVES[self.name]
            container = nodes.admonition()  # read as "<label>: <content>", like a note
            container += nodes.title(text=f"{label} {version}".strip())
            if rest.strip():
                self.state.nested_parse(StringList(rest.splitlines()), self.lineno, container)
            self.state.nested_parse(self.content, self.content_offset, container)
            return [container]

    for name in SPHINX_ROLES:
        roles.register_generic_role(name, nodes.literal)
    for name in SPHINX_DIRECTIVES:
        directives.register_directive(name, _Noted)
    _sphinx_registered = True


# -- plain text -----------------------------------------------------------------------------


def plain_blocks(text: str, page_starts: Sequence[int] = ()) -> list[Block]:
    """Paragraphs (runs of lines between blank lines), each on its page when pages are known."""
    blocks = []
    position = 0
    for match in [*_PARAGRAPH_BREAK.finditer(text), None]:
        end = match.start() if match is not None else len(text)
        paragraph = text[position:end]
        stripped = paragraph.strip()
        if stripped:
            start = position + paragraph.index(stripped[0])
            page = bisect_right(page_starts, start) if page_starts else None
            blocks.append(Block("text", stripped, (), start, page))
        position = match.end() if match is not None else len(text)
    return blocks


# -- packing --------------------------------------------------------------------------------


def pack(blocks: Sequence[Block], text: str, *, chunk_size: int, chunk_overlap: int) -> list[Piece]:
    """Fill chunks of at most `chunk_size` characters with whole blocks of one section.

    Args:
        blocks: The document's blocks, in order.
        text: The document's text (a chunk of verbatim blocks is its slice of it).
        chunk_size: The most characters in a chunk (a block that cannot be split,
            such as one line of code longer than this, is cut at the limit).
        chunk_overlap: Characters shared by consecutive pieces of one long paragraph.
    """
    pieces: list[Piece] = []
    group: list[Block] = []
    size = 0
    for block in blocks:
        if group and not _fits(group, size, block, chunk_size):
            _flush(group, text, pieces)
            group, size = [], 0
        if len(block.text) > chunk_size:
            _flush(group, text, pieces)
            group, size = [], 0
            pieces.extend(_split(block, chunk_size, chunk_overlap))
            continue
        group.append(block)
        size += len(block.text) + (2 if size else 0)
    _flush(group, text, pieces)
    return pieces


def _flush(group: list[Block], text: str, pieces: list[Piece]) -> None:
    """End a chunk; one of nothing but headings is dropped (they live on in the section path)."""
    if any(block.kind != "heading" for block in group):
        pieces.append(_joined(group, text))


def _fits(group: list[Block], size: int, block: Block, chunk_size: int) -> bool:
    if block.section != group[0].section or size + 2 + len(block.text) > chunk_size:
        return False
    # a page break always ends a chunk, however short: a fact is cited on its own page
    return block.page == group[-1].page


def _joined(group: list[Block], text: str) -> Piece:
    first, last = group[0], group[-1]
    verbatim = all(b.start is not None for b in group)
    if verbatim and first.start is not None and last.start is not None:
        body = text[first.start : last.start + len(last.text)]
    else:
        body = "\n\n".join(b.text for b in group)
    return Piece(body, first.section, first.start if verbatim else None, first.page, last.page)


def _split(block: Block, chunk_size: int, chunk_overlap: int) -> list[Piece]:
    if block.kind == "code":
        parts = _split_code(block.text, chunk_size)
    elif block.kind == "table":
        parts = _split_table(block.text, chunk_size)
    else:
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size, chunk_overlap=chunk_overlap
        )
        parts = splitter.split_text(block.text)
    pieces = []
    search_from = 0
    for part in parts:
        found = block.text.find(part, search_from) if block.start is not None else -1
        start = block.start + found if block.start is not None and found >= 0 else None
        if found >= 0:
            search_from = found + 1
        pieces.append(Piece(part, block.section, start, block.page, block.page))
    return pieces


def _split_code(code: str, chunk_size: int) -> list[str]:
    """A code block in pieces at line boundaries, each fenced as the block was."""
    lines = code.split("\n")
    fence = _FENCE_OPEN.match(lines[0])
    if fence is not None:
        opening = lines[0]
        closing = lines[-1] if len(lines) > 1 and lines[-1].startswith(fence.group(1)) else ""
        body = lines[1:-1] if closing else lines[1:]
        closing = closing or fence.group(1)
    else:  # an indented code block: its pieces are indented code too
        opening, closing, body = "", "", lines
    frame = len(opening) + len(closing) + 2 if opening else 0
    budget = max(1, chunk_size - frame)
    pieces = _packed_lines(body, budget)
    if not opening:
        return ["\n".join(piece) for piece in pieces]
    return [f"{opening}\n" + "\n".join(piece) + f"\n{closing}" for piece in pieces]


def _packed_lines(lines: list[str], budget: int) -> list[list[str]]:
    """The lines in order, in groups whose lines and newlines fit ``budget``; a longer line is cut first."""
    pieces: list[list[str]] = []
    current: list[str] = []
    size = 0
    for line in _cut_long_lines(lines, budget):
        if current and size + len(line) + 1 > budget:
            pieces.append(current)
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        pieces.append(current)
    return pieces


def _cut_long_lines(lines: list[str], budget: int) -> list[str]:
    out = []
    for line in lines:
        while len(line) > budget:
            out.append(line[:budget])
            line = line[budget:]
        out.append(line)
    return out


def _split_table(table: str, chunk_size: int) -> list[str]:
    """A pipe table in pieces at row boundaries, each starting with the header and separator."""
    lines = table.split("\n")
    header = lines[:2] if len(lines) > 1 and set(lines[1].replace(" ", "")) <= set("|:-") else []
    rows = lines[len(header) :]
    head_text = "\n".join(header)
    budget = max(1, chunk_size - len(head_text) - 1)
    return ["\n".join([*header, *piece]) for piece in _packed_lines(rows, budget)]
