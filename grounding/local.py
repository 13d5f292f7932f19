"""The local grounder: a sentence-level *heuristic*, offline, with no model call and no API key.

It is not an entailment model. Each answer sentence is compared with every
sentence of the chunks, and scored by the best match of two signals: the cosine
similarity of their WordLlama embeddings, and how many of the answer sentence's
content words, numbers and identifiers (``asyncio.wait_for``) the chunk sentence
contains. It catches answers that bring in words, names or numbers the evidence
lacks; it cannot see a negation or a reversed relation with the same words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from arcana_loop.core.sources import without_citations
from arcana_loop.grounding.attribution import overlap_sources
from arcana_loop.grounding.sentences import split_sentences
from arcana_loop.grounding.types import GroundingResult

NAME = "local"

DEFAULT_THRESHOLD = 0.55
"""Sentences scoring at least this are faithful."""
SEMANTIC_WEIGHT = 0.4
"""Share of the sentence score from embedding similarity; the rest is term coverage."""

_TOKEN = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+|\d+(?:\.\d+)?|\w+")
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that these those "
    "you your we our they their he she his her i me my not no do does did can could will would should may might must "
    "there here which who whom what when where why how than then so such also just only very more most some any each "
    "into about over under again further once all both few other own same too use used using".split()
)


def content_terms(text: str) -> set[str]:
    """Return the words that carry content: identifiers, numbers, and non-stopwords, lowercased."""
    return {
        t.lower()
        for t in _TOKEN.findall(text)
        if t.lower() not in _STOP and (len(t) > 2 or t.isdigit())
    }


class HeuristicSentenceGrounder:
    """Scores each answer sentence by similarity and term coverage against the best chunk sentence."""

    name = NAME

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, embeddings: Any = None) -> None:
        self.threshold = threshold
        self._embeddings = embeddings

    def _embedder(self) -> Any:
        if self._embeddings is None:
            from arcana_loop.knowledge.embeddings import default_embeddings

            self._embeddings = default_embeddings()
        return self._embeddings

    def _similarities(self, answer_sentences: list[str], evidence: list[str]) -> list[list[float]]:
        import numpy as np

        embedder = self._embedder()
        vectors = np.asarray(
            embedder.embed_documents([*answer_sentences, *evidence]), dtype=np.float32
        )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)
        left, right = vectors[: len(answer_sentences)], vectors[len(answer_sentences) :]
        result: list[list[float]] = np.clip(left @ right.T, 0.0, 1.0).tolist()
        return result

    def score_sentence(
        self, sentence: str, evidence: Sequence[str], similarities: Sequence[float]
    ) -> tuple[float, int]:
        """Return the sentence's score and the index of its best evidence sentence."""
        terms = content_terms(sentence)
        best, best_index = 0.0, 0
        for index, (text, similarity) in enumerate(zip(evidence, similarities, strict=True)):
            coverage = len(terms & content_terms(text)) / len(terms) if terms else 1.0
            score = SEMANTIC_WEIGHT * similarity + (1 - SEMANTIC_WEIGHT) * coverage
            if score > best:
                best, best_index = score, index
        return min(best, 1.0), best_index

    def ground(
        self,
        answer: str,
        chunks: list[dict[str, Any]],
        *,
        question: str = "",
        threshold: float | None = None,
        **opts: Any,
    ) -> GroundingResult:
        """Score the answer; the score is the length-weighted mean of its sentence scores."""
        sentences = split_sentences(answer)
        if not sentences:
            return GroundingResult(score=1.0)
        if not chunks:
            return GroundingResult(score=0.0)
        cut = self.threshold if threshold is None else threshold
        evidence = [s for c in chunks for s, _, _ in split_sentences(str(c.get("text") or ""))] or [
            ""
        ]
        # a sentence is compared by what it says: its citations are no words of the evidence
        ids = [str(c["id"]) for c in chunks if c.get("id")]
        claims = [without_citations(text, ids) for text, _, _ in sentences]
        similarities = self._similarities(claims, evidence)
        spans: list[dict[str, Any]] = []
        weighted = 0.0
        for (text, start, end), claim, row in zip(sentences, claims, similarities, strict=True):
            score, _ = self.score_sentence(claim, evidence, row)
            weighted += score * len(text)
            verdict = "supported" if score >= cut else "unsupported"
            spans.append(
                {
                    "text": text,
                    "start": start,
                    "end": end,
                    "score": round(score, 4),
                    "verdict": verdict,
                    "sources": overlap_sources(claim, chunks),
                }
            )
        total = sum(len(s[0]) for s in sentences)
        return GroundingResult.from_mapping(
            {
                "score": round(weighted / total, 4) if total else 1.0,
                "faithful_spans": [s for s in spans if s["verdict"] == "supported"],
                "hallucinated_spans": [s for s in spans if s["verdict"] != "supported"],
                "claims": [
                    {k: s[k] for k in ("text", "verdict", "start", "end", "sources")} for s in spans
                ],
            }
        )
