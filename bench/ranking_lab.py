"""Ranking ideas tried in memory, on the realistic set, before any of them touches SQL.

The python-docs corpus is read from a knowledge base (text, context and stored
embedding of every chunk) and searched in numpy: the semantic side as cosine
similarity, the lexical side as BM25 over `knowledge.lexical.terms`, hybrid as the
weighted reciprocal-rank fusion of `knowledge.queries` (pools of 40, BM25 rows under
30 % of the best dropped, a 0.35 floor for semantic-only rows). That baseline scores
within a point of the SQL search on both halves; each variant changes one thing. Run it
on the tune half to choose, and on the test half only to report:

    .venv/bin/python -m bench.ranking_lab [--split tune|test] [--variants NAME,...]

Relevance (which chunks hold a question's evidence) is computed once per corpus and
cached in the temp directory: the first run takes a few minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import pickle
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings

from arcana_loop.evaluation.cases import (
    EVAL_SETS,
    EvalCase,
    alternatives,
    holds_passage,
    load_cases,
)
from arcana_loop.knowledge import KnowledgeBase, lexical
from arcana_loop.knowledge.embeddings import WordLlamaEmbeddings
from arcana_loop.knowledge.queries import Ranking
from arcana_loop.knowledge.schema import embeddings_table
from arcana_loop.knowledge.sections import context_line, document_title, searchable_text
from arcana_loop.knowledge.stdlib_docs import COLLECTION, ensure_python_docs
from bench.embedder_bench import VARIANTS

Ranker = Callable[[str], list[int]]
SHIPPED = Ranking()
"""The fusion `KnowledgeBase` ships with, which the lab's `hybrid` reproduces."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n\s*\n")
_QUESTION_SENTENCE = re.compile(r"(?<=[.!?:;])\s+")


@dataclass
class Corpus:
    """The collection in memory: what each chunk is searched as, and its stored embedding."""

    texts: list[str]
    searchable: list[str]
    contexts: list[str]
    modules: list[str]
    vectors: np.ndarray[Any, Any]
    sections: list[int]
    """Per chunk, the index of its section (document and section path): what a search returns."""
    section_texts: list[str]
    """Each section's chunks joined, as a whole-section result holds them (`knowledge.whole`)."""


def load_corpus(kb: KnowledgeBase) -> Corpus:
    """Read every chunk of the demo collection with its document's title and its embedding."""
    ensure_python_docs(kb)
    with psycopg.connect(kb.url, options=f"-c search_path={kb.schema},public") as conn:
        rows = conn.execute(
            f"""SELECT c.text, c.metadata, d.source, d.metadata, e.embedding::text, c.document_id
                FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id
                JOIN kb_collections k ON k.id = c.collection_id
                JOIN {embeddings_table(kb.dimension).as_string(conn)} e ON e.chunk_id = c.id
                WHERE k.name = %s ORDER BY d.source, c.position""",
            (COLLECTION,),
        ).fetchall()
    contexts = [
        context_line(document_title(source, dmeta or {}), (meta or {}).get("section") or "")
        for _, meta, source, dmeta, *_ in rows
    ]
    texts = [r[0] for r in rows]
    vectors = np.array([[float(x) for x in r[4].strip("[]").split(",")] for r in rows])
    keys: dict[tuple[str, str], int] = {}
    sections = [keys.setdefault((r[5], (r[1] or {}).get("section") or ""), len(keys)) for r in rows]
    joined: list[list[str]] = [[] for _ in keys]
    for section, text in zip(sections, texts, strict=True):
        joined[section].append(text)
    return Corpus(
        texts=texts,
        searchable=[searchable_text(c, t) for c, t in zip(contexts, texts, strict=True)],
        contexts=contexts,
        modules=[document_title(r[2], r[3] or {}) for r in rows],
        vectors=vectors.astype(np.float32),
        sections=sections,
        section_texts=["\n\n".join(parts) for parts in joined],
    )


