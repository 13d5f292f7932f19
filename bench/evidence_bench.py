"""What pinning an answer to its evidence costs: bytes per answer, and the lookups' time.

Run: `python -m bench.evidence_bench [--questions 12]`. The repository's own documentation
(README, guide, folder READMEs) is ingested with WordLlama into a collection of the
bench's own schema; each question is asked by the offline controller with the local
grounder on an in-memory checkpointer, each on its own thread, as `arcana-loop ask`
does. Per answer: the pins (`LoopResult.evidence`) as JSON, what the checkpointer stores
for them (the ``evidence`` channel's blob and the finish step's write), the thread's
whole stored bytes for scale, and the time of the finish step's version lookup. Then
`stale_answers` over all the threads, timed. Results go to `bench/results/evidence.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from bench.checkpoint_bench import stored_bytes
from bench.lifecycle_bench import drop_schema

RESULTS = Path(__file__).parent / "results" / "evidence.json"
SCHEMA = "bench_evidence"
ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    "README.md",
    "docs/guide.md",
    "knowledge/README.md",
    "bench/README.md",
    "evaluation/README.md",
]
QUESTIONS = [
    "How do I resume a run whose process was killed?",
    "What does a sync remove from a collection?",
    "How is a chunk's id computed?",
    "Which checkpointers can a run use?",
    "How does the duplicate guard decide that a query repeats?",
    "What does the offline controller answer with?",
    "How are search results returned as whole sections?",
    "What does the local grounder compare?",
    "How do I serve the graph with langgraph dev?",
    "What does the budget ledger show the controller?",
    "How are metadata filters written?",
    "Which embedder does a new collection use?",
]


def pins_stored(saver: InMemorySaver, thread_id: str) -> int:
    """Bytes the saver keeps for the thread's ``evidence`` channel: its blobs and the writes to it."""
    blobs = sum(
        len(blob)
        for key, (_, blob) in saver.blobs.items()
        if key[0] == thread_id and key[2] == "evidence"
    )
    writes = sum(
        len(value[1])
        for key, stored in saver.writes.items()
        if key[0] == thread_id
        for _, channel, value, _ in stored.values()
        if channel == "evidence"
    )
    return blobs + writes


def measure(questions: list[str]) -> dict[str, Any]:
    from arcana_loop.graph import run, stale_answers
    from arcana_loop.knowledge import KnowledgeBase, database_url

    url = database_url()
    drop_schema(url, SCHEMA)
    kb = KnowledgeBase(url, "wordllama", schema=SCHEMA)
    try:
        for document in DOCUMENTS:
            kb.ingest(str(ROOT / document), collection="docs")
        saver = InMemorySaver()
        rows, lookups = [], []
        for question in questions:
            result = run(
                question,
                controller_llm="offline",
                search_fn=kb.search,
                grounder="local",
                checkpointer=saver,
                collection="docs",
            )
            assert result.thread_id is not None
            pins = result.evidence
            started = time.perf_counter()  # the lookup the finish step made for these pins
            kb.chunk_versions(
                [i for p in pins for i in (p["chunk_id"], *p["section_chunks"])],
                [str(p["document_id"]) for p in pins],
            )
            lookups.append(time.perf_counter() - started)
            rows.append(
                {
                    "question": question,
                    "pins": len(pins),
                    "cited": sum(p["cited"] for p in pins),
                    "evidence_json_bytes": len(json.dumps(pins).encode()),
                    "evidence_stored_bytes": pins_stored(saver, result.thread_id),
                    "thread_stored_bytes": stored_bytes(saver, result.thread_id),
                    "result_json_bytes": len(json.dumps(result.to_dict(), default=str).encode()),
                }
            )
        pinned = [r for r in rows if r["pins"]]
        started = time.perf_counter()
        stale = stale_answers(saver, knowledge_base=kb)
        stale_seconds = time.perf_counter() - started
    finally:
        kb.close()
        drop_schema(url, SCHEMA)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in pinned)

    return {
        "questions": len(rows),
        "answers_with_pins": len(pinned),
        "median_pins": median("pins"),
        "median_evidence_json_bytes": median("evidence_json_bytes"),
        "max_evidence_json_bytes": max(r["evidence_json_bytes"] for r in pinned),
        "median_evidence_stored_bytes": median("evidence_stored_bytes"),
        "median_thread_stored_bytes": median("thread_stored_bytes"),
        "median_result_json_bytes": median("result_json_bytes"),
        "median_lookup_ms": round(statistics.median(lookups) * 1000, 2),
        "stale_answers_ms": round(stale_seconds * 1000, 1),
        "stale_found": len(stale),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    args = parser.parse_args(argv)
    found = measure(QUESTIONS[: args.questions])
    RESULTS.write_text(json.dumps(found, indent=2) + "\n")
    summary = {k: v for k, v in found.items() if k != "rows"}
    print(json.dumps(summary, indent=2))  # a benchmark reports on stdout
    return found


if __name__ == "__main__":
    main()
