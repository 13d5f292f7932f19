"""Knowledge-base benchmark: ingest rate, search latency and HNSW recall at several sizes.

Run: `python -m bench.kb_bench --sizes 10000 100000`. The corpus is stdlib
docstrings cut into ~460-character chunks, repeated with small perturbations to
reach each size, written as files and ingested through `KnowledgeBase.ingest`
(90 % into `main`, 10 % into `small`, the filtered case). Results go to
`bench/results/kb.json`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from langchain_text_splitters import RecursiveCharacterTextSplitter
from psycopg import sql

import knowledge.writer as writer
from knowledge import KnowledgeBase, database_url, default_embeddings
from knowledge.queries import exact_settings_statement
from knowledge.schema import embeddings_table

MODULES = (
    "abc aifc array ast asyncio.base_events asyncio.events asyncio.streams asyncio.tasks "
    "binascii bz2 cmd code codecs colorsys compileall concurrent.futures contextvars "
    "ctypes curses dbm dis doctest email.message email.utils ensurepip filecmp fileinput "
    "fnmatch ftplib getopt getpass graphlib http.cookies imghdr importlib importlib.metadata "
    "keyword linecache locale lzma math mmap netrc nntplib pdb poplib profile pstats pty "
    "pydoc quopri reprlib rlcompleter runpy site stat symtable sysconfig tabnanny telnetlib "
    "token trace tty turtle unicodedata uu venv wave webbrowser wsgiref.simple_server "
    "xml.sax xmlrpc.client zipapp zipimport zlib "
    "argparse asyncio base64 bisect calendar collections configparser contextlib copy csv "
    "dataclasses datetime decimal difflib email enum fractions functools gettext glob gzip "
    "hashlib heapq hmac html http.client http.server imaplib inspect io ipaddress itertools "
    "json logging mailbox mimetypes multiprocessing numbers operator optparse os pathlib "
    "pickle pkgutil platform plistlib pprint queue random re sched secrets selectors shelve "
    "shlex shutil signal smtplib socket socketserver sqlite3 ssl statistics string struct "
    "subprocess tarfile tempfile textwrap threading timeit tkinter tokenize traceback types "
    "typing unittest urllib.parse urllib.request uuid warnings weakref xml.dom.minidom "
    "xml.etree.ElementTree zipfile zoneinfo"
).split()
CHUNK = 460
DOC_CHUNKS = 20
QUERIES = 200
WARMUP_QUERIES = 40
"""Queries run through every mode before timing (caches, prepared statements)."""
EXACT_WARMUP = 10
_VARIANT_ORDER = [
    f"{name}{label}"
    for name in ("semantic", "fulltext", "hybrid", "semantic_hnsw", "semantic_exact")
    for label in ("", "_filtered")
]
RESULTS = Path(__file__).parent / "results" / "kb.json"


def _docstrings(mod: Any, name: str) -> list[str]:
    docs = [inspect.getdoc(mod) or ""]
    for _, obj in inspect.getmembers(mod):
        if getattr(obj, "__module__", None) != name:
            continue
        docs.append(inspect.getdoc(obj) or "")
        if inspect.isclass(obj):
            docs.extend(inspect.getdoc(m) or "" for _, m in vars(obj).items() if callable(m))
    return [d for d in docs if len(d) > 40]


def stdlib_chunks() -> list[str]:
    """Return distinct ~460-character chunks of stdlib docstrings, one text per module."""
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK, chunk_overlap=0)
    chunks: list[str] = []
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        text = "\n\n".join(dict.fromkeys(_docstrings(mod, name)))
        chunks.extend(c for c in splitter.split_text(text) if len(c) > 100)
    return list(dict.fromkeys(chunks))


def perturb(text: str, other: str, rng: random.Random, round_no: int) -> str:
    """Return a variant: this chunk's first half, another's second half, a few words dropped."""
    head, tail = text.split(" "), other.split(" ")
    words = head[: len(head) // 2] + tail[len(tail) // 2 :]
    for _ in range(max(1, len(words) // 25)):
        words.pop(rng.randrange(len(words)))
    return f"{' '.join(words)} (revision {round_no})"


def corpus(size: int, seed: int = 7) -> list[str]:
    """Return `size` chunk texts: the stdlib chunks, then perturbed recombinations."""
    base = stdlib_chunks()
    rng = random.Random(seed)
    out = list(base[:size])
    round_no = 1
    while len(out) < size:
        out.extend(perturb(c, rng.choice(base), rng, round_no) for c in base[: size - len(out)])
        round_no += 1
    rng.shuffle(out)
    return out


def write_files(chunks: list[str], root: Path) -> None:
    """Write chunks as documents of DOC_CHUNKS paragraphs each."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(chunks), DOC_CHUNKS):
        (root / f"doc{i // DOC_CHUNKS:06d}.txt").write_text("\n\n".join(chunks[i : i + DOC_CHUNKS]))