def relevant_sections(corpus: Corpus, cases: Sequence[EvalCase]) -> dict[str, set[int]]:
    """Per case, the sections whose whole text holds one of its evidence passages.

    The evaluation scores what a search returns: with whole sections, a section
    holding the passage counts wherever in it the passage is.
    """
    digest = hashlib.sha1("\x00".join(corpus.section_texts).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"arcana-ranking-lab-sections-{digest}.pkl"
    known: dict[str, set[int]] = pickle.loads(cache.read_bytes()) if cache.exists() else {}
    for case in cases:
        if case.id not in known:
            passages = [p for entry in case.evidence for p in alternatives(entry)]
            known[case.id] = {
                i
                for i, text in enumerate(corpus.section_texts)
                if any(holds_passage(text, p) for p in passages)
            }
    cache.write_bytes(pickle.dumps(known))
    return {c.id: known[c.id] for c in cases}


class BM25:
    """BM25 over `lexical.terms`, the weighting of the lexical side, in memory."""

    def __init__(
        self,
        texts: Sequence[str],
        k1: float = lexical.K1,
        b: float = lexical.B,
        contexts: Sequence[str] | None = None,
        context_weight: float = 1.0,
    ):
        """BM25 over `texts`; with `contexts`, their terms count `context_weight` times (BM25F)."""
        docs = [Counter(lexical.terms(t)) for t in texts]
        if contexts is not None:
            for doc, context in zip(docs, contexts, strict=True):
                for term, tf in Counter(lexical.terms(context)).items():
                    doc[term] += context_weight * tf
        lengths = [sum(d.values()) for d in docs]
        average = max(1.0, sum(lengths) / max(len(lengths), 1))
        frequencies: Counter[str] = Counter()
        for doc in docs:
            frequencies.update(doc.keys())
        self.size = len(docs)
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i, doc in enumerate(docs):
            doc = +doc  # terms a zero context weight left at 0 are not in the chunk
            norm = k1 * (1 - b + b * lengths[i] / average)
            for term, tf in doc.items():
                self.postings[term].append((i, tf * (k1 + 1) / (tf + norm)))
        self.idf = {
            t: math.log(1 + (self.size - n + 0.5) / (n + 0.5)) for t, n in frequencies.items()
        }

    def scores(self, query: str) -> np.ndarray[Any, Any]:
        out = np.zeros(self.size)
        for term in dict.fromkeys(lexical.terms(query)):
            for i, weight in self.postings.get(term, ()):
                out[i] += self.idf[term] * weight
        return out


class Lab:
    """The baseline rankers and the variants, over one corpus."""

    def __init__(self, corpus: Corpus, embeddings: Embeddings | None = None) -> None:
        self.corpus = corpus
        self.embeddings = embeddings or WordLlamaEmbeddings()
        self.bm25 = BM25(corpus.searchable)
        self.chunk_chars = np.array([len(t) for t in corpus.texts], dtype=float)
        self.section_chars = np.array(
            [len(corpus.section_texts[s]) for s in corpus.sections], dtype=float
        )
        self.shipped_prior = self.length_prior(
            self.chunk_chars, SHIPPED.short_chunk_chars, SHIPPED.short_chunk_power
        )
        self._queries: dict[str, np.ndarray[Any, Any]] = {}
        self._sentences: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None

    def query(self, text: str) -> np.ndarray[Any, Any]:
        if text not in self._queries:
            self._queries[text] = np.array(self.embeddings.embed_query(text), dtype=np.float32)
        return self._queries[text]

    def cosine(self, text: str) -> np.ndarray[Any, Any]:
        return np.asarray(self.corpus.vectors @ self.query(text))

    def best_sentence(self, text: str) -> np.ndarray[Any, Any]:
        """Per chunk, the cosine of its closest sentence (each embedded under the chunk's context)."""
        if self._sentences is None:
            owners, sentences = [], []
            for i, (context, body) in enumerate(
                zip(self.corpus.contexts, self.corpus.texts, strict=True)
            ):
                parts = [p for p in _SENTENCE.split(body) if len(p.strip()) > 15] or [body]
                owners += [i] * len(parts)
                sentences += [searchable_text(context, p.strip()) for p in parts]
            vectors = np.array(self.embeddings.embed_documents(sentences), dtype=np.float32)
            self._sentences = np.array(owners), vectors
        owners_array, vectors = self._sentences
        best = np.full(len(self.corpus.texts), -1.0)
        np.maximum.at(best, owners_array, vectors @ self.query(text))
        return best

    def hybrid(
        self,
        query: str,
        semantic: np.ndarray[Any, Any] | None = None,
        lexical_scores: np.ndarray[Any, Any] | None = None,
        *,
        lexical_weight: float = SHIPPED.lexical_weight,
        rrf_k: float = SHIPPED.rrf_k,
        pool: int = 40,
        prior: np.ndarray[Any, Any] | None = None,
        by_section: bool = False,
        floor: float = SHIPPED.hybrid_min_similarity,
        lexical_cut: float = SHIPPED.lexical_min_ratio,
        more_lists: Sequence[tuple[float, list[int]]] = (),
    ) -> list[int]:
        """Fused ranking, as `knowledge.queries` fuses (sides given, or the baseline's).

        `prior`: per chunk, a factor of its fused score (default: the shipped length
        prior). `by_section`: each side ranks sections (a section at its best chunk's
        place, its other chunks left out). `floor` and `lexical_cut`: the shipped
        cosine floor of semantic-only rows and BM25 share of the best row.
        `more_lists`: further ranked lists fused with their weights (their rows are
        kept like lexical ones).
        """
        if prior is None:
            prior = self.shipped_prior
        sims = self.cosine(query) if semantic is None else semantic
        lex = self.bm25.scores(query) if lexical_scores is None else lexical_scores
        lex_order = [int(i) for i in np.argsort(-lex)[:pool]]
        best = lex[lex_order[0]] if lex_order else 0.0
        lexical_rows = [i for i in lex_order if lex[i] > 0 and lex[i] >= lexical_cut * best]
        semantic_rows = [int(i) for i in np.argsort(-sims)[:pool]]
        if by_section:
            semantic_rows, lexical_rows = self._firsts(semantic_rows), self._firsts(lexical_rows)
        fused: dict[int, float] = defaultdict(float)
        for rank, i in enumerate(semantic_rows):
            fused[i] += 1.0 / (rrf_k + rank + 1)
        for rank, i in enumerate(lexical_rows):
            fused[i] += lexical_weight / (rrf_k + rank + 1)
        kept = set(lexical_rows)
        for weight, rows in more_lists:
            for rank, i in enumerate(rows):
                fused[i] += weight / (rrf_k + rank + 1)
            kept.update(rows)
        fused = defaultdict(float, {i: v * prior[i] for i, v in fused.items()})
        return [i for i in sorted(fused, key=lambda i: -fused[i]) if i in kept or sims[i] >= floor]

    def _firsts(self, rows: list[int]) -> list[int]:
        """Each section's first chunk in `rows`, in order."""
        seen: set[int] = set()
        out = []
        for i in rows:
            if self.corpus.sections[i] not in seen:
                seen.add(self.corpus.sections[i])
                out.append(i)
        return out

    def convex(self, query: str, alpha: float, pool: int = 40) -> list[int]:
        """Scores fused, not ranks: ``alpha`` x cosine + (1 - alpha) x BM25 / best BM25, over both pools."""
        sims, lex = self.cosine(query), self.bm25.scores(query)
        rows = {int(i) for i in np.argsort(-sims)[:pool]} | {
            int(i) for i in np.argsort(-lex)[:pool] if lex[i] > 0
        }
        top = max(lex.max(), 1e-9)
        return sorted(rows, key=lambda i: -(alpha * sims[i] + (1 - alpha) * lex[i] / top))

    def diverse(self, ranked: list[int], weight: float, depth: int = 30) -> list[int]:
        """Maximal marginal relevance over the top `depth`: each pick's fused rank score less
        `weight` times its cosine to the closest one picked before it (near-duplicate
        namesakes make room for the rest)."""
        head, tail = ranked[:depth], ranked[depth:]
        relevance = {i: 1.0 / (n + 1) ** 0.5 for n, i in enumerate(head)}
        vectors = self.corpus.vectors
        picked: list[int] = []
        while head:

            def gain(i: int) -> float:
                if not picked:
                    return relevance[i]
                return relevance[i] - weight * float(np.max(vectors[picked] @ vectors[i]))

            best = max(head, key=gain)
            picked.append(best)
            head.remove(best)
        return picked + tail

    def length_prior(self, chars: np.ndarray[Any, Any], full: float, power: float) -> Any:
        """A factor below 1 for texts shorter than `full` characters: ``(chars / full) ** power``."""
        return np.minimum(1.0, chars / full) ** power

    def variants(self) -> dict[str, Ranker]:
        """Each idea tried, by name (the first three are the search modes as shipped)."""
        top = lambda scores: [int(i) for i in np.argsort(-scores)[:100]]  # noqa: E731

        def feedback(query: str) -> list[int]:  # Rocchio: the query moved toward the top 3
            moved = self.query(query) + 0.5 * self.corpus.vectors[self.hybrid(query)[:3]].mean(0)
            return self.hybrid(
                query, semantic=self.corpus.vectors @ (moved / np.linalg.norm(moved))
            )

        def module_prior(query: str) -> list[int]:  # members of the top 3's modules move up
            ranked = self.hybrid(query)
            modules = Counter(self.corpus.modules[i] for i in ranked[:3])
            bonus = {i: modules.get(self.corpus.modules[i], 0) / 3 for i in ranked}
            return sorted(ranked, key=lambda i: ranked.index(i) - 20 * bonus[i])

        bm25_b05 = BM25(self.corpus.searchable, b=0.5)
        return {
            "semantic": lambda q: top(self.cosine(q)),
            "bm25": lambda q: top(self.bm25.scores(q)),
            "hybrid": self.hybrid,
            "hybrid, before (k 60, lexical 1.3, no length prior)": lambda q: self.hybrid(
                q, rrf_k=60, lexical_weight=1.3, prior=np.ones(len(self.chunk_chars))
            ),
            "hybrid, bm25 b=0.5": lambda q: self.hybrid(q, lexical_scores=bm25_b05.scores(q)),
            "hybrid, lexical weight 1.0, k 20": lambda q: self.hybrid(
                q, lexical_weight=1.0, rrf_k=20
            ),
            "hybrid, pseudo-relevance feedback": feedback,
            "hybrid, module prior": module_prior,
            "semantic, best sentence": lambda q: top(self.best_sentence(q)),
            "hybrid, best sentence": lambda q: self.hybrid(q, semantic=self.best_sentence(q)),
            **self.priors(),
            **self.contextual(),
        }

    def contextual(self) -> dict[str, Ranker]:
        """Ideas for a contextual embedder's misses (tune half only, run with ``--embeddings minilm``).

        The floor and the lexical cut swept; WordLlama's cosine ranking fused as a third
        list; each sentence of a many-sentence question ranked on its own and fused in
        (weights shared by its sentences); a chunk scored by its cosine mixed with its
        best sentence's.
        """
        out: dict[str, Ranker] = {}
        for floor in (0.0, 0.25, 0.4):
            out[f"hybrid, floor {floor}"] = lambda q, f=floor: self.hybrid(q, floor=f)
        for cut in (0.0, 0.1, 0.5):
            out[f"hybrid, lexical cut {cut}"] = lambda q, c=cut: self.hybrid(q, lexical_cut=c)
        static = WordLlamaEmbeddings()
        static_vectors: list[np.ndarray[Any, Any]] = []

        def static_rows(query: str) -> list[int]:
            if not static_vectors:
                matrix = static.embed_documents(self.corpus.searchable)
                static_vectors.append(np.array(matrix, dtype=np.float32))
            cosines = static_vectors[0] @ np.array(static.embed_query(query), dtype=np.float32)
            return [int(i) for i in np.argsort(-cosines)[:40]]

        for weight in (0.2, 0.4):
            out[f"hybrid, + wordllama list {weight}"] = lambda q, w=weight: self.hybrid(
                q, more_lists=[(w, static_rows(q))]
            )

        def sentence_lists(query: str, weight: float) -> list[tuple[float, list[int]]]:
            parts = [p for p in _QUESTION_SENTENCE.split(query) if len(p.split()) >= 3]
            if len(parts) < 2:
                return []
            return [
                (weight / len(parts), [int(i) for i in np.argsort(-self.cosine(p))[:40]])
                for p in parts
            ]

        for weight in (0.3, 0.6, 1.0):
            out[f"hybrid, + question sentences {weight}"] = lambda q, w=weight: self.hybrid(
                q, more_lists=sentence_lists(q, w)
            )
        for weight in (0.25, 0.5):
            out[f"hybrid, chunk and best sentence mixed {weight}"] = lambda q, w=weight: (
                self.hybrid(q, semantic=(1 - w) * self.cosine(q) + w * self.best_sentence(q))
            )
        return out

    def priors(self) -> dict[str, Ranker]:
        """Ways to rank a section's answering chunk above its short namesakes (tune half only).

        Fusion constants without a prior, length priors (a chunk's or its section's
        characters) at the shipped fusion, context terms weighted down (BM25F), maximal
        marginal relevance, and scores fused instead of ranks.
        """
        flat = np.ones(len(self.chunk_chars))
        out: dict[str, Ranker] = {}
        for k, weight in itertools.product(
            (5, 10, 20, 40, 60), (0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.3)
        ):
            for by_section in (False, True):
                name = f"hybrid, k {k} lexical {weight}{', by section' if by_section else ''}"
                out[name] = lambda q, k=k, w=weight, b=by_section: self.hybrid(
                    q, rrf_k=k, lexical_weight=w, by_section=b, prior=flat
                )
        for full, power in itertools.product((200, 300, 400, 600, 800), (0.05, 0.1, 0.2, 0.3)):
            for name, chars in (("section", self.section_chars), ("chunk", self.chunk_chars)):
                prior = self.length_prior(chars, full, power)
                out[f"hybrid, {name} length prior {full}^{power}"] = lambda q, p=prior: self.hybrid(
                    q, prior=p
                )
        for weight in (0.0, 0.25, 0.5):
            fielded = BM25(self.corpus.texts, contexts=self.corpus.contexts, context_weight=weight)
            out[f"hybrid, context terms x{weight}"] = lambda q, f=fielded: self.hybrid(
                q, lexical_scores=f.scores(q)
            )
        for weight in (0.1, 0.2, 0.3, 0.5):
            out[f"hybrid, mmr {weight}"] = lambda q, w=weight: self.diverse(self.hybrid(q), w)
        for alpha in (0.3, 0.5, 0.7, 0.8, 0.9):
            out[f"convex {alpha}"] = lambda q, a=alpha: self.convex(q, a)
        return out


def score(
    ranker: Ranker, corpus: Corpus, cases: Sequence[EvalCase], relevant: dict[str, set[int]]
) -> dict[str, float]:
    """hit@1/5/10/30 and MRR of one ranker, over the sections its chunks belong to (each once)."""
    totals = {"hit@1": 0.0, "hit@5": 0.0, "hit@10": 0.0, "hit@30": 0.0, "mrr": 0.0}
    for case in cases:
        wanted = relevant[case.id]
        ranked = list(dict.fromkeys(corpus.sections[i] for i in ranker(case.question)))
        for k in (1, 5, 10, 30):
            totals[f"hit@{k}"] += any(i in wanted for i in ranked[:k])
        first = next((n for n, i in enumerate(ranked[:100]) if i in wanted), None)
        totals["mrr"] += 0.0 if first is None else 1 / (first + 1)
    return {name: value / len(cases) for name, value in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--split", choices=("tune", "test"), default="tune")
    parser.add_argument("--variants", help="comma-separated names (default: all)")
    parser.add_argument("--match", help="only the variants whose name holds this text")
    parser.add_argument("--skip", help="not the variants whose name holds this text")
    parser.add_argument("--embeddings", help="an embedder spec (default: WordLlama)")
    parser.add_argument(
        "--reembed",
        choices=sorted(VARIANTS),
        help="embed the chunks and questions again with this build (minilm-stored: MiniLM "
        "as its package ships it, fp32 compute) instead of the stored vectors",
    )
    args = parser.parse_args()
    kb = KnowledgeBase(embeddings=args.embeddings)
    corpus = load_corpus(kb)
    embeddings = kb.embeddings
    if args.reembed:
        embeddings = VARIANTS[args.reembed]()
        corpus.vectors = np.array(embeddings.embed_documents(corpus.searchable), dtype=np.float32)
    cases = [
        c for c in load_cases(EVAL_SETS["realistic"]).cases if c.split == args.split and c.evidence
    ]
    relevant = relevant_sections(corpus, cases)
    lab = Lab(corpus, embeddings)
    chosen = lab.variants()
    if args.variants:
        chosen = {n: chosen[n] for n in args.variants.split(",")}
    if args.match:
        chosen = {n: r for n, r in chosen.items() if args.match in n}
    if args.skip:
        chosen = {n: r for n, r in chosen.items() if args.skip not in n}
    print(f"realistic/{args.split}: {len(cases)} answerable questions, {len(corpus.texts)} chunks")
    print(f"{'variant':<44} {'hit@1':>6} {'hit@5':>6} {'hit@10':>6} {'hit@30':>6} {'mrr':>6}")
    for name, ranker in chosen.items():
        s = score(ranker, corpus, cases, relevant)
        print(
            f"{name:<44} {s['hit@1']:>6.3f} {s['hit@5']:>6.3f} {s['hit@10']:>6.3f} {s['hit@30']:>6.3f} {s['mrr']:>6.3f}"
        )
    kb.close()


if __name__ == "__main__":
    main()
