"""A question about a knowledge base with nothing to search gives up at once, saying what is missing."""

from __future__ import annotations

import pytest

from arcana_loop.nodes.deps import (
    EMPTY_COLLECTION,
    EMPTY_KNOWLEDGE_BASE,
    unsearchable_reason,
)
from arcana_loop.tools.scoping import normalize_scope


@pytest.mark.parametrize(
    ("collection", "chunks", "expected"),
    [
        ("all", {}, EMPTY_KNOWLEDGE_BASE),
        ("all", {"docs": 0}, EMPTY_KNOWLEDGE_BASE),
        ("docs", {"docs": 0, "other": 3}, EMPTY_COLLECTION.format(names="'docs'", first="docs")),
        ("all", {"docs": 2}, None),
        ("docs", {"docs": 2}, None),
        (["docs", "gone"], {"docs": 2}, None),  # one searchable collection is enough
    ],
)
def test_why_a_scope_finds_nothing(collection, chunks, expected):
    assert unsearchable_reason(normalize_scope(collection), chunks) == expected


def test_a_missing_collection_names_the_ones_that_exist():
    reason = unsearchable_reason(normalize_scope("gone"), {"docs": 2, "notes": 1})
    assert reason is not None
    assert "no collection named 'gone'" in reason and "'docs', 'notes'" in reason
    assert "arcana-loop ingest PATH --collection gone" in reason


def test_the_command_a_reason_suggests_runs_as_printed_for_any_name():
    reason = unsearchable_reason(normalize_scope("team notes"), {"docs": 2})
    assert reason is not None and "--collection 'team notes'`" in reason
    empty = unsearchable_reason(normalize_scope("it's"), {"it's": 0, "docs": 1})
    assert empty is not None and """--collection 'it'"'"'s'`""" in empty
