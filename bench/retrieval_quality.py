"""Retrieval quality of the ranking variants, side by side in one run.

Ingests the python-docs demo corpus into a fresh schema of the embedded (or
`DATABASE_URL`) server, then scores each variant on the lookup set and on both
halves of the realistic set: evidence (or source) in the top 1/5/10 and MRR, per
mode. Variants differ only in `knowledge.queries.Ranking`, so one ingest serves
them all.

    .venv/bin/python -m bench.retrieval_quality [--variants default,ts_rank] [--json PATH]
        [--embeddings huggingface:<a local sentence-transformers model directory>]
        [--section-chars 0,1000,2000,4000]

`--embeddings` takes any spec `knowledge.embeddings.resolve_embeddings` takes, to
see what another embedder does on the same sets (its package must be installed).
`--section-chars` scores each variant at each whole-section budget (`knowledge.whole`;
0: each hit its chunk alone), with the characters of the top 5 results the controller
would read (`chars@5`, mean per question).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

import psycopg

from arcana_loop.evaluation.cases import EVAL_SETS, load_cases
from arcana_loop.evaluation.retrieval import evaluate_retrieval
from arcana_loop.knowledge import KnowledgeBase, whole
from arcana_loop.knowledge.queries import Ranking
from arcana_loop.knowledge.schema import truncate_all
from arcana_loop.knowledge.server import database_url
from arcana_loop.knowledge.stdlib_docs import COLLECTION, ensure_python_docs

SCHEMA = "kb_bench_quality"
VARIANTS: dict[str, Ranking] = {
    "default": Ranking(),
    "before": Ranking(rrf_k=60, lexical_weight=1.3, short_chunk_power=0),
    "ts_rank": Ranking(lexical="ts_rank"),
    "unweighted": Ranking(semantic_weight=1.0, lexical_weight=1.0, rrf_k=60),
}
"""`default` is what KnowledgeBase() uses; `before` the fusion before whole sections (RRF k 60,
lexical weight 1.3, no length prior); `ts_rank` is the lexical ranking before BM25."""


def _subsets() -> list[tuple[str, Any]]:
    lookup = load_cases(EVAL_SETS["lookup"])
    realistic = load_cases(EVAL_SETS["realistic"])
    return [
        ("lookup", lookup.cases),
        ("realistic/tune", [c for c in realistic.cases if c.split == "tune"]),
        ("realistic/test", [c for c in realistic.cases if c.split == "test"]),
    ]


def _reading(kb: KnowledgeBase, section_chars: int, shown: list[int]) -> Any:
    """`kb.search` at one section budget (0: chunks alone), adding each top-5 text size to `shown`."""

    def search(query: str, **options: Any) -> list[Any]:
        if section_chars:
            options["section_chars"] = section_chars
        hits = kb.search(query, whole_sections=section_chars > 0, **options)
        shown.append(sum(len(h["text"]) for h in hits[:5]))
        return hits

    return search


def measure(
    kb: KnowledgeBase,
    variants: dict[str, Ranking],
    modes: tuple[str, ...],
    budgets: tuple[int, ...] = (whole.DEFAULT_SECTION_CHARS,),
) -> list[dict[str, Any]]:
    """Score every variant, section budget, subset and mode; return one row each."""
    rows = []
    for (name, ranking), budget, (subset, cases) in itertools.product(
        variants.items(), budgets, _subsets()
    ):
        kb.ranking = ranking
        for mode in modes:
            shown: list[int] = []
            search = _reading(kb, budget, shown)
            report = evaluate_retrieval(
                cases, search, collection=COLLECTION, modes=(mode,), k=(1, 5, 10)
            )
            result = report["modes"][mode]
            summary = result["summary"]
            rows.append(
                {
                    "variant": name,
                    "section_chars": budget,
                    "set": subset,
                    "mode": mode,
                    "cases": report["cases"],
                    "hit@1": summary["hit@1"],
                    "hit@5": summary["hit@5"],
                    "hit@10": summary["hit@10"],
                    "all@5": summary["recall@5"],
                    "mrr": summary["mrr"],
                    "chars@5": statistics.fmean(shown),
                    "p50_ms": result["latency_ms"]["p50"],
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated variant names"
    )
    parser.add_argument("--modes", default="semantic,fulltext,hybrid")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--embeddings", help="an embedder spec (default: WordLlama)")
    parser.add_argument(
        "--section-chars",
        default=str(whole.DEFAULT_SECTION_CHARS),
        help="comma-separated whole-section budgets (0: each hit its chunk alone)",
    )
    args = parser.parse_args()
    variants = {n: VARIANTS[n] for n in args.variants.split(",")}
    budgets = tuple(int(b) for b in args.section_chars.split(","))
    url = database_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    kb = KnowledgeBase(url, embeddings=args.embeddings, schema=SCHEMA)
    started = time.perf_counter()
    ensure_python_docs(kb)
    ingest_s = time.perf_counter() - started
    rows = measure(kb, variants, tuple(args.modes.split(",")), budgets)
    print(
        f"python-docs ingested in {ingest_s:.1f} s ({kb.collections()[0].chunks} chunks, {kb.model_name})"
    )
    print(
        f"{'variant':<12} {'sections':>8} {'set':<16} {'mode':<9} {'n':>4} {'hit@1':>6} {'hit@5':>6} {'hit@10':>6} {'all@5':>6} {'mrr':>6} {'chars@5':>7} {'p50 ms':>7}"
    )
    for r in rows:
        print(
            f"{r['variant']:<12} {r['section_chars']:>8} {r['set']:<16} {r['mode']:<9} {r['cases']:>4} {r['hit@1']:>6.3f} {r['hit@5']:>6.3f} {r['hit@10']:>6.3f} {r['all@5']:>6.3f} {r['mrr']:>6.3f} {r['chars@5']:>7.0f} {r['p50_ms']:>7.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    with kb.pool().connection() as conn:
        truncate_all(conn)
    kb.close()


if __name__ == "__main__":
    main()
