"""What the knowledge base holds now of given chunks and documents.

An answer keeps the hashes of the chunk texts it rests on; telling whether that
text has since changed needs only the current ones. This module reads them and
knows nothing of answers: ids in, hashes out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg


def text_hash(text: str) -> str:
    """The sha256 hex digest of a chunk's text (UTF-8): what `ChunkVersions.chunks` holds per chunk."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ChunkVersions:
    """The stored versions of the chunks and documents asked about; an id left out is not stored."""

    chunks: dict[str, str] = field(default_factory=dict)
    """Chunk id to the `text_hash` of its stored text."""
    documents: dict[str, str] = field(default_factory=dict)
    """Document id to its stored content hash (`DocumentInfo.content_hash`)."""


def read_versions(
    conn: psycopg.Connection[Any], chunk_ids: Iterable[str], document_ids: Iterable[str] = ()
) -> ChunkVersions:
    """Read the current text hash of each stored chunk and content hash of each stored document."""
    chunks = sorted({str(i) for i in chunk_ids})
    documents = sorted({str(i) for i in document_ids})
    texts = (
        conn.execute("SELECT id, text FROM kb_chunks WHERE id = ANY(%s)", (chunks,)).fetchall()
        if chunks
        else []
    )
    hashes = (
        conn.execute(
            "SELECT id, content_hash FROM kb_documents WHERE id = ANY(%s)", (documents,)
        ).fetchall()
        if documents
        else []
    )
    return ChunkVersions(
        chunks={str(r[0]): text_hash(r[1]) for r in texts},
        documents={str(r[0]): str(r[1]) for r in hashes},
    )
