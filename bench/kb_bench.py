"""Knowledge-base benchmark: ingest rate, search latency and HNSW recall at several sizes.

Run: `python -m bench.kb_bench --python-docs --sizes 100000`. Corpora:

* ``distinct`` (default): `bench.corpus`, distinct ~500-character chunks of real
  text (docstrings of the standard library and the installed packages, plain-text
  docs under /usr/share/doc), cut to each size;
* ``perturbed``: stdlib docstrings cut into ~460-character chunks and repeated
  with small perturbations to reach each size (near-duplicates; the corpus of
  earlier measurements);
* ``--python-docs`` adds a run on the demo corpus (`knowledge.stdlib_docs`, ~1k
  chunks at the default chunking).

Documents are files ingested through `KnowledgeBase.ingest` (about 90 % into
`main`, 10 % into `small`, the filtered case) in a fresh schema. Queries: a
sentence of each of `QUERIES` random chunks, lightly reworded, plus the questions
of the realistic evaluation set. Results go to `bench/results/kb.json`.

``--growth`` measures instead loads into a collection that already has its index
(`growth`): a first load of each size, then 10 % more, then as many again as it
holds, each against the embedder alone on its own chunks, its index work timed
apart, with searches during the doubling load checked against an exact scan.
Results go to `bench/results/kb_growth.json`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import random
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from langchain_text_splitters import RecursiveCharacterTextSplitter
from psycopg import sql

import arcana_loop.knowledge.writer as writer
from arcana_loop.evaluation.cases import EVAL_SETS, load_cases
from arcana_loop.knowledge import KnowledgeBase, database_url, default_embeddings, schema
from arcana_loop.knowledge.errors import IngestError
from arcana_loop.knowledge.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    read_file,
    split_document,
)
from arcana_loop.knowledge.queries import DEFAULT_EF_SEARCH, exact_settings_statement
from arcana_loop.knowledge.schema import embeddings_table
from arcana_loop.knowledge.stdlib_docs import stdlib_documents
from bench import corpus as distinct

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
"""Queries cut from the corpus itself; the realistic evaluation questions come on top."""
QUERY_WORDS = 16
WARMUP_QUERIES = 40
"""Queries run through every mode before timing (caches, prepared statements)."""
EXACT_WARMUP = 10
EMBED_BATCH = writer.DEFAULT_BATCH_SIZE
EMBED_MIN_CHUNKS = 10_000
INDEXED_WRITE_CHUNKS = 5000
"""Chunks written into the indexed main collection after both loads (pending beside its graph)."""
CORPORA = ("distinct", "perturbed")
_VARIANT_ORDER = [
    f"{name}{label}"
    for name in ("semantic", "fulltext", "hybrid", "semantic_hnsw", "semantic_exact")
    for label in ("", "_filtered", "_where")
]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PUNCTUATION = re.compile(r"[^\w\s.-]+|(?<!\w)[.-]+|[.-]+(?!\w)")
_ARTICLES = frozenset({"the", "a", "an"})
RESULTS = Path(__file__).parent / "results" / "kb.json"
GROWTH_RESULTS = Path(__file__).parent / "results" / "kb_growth.json"
GROWTH_STAGES = (("base", 1.0), ("grow10", 0.1), ("double", 1.0))
"""The growth case's loads: a share of what the collection holds before each (the first, of the size)."""
GROWTH_EMBED_SAMPLE = 30_000
"""Chunks of each load the embedder alone is timed on (a random sample: its rate, not its total)."""
GROWTH_QUERIES = 100
SEARCH_PAUSE_S = 0.25
"""Between the search pairs run during a load: a light reader, not a second load."""


@dataclass(frozen=True)
class Workload:
    """What one run ingests: two folders of files and the chunking they are ingested with."""

    label: str
    size: int
    """Chunks asked for (0: the whole corpus); the 100k targets apply from 100,000."""
    main: Path
    small: Path
    chunk_size: int
    chunk_overlap: int

    def chunks(self) -> list[str]:
        """The chunk texts the ingest will store (as the ingest cuts them), in file order."""
        return [row.text for row in self.rows()]

    def rows(self) -> list[Any]:
        """The ingest's own chunk rows of every file (texts and the context they are embedded with)."""
        rows: list[Any] = []
        for folder, collection in ((self.main, "main"), (self.small, "small")):
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    try:
                        doc = read_file(path, max_bytes=10 * 2**20, metadata={})
                    except IngestError:  # the ingest's walk skips it too
                        continue
                    rows.extend(
                        split_document(
                            doc,
                            collection=collection,
                            chunk_size=self.chunk_size,
                            chunk_overlap=self.chunk_overlap,
                        )
                    )
        return rows


