"""Plain data types returned by the knowledge base.

`Chunk` is a JSON-serialisable `TypedDict` because it travels through LangGraph
state and checkpoints; `IngestResult` and `CollectionInfo` are dataclasses with
`to_dict()` for CLIs and logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

SearchMode = Literal["semantic", "fulltext", "hybrid"]
SEARCH_MODES: tuple[SearchMode, ...] = ("semantic", "fulltext", "hybrid")

ProgressFn = Callable[[int, int], None]
"""Called as `progress(done_chunks, total_chunks)` after each written batch."""


class Chunk(TypedDict):
    """One search hit, safe to put in graph state and to `json.dumps`.

    The one chunk type of the project: the knowledge base fills every field; a
    custom search function may return only `id`, `text` and `score`.
    """

    id: str
    """Stable id: the same document text at the same position keeps its id across re-ingests."""
    text: str
    """The chunk text."""
    score: float
    """Higher is better, comparable only within one search mode (cosine, ts_rank_cd or RRF)."""
    collection: NotRequired[str | None]
    """Name of the collection the chunk belongs to."""
    document_id: NotRequired[str | None]
    """Id of the document the chunk was cut from."""
    position: NotRequired[int | None]
    """Zero-based index of the chunk within its document."""
    metadata: NotRequired[dict[str, Any]]
    """Document metadata plus `source`, `start_index` (character offset in the document) and `section`."""


class SearchResults(list[Chunk]):
    """What `KnowledgeBase.search` returns: the chunks, best first, as a list.

    Also the query's words no chunk of the searched collections holds (`unmatched`,
    from `knowledge.lexical.unmatched_words`), which tells a reader that a question
    names something the knowledge base never mentions (a library, a tool, an API).
    """

    unmatched: tuple[str, ...]

    def __init__(self, chunks: Iterable[Chunk] = (), unmatched: Iterable[str] = ()) -> None:
        super().__init__(chunks)
        self.unmatched = tuple(unmatched)


@dataclass
class IngestResult:
    """Counts from one ingest call.

    A *document* is one text or one file. Re-ingesting the same source with the
    same content is `documents_skipped`; with changed content it is
    `documents_replaced`: its chunks whose text (under its title and section) is
    unchanged keep their rows, ids and embeddings (`chunks_reused`), the others are
    deleted (`chunks_removed`) and the new ones embedded and inserted
    (`chunks_added`), all in one transaction. A sync (``ingest(..., sync=True)``)
    also removes the documents whose file is gone (`documents_removed`), and keeps
    those whose file it could not read (`documents_kept`).
    """

    documents_added: int = 0
    """New documents (a source not yet in the collection)."""
    documents_skipped: int = 0
    """Documents whose source and content hash were already stored: nothing written."""
    documents_replaced: int = 0
    """Documents whose source existed with a different content hash."""
    chunks_added: int = 0
    """Chunks inserted, for added and replaced documents."""
    chunks_removed: int = 0
    """Old chunks deleted: changed in a replaced document, or of a removed one."""
    chunks_reused: int = 0
    """Chunks of replaced documents kept as stored (not embedded again)."""
    documents_removed: int = 0
    """Documents a sync removed because their file is gone."""
    documents_kept: int = 0
    """Documents a sync kept as stored because it could not read their file (it is in
    `skipped_files`, lies under a folder there, or could not even be looked at)."""
    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    r"""`(path, reason)` for entries a directory walk could not use: a file binary, too
    large or nested too deeply, a folder it could not list, a broken link, ... A path
    whose name is not UTF-8 has its odd bytes written as ``\xNN``."""

    def to_dict(self) -> dict[str, Any]:
        """Return the counts as a JSON-serialisable dict."""
        data = asdict(self)
        data["skipped_files"] = [list(item) for item in self.skipped_files]
        return data


@dataclass(frozen=True)
class CollectionInfo:
    """A collection with its sizes and the embedder it was built with."""

    name: str
    documents: int
    chunks: int
    embedding_model: str
    dimension: int

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a dict."""
        return asdict(self)


@dataclass(frozen=True)
class DocumentInfo:
    """One stored document: where it came from, how big it is, when it was written."""

    id: str
    collection: str
    source: str
    """The source as stored: a file's absolute path, a text's name, a LangChain document's ``source``."""
    title: str
    chunks: int
    bytes: int
    """UTF-8 bytes of text its chunks hold."""
    content_hash: str
    ingested_at: datetime
    """When the document was first stored."""
    updated_at: datetime
    """When its content was last written (equal to `ingested_at` until it is replaced)."""
    metadata: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as JSON-ready data (times in ISO 8601)."""
        data = asdict(self)
        data["ingested_at"] = self.ingested_at.isoformat()
        data["updated_at"] = self.updated_at.isoformat()
        return data


def checked_dimension(dimension: int) -> int:
    """Return `dimension` if it is an embedding dimension pgvector stores (1..16000), else raise `ValueError`."""
    value: object = dimension  # callers may pass anything at runtime
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= dimension <= 16000:
        raise ValueError(f"embedding dimension must be an int in 1..16000, got {dimension!r}")
    return dimension