def questions(chunks: list[str], rng: random.Random) -> list[str]:
    """Question-like queries: the first dozen words of random chunks."""
    picks = rng.sample(chunks, QUERIES)
    return [" ".join(c.split()[:12]) for c in picks]


def is_source(text: str, query: str) -> bool:
    """Tell whether `text` is the chunk `query` was cut from (its first dozen words)."""
    return " ".join(text.split()[:12]) == query


def pct(values: list[float], q: float) -> float:
    """Return the q-th percentile in milliseconds."""
    return float(np.percentile(values, q) * 1000)


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def recall(got: list[list[str]], want: list[list[str]]) -> float:
    return statistics.mean(
        len(set(g) & set(w)) / max(1, len(w)) for g, w in zip(got, want, strict=True)
    )


class Bench:
    """One size's run."""

    def __init__(self, url: str, size: int) -> None:
        self.size = size
        self.schema = f"kb_bench_{size}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )
        self.kb = KnowledgeBase(url, schema=self.schema)
        self.out: dict[str, Any] = {"size": size}

    def ingest(self, chunks: list[str]) -> None:
        emb = default_embeddings()
        sample = chunks[: min(len(chunks), 20000)]
        emb.embed_array(sample[:1000])  # warm-up: first calls pay for lazy setup
        _, t_embed = timed(emb.embed_array, sample)
        self.out["embed_rate"] = len(sample) / t_embed
        index_time = [0.0]
        real_hnsw, real_gin = writer.create_hnsw_index, writer.create_fulltext_index

        def timed_hnsw(conn: Any, dim: int) -> None:
            _, t = timed(real_hnsw, conn, dim)
            index_time[0] += t

        def timed_gin(conn: Any) -> None:
            _, t = timed(real_gin, conn)
            index_time[0] += t

        # index builds after a bulk load (HNSW, and GIN when dropped) count as index time
        writer.create_hnsw_index = timed_hnsw  # type: ignore[assignment]
        writer.create_fulltext_index = timed_gin  # type: ignore[assignment]
        cut = len(chunks) // 10
        with tempfile.TemporaryDirectory() as tmp:
            write_files(chunks[cut:], Path(tmp) / "main")
            write_files(chunks[:cut], Path(tmp) / "small")
            self.kb.pool()  # schema creation is not ingest
            r1, t1 = timed(
                self.kb.ingest, Path(tmp) / "main", collection="main", chunk_size=CHUNK, chunk_overlap=0
            )
            index1 = index_time[0]
            r2, t2 = timed(
                self.kb.ingest, Path(tmp) / "small", collection="small", chunk_size=CHUNK, chunk_overlap=0
            )
        writer.create_hnsw_index, writer.create_fulltext_index = real_hnsw, real_gin  # type: ignore[assignment]
        n = r1.chunks_added + r2.chunks_added
        total = t1 + t2
        self.out.update(
            chunks=n,
            ingest_s=total,
            ingest_rate=n / total,
            index_build_s=index_time[0],
            ingest_rate_excl_index=n / (total - index_time[0]),
            # the first load fills an empty table (HNSW built once at the end); the
            # second adds 10 % to an indexed table (live HNSW inserts)
            ingest_bulk_rate=r1.chunks_added / t1,
            ingest_bulk_rate_excl_index=r1.chunks_added / (t1 - index1),
            ingest_incremental_rate=r2.chunks_added / t2,
        )
        with self.kb.pool().connection() as conn:
            conn.execute("ANALYZE")

    def search_latency(self, queries: list[str]) -> None:
        """Time every mode per query, interleaved in a shuffled order, after a warm-up pass.

        Interleaving makes load from elsewhere hit every mode alike; shuffling keeps
        any mode from always following the same one. The forced exact scan runs in
        a pass of its own: its two parallel workers slowed whatever came next.
        """
        hnsw = KnowledgeBase(self.kb.url, schema=self.schema, exact_max_rows=0)
        exact = KnowledgeBase(self.kb.url, schema=self.schema, exact_max_rows=10**9)
        variants: list[tuple[str, KnowledgeBase, str]] = [
            (mode, self.kb, mode) for mode in ("semantic", "fulltext", "hybrid")
        ] + [("semantic_hnsw", hnsw, "semantic")]
        scopes = (("", None), ("_filtered", "small"))
        runs = [(v, scope) for v in variants for scope in scopes]
        rng = random.Random(5)
        times: dict[str, list[float]] = {}
        hits: dict[str, list[bool]] = {}
        try:
            for q in queries[:WARMUP_QUERIES]:
                for (_, kb, mode), (_, coll) in runs:
                    kb.search(q, mode=mode, collection=coll)
            for q in queries:
                for (name, kb, mode), (label, coll) in rng.sample(runs, len(runs)):
                    found, t = timed(kb.search, q, mode=mode, collection=coll)
                    times.setdefault(f"{name}{label}", []).append(t)
                    if not label:
                        hits.setdefault(name, []).append(any(is_source(h["text"], q) for h in found))
            for q in queries:
                for label, coll in scopes:
                    found, t = timed(exact.search, q, mode="semantic", collection=coll)
                    times.setdefault(f"semantic_exact{label}", []).append(t)
        finally:
            hnsw.close()
            exact.close()
        for key in sorted(times, key=_VARIANT_ORDER.index):  # a stable layout in kb.json
            self.out[f"{key}_p50_ms"] = pct(times[key], 50)
            self.out[f"{key}_p95_ms"] = pct(times[key], 95)
        for name in sorted(hits, key=_VARIANT_ORDER.index):
            self.out[f"{name}_source_hit5"] = statistics.mean(hits[name])

    def recall(self, queries: list[str]) -> None:
        emb = default_embeddings()
        qv = emb.embed_array(queries)
        table = embeddings_table(256)
        with self.kb.pool().connection() as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT e.chunk_id, e.embedding, k.name FROM {t} e"
                    " JOIN kb_collections k ON k.id = e.collection_id"
                ).format(t=table)
            ).fetchall()
        ids = np.array([r[0] for r in rows])
        matrix = np.stack([np.asarray(r[1], dtype=np.float32) for r in rows])
        small = np.array([r[2] == "small" for r in rows])
        for label, mask, coll in (("", None, None), ("_filtered", small, "small")):
            m = matrix if mask is None else matrix[mask]
            mid = ids if mask is None else ids[mask]
            brute, exact, t_np, t_exact = self._exact_and_numpy(qv, m, mid, coll)
            saved = self.kb.exact_max_rows
            self.kb.exact_max_rows = 0
            hnsw = [
                [h["id"] for h in self.kb.search(q, mode="semantic", collection=coll)]
                for q in queries
            ]
            self.kb.exact_max_rows = saved
            default = [
                [h["id"] for h in self.kb.search(q, mode="semantic", collection=coll)]
                for q in queries
            ]
            self.out[f"numpy{label}_p50_ms"] = pct(t_np, 50)
            self.out[f"exact_sql{label}_p50_ms"] = pct(t_exact, 50)
            self.out[f"recall_hnsw_vs_exact{label}"] = recall(hnsw, exact)
            self.out[f"recall_hnsw_vs_numpy{label}"] = recall(hnsw, brute)
            self.out[f"recall_default_vs_exact{label}"] = recall(default, exact)
            self.out[f"recall_exact_vs_numpy{label}"] = recall(exact, brute)

    def _exact_and_numpy(
        self,
        qv: np.ndarray[Any, Any],
        m: np.ndarray[Any, Any],
        mid: np.ndarray[Any, Any],
        coll: str | None,
    ) -> tuple[list[list[str]], list[list[str]], list[float], list[float]]:
        """Top 5 by numpy brute force and by the exact SQL scan, timed query by query in turn."""
        # the knowledge base's exact scan: its ordering and its transaction-local settings
        stmt = sql.SQL(
            "SELECT e.chunk_id, 1 - (e.embedding <=> %(q)s) AS sim"
            " FROM {t} e JOIN kb_collections k ON k.id = e.collection_id"
            " WHERE (%(c)s::text IS NULL OR k.name = %(c)s)"
            " ORDER BY sim DESC LIMIT 5"
        ).format(t=embeddings_table(256))
        brute: list[list[str]] = []
        exact: list[list[str]] = []
        t_np: list[float] = []
        t_exact: list[float] = []
        with self.kb.pool().connection() as conn:
            for i, v in enumerate(qv):
                start = time.perf_counter()
                top = np.argpartition(-(m @ v), 5)[:5]
                elapsed = time.perf_counter() - start
                start = time.perf_counter()
                with conn.transaction():
                    conn.execute(*exact_settings_statement())
                    rows = conn.execute(stmt, {"c": coll, "q": v}).fetchall()
                t = time.perf_counter() - start
                if i >= EXACT_WARMUP:  # the first scans warm the caches
                    t_np.append(elapsed)
                    t_exact.append(t)
                brute.append(list(mid[top]))
                exact.append([r[0] for r in rows])
        return brute, exact, t_np, t_exact

    def verdicts(self) -> dict[str, bool | None]:
        o = self.out
        big = o["size"] >= 100_000
        return {
            "ingest >= 0.8x embedder": o["ingest_rate"] >= 0.8 * o["embed_rate"],
            "ingest (excl. index build) >= 0.8x embedder": o["ingest_rate_excl_index"]
            >= 0.8 * o["embed_rate"],
            "bulk ingest (excl. index build) >= 0.8x embedder": o["ingest_bulk_rate_excl_index"]
            >= 0.8 * o["embed_rate"],
            "semantic p50 <= 10 ms": o["semantic_p50_ms"] <= 10 if big else None,
            "semantic p50 <= 10 ms (10% filter)": o["semantic_filtered_p50_ms"] <= 10
            if big
            else None,
            "recall@5 >= 0.95 (default path)": o["recall_default_vs_exact"] >= 0.95,
            "recall@5 >= 0.95 (default path, 10% filter)": o["recall_default_vs_exact_filtered"]
            >= 0.95,
            "recall@5 >= 0.95 (HNSW forced)": o["recall_hnsw_vs_exact"] >= 0.95,
            "hybrid p50 <= 2x semantic": o["hybrid_p50_ms"] <= 2 * o["semantic_p50_ms"],
            "exact scan <= 2x numpy": o["exact_sql_p50_ms"] <= 2 * o["numpy_p50_ms"],
        }

    def close(self, keep: bool) -> None:
        url = self.kb.url
        self.kb.close()
        if not keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
                )


def run(size: int, url: str | None, keep: bool) -> dict[str, Any]:
    chunks = corpus(size)
    bench = Bench(url or database_url(), size)
    try:
        bench.ingest(chunks)
        qs = questions(chunks, random.Random(11))
        bench.search_latency(qs)
        bench.recall(qs)
        bench.out["targets"] = bench.verdicts()
        return bench.out
    finally:
        bench.close(keep)


def print_table(results: list[dict[str, Any]]) -> None:
    keys = [k for k in results[0] if k != "targets"]
    print(f"{'metric':42}" + "".join(f"{r['size']:>14}" for r in results))
    for k in keys:
        cells = "".join(
            f"{r[k]:>14.2f}" if isinstance(r[k], float) else f"{r[k]:>14}" for r in results
        )
        print(f"{k:42}{cells}")
    print()
    for r in results:
        for name, ok in r["targets"].items():
            verdict = "n/a (size < 100k)" if ok is None else ("PASS" if ok else "FAIL")
            print(f"[{r['size']}] {name:48} {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument(
        "--url", default=None, help="PostgreSQL URL (default: DATABASE_URL or embedded)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench schemas")
    args = parser.parse_args()
    results = [run(size, args.url, args.keep) for size in args.sizes]
    print_table(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