@dataclass(frozen=True)
class Query:
    """A search query; `needle` is the text its source chunk holds (None: not cut from the corpus)."""

    text: str
    needle: str | None = None


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


def perturbed_workload(size: int, tmp: Path) -> Workload:
    """The earlier corpus: perturbed stdlib chunks, 10 % of them into `small`."""
    chunks = corpus(size)
    cut = len(chunks) // 10
    write_files(chunks[cut:], tmp / "main")
    write_files(chunks[:cut], tmp / "small")
    return Workload(f"perturbed:{size}", size, tmp / "main", tmp / "small", CHUNK, 0)


def indexed_write_files(source: Path, target: Path, chunks: int) -> Path:
    """Copy files of `source`, in sorted order, into `target` until they hold about `chunks` chunks."""
    copied = 0
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        if copied >= chunks:
            break
        text = path.read_text(encoding="utf-8")
        (target / f"more-{path.name}").write_text(text, encoding="utf-8")
        copied += len(text.strip().split("\n\n"))
    return target


def distinct_workload(size: int, summaries: list[Path] | None = None) -> Workload:
    """The distinct corpus of `size` chunks (built once, then cached), with package summaries if given."""
    root = distinct.build(size, summaries=summaries or [])
    return Workload(
        f"distinct:{size}", size, root / "main", root / "small", distinct.CHUNK_CHARS, 0
    )


def python_docs_workload(tmp: Path) -> Workload:
    """The demo corpus, one file per module, at the default chunking (as `ask` ingests it)."""
    for source, text, _ in stdlib_documents():
        name = source.removeprefix("pydoc:")
        folder = tmp / ("small" if distinct.is_small(name) else "main")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    return Workload(
        "python-docs", 0, tmp / "main", tmp / "small", DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP
    )


def corpus_queries(chunks: list[str], rng: random.Random, count: int = QUERIES) -> list[Query]:
    """Queries cut from `count` random chunks: one sentence each, lightly reworded.

    The sentence (its first `QUERY_WORDS` words) loses its punctuation and
    articles and is lower-cased, so neither side matches it verbatim; `needle`
    keeps the words as the chunk has them, to tell whether the chunk was found.
    """
    queries = []
    for chunk in rng.sample(chunks, min(count, len(chunks))):
        sentences = [s for s in _SENTENCE_END.split(chunk) if len(s.split()) >= 6] or [chunk]
        needle = " ".join(rng.choice(sentences).split()[:QUERY_WORDS])
        words = [w for w in _PUNCTUATION.sub(" ", needle).lower().split() if w not in _ARTICLES]
        queries.append(Query(" ".join(words) or needle, needle))
    return queries


def realistic_queries() -> list[Query]:
    """The questions of the realistic evaluation set (both splits), as people ask them."""
    return [Query(case.question) for case in load_cases(EVAL_SETS["realistic"]).cases]


def is_source(text: str, query: Query) -> bool:
    """Tell whether `text` holds the words `query` was cut from (whitespace aside)."""
    return query.needle is not None and query.needle in " ".join(text.split())


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


def _chunks_of(collection: str | None) -> dict[str, Any]:
    """A semantic search's arguments for its top chunks, not whole sections (the search's default).

    Recall compares chunk ids with an exact scan's; a whole-section result merges the
    chunks of one section into one hit.
    """
    return {"mode": "semantic", "collection": collection, "whole_sections": False}


