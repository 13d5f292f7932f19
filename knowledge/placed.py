"""Where a chunk is in its document, as readers see it: kept in step without rewriting moved rows."""

from __future__ import annotations

from psycopg import sql

MOVED_KEY = "start_index"
"""The one metadata key a move changes (with the chunk's position, which is a column)."""

PLACED_POSITION_SQL = "coalesce((d.moved -> c.id ->> 'position')::integer, c.position)"
"""A chunk's position as a reader sees it (``c`` a `kb_chunks` row, ``d`` its `kb_documents` row)."""
PLACED_START_SQL = "coalesce(d.moved -> c.id -> 'start_index', c.metadata -> 'start_index')"
"""A chunk's ``start_index`` as a reader sees it, as jsonb (``c`` and ``d`` as above)."""

PLACED_CHUNK_SQL = sql.SQL(
    PLACED_POSITION_SQL + ","
    " CASE WHEN d.moved ? c.id THEN (c.metadata - 'start_index') || ((d.moved -> c.id) - 'position')"
    " ELSE c.metadata END"
)
"""A chunk's position and metadata as a reader sees them (``c`` is a `kb_chunks` row, ``d``
its `kb_documents` row; a filter, which has no ``d``, calls ``kb_chunk_metadata``).

An edit to a document moves the chunks after it. Rewriting each moved row cost
about as much as inserting it (a new tuple, its tsvector recomputed, an entry in
every index, the GIN pending list to merge), so a 1 % edit near the top of a
document rewrote nearly all of it. Instead the document row records where its
moved chunks now are (`kb_documents.moved`), one row written per edit, and every
read of a chunk's position or offset goes through these expressions. An entry leaves out
the position where the chunk's row has it already; it holds the offset whenever the
chunk has one (an entry without it means the chunk has none).
"""
