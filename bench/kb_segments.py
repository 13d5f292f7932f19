"""Segments by hand: a collection's vectors split into sub-partitions, each with its own HNSW graph.

Measures the parts of a design where a large load into an indexed collection
builds a graph over its own rows only (a segment), attached beside the
collection's graph, instead of rebuilding the whole graph or merging vector by
vector (`knowledge.schema.rebuild_hnsw_beside`, `merge_pending_batch`). It reads the
collection a growth run left (``kb_bench --growth --keep``: 220k chunks in
``kb_bench_growth_100000``) and works in a schema of its own (`LAB`):

- ``builds``: HNSW build time of a 10k and a 110k table (parallel or not,
  ``ef_construction`` 64 or 40), with the server's build messages shown;
- ``segments K...``: the collection's vectors split by a hash of the chunk id into
  K sub-partitions of one list partition, each with its graph;
- ``sweep K:EF...``: semantic search p50 and recall@5 against an exact scan, the
  search's own statement (graph, plus the pending rows scanned exactly) over the
  real partition (K = 1) or the K-segment table, at ``hnsw.ef_search`` EF;
- ``filtered K...``: the same with a join and a filter keeping 10 % of the chunks;
- ``attach``: a 10k segment built beside, then attached: how long, under which locks;
- ``merge``: pending vectors moved into a 100k graph on one connection, then two;
- ``inplace``: a 55k segment attached with no graph (searched by a bounded sort), then its
  graph built in place while a thread searches: the plan, and the searches' p50 and
  slowest before, during and after the build;
- ``unequal EF...``: a 200k segment and a 20k one (a 10 % load's), searched at each EF
  with the small one's graph, then without it (its rows sorted exactly);
- ``drop``: drop the lab schema (it is kept between commands).

    .venv/bin/python -m bench.kb_bench --growth --sizes 100000 --summaries pypi.tsv --keep
    .venv/bin/python -m bench.kb_segments segments 2 4
    .venv/bin/python -m bench.kb_segments sweep 1:300 2:300 2:150 4:100

Each command adds its figures, with the load average, to `RESULTS`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from arcana_loop.knowledge import database_url, default_embeddings
from bench.kb_bench import corpus_queries

SCHEMA = "kb_bench_growth_100000"
"""The growth run's schema (kept with ``--keep``)."""
LAB = "kb_segments_lab"
RESULTS = Path(__file__).parent / "results" / "kb_segments.json"
QUERIES = 300
ROUNDS = 3

_SEARCH = """
SELECT chunk_id, sim FROM (
  (SELECT e.chunk_id, 1 - (e.embedding <=> %(q)s::vector) AS sim
   FROM {t} e WHERE e.collection_id = ANY(%(ids)s) AND NOT e.pending
   ORDER BY e.embedding <=> %(q)s::vector LIMIT 5)
  UNION ALL
  (SELECT e.chunk_id, 1 - (e.embedding <=> %(q)s::vector) AS sim
   FROM {t} e WHERE e.collection_id = ANY(%(ids)s) AND e.pending
   ORDER BY sim DESC LIMIT 5)) v
ORDER BY sim DESC LIMIT 5"""
"""`knowledge.queries._SEMANTIC_GRAPH` at a limit of 5, no metadata filter."""
_FILTERED = """
SELECT e.chunk_id FROM {t} e JOIN {s}.kb_chunks fc ON fc.id = e.chunk_id
WHERE e.collection_id = ANY(%(ids)s) AND NOT e.pending AND fc.position %% 10 = 0
ORDER BY e.embedding <=> %(q)s::vector LIMIT 5"""


def load() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