def drop_schema(url: str, schema: str) -> None:
    """Drop a bench's schema with everything in it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def embed_rate(texts: list[str]) -> float:
    """WordLlama alone on `texts` (chunks/s), in the ingest's batches, after a warm-up.

    A small corpus is embedded over again until `EMBED_MIN_CHUNKS` chunks are
    timed, so its rate is not one batch's noise.
    """
    emb = default_embeddings()
    emb.embed_array(texts[:1000])  # warm-up: first calls pay for lazy setup
    rounds = -(-EMBED_MIN_CHUNKS // len(texts))
    start = time.perf_counter()
    for _ in range(rounds):
        for i in range(0, len(texts), EMBED_BATCH):
            emb.embed_array(texts[i : i + EMBED_BATCH])
    return rounds * len(texts) / (time.perf_counter() - start)


class Bench:
    """One corpus size's run."""

    def __init__(self, url: str, workload: Workload) -> None:
        self.workload = workload
        self.schema = "kb_bench_" + re.sub(r"\W", "_", workload.label)
        drop_schema(url, self.schema)
        # WordLlama: its figures are the knowledge base's, not an embedder's (knowledge/README.md)
        self.kb = KnowledgeBase(url, "wordllama", schema=self.schema)
        self.out: dict[str, Any] = {"corpus": workload.label}

    def ingest(self) -> None:
        """Ingest both folders, timing index builds apart, and WordLlama alone on the same chunks."""
        w = self.workload
        # what the ingest embeds: each chunk under its title and section path
        self.out["embed_rate"] = embed_rate([row.searchable for row in w.rows()])
        index_time = [0.0]
        real_hnsw, real_gin = schema.create_hnsw_index, schema.create_fulltext_index

        def timed_hnsw(conn: Any, *args: Any, **kwargs: Any) -> None:
            _, t = timed(real_hnsw, conn, *args, **kwargs)
            index_time[0] += t

        def timed_gin(conn: Any) -> None:
            _, t = timed(real_gin, conn)
            index_time[0] += t

        # index builds after a bulk load (HNSW, and GIN when dropped) count as index time
        # the writer calls them through its module globals
        vars(writer).update(create_hnsw_index=timed_hnsw, create_fulltext_index=timed_gin)
        chunking = {"chunk_size": w.chunk_size, "chunk_overlap": w.chunk_overlap}
        try:
            self.kb.pool()  # schema creation is not ingest
            r1, t1 = timed(self.kb.ingest, w.main, collection="main", **chunking)
            index1 = index_time[0]
            r2, t2 = timed(self.kb.ingest, w.small, collection="small", **chunking)
        finally:
            vars(writer).update(create_hnsw_index=real_hnsw, create_fulltext_index=real_gin)
        with tempfile.TemporaryDirectory() as more:
            # writes into the indexed main collection: files of the small one, copied under
            # other names (new sources, so new chunk ids: every chunk is embedded and written)
            held = indexed_write_files(w.small, Path(more), INDEXED_WRITE_CHUNKS)
            r3, t3 = timed(self.kb.ingest, held, collection="main", **chunking)
        n = r1.chunks_added + r2.chunks_added
        docs = r1.documents_added + r2.documents_added
        total = t1 + t2
        self.out.update(
            size=n,
            documents=docs,
            ingest_s=total,
            ingest_docs_rate=docs / total,
            ingest_rate=n / total,
            ingest_vs_embedder=n / total / self.out["embed_rate"],
            index_build_s=index_time[0],
            ingest_rate_excl_index=n / (total - index_time[0]),
            # the first load fills an empty table (indexes built once at the end); the
            # second adds 10 % to an indexed table (live HNSW inserts), unless the
            # load is small enough to keep the indexes throughout
            ingest_bulk_rate=r1.chunks_added / t1,
            ingest_bulk_rate_excl_index=r1.chunks_added / (t1 - index1),
            ingest_second_collection_rate=r2.chunks_added / t2,
            # GIN inserts into live indexes; the vectors wait outside the HNSW graph
            # (pending) until `merge_pending`, timed after the searches
            indexed_write_chunks=r3.chunks_added,
            indexed_write_s=t3,
            indexed_write_rate=r3.chunks_added / t3,
            indexed_write_vs_embedder=r3.chunks_added / t3 / self.out["embed_rate"],
        )
        with self.kb.pool().connection() as conn:
            conn.execute("ANALYZE")
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
            ).fetchone()
            self.out["stored_mb"] = float(row[0] or 0) / 2**20 if row else 0.0

    def search_latency(self, queries: list[Query], *, settled: bool = False) -> None:
        """Time every mode per query, interleaved in a shuffled order, after a warm-up pass.

        Interleaving makes load from elsewhere hit every mode alike; shuffling keeps
        any mode from always following the same one. The forced exact scan runs in
        a pass of its own: its two parallel workers slowed whatever came next.
        `settled` (after `settle`): the keys end in ``_settled``, and the exact pass and
        the source hits, which the first pass measured, are left out.
        """
        hnsw = KnowledgeBase(self.kb.url, "wordllama", schema=self.schema, exact_max_rows=0)
        exact = KnowledgeBase(self.kb.url, "wordllama", schema=self.schema, exact_max_rows=10**9)
        variants: list[tuple[str, KnowledgeBase, str]] = [
            (mode, self.kb, mode) for mode in ("semantic", "fulltext", "hybrid")
        ] + [("semantic_hnsw", hnsw, "semantic")]
        # _where: the same 10 % as the small collection, chosen by a metadata filter on its
        # documents' folder across both collections instead of by collection
        where = {"source": {"$like": f"{self.workload.small.resolve()}/%"}}
        scopes: tuple[tuple[str, str | None, dict[str, Any] | None], ...] = (
            ("", None, None),
            ("_filtered", "small", None),
            ("_where", None, where),
        )
        runs = [(v, scope) for v in variants for scope in scopes]
        rng = random.Random(5)
        times: dict[str, list[float]] = {}
        hits: dict[str, list[bool]] = {}
        try:
            for q in queries[:WARMUP_QUERIES]:
                for (_, kb, mode), (_, coll, filt) in runs:
                    kb.search(q.text, mode=mode, collection=coll, filter=filt)
            for q in queries:
                for (name, kb, mode), (label, coll, filt) in rng.sample(runs, len(runs)):
                    found, t = timed(kb.search, q.text, mode=mode, collection=coll, filter=filt)
                    times.setdefault(f"{name}{label}", []).append(t)
                    if not label and q.needle is not None:
                        hits.setdefault(name, []).append(
                            any(is_source(h["text"], q) for h in found)
                        )
            for q in queries if not settled else []:
                for label, coll, filt in scopes:
                    found, t = timed(
                        exact.search, q.text, mode="semantic", collection=coll, filter=filt
                    )
                    times.setdefault(f"semantic_exact{label}", []).append(t)
        finally:
            hnsw.close()
            exact.close()
        suffix = "_settled" if settled else ""
        for key in sorted(times, key=_VARIANT_ORDER.index):  # a stable layout in kb.json
            self.out[f"{key}_p50_ms{suffix}"] = pct(times[key], 50)
            self.out[f"{key}_p95_ms{suffix}"] = pct(times[key], 95)
        for name in sorted(hits, key=_VARIANT_ORDER.index) if not settled else []:
            self.out[f"{name}_source_hit5"] = statistics.mean(hits[name])

    def settle(self) -> None:
        """Do now the upkeep the server would do in the minutes after the load, timed apart.

        Right after a large load the server's autovacuum of the new rows and its
        checkpoints run beside whatever comes next (at 1M they doubled the searches'
        p50). `VACUUM (ANALYZE)` takes the autovacuum's place (a running one yields its
        lock) and `CHECKPOINT` writes the load's pages, so the searches timed after it
        read what a collection serves once its load is minutes old.
        """
        with psycopg.connect(self.kb.url, autocommit=True) as conn:
            start = time.perf_counter()
            conn.execute("VACUUM (ANALYZE)")
            conn.execute("CHECKPOINT")
            self.out["settle_s"] = time.perf_counter() - start

    def recall(self, queries: list[Query], ef_sweep: list[int]) -> None:
        """Recall@5 of HNSW and of the default path against the exact scan, and numpy's timing.

        `ef_sweep` adds forced-HNSW recall and p50 at each of those `ef_search` values.
        """
        texts = [q.text for q in queries]
        qv = default_embeddings().embed_array(texts)
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
        realistic = [q.needle is None for q in queries]
        for label, mask, coll in (("", None, None), ("_filtered", small, "small")):
            m = matrix if mask is None else matrix[mask]
            mid = ids if mask is None else ids[mask]
            brute, exact, t_np, t_exact = self._exact_and_numpy(qv, m, mid, coll)
            hnsw, _ = self._hnsw(texts, coll, DEFAULT_EF_SEARCH)
            default = [[h["id"] for h in self.kb.search(q, **_chunks_of(coll))] for q in texts]
            self.out[f"numpy{label}_p50_ms"] = pct(t_np, 50)
            self.out[f"exact_sql{label}_p50_ms"] = pct(t_exact, 50)
            self.out[f"recall_hnsw_vs_exact{label}"] = recall(hnsw, exact)
            self.out[f"recall_hnsw_vs_numpy{label}"] = recall(hnsw, brute)
            self.out[f"recall_default_vs_exact{label}"] = recall(default, exact)
            self.out[f"recall_exact_vs_numpy{label}"] = recall(exact, brute)
            for name, keep in (("corpus", False), ("realistic", True)):
                pick = [i for i, r in enumerate(realistic) if r == keep]
                self.out[f"recall_default_vs_exact{label}_{name}_q"] = recall(
                    [default[i] for i in pick], [exact[i] for i in pick]
                )
            for ef in ef_sweep:
                got, t = self._hnsw(texts, coll, ef)
                self.out[f"ef{ef}_hnsw{label}_recall"] = recall(got, exact)
                self.out[f"ef{ef}_hnsw{label}_p50_ms"] = pct(t, 50)

    def _hnsw(
        self, texts: list[str], coll: str | None, ef: int
    ) -> tuple[list[list[str]], list[float]]:
        """Top 5 ids through the HNSW index at `ef_search=ef`, and each search's time."""
        saved = self.kb.exact_max_rows
        self.kb.exact_max_rows = 0
        try:
            found = [timed(self.kb.search, q, ef_search=ef, **_chunks_of(coll)) for q in texts]
        finally:
            self.kb.exact_max_rows = saved
        return [[h["id"] for h in hits] for hits, _ in found], [t for _, t in found]

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

    def merge_pending(self) -> None:
        """Time moving the indexed writes' pending vectors into the graph, and the write with it."""
        moved, t = timed(self.kb.merge_pending)
        o = self.out
        o["merged_vectors"] = moved
        o["merge_ms_per_vector"] = 1000 * t / moved if moved else None
        with_merge = o["indexed_write_chunks"] / (o["indexed_write_s"] + t)
        o["indexed_write_with_merge_vs_embedder"] = with_merge / o["embed_rate"]

    def verdicts(self) -> dict[str, bool | None]:
        """The targets: ingest against the embedder measured in the same run, latency, recall."""
        o = self.out
        big = self.workload.size >= 100_000

        def at_scale(ok: bool) -> bool | None:
            return ok if big else None

        return {
            "bulk ingest >= 0.5x embedder (whole stage)": o["ingest_bulk_rate"]
            >= 0.5 * o["embed_rate"],
            "bulk ingest (excl. index build) >= 0.5x embedder": o["ingest_bulk_rate_excl_index"]
            >= 0.5 * o["embed_rate"],
            "indexed writes >= 0.25x embedder": o["indexed_write_vs_embedder"] >= 0.25,
            "semantic p50 <= 20 ms, recall@5 >= 0.95": at_scale(
                o["semantic_p50_ms"] <= 20 and o["recall_default_vs_exact"] >= 0.95
            ),
            "semantic p50 <= 20 ms, recall@5 >= 0.95 (10% collection)": at_scale(
                o["semantic_filtered_p50_ms"] <= 20
                and o["recall_default_vs_exact_filtered"] >= 0.95
            ),
            "semantic p50 <= 20 ms once settled (whole, 10% collection)": at_scale(
                max(o["semantic_p50_ms_settled"], o["semantic_filtered_p50_ms_settled"]) <= 20
            ),
            "hybrid p50 <= 2x semantic p50": o["hybrid_p50_ms"] <= 2 * o["semantic_p50_ms"],
            "hybrid p50 (10% collection) <= 2x unfiltered semantic p50": o["hybrid_filtered_p50_ms"]
            <= 2 * o["semantic_p50_ms"],
            "recall@5 >= 0.95 (HNSW forced)": o["recall_hnsw_vs_exact"] >= 0.95,
        }

    def close(self, keep: bool) -> None:
        self.kb.close()
        if not keep:
            drop_schema(self.kb.url, self.schema)


