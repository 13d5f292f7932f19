"""What keeping a knowledge base in step with its files costs: a 1 % edit against the first ingest.

One large Markdown document (``--sections`` sections of standard-library docstrings,
one per member, about ``--sections`` chunks) is ingested into a fresh schema; then
1 % of its sections are edited (a sentence appended to each), at spread positions,
and the document is ingested again; then a paragraph is added at its top (every
later chunk moves). An unchanged re-ingest (the content hash, nothing parsed) and
an edit of the last section only (nothing moves) bound the cost from below. Each step is repeated ``--rounds`` times on a fresh schema and
the medians are compared with the first ingest's, measured in the same run:

    .venv/bin/python -m bench.lifecycle_bench --sections 2000 --rounds 3

Writes ``bench/results/lifecycle.json``.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from arcana_loop.knowledge import KnowledgeBase, database_url
from bench.report import write_results

SCHEMA = "lifecycle_bench"
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


def sections(count: int) -> list[tuple[str, str]]:
    """Up to `count` (heading, text) pairs: one member's docstring each, distinct."""
    import importlib

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
    return list(found.items())


def document(parts: list[tuple[str, str]], edited: set[int], preface: str = "") -> str:
    lines = ["# Library notes", "", preface]
    for n, (heading, text) in enumerate(parts):
        extra = " This note was revised after review." if n in edited else ""
        lines += [f"## {heading}", "", text + extra, ""]
    return "\n".join(lines)


def fresh_kb(url: str) -> KnowledgeBase:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    kb = KnowledgeBase(url, schema=SCHEMA)
    kb.pool()  # the schema is made here, outside the timings
    return kb


def timed_ingest(kb: KnowledgeBase, path: Path) -> tuple[float, Any]:
    start = time.perf_counter()
    result = kb.ingest(path, collection="notes")
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    url = database_url()
    parts = sections(args.sections)
    step = max(1, len(parts) // max(1, len(parts) // 100))
    edited = set(range(step // 2, len(parts), step))  # 1 %, spread through the document
    last = {len(parts) - 1}
    rows: dict[str, list[float]] = {
        "first ingest": [],
        "unchanged": [],
        "last section edited": [],
        "1 % edited": [],
        "paragraph on top": [],
    }
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "notes.md"
        for _ in range(args.rounds):
            kb = fresh_kb(url)
            try:
                for label, text in (
                    ("first ingest", document(parts, set())),
                    ("unchanged", document(parts, set())),
                    ("last section edited", document(parts, last)),
                    ("1 % edited", document(parts, edited | last)),
                    ("paragraph on top", document(parts, edited, "Read these notes in order.")),
                ):
                    path.write_text(text)
                    seconds, result = timed_ingest(kb, path)
                    rows[label].append(seconds)
                    counts[label] = {
                        k: getattr(result, k)
                        for k in ("chunks_added", "chunks_reused", "chunks_removed")
                    }
            finally:
                kb.close()
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA))
                    )
    base = statistics.median(rows["first ingest"])
    print(f"{len(parts)} sections, {len(edited)} edited, {args.rounds} rounds (medians)\n")
    print(f"{'step':<20} {'seconds':>8} {'vs first':>9} {'added':>6} {'kept':>6} {'removed':>8}")
    result: dict[str, Any] = {"sections": len(parts), "edited": len(edited), "steps": {}}
    for label, times in rows.items():
        median = statistics.median(times)
        c = counts[label]
        print(
            f"{label:<20} {median:>8.3f} {median / base:>8.1%} {c['chunks_added']:>6}"
            f" {c['chunks_reused']:>6} {c['chunks_removed']:>8}"
        )
        result["steps"][label] = {"median_s": median, "ratio": median / base, **c}
    write_results(Path(__file__).parent / "results" / "lifecycle.json", result)


if __name__ == "__main__":
    main()
