"""A load that adds a large share of an indexed collection rebuilds its graph beside the live one."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.documents import Document

from arcana_loop.knowledge import KnowledgeBase, schema, settings
from arcana_loop.knowledge import queries as q
from arcana_loop.knowledge.pgkeeper import recorded_pid
from arcana_loop.knowledge.server import (
    IDLE_ENV,
    PGDATA_ENV,
    embedded_server_url,
    stop_embedded_server,
)

pytestmark = pytest.mark.postgres

WORDS = (
    "harbour crane tide anchor ledger cargo pilot beacon rope hull mast keel ferry dock"
    " lantern chart compass gull salt reef buoy quay tugboat winch barge siren storm fog"
    " voyage captain sailor net trawler oyster lighthouse jetty moor swell current breeze"
    " shipyard rivet timber canvas tar pitch rudder helm bow stern deck galley cabin hold"
    " manifest customs tariff ledger clerk warehouse pallet forklift container gantry berth"
).split()
PARTITION = "kb_embeddings_256_c1"
"""The one collection's partition (ids start at 1 in each test)."""
SEGMENT = f"{PARTITION}_s0"
"""Its first segment, which a rebuild of the whole collection replaces under the same name."""


def notes(start: int, count: int) -> list[Document]:
    """`count` one-chunk documents, each a sentence of its own made of harbour words."""
    rng = random.Random(start)
    return [
        Document(
            page_content=f"Note {n}: " + " ".join(rng.choice(WORDS) for _ in range(14)) + ".",
            metadata={"source": f"note-{n}"},
        )
        for n in range(start, start + count)
    ]


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loads past 100 pending vectors take them in; from half the graph's size, by a rebuild."""
    monkeypatch.setenv(settings.PENDING_MAX_ROWS.env, "100")
    monkeypatch.setenv(settings.REBUILD_MIN_SHARE.env, "0.5")


def _one(kb: KnowledgeBase, query: str, *params: Any) -> Any:
    with kb.pool().connection() as conn:
        row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def _oid(kb: KnowledgeBase, name: str) -> int | None:
    oid = _one(kb, "SELECT to_regclass(current_schema() || '.' || %s)::oid", name)
    return None if oid is None else int(oid)


def _pending(kb: KnowledgeBase) -> int:
    return int(_one(kb, f"SELECT count(*) FROM {PARTITION} WHERE pending"))


def _vectors_match_chunks(kb: KnowledgeBase) -> bool:
    """Every chunk has its vector and every vector its chunk."""
    return bool(
        _one(
            kb,
            f"SELECT (SELECT count(*) FROM kb_chunks) = (SELECT count(*) FROM {PARTITION} e"
            " JOIN kb_chunks c ON c.id = e.chunk_id)"
            f" AND (SELECT count(*) FROM kb_chunks) = (SELECT count(*) FROM {PARTITION})",
        )
    )


def _graph_plan(kb: KnowledgeBase, query: str) -> str:
    """EXPLAIN of the statement a semantic index (not exact) search of the collection runs."""
    req = q.make_request(
        query, collection=None, limit=5, mode="semantic", threshold=None, ef_search=None
    )
    assert req is not None
    statement, params = q.search_statement(
        req,
        q.ResolvedCollections(ids=[1], dimension=kb.dimension),
        vector=kb._embed(query),
        exact=False,
        ranking=kb.ranking,
    )
    with kb.pool().connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")  # a few thousand rows: make costs decide
        text = statement.as_string(conn)
        rows = conn.execute(f"EXPLAIN {text}", params).fetchall()
    return "\n".join(r[0] for r in rows)


