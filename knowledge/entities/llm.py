"""The LLM extractor: any LangChain chat model with `with_structured_output`.

Chunks go to the model in batches of `batch_size` through `Runnable.batch` with
`max_concurrency`, so at most that many requests are in flight. A reply that is
not a valid `ExtractionReply` (an exception from the model or the parser, a
wrong shape, a validation error) skips its chunk with the reason logged and
recorded; nothing of that chunk is written. A relationship whose ends are not
among the chunk's entities, or that links an entity to itself, is dropped.

Offsets: each entity gets a mention at every case-insensitive occurrence of its
name in the chunk; a name the model normalised so that it does not occur
verbatim gets one mention spanning the whole chunk.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field, ValidationError

from arcana_loop.knowledge.entities.prompts import EXTRACTION_PROMPT
from arcana_loop.knowledge.entities.types import (
    ChunkText,
    ExtractedEntity,
    ExtractedRelationship,
    Extraction,
    normalize_name,
)

logger = logging.getLogger(__name__)

MAX_CHUNK_CHARS = 8000


class EntityReply(BaseModel):
    """One entity as the model returns it."""

    name: str = Field(min_length=1, description="The entity's name, as the text writes it.")
    type: str = Field(
        default="", description="A short type: module, class, function, concept, person, place..."
    )
    description: str = Field(default="", description="One sentence from the text about the entity.")


class RelationshipReply(BaseModel):
    """One relationship as the model returns it."""

    source: str = Field(min_length=1, description="Name of an entity of the list.")
    target: str = Field(min_length=1, description="Name of another entity of the list.")
    type: str = Field(default="related_to", description="A short type: part_of, raises, uses...")
    description: str = Field(default="", description="One sentence on how they relate.")
    strength: float = Field(
        default=1.0, gt=0, le=10, description="1 (loose) to 10 (defined by each other)."
    )


class ExtractionReply(BaseModel):
    """The structured reply for one chunk."""

    entities: list[EntityReply] = Field(default_factory=list)
    relationships: list[RelationshipReply] = Field(default_factory=list)


def _spans(text: str, name: str) -> tuple[tuple[int, int], ...]:
    found = tuple((m.start(), m.end()) for m in re.finditer(re.escape(name), text, re.IGNORECASE))
    return found or ((0, len(text)),)


def to_extraction(chunk: ChunkText, reply: Any) -> Extraction:
    """Turn one model reply (or the exception it raised) into an `Extraction`."""
    if isinstance(reply, BaseException):
        return _skipped(chunk, f"{type(reply).__name__}: {reply}".strip())
    try:
        parsed = (
            reply if isinstance(reply, ExtractionReply) else ExtractionReply.model_validate(reply)
        )
    except ValidationError as exc:
        return _skipped(chunk, f"malformed reply: {exc.error_count()} validation error(s)")
    entities: dict[str, ExtractedEntity] = {}
    for ent in parsed.entities:
        key = normalize_name(ent.name)
        if key and key not in entities:
            name = ent.name.strip()
            entities[key] = ExtractedEntity(
                name, ent.type.strip(), ent.description.strip(), _spans(chunk.text, name)
            )
    relationships = []
    for rel in parsed.relationships:
        source, target = normalize_name(rel.source), normalize_name(rel.target)
        if source in entities and target in entities and source != target:
            relationships.append(
                ExtractedRelationship(
                    entities[source].name,
                    entities[target].name,
                    rel.type.strip() or "related_to",
                    rel.description.strip(),
                    rel.strength,
                )
            )
    return Extraction(chunk.id, tuple(entities.values()), tuple(relationships))


def _skipped(chunk: ChunkText, reason: str) -> Extraction:
    logger.warning("entity extraction skipped chunk %s: %s", chunk.id, reason)
    return Extraction(chunk.id, skipped=reason)


def _model_name(model: Any) -> str:
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return f"llm:{value}"
    return f"llm:{type(model).__name__}"


class LLMExtractor:
    """Extract entities and relationships with a chat model (see the module docstring).

    Args:
        model: A LangChain chat model that supports `with_structured_output`.
        batch_size: Chunks sent per `batch` call.
        max_concurrency: Most requests in flight at once.
        prompt: The instruction, with a `{text}` slot.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        batch_size: int = 16,
        max_concurrency: int = 4,
        prompt: str = EXTRACTION_PROMPT,
    ) -> None:
        checked: tuple[tuple[str, object], ...] = (
            ("batch_size", batch_size),
            ("max_concurrency", max_concurrency),
        )
        for label, value in checked:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if "{text}" not in prompt:
            raise ValueError("the extraction prompt needs a {text} slot")
        self.model = model
        self.batch_size = batch_size
        self.max_concurrency = max_concurrency
        self.prompt = prompt
        self.name = _model_name(model)
        self._structured = model.with_structured_output(ExtractionReply)

    def _inputs(self, chunks: Sequence[ChunkText]) -> list[Any]:
        return [self.prompt.replace("{text}", c.text[:MAX_CHUNK_CHARS]) for c in chunks]

    def extract(self, chunks: Sequence[ChunkText]) -> list[Extraction]:
        """Extract every chunk, in order; a failing or malformed reply skips its chunk."""
        out: list[Extraction] = []
        for start in range(0, len(chunks), self.batch_size):
            batch = list(chunks[start : start + self.batch_size])
            replies = self._structured.batch(
                self._inputs(batch),
                config={"max_concurrency": self.max_concurrency},
                return_exceptions=True,
            )
            out += [to_extraction(c, r) for c, r in zip(batch, replies, strict=True)]
        return out

    async def aextract(self, chunks: Sequence[ChunkText]) -> list[Extraction]:
        """Extract like `extract`, on the event loop."""
        out: list[Extraction] = []
        for start in range(0, len(chunks), self.batch_size):
            batch = list(chunks[start : start + self.batch_size])
            replies = await self._structured.abatch(
                self._inputs(batch),
                config={"max_concurrency": self.max_concurrency},
                return_exceptions=True,
            )
            out += [to_extraction(c, r) for c, r in zip(batch, replies, strict=True)]
        return out
