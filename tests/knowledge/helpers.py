"""Test helpers: a tiny deterministic embedder of another dimension, and corpus loading."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from langchain_core.embeddings import Embeddings

from arcana_loop.knowledge import IngestResult, KnowledgeBase
from tests.knowledge.corpus import TOPICS


class HashEmbeddings(Embeddings):
    """Bag-of-words hashing embedder (64 dims): a stand-in for "another model"."""

    model_name = "test:hash-64"
    dimension = 64

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dimension
        for word in re.findall(r"\w+", text.lower()):
            vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


CHUNK_SIZE = 300
"""The topics' chunking: small chunks, so that each topic makes several."""
CHUNK_OVERLAP = 40


def ingest_topic(kb: KnowledgeBase, topic: str, **kwargs: Any) -> IngestResult:
    """Ingest one topic's text in chunks of at most `CHUNK_SIZE` characters."""
    return kb.ingest(TOPICS[topic], chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, **kwargs)


def load_topics(kb: KnowledgeBase, collection: str = "default", **kwargs: Any) -> IngestResult:
    """Ingest every topic as a named text document; return the summed counts."""
    total = IngestResult()
    for topic in TOPICS:
        res = ingest_topic(
            kb, topic, collection=collection, name=topic, metadata={"topic": topic}, **kwargs
        )
        total.documents_added += res.documents_added
        total.chunks_added += res.chunks_added
    return total
