"""The embedders side by side in one run: speed, the demo corpus's ingest, query latency, retrieval quality.

    .venv/bin/python -m bench.embedder_bench [--variants wordllama,minilm-stored,minilm]
        [--speed-chunks 1000] [--rounds 3] [--no-quality] [--json PATH]

Variants: ``wordllama``; ``minilm`` (the per-channel int8 model made once per machine,
the default with the onnx extra); ``minilm-stored`` (the graph as the package ships
it: int8 weights cast to float32, fp32 compute).

Speed: each variant embeds the same chunks of the demo corpus (their searchable
text, title and section path first, as ingest embeds them) in alternating rounds;
chunks/s per round, chunks per CPU-second of this process (what load on a shared
machine moves least), and the ratio of each variant to ``minilm-stored`` in the
same round. Query latency: each variant embeds 100 questions of the realistic set one at a
time (median wall and CPU ms). Quality: for each variant, python-docs is ingested into a schema of
its own (timed), then `bench.retrieval_quality.measure` scores the lookup set and
both halves of the realistic set in the hybrid and semantic modes, with each
search's p50.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from langchain_core.embeddings import Embeddings

from arcana_loop.evaluation.cases import EVAL_SETS, load_cases
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.embeddings import embed_matrix, resolve_embeddings
from arcana_loop.knowledge.embeddings_minilm import MiniLMEmbeddings
from arcana_loop.knowledge.queries import Ranking
from arcana_loop.knowledge.sections import context_line, document_title, searchable_text
from arcana_loop.knowledge.server import database_url
from arcana_loop.knowledge.stdlib_docs import ensure_python_docs
from bench.retrieval_quality import measure

VARIANTS: dict[str, Callable[[], Embeddings]] = {
    "wordllama": lambda: resolve_embeddings("wordllama"),
    "minilm-stored": lambda: MiniLMEmbeddings(quantized=False),
    "minilm": lambda: MiniLMEmbeddings(),
}
BASELINE = "minilm-stored"


def _schema(variant: str) -> str:
    return "kb_bench_emb_" + variant.replace("-", "_")


def _fresh(url: str, variant: str) -> KnowledgeBase:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {_schema(variant)} CASCADE")
    return KnowledgeBase(url, embeddings=VARIANTS[variant](), schema=_schema(variant))


def chunk_texts(kb: KnowledgeBase, count: int) -> list[str]:
    """What ingest embedded for the first `count` chunks (by id, so a spread of the corpus)."""
    with kb.pool().connection() as conn:
        rows = conn.execute(
            "SELECT c.text, d.source, d.metadata, coalesce(c.metadata->>'section', '')"
            " FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id ORDER BY c.id LIMIT %s",
            (count,),
        ).fetchall()
    return [
        searchable_text(context_line(document_title(source, meta or {}), section), text)
        for text, source, meta, section in rows
    ]


def speed(variants: list[str], texts: list[str], rounds: int) -> dict[str, Any]:
    """Chunks/s of each variant per round, and each round's ratio to the baseline."""
    models = {name: VARIANTS[name]() for name in variants}
    for model in models.values():
        embed_matrix(model, texts[:8], int(model.dimension))  # type: ignore[attr-defined]
    rates: dict[str, list[float]] = {name: [] for name in variants}
    per_cpu: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, model in models.items():
            started, cpu = time.perf_counter(), time.process_time()
            embed_matrix(model, texts, int(model.dimension))  # type: ignore[attr-defined]
            rates[name].append(len(texts) / (time.perf_counter() - started))
            per_cpu[name].append(len(texts) / (time.process_time() - cpu))
    out: dict[str, Any] = {
        "chunks": len(texts),
        "rounds": rounds,
        "chunks_per_s": rates,
        # what the process itself spent: on a shared machine, wall time also counts others' work
        "chunks_per_cpu_s": per_cpu,
    }
    # a query is embedded alone: its latency, the embedder's share of a search's
    queries = [c.question for c in load_cases(EVAL_SETS["realistic"]).cases[:100]]
    out["query_ms_p50"], out["query_cpu_ms_p50"] = {}, {}
    for name, model in models.items():
        walls, cpus = [], []
        for query in queries:
            started, cpu = time.perf_counter(), time.process_time()
            model.embed_query(query)
            walls.append(1000 * (time.perf_counter() - started))
            cpus.append(1000 * (time.process_time() - cpu))
        out["query_ms_p50"][name] = statistics.median(walls)
        out["query_cpu_ms_p50"][name] = statistics.median(cpus)
    if BASELINE in rates:
        out["ratio_to_" + BASELINE] = {
            name: [r / b for r, b in zip(rs, rates[BASELINE], strict=True)]
            for name, rs in rates.items()
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--speed-chunks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    variants = args.variants.split(",")
    url = database_url()
    results: dict[str, Any] = {"variants": variants, "ingest_s": {}, "quality": []}
    corpus = _fresh(url, "wordllama")
    started = time.perf_counter()
    ensure_python_docs(corpus)
    results["ingest_s"]["wordllama"] = time.perf_counter() - started
    results["speed"] = speed(variants, chunk_texts(corpus, args.speed_chunks), args.rounds)
    print(json.dumps(results["speed"], indent=1))
    for variant in variants if not args.no_quality else []:
        kb = corpus if variant == "wordllama" else _fresh(url, variant)
        if kb is not corpus:
            started = time.perf_counter()
            ensure_python_docs(kb)
            results["ingest_s"][variant] = time.perf_counter() - started
        for row in measure(kb, {"default": Ranking()}, ("hybrid", "semantic")):
            results["quality"].append({"embedder": variant, **row})
        print(f"{variant}: ingest {results['ingest_s'][variant]:.0f} s")
    for row in results["quality"]:
        print(
            f"{row['embedder']:<14} {row['set']:<16} {row['mode']:<9} hit@1 {row['hit@1']:.3f}"
            f" hit@5 {row['hit@5']:.3f} hit@10 {row['hit@10']:.3f} mrr {row['mrr']:.3f}"
            f" p50 {row['p50_ms']:.1f} ms"
        )
    speeds = results["speed"]["chunks_per_s"]
    print({k: round(statistics.median(v), 1) for k, v in speeds.items()})
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