def _index_state(kb: KnowledgeBase) -> tuple[bool, bool, str | None] | None:
    """(valid, ready, predicate) of the partition's HNSW index, None if it has none."""
    with kb.pool().connection() as conn:
        row = conn.execute(
            "SELECT i.indisvalid, i.indisready, pg_get_expr(i.indpred, i.indrelid)"
            " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = %s",
            (f"{SEGMENT}_hnsw",),
        ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _found_first(kb: KnowledgeBase, docs: list[Document]) -> bool:
    """Whether a graph search (exact scans off) and an exact scan both rank each note first."""
    graph = KnowledgeBase(kb.url, kb.embeddings, schema=kb.schema, exact_max_rows=0)
    exact = KnowledgeBase(kb.url, kb.embeddings, schema=kb.schema, exact_max_rows=10**9)
    try:
        for doc in docs:
            for side in (graph, exact):
                hits = side.search(doc.page_content, mode="semantic", limit=5, whole_sections=False)
                if not hits or hits[0]["text"] != doc.page_content:
                    return False
        return True
    finally:
        graph.close()
        exact.close()


def test_a_load_that_adds_a_large_share_rebuilds_the_graph_beside_the_live_one(
    kb: KnowledgeBase, eager: None
) -> None:
    first, second = notes(0, 1200), notes(1200, 1200)
    kb.ingest(first, collection="port")  # into an empty graph: rebuilt at once
    assert _pending(kb) == 0 and _index_state(kb) == (True, True, "(NOT pending)")
    before = (_oid(kb, SEGMENT), _oid(kb, f"{SEGMENT}_hnsw"))

    kb.ingest(second, collection="port")  # as many again: a new graph over all 2,400
    assert _pending(kb) == 0
    after = (_oid(kb, SEGMENT), _oid(kb, f"{SEGMENT}_hnsw"))
    assert None not in after and after[0] != before[0] and after[1] != before[1]
    assert _index_state(kb) == (True, True, "(NOT pending)")
    assert _vectors_match_chunks(kb)
    assert _one(kb, "SELECT count(*) FROM pg_class WHERE relname LIKE %s", "%rebuild%") == 0
    # the new table took the segment's place under every name: its graph, and its share
    # of the parent's chunk-id and pending-rows indexes
    plan = _graph_plan(kb, second[0].page_content)
    assert f"Index Scan using {SEGMENT}_hnsw" in plan, plan
    assert f"Index Scan using {SEGMENT}_collection_id_idx" in plan, plan
    assert (
        _one(
            kb,
            "SELECT count(*) FROM pg_inherits WHERE inhrelid IN (%s::regclass, %s::regclass)",
            f"{SEGMENT}_chunk_id_idx",
            f"{SEGMENT}_collection_id_idx",
        )
        == 2
    )
    assert _found_first(kb, first[::100] + second[::100])


def test_a_load_below_the_share_merges_into_the_live_graph(kb: KnowledgeBase, eager: None) -> None:
    kb.ingest(notes(0, 1200), collection="port")
    before = (_oid(kb, SEGMENT), _oid(kb, f"{SEGMENT}_hnsw"))
    more = notes(1200, 300)  # a quarter: past the pending limit, below half the graph
    kb.ingest(more, collection="port")
    assert _pending(kb) == 0
    assert (_oid(kb, SEGMENT), _oid(kb, f"{SEGMENT}_hnsw")) == before  # merged, not rebuilt
    assert _found_first(kb, more[::50])


def test_a_few_pending_vectors_stay_pending(kb: KnowledgeBase, eager: None) -> None:
    kb.ingest(notes(0, 1200), collection="port")
    kb.ingest(notes(1200, 80), collection="port")  # within the limit of 100
    assert _pending(kb) == 80


class _Watch:
    """A connection of the test's own, to watch the server from outside the knowledge base."""

    def __init__(self, pg_url: str, schema: str) -> None:
        self.conn = psycopg.connect(
            pg_url, autocommit=True, options=f"-c search_path={schema},public"
        )
        self.schema = schema

    def building(self) -> bool:
        """Whether a backend is building the collection's new graph (its CREATE INDEX).

        Its table is not committed, so not in the catalog others read: found by its
        statement (the session's server holds one test's tables at a time).
        """
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
            " AND query LIKE %s AND pid <> pg_backend_pid()",
            (f'CREATE INDEX "{PARTITION}_rebuild_hnsw" %',),
        ).fetchone()
        return bool(row and row[0])

    def one(self, query: str, *params: Any) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self.conn.close()