def growth_stages(root: Path, size: int, out: Path) -> list[Path]:
    """Split a corpus's files into the growth case's loads (`GROWTH_STAGES`), copied under `out`.

    Files are taken in a fixed shuffle (docstrings, documentation and summaries mixed
    alike in every load) until each load holds its share of what the collection holds
    before it; the first holds `size` chunks.

    Raises:
        ValueError: if the corpus holds too few chunks for every load.
    """
    files = sorted(p for p in root.rglob("*") if p.suffix in (".txt", ".md"))
    random.Random(7).shuffle(files)
    folders, held, at = [], 0, 0
    for name, share in GROWTH_STAGES:
        want = size if not held else math.ceil(share * held)
        folder = out / name
        folder.mkdir(parents=True)
        got = 0
        while got < want:
            if at == len(files):
                raise ValueError(
                    f"the corpus at {root} holds too few chunks for a {size:,}-chunk growth run;"
                    " give --summaries"
                )
            path = files[at]
            at += 1
            got += len(distinct.read_file_chunks(path))
            shutil.copy(path, folder / f"{at:07d}{path.suffix}")
        held += got
        folders.append(folder)
    return folders


class Growth:
    """Loads into a collection that has its index: each load's rate, index work, searches meanwhile."""

    def __init__(self, url: str, size: int, folders: list[Path]) -> None:
        self.size, self.folders = size, folders
        self.schema = f"kb_bench_growth_{size}"
        drop_schema(url, self.schema)
        self.kb = KnowledgeBase(url, "wordllama", schema=self.schema)  # as `Bench`: WordLlama
        self.out: dict[str, Any] = {"corpus": f"growth:{size}"}
        self.work = {"build": 0.0, "rebuild": 0.0, "merge": 0.0}
        """Seconds of index work in the current load: builds after a bulk load, rebuilds, merges."""
        self.rebuilt: list[schema.Rebuilt] = []
        """The current load's rebuild, if it rebuilt its collection's graph."""

    def run(self) -> dict[str, Any]:
        """Every load in turn, then searches and recall after the last; return the results."""
        real = {name: vars(writer)[name] for name in _INDEX_WORK}
        timed_ones = {name: self._timer(kind, real[name]) for name, kind in _INDEX_WORK.items()}
        vars(writer).update(timed_ones)  # the writer calls them through its module globals
        try:
            self.kb.pool()  # schema creation is not ingest
            queries: list[Query] = []
            for folder, (name, _) in zip(self.folders, GROWTH_STAGES, strict=True):
                rows = _folder_rows(folder)
                if not queries:  # cut from the first load's chunks: there from the start
                    queries = corpus_queries(
                        [r.text for r in rows], random.Random(11), GROWTH_QUERIES
                    )
                self._load(name, folder, rows, queries if name == "double" else None)
                if name == "grow10":
                    self._merge_left(name)
        finally:
            vars(writer).update(real)
        self._searches(queries, "after")
        self.out["uptime_after"] = _uptime()
        return self.out

    def _timer(self, kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_work(*args: Any, **kwargs: Any) -> Any:
            out, t = timed(fn, *args, **kwargs)
            self.work[kind] += t
            if isinstance(out, schema.Rebuilt):
                self.rebuilt.append(out)
            return out

        return timed_work

    def _load(self, name: str, folder: Path, rows: list[Any], queries: list[Query] | None) -> None:
        """One load, timed whole and by its index work, with searches meanwhile if `queries`."""
        o = self.out
        rng = random.Random(3)
        sample = rng.sample(rows, min(GROWTH_EMBED_SAMPLE, len(rows)))
        texts = [r.searchable for r in sample]
        embed_before = embed_rate(texts)
        before = self._stored()
        self.work = dict.fromkeys(self.work, 0.0)
        self.rebuilt = []
        o[f"{name}_uptime"] = _uptime()
        stop = threading.Event()
        reader = _Reader(self.kb, queries or [], stop)
        if queries:
            reader.start()
        try:
            result, t = timed(
                self.kb.ingest,
                folder,
                collection="main",
                chunk_size=distinct.CHUNK_CHARS,
                chunk_overlap=0,
            )
        finally:
            stop.set()
            if queries:
                reader.join()
        n = result.chunks_added
        index = sum(self.work.values())
        # timed before and after the load: on a shared machine its rate moves within minutes
        embed_after = embed_rate(texts)
        embed = (embed_before + embed_after) / 2
        o.update(
            {
                f"{name}_held_before": before,
                f"{name}_chunks": n,
                f"{name}_share": n / before if before else None,
                f"{name}_embed_rate_before": embed_before,
                f"{name}_embed_rate_after": embed_after,
                f"{name}_embed_rate": embed,
                f"{name}_s": t,
                f"{name}_rate": n / t,
                f"{name}_vs_embedder": n / t / embed,
                f"{name}_pipeline_s": t - index,
                f"{name}_pipeline_vs_embedder": n / (t - index) / embed,
                **{f"{name}_{kind}_s": spent for kind, spent in self.work.items()},
                f"{name}_pending_after": self._pending(),
                f"{name}_segments_after": self._segments(),
            }
        )
        for r in self.rebuilt:
            o.update(
                {
                    f"{name}_rebuild_rows": r.rows,
                    f"{name}_rebuild_copy_s": r.copy_s,
                    f"{name}_rebuild_build_s": r.build_s,
                    f"{name}_rebuild_ms_per_row": 1000 * (r.copy_s + r.build_s) / r.rows,
                    f"{name}_rebuild_swap_s": r.swap_s,
                    f"{name}_rebuild_searches_waited_s": r.blocked_s,
                }
            )
        if queries:
            o.update(reader.summary(f"{name}_during"))

    def _merge_left(self, name: str) -> None:
        """Merge what a load left pending (below the limit) and count it into the load's rate."""
        o = self.out
        moved, t = timed(self.kb.merge_pending, "main")
        o[f"{name}_merged_after"] = moved
        o[f"{name}_merge_after_s"] = t
        o[f"{name}_merge_ms_per_vector"] = 1000 * t / moved if moved else None
        o[f"{name}_with_merge_vs_embedder"] = (
            o[f"{name}_chunks"] / (o[f"{name}_s"] + t) / o[f"{name}_embed_rate"]
        )

    def _searches(self, queries: list[Query], label: str) -> None:
        stop = threading.Event()
        reader = _Reader(self.kb, queries, stop, pause=0.0)
        reader.run_once()
        self.out.update(reader.summary(label))

    def _stored(self) -> int:
        with self.kb.pool().connection() as conn:
            row = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()
        return int(row[0]) if row else 0

    def _pending(self) -> int:
        with self.kb.pool().connection() as conn:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {t} WHERE pending").format(t=embeddings_table(256))
            ).fetchone()
        return int(row[0]) if row else 0

    def _segments(self) -> int:
        """The collection's segments (each with a graph of its own: `knowledge.schema`)."""
        with self.kb.pool().connection() as conn:
            (coll,) = conn.execute(
                "SELECT id FROM kb_collections WHERE name = 'main'"
            ).fetchone() or (0,)
            return len(schema.segments(conn, 256, int(coll)))

    def close(self, keep: bool) -> None:
        self.kb.close()
        if not keep:
            drop_schema(self.kb.url, self.schema)


