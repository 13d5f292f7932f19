"""A knowledge graph per collection: entities, relationships, mentions and communities.

Built at ingest (`KnowledgeBase.ingest(..., entities=True)`) or afterwards
(`KnowledgeBase.build_entities`), stored in the same PostgreSQL schema as the
chunks, and fused into `KnowledgeBase.search` by reciprocal-rank fusion when
the searched collections have entities. The package is named `entities`, not
`graph`, because `graph` is the loop's LangGraph graph. Extractors:
`OfflineExtractor` (patterns and co-occurrence, the default) and `LLMExtractor`
(any chat model with structured output). This package imports nothing from
`knowledge.base`, so the base can import it.
"""

from __future__ import annotations

from arcana_loop.knowledge.entities.offline import OfflineExtractor
from arcana_loop.knowledge.entities.search import EntitySearchOptions
from arcana_loop.knowledge.entities.types import (
    ChunkText,
    EntityBuildError,
    EntityBuildResult,
    ExtractedEntity,
    ExtractedRelationship,
    Extraction,
    Extractor,
    normalize_name,
)

__all__ = [
    "ChunkText",
    "ExtractedEntity",
    "ExtractedRelationship",
    "Extraction",
    "Extractor",
    "EntityBuildError",
    "EntityBuildResult",
    "EntitySearchOptions",
    "OfflineExtractor",
    "normalize_name",
]
