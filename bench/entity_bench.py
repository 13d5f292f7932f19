"""Knowledge-graph benchmark on the demo corpus: build time, search latency, retrieval quality.

Run: `python -m bench.entity_bench` (the embedded server, or `DATABASE_URL`). It
ingests the demo corpus (`knowledge.stdlib_docs`, collection `python-docs`) into
its own schema `entity_bench`, then measures:

* entity build time per 1,000 chunks with the offline extractor (extraction alone,
  and extraction + entity embedding + writing + communities);
* search latency (hybrid, limit 5) with and without entities, p50/p95 over the
  labelled questions repeated `--rounds` times;
* recall@5 and MRR with and without entities on `evaluation/data/python_docs_eval.json`,
  per question kind (single, multi), for a few entity search settings.

Results go to `bench/results/entities.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from arcana_loop.evaluation.cases import PYTHON_DOCS_EVAL, load_cases
from arcana_loop.evaluation.metrics import quantile
from arcana_loop.evaluation.retrieval import evaluate_retrieval
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.entities import EntitySearchOptions, OfflineExtractor
from arcana_loop.knowledge.entities.store import pending_chunks
from arcana_loop.knowledge.stdlib_docs import COLLECTION, ensure_python_docs

RESULTS = Path(__file__).parent / "results" / "entities.json"
SCHEMA = "entity_bench"
SETTINGS: dict[str, EntitySearchOptions] = {
    "default": EntitySearchOptions(),
    "depth0": EntitySearchOptions(depth=0),
    "depth2": EntitySearchOptions(depth=2),
    "threshold0.5": EntitySearchOptions(entity_threshold=0.5),
    "threshold0.7": EntitySearchOptions(entity_threshold=0.7),
    "weight0.5": EntitySearchOptions(entity_weight=0.5),
}


def _ms(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    return {
        "p50": quantile(ordered, 0.5),
        "p95": quantile(ordered, 0.95),
        "mean": statistics.fmean(ordered),
    }


def build_times(kb: KnowledgeBase) -> dict[str, Any]:
    coll = kb._collection(COLLECTION, create=False)
    with kb.pool().connection() as conn:
        chunks = pending_chunks(conn, coll.id, rebuild=True)
    started = time.perf_counter()
    OfflineExtractor().extract(chunks)
    extract_s = time.perf_counter() - started
    started = time.perf_counter()
    result = kb.build_entities(COLLECTION, rebuild=True)
    build_s = time.perf_counter() - started
    per_k = 1000 / len(chunks)
    return {
        "chunks": len(chunks),
        "extract_seconds": round(extract_s, 3),
        "build_seconds": round(build_s, 3),
        "extract_seconds_per_1000_chunks": round(extract_s * per_k, 3),
        "build_seconds_per_1000_chunks": round(build_s * per_k, 3),
        "entities": result.entities,
        "relationships": result.relationships,
        "mentions": result.mentions,
        "communities": result.communities,
    }


def latency(kb: KnowledgeBase, questions: list[str], rounds: int) -> dict[str, Any]:
    out = {}
    for label, entities in (("without_entities", False), ("with_entities", None)):
        for q in questions[:5]:  # warm caches and plans
            kb.search(q, collection=COLLECTION, entities=entities)
        times = []
        for _ in range(rounds):
            for q in questions:
                started = time.perf_counter()
                kb.search(q, collection=COLLECTION, entities=entities)
                times.append((time.perf_counter() - started) * 1000)
        out[label] = {k: None if v is None else round(v, 2) for k, v in _ms(times).items()}
    return out


def _by_kind(report: dict[str, Any], mode: str) -> dict[str, dict[str, float]]:
    rows = report["modes"][mode]["per_case"]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row)
        kinds.setdefault("all", []).append(row)
    return {
        kind: {
            "n": len(group),
            "recall@5": round(statistics.fmean(r["recall@5"] for r in group), 4),
            "mrr": round(statistics.fmean(r["mrr"] for r in group), 4),
        }
        for kind, group in kinds.items()
    }


def quality(kb: KnowledgeBase, modes: tuple[str, ...]) -> dict[str, Any]:
    cases = load_cases(PYTHON_DOCS_EVAL)

    def searcher(entities: bool | None) -> Callable[..., Any]:
        return lambda query, **kw: kb.search(query, entities=entities, **kw)

    out: dict[str, Any] = {
        "without_entities": {},
        "settings": {k: asdict(v) for k, v in SETTINGS.items()},
    }
    plain = evaluate_retrieval(cases, searcher(False), collection=COLLECTION, modes=modes, k=(5,))
    for mode in modes:
        out["without_entities"][mode] = _by_kind(plain, mode)
    saved = kb.entity_options
    for name, opts in SETTINGS.items():
        kb.entity_options = opts
        report = evaluate_retrieval(
            cases, searcher(None), collection=COLLECTION, modes=modes, k=(5,)
        )
        out[name] = {mode: _by_kind(report, mode) for mode in modes}
    kb.entity_options = replace(saved)
    return out


def entity_use(kb: KnowledgeBase, questions: list[str]) -> dict[str, Any]:
    """How often a question matched entities, and how many results the entities contributed."""
    matched = contributed = 0
    for q in questions:
        hits = kb.search(q, collection=COLLECTION)
        if hits and "matched_entities" in hits[0]["metadata"]:
            matched += 1
            contributed += sum(1 for h in hits if h["metadata"]["found_by"] == ["entities"])
    return {
        "questions": len(questions),
        "matched_entities": matched,
        "entity_only_results": contributed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["hybrid", "semantic", "fulltext"])
    args = parser.parse_args()
    kb = KnowledgeBase(embeddings="wordllama", schema=SCHEMA)
    started = time.perf_counter()
    ensure_python_docs(kb)
    ingest_s = time.perf_counter() - started
    questions = [c.question for c in load_cases(PYTHON_DOCS_EVAL).cases]
    results: dict[str, Any] = {"ingest_seconds": round(ingest_s, 2)}
    results["build"] = build_times(kb)
    print(json.dumps(results["build"], indent=2))
    results["latency_ms"] = latency(kb, questions, args.rounds)
    print(json.dumps(results["latency_ms"], indent=2))
    results["entity_use"] = entity_use(kb, questions)
    print(json.dumps(results["entity_use"], indent=2))
    results["quality"] = quality(kb, tuple(args.modes))
    print(json.dumps({k: v for k, v in results["quality"].items() if k != "settings"}, indent=2))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    kb.close()


if __name__ == "__main__":
    main()