_INDEX_WORK = {
    "create_hnsw_index": "build",
    "create_fulltext_index": "build",
    "rebuild_hnsw_beside": "rebuild",
    "merge_pending": "merge",
}
"""The writer's index work, by the global it calls it through, and what it is counted as."""


class _Reader(threading.Thread):
    """Searches during a load: each query the default way and by an exact scan, back to back."""

    def __init__(
        self,
        kb: KnowledgeBase,
        queries: list[Query],
        stop: threading.Event,
        pause: float = SEARCH_PAUSE_S,
    ) -> None:
        super().__init__(daemon=True)
        self.kb, self.queries, self.stop, self.pause = kb, queries, stop, pause
        self.got: list[list[str]] = []
        self.want: list[list[str]] = []
        self.times: list[float] = []

    def run(self) -> None:
        exact = KnowledgeBase(self.kb.url, "wordllama", schema=self.kb.schema, exact_max_rows=10**9)
        try:
            i = 0
            while not self.stop.is_set():
                self._pair(exact, self.queries[i % len(self.queries)])
                i += 1
                self.stop.wait(self.pause)
        finally:
            exact.close()

    def run_once(self) -> None:
        exact = KnowledgeBase(self.kb.url, "wordllama", schema=self.kb.schema, exact_max_rows=10**9)
        try:
            for q in self.queries:
                self._pair(exact, q)
        finally:
            exact.close()

    def _pair(self, exact: KnowledgeBase, q: Query) -> None:
        hits, t = timed(self.kb.search, q.text, **_chunks_of("main"))
        self.got.append([h["id"] for h in hits])
        self.times.append(t)
        self.want.append([h["id"] for h in exact.search(q.text, **_chunks_of("main"))])

    def summary(self, label: str) -> dict[str, Any]:
        if not self.got:
            return {f"{label}_searches": 0}
        return {
            f"{label}_searches": len(self.got),
            f"{label}_semantic_p50_ms": pct(self.times, 50),
            f"{label}_semantic_p95_ms": pct(self.times, 95),
            f"{label}_semantic_max_ms": 1000 * max(self.times),
            f"{label}_recall_vs_exact": recall(self.got, self.want),
        }