def _wait_for(check: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_writes_and_deletes_during_the_rebuild_are_kept(
    kb: KnowledgeBase, pg_url: str, eager: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb.ingest(notes(0, 3000), collection="port")
    old = _oid(kb, SEGMENT)
    gone, late = notes(0, 1)[0], notes(9000, 1)[0]
    errors: list[BaseException] = []

    def run(target: Any, *args: Any, **kwargs: Any) -> threading.Thread:
        def body() -> None:
            try:
                target(*args, **kwargs)
            except BaseException as exc:  # re-raised by the test below
                errors.append(exc)

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    # the swap waits until the writes below are done: a 6,000-row graph is built in a second or two
    swap = threading.Event()
    real_swap = schema._swap_in

    def swap_when_told(*args: Any) -> float:
        assert swap.wait(120)
        return real_swap(*args)

    monkeypatch.setattr(schema, "_swap_in", swap_when_told)
    watch = _Watch(pg_url, kb.schema)
    other = KnowledgeBase(pg_url, kb.embeddings, schema=kb.schema)
    other.collections()  # opened before: its writes come within the build
    try:
        loader = run(kb.ingest, notes(3000, 3000), collection="port")
        _wait_for(watch.building)
        # another process writes a document and deletes one while the graph is built
        writing = run(other.ingest, [late], collection="port")
        _wait_for(
            lambda: watch.one("SELECT count(*) FROM kb_chunks WHERE text = %s", late.page_content)
        )
        assert other.delete_document(source="note-0", collection="port") == 1
        # both went into the old partition, after the copy the new graph is built from
        assert watch.one("SELECT %s::regclass::oid", SEGMENT) == old
        swap.set()
        for thread in (loader, writing):
            thread.join()
    finally:
        swap.set()
        other.close()
        watch.close()
    assert not errors, errors
    assert _oid(kb, SEGMENT) != old  # swapped in
    assert _pending(kb) == 1  # the late vector, brought over pending
    assert _vectors_match_chunks(kb)  # the deleted one left behind
    hits = kb.search(late.page_content, mode="semantic", limit=1)
    assert hits and hits[0]["text"] == late.page_content
    assert all(h["text"] != gone.page_content for h in kb.search(gone.page_content, limit=5))


KILLED_DURING_THE_BUILD = textwrap.dedent(
    """
    import random, sys
    from langchain_core.documents import Document
    from arcana_loop.knowledge import KnowledgeBase
    from tests.knowledge.test_rebuild import notes

    kb = KnowledgeBase(sys.argv[1], schema=sys.argv[2])
    kb.ingest(notes(3000, 3000), collection="port")  # doubles it: killed while rebuilding
    """
)


@pytest.mark.reliability
def test_a_load_killed_during_the_rebuild_leaves_the_old_graph_valid_and_in_use(
    kb: KnowledgeBase, pg_url: str, eager: None
) -> None:
    base = notes(0, 3000)
    kb.ingest(base, collection="port")
    index = _oid(kb, f"{SEGMENT}_hnsw")
    env = {
        **os.environ,
        settings.PENDING_MAX_ROWS.env: "100",
        settings.REBUILD_MIN_SHARE.env: "0.5",
    }
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_DURING_THE_BUILD, pg_url, kb.schema],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    watch = _Watch(pg_url, kb.schema)
    try:
        _wait_for(lambda: watch.building() or child.poll() is not None)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        os.kill(child.pid, signal.SIGKILL)  # mid-build, on the server's side
        child.wait(timeout=60)
        # its backend notices the client gone within a second and rolls the rebuild back
        _wait_for(lambda: not watch.building(), timeout=30)
        _wait_for(
            lambda: (
                watch.one("SELECT count(*) FROM pg_class WHERE relname LIKE '%%rebuild%%'") == 0
            ),
            timeout=30,
        )
    finally:
        if child.poll() is None:
            child.kill()
        watch.close()
    assert child.returncode == -signal.SIGKILL

    later = KnowledgeBase(pg_url, schema=kb.schema)  # the next process to open it
    try:
        assert _oid(later, f"{SEGMENT}_hnsw") == index
        assert _index_state(later) == (True, True, "(NOT pending)")
        added = _pending(later)  # the killed load's batches had all committed, pending
        assert added == 3000
        assert _vectors_match_chunks(later)
        plan = _graph_plan(later, base[0].page_content)
        assert f"Index Scan using {SEGMENT}_hnsw" in plan, plan
        assert _found_first(later, base[::300] + notes(3000, 3000)[::300])
    finally:
        later.close()


DOUBLE_IT = textwrap.dedent(
    """
    import sys
    from arcana_loop.knowledge import KnowledgeBase
    from tests.knowledge.test_rebuild import notes

    KnowledgeBase(sys.argv[1], schema=sys.argv[2]).ingest(notes(3000, 3000), collection="port")
    """
)


START_IT = (
    "import sys\nfrom pathlib import Path\n"
    "from arcana_loop.knowledge.server import embedded_server_url\n"
    "print(embedded_server_url(Path(sys.argv[1])))\n"
)


@pytest.fixture
def own_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data directory for a server of the test's own, in a parent every user may enter."""
    base = Path(tempfile.mkdtemp(prefix="arcana-rebuild-"))
    base.chmod(0o755)
    pgdata = base / "pgdata"
    monkeypatch.setenv(PGDATA_ENV, str(pgdata))
    try:
        yield pgdata
    finally:
        stop_embedded_server(pgdata)
        if pgdata.is_symlink():  # run as root, its cluster may live elsewhere
            shutil.rmtree(pgdata.resolve(), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.reliability
@pytest.mark.slow
def test_a_server_stopped_during_the_rebuild_leaves_the_old_graph_valid_and_in_use(
    own_server: Path, eager: None
) -> None:
    url = embedded_server_url(own_server)
    kb = KnowledgeBase(url, schema="kb_rebuild")
    try:
        base = notes(0, 3000)
        kb.ingest(base, collection="port")
        index = _oid(kb, f"{SEGMENT}_hnsw")
    finally:
        kb.close()
    child = subprocess.Popen(
        [sys.executable, "-c", DOUBLE_IT, url, "kb_rebuild"],
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    watch = _Watch(url, "kb_rebuild")
    try:
        _wait_for(lambda: watch.building() or child.poll() is not None)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
    finally:
        watch.close()
    stop_embedded_server(own_server)  # as `arcana-loop` stops it: fast, open work rolled back
    child.wait(timeout=120)
    assert child.returncode != 0  # its load ended with the server
    _wait_for(lambda: recorded_pid(own_server) is None, timeout=60)  # down before it starts again
    # started again by another process, as the next user would (this one stopped using it)
    started = subprocess.run(
        [sys.executable, "-c", START_IT, str(own_server)],
        env={**os.environ, IDLE_ENV: "600"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    later = KnowledgeBase(started.stdout.strip(), schema="kb_rebuild")
    try:
        assert _oid(later, f"{SEGMENT}_hnsw") == index
        assert _index_state(later) == (True, True, "(NOT pending)")
        assert _one(later, "SELECT count(*) FROM pg_class WHERE relname LIKE '%%rebuild%%'") == 0
        assert _pending(later) == 3000 and _vectors_match_chunks(later)
        plan = _graph_plan(later, base[0].page_content)
        assert f"Index Scan using {SEGMENT}_hnsw" in plan, plan
        assert _found_first(later, base[::300] + notes(3000, 3000)[::300])
    finally:
        later.close()


def test_a_bad_setting_is_one_line_and_stores_nothing(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.REBUILD_MIN_SHARE.env, "half")
    with pytest.raises(ValueError, match=f"^{settings.REBUILD_MIN_SHARE.env} must be a number"):
        kb.ingest(notes(0, 5), collection="port")
    monkeypatch.setenv(settings.REBUILD_MIN_SHARE.env, "0.5")
    monkeypatch.setenv(settings.PENDING_MAX_ROWS.env, "-3")
    with pytest.raises(ValueError, match=f"^{settings.PENDING_MAX_ROWS.env} must be a whole"):
        kb.ingest(notes(0, 5), collection="port")
    assert kb.documents() == []


def test_a_swap_held_off_by_writers_is_tried_again_then_left_pending(
    kb: KnowledgeBase, pg_url: str, eager: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "SWAP_LOCK_TIMEOUT", "200ms")
    monkeypatch.setattr(schema, "SWAP_ATTEMPTS", 3)
    kb.ingest(notes(0, 1200), collection="port")
    index = _oid(kb, f"{SEGMENT}_hnsw")
    with psycopg.connect(pg_url, options=f"-c search_path={kb.schema},public") as writer_:
        # an ingest batch that stays open: the swap cannot hold kb_chunks still
        writer_.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
        more = notes(1200, 1200)
        kb.ingest(more, collection="port")  # stored and found; its graph not swapped in
        writer_.rollback()
    assert _oid(kb, f"{SEGMENT}_hnsw") == index and _pending(kb) == 1200
    assert _found_first(kb, more[::200])

    watch = _Watch(pg_url, kb.schema)
    waited = threading.Event()

    def release_after_a_try() -> None:
        _wait_for(lambda: watch.one(_SWAP_WAITING) > 0)
        waited.set()
        time.sleep(0.5)  # past the first try's 200 ms: it gave up, the next one gets it
        held.rollback()

    with psycopg.connect(pg_url, options=f"-c search_path={kb.schema},public") as held:
        held.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
        release = threading.Thread(target=release_after_a_try)
        release.start()
        try:
            kb.ingest(notes(2400, 1200), collection="port")
        finally:
            release.join()
            watch.close()
    assert waited.is_set()
    assert _oid(kb, f"{SEGMENT}_hnsw") != index and _pending(kb) == 0


_SWAP_WAITING = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'ShareRowExclusiveLock'"
    " AND relation = 'kb_chunks'::regclass"
)
"""A swap waiting to hold kb_chunks still."""
