"""What the knowledge base holds, as search shows it: a chunk's title, section, pages and text.

`documents show` and the MCP server's `read_document` read a stored document's chunks
in order here; the MCP server's `search` shapes its hits with the same `place_of`, so
a chunk reads the same whichever way it was reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql
from typing_extensions import TypedDict

from arcana_loop.knowledge.placed import PLACED_CHUNK_SQL
from arcana_loop.knowledge.sections import document_title, page_label


class ChunkPlace(TypedDict):
    """Where a chunk sits: its document's title and source, the section path, the pages."""

    title: str
    source: str | None
    section: str | None
    pages: str | None
    """``"3"`` or ``"2–3"`` for a paged document (PDF), else ``None``."""


class StoredChunk(ChunkPlace):
    """One chunk of a stored document, in document order."""

    id: str
    position: int
    """Zero-based index of the chunk in its document."""
    text: str


def place_of(metadata: Mapping[str, Any], fallback_source: str = "") -> ChunkPlace:
    """A chunk's place from its metadata (`source`, `title`, `section`, `page`/`page_end`)."""
    source = metadata.get("source")
    section = metadata.get("section")
    return {
        "title": document_title(str(source or fallback_source), dict(metadata)),
        "source": str(source) if source else None,
        "section": str(section) if section else None,
        "pages": page_label(metadata),
    }


_CHUNKS_OF_DOCUMENT = sql.SQL(
    "SELECT c.id, c.text, {placed} FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
    " WHERE c.document_id = %s ORDER BY 3"
).format(placed=PLACED_CHUNK_SQL)
"""A document's chunks with their place (`PLACED_CHUNK_SQL`'s position and metadata), in order."""


def document_chunks(kb: Any, document_id: str) -> list[StoredChunk]:
    """The chunks of the stored document `document_id`, in order, each with its place.

    Reads through `knowledge.placed` as every reader does, so a chunk an edit moved
    is where the document now has it.
    """
    with kb.pool().connection() as conn:
        rows = conn.execute(_CHUNKS_OF_DOCUMENT, (document_id,)).fetchall()
    return [
        {"id": chunk_id, "position": position, "text": text, **place_of(metadata or {})}
        for chunk_id, text, position, metadata in rows
    ]


def find_document(kb: Any, source: str, collections: Sequence[str]) -> Any:
    """The one stored document `source` names in `collections` (as `kb.find_documents` reads names).

    Raises:
        LookupError: if no document matches (naming the closest sources of a single
            collection), or several do (naming them): a one-line message either way.
    """
    from arcana_loop.knowledge.errors import CollectionNotFound, KnowledgeBaseError

    found, missed = [], []
    for name in collections:
        try:
            found += kb.find_documents(source, collection=name)
        except CollectionNotFound:
            raise
        except KnowledgeBaseError as exc:  # nothing of that name there
            missed.append(str(exc))
    if not found:
        raise LookupError(
            missed[0] if len(missed) == 1 else f"no document {source!r} in {', '.join(collections)}"
        )
    if len(found) > 1:
        names = ", ".join(f"{d.source} ({d.collection})" for d in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise LookupError(f"{source!r} names {len(found)} documents: {names}{more}; name one")
    return found[0]