def _folder_rows(folder: Path) -> list[Any]:
    """The chunk rows an ingest of `folder` stores (texts and what they are embedded as)."""
    rows: list[Any] = []
    for path in sorted(folder.iterdir()):
        try:
            doc = read_file(path, max_bytes=10 * 2**20, metadata={})
        except IngestError:  # the ingest's walk skips it too
            continue
        rows.extend(
            split_document(doc, collection="main", chunk_size=distinct.CHUNK_CHARS, chunk_overlap=0)
        )
    return rows


def _uptime() -> str:
    """The load averages over 1, 5 and 15 minutes, as the machine's load beside each figure."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def growth_run(size: int, url: str | None, keep: bool, summaries: list[Path]) -> dict[str, Any]:
    """The growth case at `size`: its corpus built (cached), its loads measured in a fresh schema."""
    need = math.ceil(size * (1 + GROWTH_STAGES[1][1]) * 2) + DOC_CHUNKS * 200
    root = distinct.build(need, summaries=summaries)
    with tempfile.TemporaryDirectory() as tmp:
        folders = growth_stages(root, size, Path(tmp))
        growth = Growth(url or database_url(), size, folders)
        try:
            return growth.run()
        finally:
            growth.close(keep)


def print_growth(results: list[dict[str, Any]]) -> None:
    """Print every growth metric, one column per size."""
    keys = list(dict.fromkeys(k for r in results for k in r if k != "corpus"))
    print(f"{'metric':48}" + "".join(f"{r['corpus']:>18}" for r in results))
    for k in keys:
        print(f"{k:48}" + "".join(_cell(r.get(k)) for r in results))


def run(workload: Workload, url: str | None, keep: bool, ef_sweep: list[int]) -> dict[str, Any]:
    """Ingest `workload` into a fresh schema and measure it; return the results."""
    bench = Bench(url or database_url(), workload)
    try:
        bench.ingest()
        chunks = workload.chunks()
        qs = corpus_queries(chunks, random.Random(11)) + realistic_queries()
        bench.out["queries"] = len(qs)
        bench.search_latency(qs)  # right after the load, its upkeep running beside
        bench.settle()
        bench.search_latency(qs, settled=True)
        bench.recall(qs, ef_sweep)  # searches above and here run with the writes pending
        bench.merge_pending()
        bench.out["targets"] = bench.verdicts()
        return bench.out
    finally:
        bench.close(keep)


def print_table(results: list[dict[str, Any]]) -> None:
    """Print every metric, one column per run, then each run's targets."""
    keys = list(dict.fromkeys(k for r in results for k in r if k not in ("corpus", "targets")))
    print(f"{'metric':48}" + "".join(f"{r['corpus']:>18}" for r in results))
    for k in keys:
        cells = "".join(_cell(r.get(k)) for r in results)
        print(f"{k:48}{cells}")
    print()
    for r in results:
        for name, ok in r["targets"].items():
            verdict = "n/a (size < 100k)" if ok is None else ("PASS" if ok else "FAIL")
            print(f"[{r['corpus']}] {name:52} {verdict}")


