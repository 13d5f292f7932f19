"""Build a collection's entities from its chunks: extract, embed entities, write, find communities.

Only chunks not extracted yet are extracted (every chunk with
`rebuild=True`), in batches of `batch_size`; each batch is extracted with no
transaction open, then written in one (`store.write_extractions`). A failure
leaves the batches already written complete and the rest pending, and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from psycopg_pool import ConnectionPool

from arcana_loop.knowledge.embeddings import embed_matrix
from arcana_loop.knowledge.entities import communities as comm
from arcana_loop.knowledge.entities import store
from arcana_loop.knowledge.entities.offline import OfflineExtractor
from arcana_loop.knowledge.entities.prompts import COMMUNITY_SUMMARY_PROMPT
from arcana_loop.knowledge.entities.types import (
    ChunkText,
    EntityBuildError,
    EntityBuildResult,
    Extraction,
    Extractor,
)

logger = logging.getLogger(__name__)

DEFAULT_ENTITY_BATCH = 2000


def resolve_extractor(extractor: Extractor | BaseChatModel | None) -> Extractor:
    """Return `extractor`, the LLM extractor around a chat model, or the offline default.

    Raises:
        TypeError: for anything else.
    """
    if extractor is None:
        return OfflineExtractor()
    if isinstance(extractor, BaseChatModel):
        from arcana_loop.knowledge.entities.llm import LLMExtractor

        return LLMExtractor(extractor)
    if isinstance(extractor, Extractor):
        return extractor
    raise TypeError(
        "entity_extractor must be None (offline), a chat model, or an object with"
        f" a name and extract(chunks); got {type(extractor).__name__}"
    )


def llm_summarizer(model: BaseChatModel) -> comm.Summarizer:
    """Return a community summariser that asks `model` (falls back when it fails)."""

    def summarize(members: list[tuple[str, str]]) -> str:
        listing = "\n".join(f"- {name}: {desc}" if desc else f"- {name}" for name, desc in members)
        reply = model.invoke(COMMUNITY_SUMMARY_PROMPT.replace("{entities}", listing))
        content = reply.content
        return content if isinstance(content, str) else ""

    return summarize


def _checked(batch: Sequence[ChunkText], extractions: Any, name: str) -> list[Extraction]:
    if not isinstance(extractions, list) or len(extractions) != len(batch):
        raise EntityBuildError(f"extractor {name!r} must return one Extraction per chunk, in order")
    for chunk, ext in zip(batch, extractions, strict=True):
        if not isinstance(ext, Extraction) or ext.chunk_id != chunk.id:
            raise EntityBuildError(
                f"extractor {name!r} returned {type(ext).__name__} for chunk {chunk.id},"
                " expected an Extraction with that chunk_id"
            )
    return extractions


def build_collection(
    pool: ConnectionPool[Any],
    embeddings: Embeddings,
    *,
    collection_id: int,
    collection: str,
    dimension: int,
    extractor: Extractor,
    rebuild: bool = False,
    batch_size: int = DEFAULT_ENTITY_BATCH,
    communities: bool = True,
    summarizer: comm.Summarizer | None = None,
) -> EntityBuildResult:
    """Extract the pending chunks of one collection and write their entities.

    Raises:
        EntityBuildError: if the extractor raised or broke its contract; the
            message says how many chunks were done.
    """
    result = EntityBuildResult()
    with pool.connection() as conn:
        pending = store.pending_chunks(conn, collection_id, rebuild=rebuild)
        if not pending:
            store.mark_dirty(conn, collection_id, extractor.name)  # built, if empty
    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        try:
            extractions = _checked(batch, extractor.extract(batch), extractor.name)
        except EntityBuildError as exc:
            raise EntityBuildError(f"{exc}; {start} of {len(pending)} chunks were done") from exc
        except Exception as exc:
            raise EntityBuildError(
                f"entity extraction failed for collection {collection!r} after {start} of"
                f" {len(pending)} chunks ({type(exc).__name__}: {exc}); the rest stay pending,"
                " run build_entities to retry"
            ) from exc
        prepared = store.prepare(extractions)
        texts = [store.entity_text(e.name, e.description) for e in prepared.entities.values()]
        vectors = (
            embed_matrix(embeddings, texts, dimension)
            if texts
            else np.zeros((0, dimension), dtype=np.float32)
        )
        with pool.connection() as conn:
            store.write_extractions(
                conn,
                collection_id=collection_id,
                dimension=dimension,
                extractor=extractor.name,
                prepared=prepared,
                vectors=vectors,
            )
        result.chunks_processed += len(batch)
        result.skipped += [(e.chunk_id, e.skipped) for e in extractions if e.skipped is not None]
    result.chunks_skipped = len(result.skipped)
    with pool.connection() as conn:
        if communities:
            comm.update_dirty(conn, [collection_id], summarizer=summarizer)
        counts = store.entity_counts(conn, collection_id)
    result.entities = counts["entities"]
    result.relationships = counts["relationships"]
    result.mentions = counts["mentions"]
    result.communities = counts["communities"]
    logger.info("entities of %r: %s", collection, counts)
    return result
