"""Each search as a retriever run of its own in LangChain tracing (LangSmith and any callback handler).

A LangChain retriever shows up in a trace as a ``retriever`` run whose input is the
query and whose output is the documents it found. The loop's searches are not
retrievers, so the ``tools`` node opens such a run around each one, under the node's
own run (the config LangGraph set for the node's task). The scope and the limit are
in the run's metadata: a retriever run's inputs hold only the query. Without
callbacks (no tracing, no handler) this costs a few attribute lookups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    BaseCallbackManager,
    CallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.runnables.config import ensure_config

from arcana_loop.knowledge.types import Chunk

RUN_NAME = "search"


def _metadata(collection: str | list[str] | None, limit: int) -> dict[str, Any]:
    return {"collection": collection, "limit": limit, "ls_retriever_name": RUN_NAME}


def _manager(collection: str | list[str] | None, limit: int) -> CallbackManager | None:
    """The search's callback manager, or ``None`` when the node's run has no handler.

    Inside a node, the config's callbacks are the node's run's: LangGraph configured them
    with every handler the run has (LangSmith's tracer included, when tracing is on), so a
    manager without handlers there means nobody listens, and configuring another one (a
    tenth of a millisecond a search) is skipped.
    """
    config = ensure_config()
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager) and not callbacks.handlers:
        return None
    return CallbackManager.configure(
        callbacks,
        None,
        inheritable_tags=config.get("tags"),
        inheritable_metadata=config.get("metadata"),
        local_metadata=_metadata(collection, limit),
    )


def documents(found: Sequence[Chunk]) -> list[Document]:
    """Return chunks as LangChain documents: the text as page content, the rest as metadata."""
    return [
        Document(
            page_content=c["text"],
            id=c["id"],
            metadata={k: v for k, v in c.items() if k not in ("id", "text")},
        )
        for c in found
    ]


def start_search(
    query: str, collection: str | list[str] | None, limit: int
) -> CallbackManagerForRetrieverRun | None:
    """Open the retriever run of one search; ``None`` when nobody listens."""
    manager = _manager(collection, limit)
    if manager is None or not manager.handlers:
        return None
    return manager.on_retriever_start(None, query, name=RUN_NAME)


def end_search(
    run: CallbackManagerForRetrieverRun | None, found: Sequence[Chunk], error: str | None = None
) -> None:
    """Close a search's run with the chunks it found, or with the error its result was."""
    if run is None:
        return
    if error is not None:
        run.on_retriever_error(ValueError(error))
    else:
        run.on_retriever_end(documents(found))


def search_failed(run: CallbackManagerForRetrieverRun | None, exc: BaseException) -> None:
    """Close a search's run with the exception the search raised."""
    if run is not None:
        run.on_retriever_error(exc)
