"""The arcana-loop knowledge base: PostgreSQL + pgvector, MiniLM or WordLlama embeddings per collection.

`ingest`, `search` and `asearch` here use a lazily created default knowledge base
(`default_knowledge_base()`: `DATABASE_URL`, else the embedded server). They fit
the loop's `search_fn(query, collection=..., limit=..., **search_opts)` call.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from langchain_core.documents import Document

from arcana_loop.knowledge.base import (
    LOOP_SET_SEARCH_ARGUMENTS,
    KnowledgeBase,
    check_search_options,
)
from arcana_loop.knowledge.embeddings import (
    WordLlamaEmbeddings,
    default_embedder_name,
    default_embeddings,
    embedding_model_name,
    resolve_embeddings,
)
from arcana_loop.knowledge.embeddings_minilm import MiniLMEmbeddings
from arcana_loop.knowledge.errors import (
    CollectionNotFound,
    DatabaseUnavailable,
    DataDirectoryFull,
    EmbedderFailed,
    EmbedderUnavailable,
    EmbeddingMismatch,
    IngestError,
    IngestInterrupted,
    KnowledgeBaseError,
    UnsupportedFormat,
)
from arcana_loop.knowledge.loaders import MissingExtra
from arcana_loop.knowledge.reembed import ReembedResult
from arcana_loop.knowledge.retriever import KnowledgeBaseRetriever
from arcana_loop.knowledge.server import database_url
from arcana_loop.knowledge.types import (
    SEARCH_MODES,
    Chunk,
    CollectionInfo,
    DocumentInfo,
    IngestResult,
    SearchMode,
    SearchResults,
)
from arcana_loop.knowledge.versions import ChunkVersions, text_hash

__all__ = [
    "SEARCH_MODES",
    "Chunk",
    "ChunkVersions",
    "CollectionInfo",
    "CollectionNotFound",
    "DataDirectoryFull",
    "DocumentInfo",
    "DatabaseUnavailable",
    "EmbedderFailed",
    "EmbedderUnavailable",
    "EmbeddingMismatch",
    "IngestError",
    "IngestInterrupted",
    "IngestResult",
    "KnowledgeBase",
    "LOOP_SET_SEARCH_ARGUMENTS",
    "check_search_options",
    "KnowledgeBaseError",
    "KnowledgeBaseRetriever",
    "MiniLMEmbeddings",
    "MissingExtra",
    "ReembedResult",
    "SearchMode",
    "SearchResults",
    "UnsupportedFormat",
    "WordLlamaEmbeddings",
    "aingest",
    "asearch",
    "chunk_versions",
    "database_url",
    "default_embedder_name",
    "default_embeddings",
    "default_knowledge_base",
    "embedding_model_name",
    "ingest",
    "resolve_embeddings",
    "search",
    "text_hash",
]

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

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


def _on_default(method: Callable[Concatenate[KnowledgeBase, P], R], doc: str) -> Callable[P, R]:
    """`method` of the default knowledge base, as a function with the method's own signature."""

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return method(default_knowledge_base(), *args, **kwargs)

    return _signed(call, method, doc)


def _on_default_async(
    method: Callable[Concatenate[KnowledgeBase, P], Awaitable[R]], doc: str
) -> Callable[P, Awaitable[R]]:
    """`_on_default` for a coroutine method: the default knowledge base is made off the event loop."""

    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return await method(await _adefault_knowledge_base(), *args, **kwargs)

    return _signed(call, method, doc)


def _signed(function: F, method: Callable[..., Any], doc: str) -> F:
    # whoever inspects a search function's parameters (or reads help()) sees the
    # method's, without `self`, so the signature is written once, on the method
    signature = inspect.signature(method)
    function.__signature__ = signature.replace(  # type: ignore[attr-defined]  # read by inspect.signature
        parameters=list(signature.parameters.values())[1:]
    )
    function.__name__ = function.__qualname__ = method.__name__
    function.__doc__ = doc
    return function


def ingest(
    source: str | os.PathLike[str] | Document | Sequence[Document], **kwargs: Any
) -> IngestResult:
    """Ingest into the default knowledge base; see `KnowledgeBase.ingest`."""
    return default_knowledge_base().ingest(source, **kwargs)


async def aingest(
    source: str | os.PathLike[str] | Document | Sequence[Document], **kwargs: Any
) -> IngestResult:
    """Ingest into the default knowledge base in a worker thread."""
    return await (await _adefault_knowledge_base()).aingest(source, **kwargs)


search = _on_default(
    KnowledgeBase.search, "Search the default knowledge base; see `KnowledgeBase.search`."
)
asearch = _on_default_async(
    KnowledgeBase.asearch, "Search the default knowledge base without blocking the event loop."
)
chunk_versions = _on_default(
    KnowledgeBase.chunk_versions,
    "The current versions of chunks and documents in the default knowledge base; see `KnowledgeBase.chunk_versions`.",
)
