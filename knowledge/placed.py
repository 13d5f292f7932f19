"""Where a chunk is in its document, as readers see it: kept in step without rewriting moved rows.

An edit to a document moves the chunks after it. Rewriting each moved row cost about as
much as inserting it (a new tuple, its tsvector recomputed, an entry in every index, the
GIN pending list to merge), so a 1 % edit near the top of a document rewrote nearly all of
it. A kept chunk's row therefore keeps the position and ``start_index`` it was written
with, and its document's row says how rows have moved since: **shift ranges**, three
arrays (`kb_documents.shift_from`, ``shift_position``, ``shift_start``). A row whose stored
position is at least ``shift_from[i]`` (and below ``shift_from[i + 1]``) is read at its
position plus ``shift_position[i]`` and its offset plus ``shift_start[i]``; every read of a
chunk's position or offset goes through the expressions below. An edit writes a few
ranges (one per stretch that moved alike: about one per place it changed) instead of an
entry per moved chunk, so what it writes does not grow with the document.

For the ranges to tell rows apart, no two rows of a document share a stored position.
A new row is written at its position when no kept row is stored there, else (text
added before kept chunks) every new row of the edit at its position plus one offset
that puts them past the kept rows (`shifted_rows`); readers never see stored positions.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from psycopg import sql

MOVED_KEY = "start_index"
"""The one metadata key a move changes (with the chunk's position, which is a column)."""

_RANGE = "width_bucket(c.position, d.shift_from)"
"""The shift range of row ``c`` in its document ``d`` (1-based; NULL without ranges)."""
PLACED_POSITION_SQL = f"c.position + coalesce(d.shift_position[{_RANGE}], 0)"
"""A chunk's position as a reader sees it (``c`` a `kb_chunks` row, ``d`` its `kb_documents` row)."""
_SHIFTED_START = f"((c.metadata ->> 'start_index')::integer + coalesce(d.shift_start[{_RANGE}], 0))"
PLACED_START_SQL = (
    "CASE WHEN d.shift_from IS NULL THEN c.metadata -> 'start_index'"
    f" ELSE to_jsonb({_SHIFTED_START}) END"
)
"""A chunk's ``start_index`` as a reader sees it, as jsonb (``c`` and ``d`` as above)."""

PLACED_CHUNK_SQL = sql.SQL(
    PLACED_POSITION_SQL + ","
    " CASE WHEN d.shift_from IS NULL OR NOT c.metadata ? 'start_index' THEN c.metadata"
    f" ELSE c.metadata || jsonb_build_object('start_index', {_SHIFTED_START}) END"
)
"""A chunk's position and metadata as a reader sees them (``c`` is a `kb_chunks` row, ``d``
its `kb_documents` row; a filter, which has no ``d``, calls ``kb_chunk_metadata``)."""

MAX_STORED_POSITION = 2**31 - 1
"""The largest stored position (`kb_chunks.position` is an int4)."""
NO_START = -1
"""A chunk's offset in the arrays below when it has none (its text is no slice of the document's)."""


class Shifts(NamedTuple):
    """A document's shift ranges, as its row stores them (see the module docstring)."""

    start_at: list[int]
    """The stored position each range starts at, ascending; the first is 0."""
    position: list[int]
    """What each range adds to a row's position."""
    offset: list[int]
    """What each range adds to a row's ``start_index``."""


class Placing(NamedTuple):
    """Where a document's rows are once an edit is written, and how readers find their chunks."""

    rows: np.ndarray[Any, Any]
    """Per chunk, in order: the position and offset its row is stored with."""
    offset: int
    """Added to a new row's position when it is written (see `shifted_rows`)."""
    shifts: Shifts | None
    """The ranges that take each row to its chunk's place; None: every row is where its chunk is."""


def shifted_rows(
    now: np.ndarray[Any, Any], stored: np.ndarray[Any, Any], kept: np.ndarray[Any, Any]
) -> Placing | None:
    """Place a document's rows after an edit: kept rows stay, new ones get free positions.

    Args:
        now: Per chunk, in order: its position and offset in the new version (`NO_START`: none).
        stored: Per chunk: where its row is stored, for the `kept` ones (others are ignored).
        kept: Which chunks keep their stored row. A kept row's offset must be there exactly
            when its chunk's is (a range moves an offset; it cannot add or remove one).

    Returns:
        The placing, or None when the new rows cannot be placed past the kept ones within
        `MAX_STORED_POSITION` (the caller then writes every row where its chunk is).
    """
    rows = np.array(stored, dtype=np.int64, copy=True).reshape(-1, 2)
    now = np.asarray(now, dtype=np.int64).reshape(-1, 2)
    new = ~np.asarray(kept, dtype=bool)
    offset = 0
    if new.any():
        taken = rows[~new, 0]
        wanted = now[new, 0]
        if taken.size and np.isin(wanted, taken).any():
            offset = int(taken.max()) + 1 - int(wanted.min())
            if int(wanted.max()) + offset > MAX_STORED_POSITION:
                return None
        rows[new, 0] = wanted + offset
        rows[new, 1] = now[new, 1]
    return Placing(rows, offset, shifts_of(now, rows))


def shifts_of(now: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]) -> Shifts | None:
    """The fewest ranges that take each row (`rows`: stored position, offset) to its chunk's place (`now`).

    Rows are taken in stored order; a range ends where the change of position or offset
    does. A row without an offset moves none, so it does not end a range. None: no row moves.
    """
    if not len(rows):
        return None
    order = np.argsort(rows[:, 0], kind="stable")
    stored, placed = rows[order], now[order]
    by_position = placed[:, 0] - stored[:, 0]
    has_start = stored[:, 1] != NO_START
    by_offset = np.where(has_start, placed[:, 1] - stored[:, 1], 0)
    # a row without an offset takes the change of the row before it (the first one's after it)
    with_start = np.flatnonzero(has_start)
    if len(with_start):
        last_seen = np.maximum.accumulate(np.where(has_start, np.arange(len(order)), -1))
        by_offset = by_offset[np.where(last_seen >= 0, last_seen, with_start[0])]
    ends = (by_position[1:] != by_position[:-1]) | (by_offset[1:] != by_offset[:-1])
    first = np.concatenate(([0], np.flatnonzero(ends) + 1))
    if len(first) == 1 and by_position[0] == 0 and by_offset[0] == 0:
        return None
    start_at = stored[first, 0]
    start_at[0] = 0  # every stored position is at least 0: each row has a range
    return Shifts(start_at.tolist(), by_position[first].tolist(), by_offset[first].tolist())
