"""The knowledge base as a LangChain retriever, to drop into any LangChain chain.

`KnowledgeBase.as_retriever()` returns a `KnowledgeBaseRetriever`: `invoke(query)`
runs `KnowledgeBase.search` and `ainvoke(query)` runs `KnowledgeBase.asearch` (on
an async connection, never blocking the event loop). Each hit becomes a
`Document` whose `page_content` is the chunk text, whose `id` is the chunk id,
and whose metadata is the chunk's metadata plus `id`, `score`, `collection`,
`source`, `section` (empty when the chunk is under no heading), `document_id`
and `position`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from arcana_loop.knowledge.types import Chunk, SearchMode


class Searchable(Protocol):
    """What the retriever needs of a knowledge base: `KnowledgeBase.search` and `asearch`."""

    def search(self, query: str, **options: Any) -> list[Chunk]:
        """Search synchronously."""
        ...

    async def asearch(self, query: str, **options: Any) -> list[Chunk]:
        """Search on the event loop."""
        ...


class KnowledgeBaseRetriever(BaseRetriever):
    """Retrieve chunks of a `KnowledgeBase` as LangChain `Document`s (sync and async).

    Build it with `KnowledgeBase.as_retriever`, which checks the options first.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    knowledge_base: Any
    """The `KnowledgeBase` searched (typed `Any`: pydantic cannot validate it)."""
    collection: str | list[str] | None = None
    """`None` or `"all"` (every collection), a name, or a list of names."""
    mode: SearchMode = "hybrid"
    """`"semantic"`, `"fulltext"` or `"hybrid"`."""
    k: int = 4
    """Most documents returned."""
    threshold: float | None = None
    filter: dict[str, Any] | None = None
    """A metadata filter for every query (`knowledge.filters`)."""
    """Minimum score, in the mode's own scale (see `KnowledgeBase.search`)."""

    def _search_options(self) -> dict[str, Any]:
        """The search's options, the same for both paths."""
        return {
            "collection": self.collection,
            "limit": self.k,
            "mode": self.mode,
            "threshold": self.threshold,
            "filter": self.filter,
        }

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        kb: Searchable = self.knowledge_base
        return [chunk_document(c) for c in kb.search(query, **self._search_options())]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        kb: Searchable = self.knowledge_base
        return [chunk_document(c) for c in await kb.asearch(query, **self._search_options())]


def chunk_document(chunk: Chunk) -> Document:
    """Return a search hit as a LangChain `Document` (see the module docstring for its metadata)."""
    meta = chunk["metadata"]
    metadata = {
        **meta,
        "id": chunk["id"],
        "score": chunk["score"],
        "collection": chunk["collection"],
        "source": meta.get("source", ""),
        "section": meta.get("section", ""),
        "document_id": chunk["document_id"],
        "position": chunk["position"],
    }
    return Document(id=chunk["id"], page_content=chunk["text"], metadata=metadata)


def scope_list(collection: str | Sequence[str] | None) -> str | list[str] | None:
    """The retriever's `collection` field: a list of names is copied, so later changes to it do not leak in."""
    if collection is None or isinstance(collection, str):
        return collection
    return list(collection)
