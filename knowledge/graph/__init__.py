"""A knowledge graph per collection: entities, relationships, mentions and communities.

Built at ingest (`KnowledgeBase.ingest(..., graph=True)`) or afterwards
(`KnowledgeBase.build_graph`), stored in the same PostgreSQL schema as the
chunks, and fused into `KnowledgeBase.search` by reciprocal-rank fusion when
the searched collections have a graph. Extractors: `OfflineExtractor` (patterns
and co-occurrence, the default) and `LLMExtractor` (any chat model with
structured output). This package imports nothing from `knowledge.base`, so the
base can import it.
"""

from __future__ import annotations

from arcana_loop.knowledge.graph.offline import OfflineExtractor
from arcana_loop.knowledge.graph.search import GraphSearchOptions
from arcana_loop.knowledge.graph.types import (
    ChunkText,
    ExtractedEntity,
    ExtractedRelationship,
    Extraction,
    Extractor,
    GraphBuildError,
    GraphBuildResult,
    normalize_name,
)

__all__ = [
    "ChunkText",
    "ExtractedEntity",
    "ExtractedRelationship",
    "Extraction",
    "Extractor",
    "GraphBuildError",
    "GraphBuildResult",
    "GraphSearchOptions",
    "OfflineExtractor",
    "normalize_name",
]
