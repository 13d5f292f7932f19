"""What extractors read and return, and the one Protocol every extractor satisfies."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from arcana_loop.knowledge.errors import KnowledgeBaseError

_SPACES = re.compile(r"\s+")


def normalize_name(name: str) -> str:
    """Return the key an entity is unique by within a collection.

    Case and runs of whitespace are ignored and a trailing `()` is dropped, so
    `Wait_For()`, `wait_for` and `wait_for ()` are one entity.
    """
    text = _SPACES.sub(" ", name).strip().lower()
    while text.endswith("()"):
        text = text[:-2].rstrip()
    return text


@dataclass(frozen=True)
class ChunkText:
    """A chunk as an extractor sees it."""

    id: str
    text: str


@dataclass(frozen=True)
class ExtractedEntity:
    """An entity found in one chunk, with where it occurs."""

    name: str
    type: str = ""
    description: str = ""
    spans: tuple[tuple[int, int], ...] = ()
    """`(start, end)` character offsets in the chunk text; empty when the extractor cannot say."""


@dataclass(frozen=True)
class ExtractedRelationship:
    """A relationship between two entities of the same chunk (names as extracted)."""

    source: str
    target: str
    type: str = "related_to"
    description: str = ""
    strength: float = 1.0


@dataclass(frozen=True)
class Extraction:
    """What an extractor made of one chunk.

    `skipped` holds the reason when the extractor could not use the chunk (a
    malformed model reply, for one); such a chunk contributes nothing.
    """

    chunk_id: str
    entities: tuple[ExtractedEntity, ...] = ()
    relationships: tuple[ExtractedRelationship, ...] = ()
    skipped: str | None = None


@runtime_checkable
class Extractor(Protocol):
    """Turns chunks into entities and relationships, one `Extraction` per chunk, in order."""

    name: str
    """Recorded per collection, so a knowledge graph says what built it."""

    def extract(self, chunks: Sequence[ChunkText]) -> list[Extraction]:
        """Extract entities and relationships from `chunks`."""
        ...


@dataclass
class EntityBuildResult:
    """Counts from one entity build."""

    chunks_processed: int = 0
    chunks_skipped: int = 0
    entities: int = 0
    relationships: int = 0
    mentions: int = 0
    communities: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """`(chunk_id, reason)` for chunks the extractor skipped."""


class EntityBuildError(KnowledgeBaseError):
    """Entities could not be built (the extractor failed or broke its contract).

    Whatever chunks were written before the failure keep complete entities; the
    rest stay pending, and `KnowledgeBase.build_entities` picks them up.
    """