class Lab:
    """The growth run's collection, the lab schema, and the figures gathered."""

    def __init__(self) -> None:
        self.conn = psycopg.connect(database_url(), autocommit=True)
        self.conn.add_notice_handler(lambda d: print(f"  {d.severity}: {d.message_primary}"))
        self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {LAB}")
        row = self.conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname LIKE 'kb_embeddings_256_c%%' AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchone()
        if row is None:
            raise SystemExit(
                f"no growth collection in {SCHEMA}: run kb_bench --growth --keep first"
            )
        self.partition = f"{SCHEMA}.{row[0]}"
        self.collection = int(row[0].rsplit("_c", 1)[1])
        self.out: dict[str, list[dict[str, Any]]] = {}

    def note(self, kind: str, **figures: Any) -> None:
        print(
            kind,
            ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
            ),
        )
        self.out.setdefault(kind, []).append({**figures, "load": load()})

    def copy(self, table: str, where: str, segment: int | None = None) -> None:
        """A plain table of the collection's vectors that `where` keeps, none pending."""
        seg = "" if segment is None else f"{segment}, "
        self.conn.execute(
            f"INSERT INTO {LAB}.{table} SELECT chunk_id, collection_id, {seg}embedding, false"
            f" FROM {self.partition} WHERE {where}"
        )

    def build(self, table: str, *, workers: int = 1, efc: int = 64, debug: bool = False) -> float:
        """Build `table`'s HNSW index as the knowledge base does (partial: not pending); seconds."""
        c = self.conn
        c.execute(f"DROP INDEX IF EXISTS {LAB}.{table}_hnsw")
        with c.transaction():
            c.execute(
                "SELECT set_config('max_parallel_maintenance_workers', %s, true)", (str(workers),)
            )
            if debug:  # the build says how many workers it got
                c.execute("SET LOCAL client_min_messages = debug1")
            start = time.perf_counter()
            c.execute(
                f"CREATE INDEX {table}_hnsw ON {LAB}.{table} USING hnsw (embedding vector_cosine_ops)"
                f" WITH (ef_construction = {efc}) WHERE NOT pending"
            )
            took = time.perf_counter() - start
        rows = _count(c, f"SELECT count(*) FROM {LAB}.{table}")
        self.note(
            "build",
            table=table,
            rows=rows,
            workers=workers,
            ef_construction=efc,
            s=took,
            ms_per_row=1000 * took / rows,
        )
        return took

    def plain(self, table: str, where: str) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {LAB}.{table}")
        self.conn.execute(f"CREATE TABLE {LAB}.{table} (LIKE {self.partition})")
        self.copy(table, where)

    def builds(self) -> None:
        self.plain("b10", "abs(hashtext(chunk_id)) % 22 = 0")
        self.plain("b110", "abs(hashtext(chunk_id)) % 2 = 1")
        self.build("b10")
        self.build("b110", debug=True)
        self.build("b110", workers=0)
        self.build("b110", efc=40)
        self.build("b110")

    def unequal(self, efs: list[int]) -> None:
        """A large segment and a small one: each `ef_search`, with the small one's graph and without."""
        c, parent = self.conn, "sequ"
        c.execute(f"DROP TABLE IF EXISTS {LAB}.{parent}")
        c.execute(
            f"CREATE TABLE {LAB}.{parent} (LIKE {LAB}.seg2) PARTITION BY LIST (collection_id)"
        )
        c.execute(
            f"CREATE TABLE {LAB}.{parent}_c PARTITION OF {LAB}.{parent}"
            f" FOR VALUES IN ({self.collection}) PARTITION BY LIST (segment)"
        )
        for s, where in (
            (0, "abs(hashtext(chunk_id)) % 11 <> 0"),
            (1, "abs(hashtext(chunk_id)) % 11 = 0"),
        ):
            sub = f"{parent}_c_s{s}"
            c.execute(f"CREATE TABLE {LAB}.{sub} PARTITION OF {LAB}.{parent}_c FOR VALUES IN ({s})")
            self.copy(sub, where, segment=s)
            self.build(sub)
            c.execute(f"CREATE INDEX ON {LAB}.{sub} (collection_id) WHERE pending")
        c.execute(f"ANALYZE {LAB}.{parent}")
        self.sweep([(-1, ef) for ef in efs])
        c.execute(f"DROP INDEX {LAB}.{parent}_c_s1_hnsw")
        print("without the small segment's graph:")
        self.sweep([(-1, ef) for ef in efs])

    def segments(self, k: int) -> None:
        """The collection's vectors in `k` sub-partitions (by a hash of the chunk id), each with its graph."""
        c, parent = self.conn, f"seg{k}"
        c.execute(f"DROP TABLE IF EXISTS {LAB}.{parent}")
        c.execute(
            f"CREATE TABLE {LAB}.{parent} (chunk_id text NOT NULL, collection_id bigint NOT NULL,"
            " segment int NOT NULL, embedding vector(256) NOT NULL, pending boolean NOT NULL DEFAULT false)"
            " PARTITION BY LIST (collection_id)"
        )
        c.execute(
            f"CREATE TABLE {LAB}.{parent}_c PARTITION OF {LAB}.{parent}"
            f" FOR VALUES IN ({self.collection}) PARTITION BY LIST (segment)"
        )
        for s in range(k):
            sub = f"{parent}_c_s{s}"
            c.execute(f"CREATE TABLE {LAB}.{sub} PARTITION OF {LAB}.{parent}_c FOR VALUES IN ({s})")
            self.copy(sub, f"abs(hashtext(chunk_id)) % {k} = {s}", segment=s)
            self.build(sub)
            c.execute(f"CREATE INDEX ON {LAB}.{sub} (collection_id) WHERE pending")
        c.execute(f"ANALYZE {LAB}.{parent}")

    def queries(self, count: int = QUERIES) -> list[str]:
        texts = [
            r[0]
            for r in self.conn.execute(
                f"SELECT text FROM {SCHEMA}.kb_chunks ORDER BY id LIMIT 60000"
            )
        ]
        picked = corpus_queries(texts, random.Random(11), count)
        vectors = default_embeddings().embed_array([q.text for q in picked])
        return ["[" + ",".join(f"{x:.7f}" for x in v) + "]" for v in vectors]

    def exact(self, q: str, where: str = "") -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                f"SELECT e.chunk_id FROM {self.partition} e JOIN {SCHEMA}.kb_chunks fc ON fc.id = e.chunk_id"
                f" {where} ORDER BY 1 - (e.embedding <=> %s::vector) DESC LIMIT 5",
                (q,),
            )
        ]

    def timed(self, statement: str, q: str, ef: int) -> tuple[list[str], float]:
        with self.conn.transaction():
            self.conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true),"
                " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                (str(ef),),
            )
            start = time.perf_counter()
            rows = self.conn.execute(statement, {"q": q, "ids": [self.collection]}).fetchall()
            return [r[0] for r in rows], time.perf_counter() - start

    def table(self, k: int) -> str:
        if k == -1:  # `unequal`'s
            return f"{LAB}.sequ"
        return f"{SCHEMA}.kb_embeddings_256" if k == 1 else f"{LAB}.seg{k}"

    def sweep(self, configs: list[tuple[int, int]], *, filtered: bool = False) -> None:
        qs = self.queries(100 if filtered else QUERIES)
        where = "WHERE fc.position %% 10 = 0" if filtered else ""
        want = [self.exact(q, where) for q in qs]
        template = _FILTERED if filtered else _SEARCH
        for k, _ in configs:
            plan = self.conn.execute(
                "EXPLAIN (COSTS OFF) " + template.format(t=self.table(k), s=SCHEMA),
                {"q": qs[0], "ids": [self.collection]},
            ).fetchall()
            print(
                f"plan, {k} segment(s):",
                " | ".join(
                    r[0].split(" on ")[0].strip()
                    for r in plan
                    if "Scan" in r[0] or "Append" in r[0] or "Loop" in r[0]
                ),
            )
        for n in range(ROUNDS):
            for k, ef in configs:
                got, times = zip(
                    *(self.timed(template.format(t=self.table(k), s=SCHEMA), q, ef) for q in qs),
                    strict=True,
                )
                self.note(
                    "filtered" if filtered else "search",
                    round=n,
                    segments=k,
                    ef_search=ef,
                    p50_ms=1000 * statistics.median(times),
                    p95_ms=1000 * sorted(times)[int(0.95 * len(times))],
                    recall=statistics.mean(
                        len(set(g) & set(w)) / 5 for g, w in zip(got, want, strict=True)
                    ),
                    full=statistics.mean(len(g) == 5 for g in got),
                )

    def attach(self) -> None:
        """A 10k segment built beside the 2-segment table, then attached to it."""
        c, new = self.conn, "seg2_c_s2"
        c.execute(f"DROP TABLE IF EXISTS {LAB}.{new}")
        c.execute(
            f"CREATE TABLE {LAB}.{new} (LIKE {LAB}.seg2 INCLUDING DEFAULTS,"
            f" CONSTRAINT {new}_bound CHECK (segment = 2 AND collection_id = {self.collection}))"
        )
        self.copy(new, "abs(hashtext(chunk_id)) % 22 = 0", segment=2)
        self.build(new)
        with c.transaction():
            start = time.perf_counter()
            c.execute(f"ALTER TABLE {LAB}.seg2_c ATTACH PARTITION {LAB}.{new} FOR VALUES IN (2)")
            took = time.perf_counter() - start
            locks = c.execute(
                "SELECT relation::regclass::text || ' ' || mode FROM pg_locks WHERE pid = pg_backend_pid()"
                " AND locktype = 'relation' AND relation::regclass::text LIKE %s ORDER BY 1",
                (f"{LAB}.seg2%",),
            ).fetchall()
        self.note(
            "attach",
            rows=_count(c, f"SELECT count(*) FROM {LAB}.{new}"),
            ms=1000 * took,
            locks="; ".join(r[0] for r in locks),
        )
        c.execute(f"ALTER TABLE {LAB}.seg2_c DETACH PARTITION {LAB}.{new}")
        c.execute(f"DROP TABLE {LAB}.{new}")

    def inplace(self) -> None:
        """A segment attached before its graph: searched exactly, then its graph built under searches."""
        c, new = self.conn, "seg2_c_s3"
        c.execute(f"DROP TABLE IF EXISTS {LAB}.{new}")
        c.execute(f"CREATE TABLE {LAB}.{new} PARTITION OF {LAB}.seg2_c FOR VALUES IN (3)")
        self.copy(new, "abs(hashtext(chunk_id)) % 4 = 0", segment=3)
        c.execute(f"ANALYZE {LAB}.{new}")
        qs = self.queries(100)
        statement = _SEARCH.format(t=self.table(2))
        plan = c.execute(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + statement,
            {"q": qs[0], "ids": [self.collection]},
        ).fetchall()
        print("\n".join(r[0] for r in plan if "Sort" in r[0] or "Scan" in r[0] or "Append" in r[0]))
        self.searches_meanwhile(qs, "without its graph", lambda: time.sleep(5))
        self.searches_meanwhile(qs, "during its build", lambda: self.build(new, debug=True))
        self.searches_meanwhile(qs, "with its graph", lambda: time.sleep(5))
        c.execute(f"DROP TABLE {LAB}.{new}")

    def searches_meanwhile(self, qs: list[str], label: str, work: Any) -> None:
        """Search over and over on a connection of its own while `work` runs; p50 and slowest."""
        stop, times = threading.Event(), []

        def search() -> None:
            with psycopg.connect(database_url(), autocommit=True) as conn:
                statement = _SEARCH.format(t=self.table(2))
                while not stop.is_set():
                    for q in qs:
                        with conn.transaction():
                            conn.execute("SELECT set_config('hnsw.ef_search', '300', true)")
                            start = time.perf_counter()
                            conn.execute(statement, {"q": q, "ids": [self.collection]}).fetchall()
                            times.append(time.perf_counter() - start)
                        if stop.is_set():
                            return

        thread = threading.Thread(target=search)
        thread.start()
        work()
        stop.set()
        thread.join()
        self.note(
            "inplace",
            segment=label,
            searches=len(times),
            p50_ms=1000 * statistics.median(times),
            max_ms=1000 * max(times),
        )

    def merge(self) -> None:
        """Pending vectors into a 100k graph, as `merge_pending_batch` moves them: one connection, then two."""
        c, table, moves = self.conn, "m100", 4500
        self.plain(table, "abs(hashtext(chunk_id)) % 2 = 0 OR abs(hashtext(chunk_id)) % 22 = 0")
        c.execute(f"UPDATE {LAB}.{table} SET pending = abs(hashtext(chunk_id)) % 22 = 0")
        c.execute(f"ALTER TABLE {LAB}.{table} ADD PRIMARY KEY (chunk_id, collection_id)")
        c.execute(f"CREATE INDEX ON {LAB}.{table} (collection_id) WHERE pending")
        c.execute(f"VACUUM ANALYZE {LAB}.{table}")
        self.build(table)
        for connections in (1, 2):
            wal = c.execute("SELECT pg_current_wal_lsn()").fetchone()
            start = time.perf_counter()
            threads = [
                threading.Thread(target=_merge_some, args=(table, moves // connections))
                for _ in range(connections)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.perf_counter() - start
            written = _count(
                c, f"SELECT (pg_current_wal_lsn() - '{wal[0] if wal else '0/0'}'::pg_lsn)::bigint"
            )
            self.note(
                "merge",
                connections=connections,
                vectors=moves,
                ms_per_vector=1000 * took / moves,
                wal_kb_per_vector=written / moves / 1024,
            )


def _merge_some(table: str, rows: int) -> None:
    with psycopg.connect(database_url(), autocommit=True) as conn:
        moved = 0
        while moved < rows:
            with conn.transaction():
                cur = conn.execute(
                    f"WITH picked AS (SELECT chunk_id FROM {LAB}.{table} WHERE pending LIMIT 500 FOR UPDATE SKIP LOCKED)"
                    f" UPDATE {LAB}.{table} e SET pending = false FROM picked WHERE e.chunk_id = picked.chunk_id AND e.pending"
                )
            if cur.rowcount <= 0:
                return
            moved += cur.rowcount


def _count(conn: psycopg.Connection[Any], statement: str) -> int:
    row = conn.execute(statement).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "what",
        choices=[
            "builds",
            "segments",
            "sweep",
            "filtered",
            "attach",
            "merge",
            "inplace",
            "unequal",
            "drop",
        ],
    )
    parser.add_argument(
        "args", nargs="*", help="segment counts (segments, filtered) or K:EF pairs (sweep)"
    )
    args = parser.parse_args()
    if args.what == "drop":
        with psycopg.connect(database_url(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {LAB} CASCADE")
        return
    lab = Lab()
    if args.what == "builds":
        lab.builds()
    elif args.what == "segments":
        for k in args.args:
            lab.segments(int(k))
    elif args.what in ("sweep", "filtered"):
        pairs = (
            [tuple(int(x) for x in a.split(":")) for a in args.args]
            if args.what == "sweep"
            else [(int(k), 900) for k in args.args]
        )
        lab.sweep([(p[0], p[1]) for p in pairs], filtered=args.what == "filtered")
    elif args.what == "attach":
        lab.attach()
    elif args.what == "inplace":
        lab.inplace()
    elif args.what == "unequal":
        lab.unequal([int(ef) for ef in args.args])
    else:
        lab.merge()
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for kind, rows in lab.out.items():
        kept.setdefault(kind, []).extend(rows)
    RESULTS.write_text(json.dumps(kept, indent=1))


if __name__ == "__main__":
    main()