def _cell(value: Any) -> str:
    if value is None:
        return f"{'-':>18}"
    return f"{value:>18.3f}" if isinstance(value, float) else f"{value:>18}"


def workloads(
    corpus_name: str,
    sizes: list[int],
    python_docs: bool,
    tmp: Path,
    summaries: list[Path] | None = None,
) -> list[Callable[[], Workload]]:
    """The runs asked for, each built only when its turn comes (a corpus build takes a minute)."""
    runs: list[Callable[[], Workload]] = []
    if python_docs:
        runs.append(lambda: python_docs_workload(tmp / "python-docs"))
    for size in sizes:
        if corpus_name == "distinct":
            runs.append(lambda size=size: distinct_workload(size, summaries))  # type: ignore[misc]
        else:
            runs.append(lambda size=size: perturbed_workload(size, tmp / f"perturbed-{size}"))  # type: ignore[misc]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    parser.add_argument("--corpus", choices=CORPORA, default="distinct")
    parser.add_argument(
        "--python-docs", action="store_true", help="also run on the demo corpus (~1k chunks)"
    )
    parser.add_argument(
        "--ef-sweep",
        type=int,
        nargs="*",
        default=[],
        help="also measure forced HNSW at these ef_search",
    )
    parser.add_argument(
        "--url", default=None, help="PostgreSQL URL (default: DATABASE_URL or embedded)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench schemas")
    parser.add_argument(
        "--summaries",
        type=Path,
        nargs="*",
        default=None,
        help="package lists (TSV with name and summary columns) to reach sizes past ~119k;"
        f" default: ${distinct.SUMMARIES_ENV}",
    )
    parser.add_argument("--json", type=Path, default=None, help=f"results file (default {RESULTS})")
    parser.add_argument(
        "--growth",
        action="store_true",
        help="measure loads into an indexed collection instead (10 %% more, then doubling it);"
        f" results to {GROWTH_RESULTS.name}",
    )
    args = parser.parse_args()
    if args.growth:
        lists = distinct.summary_lists(args.summaries)
        growth = [growth_run(size, args.url, args.keep, lists) for size in args.sizes]
        print_growth(growth)
        target = args.json or GROWTH_RESULTS
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(growth, indent=2))
        print(f"\nwrote {target}")
        return
    args.json = args.json or RESULTS
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            run(make(), args.url, args.keep, args.ef_sweep)
            for make in workloads(
                args.corpus,
                args.sizes,
                args.python_docs,
                Path(tmp),
                distinct.summary_lists(args.summaries),
            )
        ]
    print_table(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
