"""The arcana-loop knowledge base: PostgreSQL + pgvector, WordLlama embeddings by default.

`ingest`, `search` and `asearch` here use a lazily created default knowledge base
(`default_knowledge_base()`: `DATABASE_URL`, else the embedded server). They fit
the loop's `search_fn(query, collection=..., limit=..., **search_opts)` call.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from arcana_loop.knowledge.base import KnowledgeBase
from arcana_loop.knowledge.embeddings import (
    WordLlamaEmbeddings,
    default_embeddings,
    embedding_model_name,
    resolve_embeddings,
)
from arcana_loop.knowledge.errors import (
    CollectionNotFound,
    DatabaseUnavailable,
    EmbeddingMismatch,
    IngestError,
    KnowledgeBaseError,
)
from arcana_loop.knowledge.loaders import MissingExtra
from arcana_loop.knowledge.retriever import KnowledgeBaseRetriever
from arcana_loop.knowledge.server import database_url
from arcana_loop.knowledge.types import (
    SEARCH_MODES,
    Chunk,
    CollectionInfo,
    IngestResult,
    SearchMode,
)

__all__ = [
    "SEARCH_MODES",
    "Chunk",
    "CollectionInfo",
    "CollectionNotFound",
    "DatabaseUnavailable",
    "EmbeddingMismatch",
    "IngestError",
    "IngestResult",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "KnowledgeBaseRetriever",
    "MissingExtra",
    "SearchMode",
    "WordLlamaEmbeddings",
    "aingest",
    "asearch",
    "database_url",
    "default_embeddings",
    "default_knowledge_base",
    "embedding_model_name",
    "ingest",
    "resolve_embeddings",
    "search",
]

_default: KnowledgeBase | None = None
_default_lock = threading.Lock()


def default_knowledge_base() -> KnowledgeBase:
    """Return the process-wide default knowledge base, created on first call."""
    global _default
    with _default_lock:
        if _default is None:
            _default = KnowledgeBase()
        return _default


async def _adefault_knowledge_base() -> KnowledgeBase:
    # The first call loads the embedder and may start the embedded server: keep
    # that off the event loop (a served graph shares it with every other run).
    if _default is not None:
        return _default
    return await asyncio.to_thread(default_knowledge_base)


def ingest(source: str | os.PathLike[str] | Document | Sequence[Document], **kwargs: Any) -> IngestResult:
    """Ingest into the default knowledge base; see `KnowledgeBase.ingest`."""
    return default_knowledge_base().ingest(source, **kwargs)


async def aingest(
    source: str | os.PathLike[str] | Document | Sequence[Document], **kwargs: Any
) -> IngestResult:
    """Ingest into the default knowledge base in a worker thread."""
    return await (await _adefault_knowledge_base()).aingest(source, **kwargs)


def search(
    query: str,
    *,
    collection: str | Sequence[str] | None = None,
    limit: int = 5,
    mode: str = "hybrid",
    threshold: float | None = None,
    ef_search: int | None = None,
    entities: bool | None = None,
    entity_depth: int | None = None,
) -> list[Chunk]:
    """Search the default knowledge base; see `KnowledgeBase.search`."""
    return default_knowledge_base().search(
        query,
        collection=collection,
        limit=limit,
        mode=mode,
        threshold=threshold,
        ef_search=ef_search,
        entities=entities,
        entity_depth=entity_depth,
    )


async def asearch(
    query: str,
    *,
    collection: str | Sequence[str] | None = None,
    limit: int = 5,
    mode: str = "hybrid",
    threshold: float | None = None,
    ef_search: int | None = None,
    entities: bool | None = None,
    entity_depth: int | None = None,
) -> list[Chunk]:
    """Search the default knowledge base without blocking the event loop."""
    return await (await _adefault_knowledge_base()).asearch(
        query,
        collection=collection,
        limit=limit,
        mode=mode,
        threshold=threshold,
        ef_search=ef_search,
        entities=entities,
        entity_depth=entity_depth,
    )
