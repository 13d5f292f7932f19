"""Test helpers: a tiny deterministic embedder of another dimension, and corpus loading."""

from __future__ import annotations

import hashlib
import re

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


def load_topics(kb: KnowledgeBase, collection: str = "default", **kwargs: object) -> IngestResult:
    """Ingest every topic as a named text document; return the summed counts."""
    total = IngestResult()
    for topic, text in TOPICS.items():
        res = kb.ingest(
            text,
            collection=collection,
            name=topic,
            metadata={"topic": topic},
            chunk_size=300,
            chunk_overlap=40,
            **kwargs,  # type: ignore[arg-type]
        )
        total.documents_added += res.documents_added
        total.chunks_added += res.chunks_added
    return total
