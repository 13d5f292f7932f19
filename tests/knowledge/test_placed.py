"""Shift ranges: the few ranges that place a document's kept rows where its chunks now are."""

from __future__ import annotations

import numpy as np

from arcana_loop.knowledge.placed import NO_START, shifted_rows, shifts_of


def _read(shifts: object, rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Where readers find each row (stored position, offset), as `PLACED_POSITION_SQL` reads it."""
    if shifts is None:
        return rows
    start_at, by_position, by_offset = shifts  # type: ignore[misc]
    out = []
    for position, start in rows:
        at = max(i for i, first in enumerate(start_at) if first <= position)
        out.append(
            (position + by_position[at], start if start == NO_START else start + by_offset[at])
        )
    return out


def test_rows_that_moved_alike_share_a_range_and_rows_in_place_need_none() -> None:
    rows = np.array([(0, 0), (1, 40), (2, NO_START), (3, 90), (4, 130)])
    assert shifts_of(rows, rows) is None
    # text added after the first chunk: the rest moves 12 characters, a code piece among them
    now = rows + np.array([(0, 0), (0, 12), (0, 0), (0, 12), (0, 12)])
    shifts = shifts_of(now, rows)
    assert shifts is not None and shifts.start_at == [0, 1]  # the piece splits no range
    assert _read(shifts, rows.tolist()) == [tuple(r) for r in now.tolist()]


def test_new_rows_go_past_the_kept_ones_only_where_a_kept_row_holds_their_position() -> None:
    now = np.array([(0, 0), (1, 50), (2, 90), (3, 140)])
    # the chunk at 1 replaced in place: its new row takes the position the old one had
    stored = np.array([(0, 0), (0, 0), (2, 80), (3, 130)])
    kept = np.array([True, False, True, True])
    placing = shifted_rows(now, stored, kept)
    assert placing is not None and placing.offset == 0
    assert _read(placing.shifts, placing.rows.tolist()) == [tuple(r) for r in now.tolist()]
    # a chunk added on top: the kept rows still hold positions 0-2, so it goes past them
    now = np.array([(0, 0), (1, 30), (2, 60), (3, 100)])
    stored = np.array([(0, 0), (0, 0), (1, 30), (2, 70)])
    placing = shifted_rows(now, stored, np.array([False, True, True, True]))
    assert placing is not None and placing.offset == 3 and placing.rows[0].tolist() == [3, 0]
    assert _read(placing.shifts, placing.rows.tolist()) == [tuple(r) for r in now.tolist()]
