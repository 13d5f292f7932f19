"""A large load into an indexed collection gets a segment and an HNSW graph of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langchain_core.documents import Document

from arcana_loop.knowledge import KnowledgeBase, settings
from arcana_loop.knowledge.pgkeeper import recorded_pid
from arcana_loop.knowledge.server import IDLE_ENV, embedded_server_url, stop_embedded_server
from tests.knowledge.test_rebuild import (
    PARTITION,
    START_IT,
    _found_first,
    _graph_plan,
    _oid,
    _one,
    _wait_for,
    _Watch,
    notes,
    own_server,  # noqa: F401  (a fixture)
)

pytestmark = pytest.mark.postgres

FIRST, SECOND = f"{PARTITION}_s0", f"{PARTITION}_s1"
SMALL_SEGMENTS = {
    settings.PENDING_MAX_ROWS.env: "100",
    settings.REBUILD_MIN_SHARE.env: "0.5",
    settings.SEGMENT_MIN_ROWS.env: "1000",
}
"""A first load past 100 pending vectors gets its graph at once; loads of 1,000 chunks a segment."""


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SMALL_SEGMENTS.items():
        monkeypatch.setenv(name, value)


def _segments(kb: KnowledgeBase) -> dict[str, int]:
    """Each segment of the collection's partition and the vectors it holds."""
    with kb.pool().connection() as conn:
        names = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s) ORDER BY 1",
            (PARTITION,),
        ).fetchall()
        return {
            name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])  # type: ignore[index]
            for (name,) in names
        }


def _graph(kb: KnowledgeBase, segment: str) -> tuple[bool, str | None] | None:
    """(valid, predicate) of a segment's HNSW index, None if it has none."""
    with kb.pool().connection() as conn:
        row = conn.execute(
            "SELECT i.indisvalid, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = %s",
            (f"{segment}_hnsw",),
        ).fetchone()
    return None if row is None else (row[0], row[1])


def _partition_tables(kb: KnowledgeBase) -> int:
    """Relations of this schema named after the collection's partition: it, its segments, their indexes."""
    return int(
        _one(
            kb,
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND (c.relname = %s OR c.relname LIKE %s)",
            PARTITION,
            f"{PARTITION}\\_%",
        )
    )


def _pending(kb: KnowledgeBase) -> int:
    return int(_one(kb, f"SELECT count(*) FROM {PARTITION} WHERE pending"))


def test_a_large_load_gets_a_segment_whose_graph_is_built_after_it(
    kb: KnowledgeBase, small_segments: None
) -> None:
    first, second = notes(0, 1000), notes(1000, 1000)
    kb.ingest(first, collection="port")  # past the pending limit: its graph built at once
    graph = _oid(kb, f"{FIRST}_hnsw")
    assert graph is not None and _pending(kb) == 0

    kb.ingest(second, collection="port")  # as many again: a segment of its own
    assert _segments(kb) == {FIRST: 1000, SECOND: 1000}
    assert _oid(kb, f"{FIRST}_hnsw") == graph  # the first graph was never touched
    assert _graph(kb, SECOND) == (True, "(NOT pending)")
    assert _pending(kb) == 0
    plan = _graph_plan(kb, second[0].page_content)  # one walk of each graph, merged
    assert f"Index Scan using {FIRST}_hnsw" in plan and f"Index Scan using {SECOND}_hnsw" in plan
    assert _found_first(kb, first[::200] + second[::200])

    kb.ingest(notes(4000, 50), collection="port")  # a small write waits in the first segment
    assert _segments(kb) == {FIRST: 1050, SECOND: 1000} and _pending(kb) == 50


def test_deletes_edits_scopes_and_collection_deletes_work_across_segments(
    kb: KnowledgeBase, small_segments: None
) -> None:
    kb.ingest(notes(0, 1000), collection="port")
    kb.ingest(notes(1000, 1000), collection="port")
    kb.ingest("Rooks move along ranks and files.", collection="chess")
    assert _segments(kb) == {FIRST: 1000, SECOND: 1000}

    assert kb.delete_document(source="note-1500", collection="port") == 1
    edited = Document(
        page_content="Note 1600: the lighthouse keeper logs the storm in his ledger.",
        metadata={"source": "note-1600"},
    )
    assert kb.ingest([edited], collection="port").documents_replaced == 1
    # the old vectors went with their chunks; the edit's new one waits in the first segment
    assert _segments(kb) == {FIRST: 1001, SECOND: 998} and _pending(kb) == 1
    assert _one(kb, f"SELECT count(*) FROM {PARTITION}") == _one(
        kb, "SELECT count(*) FROM kb_chunks WHERE collection_id = 1"
    )
    hits = kb.search(edited.page_content, collection="port", mode="semantic", limit=1)
    assert [h["text"] for h in hits] == [edited.page_content]
    assert {
        h["collection"] for h in kb.search("rook ranks", collection="chess", mode="semantic")
    } == {"chess"}
    assert {
        h["collection"] for h in kb.search("rook ranks", collection="port", mode="semantic")
    } == {"port"}

    assert _partition_tables(kb) > 0
    kb.delete_collection("port")
    assert _partition_tables(kb) == 0
    hits = kb.search("rook", mode="semantic", limit=5)
    assert [h["text"] for h in hits] == ["Rooks move along ranks and files."]


def test_more_than_three_segments_are_compacted_into_fewer(
    kb: KnowledgeBase, small_segments: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.SEGMENT_MIN_ROWS.env, "300")
    first = notes(0, 1000)
    kb.ingest(first, collection="port")
    graph = _oid(kb, f"{FIRST}_hnsw")
    later = [notes(start, 300) for start in (2000, 2300, 2600)]
    for load in later[:2]:
        kb.ingest(load, collection="port")
    assert list(_segments(kb).values()) == [1000, 300, 300]
    kb.ingest(later[2], collection="port")  # a fourth: the three small ones become one
    assert _segments(kb) == {FIRST: 1000, SECOND: 900}
    assert _oid(kb, f"{FIRST}_hnsw") == graph  # the largest was left as it was
    assert _graph(kb, SECOND) == (True, "(NOT pending)")
    assert _one(kb, "SELECT count(*) FROM pg_class WHERE relname LIKE %s", "%rebuild%") == 0
    assert _found_first(kb, first[::250] + [d for load in later for d in load[::100]])


def test_a_segmented_collection_is_reembedded_whole(
    kb: KnowledgeBase, small_segments: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.SEGMENT_MIN_ROWS.env, "100")  # small: MiniLM re-embeds every row
    kb.ingest(notes(0, 120), collection="port")
    kb.ingest(notes(120, 120), collection="port")
    assert list(_segments(kb).values()) == [120, 120]

    assert kb.reembed("port", "minilm").chunks == 240
    assert _one(kb, "SELECT count(*) FROM kb_embeddings_256") == 0
    assert _one(kb, "SELECT count(*) FROM kb_embeddings_384_c1_s0") == 240
    assert _partition_tables(kb) == 0
    assert _one(
        kb, "SELECT count(*) FROM pg_indexes WHERE indexname = 'kb_embeddings_384_c1_s0_hnsw'"
    )
    reembedded = KnowledgeBase(kb.url, "minilm", schema=kb.schema)
    try:
        hits = reembedded.search(notes(180, 1)[0].page_content, collection="port", mode="semantic")
        assert hits and {h["collection"] for h in hits} == {"port"}
    finally:
        reembedded.close()


def _builds_second_graph(watch: _Watch) -> bool:
    """Whether a backend is building the second segment's graph (its CREATE INDEX)."""
    return bool(
        watch.one(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s",
            f'CREATE INDEX IF NOT EXISTS "{SECOND}_hnsw" %',
        )
    )


KILLED_DURING_THE_SEGMENT_BUILD = textwrap.dedent(
    """
    import sys
    from arcana_loop.knowledge import KnowledgeBase
    from tests.knowledge.test_rebuild import notes

    kb = KnowledgeBase(sys.argv[1], schema=sys.argv[2])
    kb.ingest(notes(3000, 3000), collection="port")  # a segment: killed while its graph is built
    """
)


@pytest.mark.reliability
def test_a_load_killed_while_its_segment_graph_is_built_leaves_the_old_graph_in_use(
    kb: KnowledgeBase, pg_url: str, small_segments: None
) -> None:
    base = notes(0, 3000)
    kb.ingest(base, collection="port")
    index = _oid(kb, f"{FIRST}_hnsw")
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_DURING_THE_SEGMENT_BUILD, pg_url, kb.schema],
        env={**os.environ, **SMALL_SEGMENTS},
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    watch = _Watch(pg_url, kb.schema)

    def builds() -> bool:
        return _builds_second_graph(watch)

    try:
        _wait_for(lambda: builds() or child.poll() is not None)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        os.kill(child.pid, signal.SIGKILL)  # mid-build, on the server's side
        child.wait(timeout=60)
        # its backend notices the client gone within a second and rolls the build back
        _wait_for(lambda: not builds(), timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
        watch.close()
    assert child.returncode == -signal.SIGKILL

    # the next search, before anything is rebuilt: the old graph, and the new rows sorted exactly
    assert _oid(kb, f"{FIRST}_hnsw") == index and _graph(kb, FIRST) == (True, "(NOT pending)")
    assert _graph(kb, SECOND) is None and _segments(kb) == {FIRST: 3000, SECOND: 3000}
    plan = _graph_plan(kb, base[0].page_content)
    assert f"Index Scan using {FIRST}_hnsw" in plan, plan
    assert f"Seq Scan on {SECOND}" in plan, plan
    note = notes(3000, 3000)[300].page_content  # in the segment without a graph: found exactly
    hits = kb.search(note, mode="semantic", limit=1, whole_sections=False)
    assert [h["text"] for h in hits] == [note]

    later = KnowledgeBase(pg_url, schema=kb.schema)  # the next process to open it builds it
    try:
        later.collections()
        assert _oid(later, f"{FIRST}_hnsw") == index
        assert _graph(later, SECOND) == (True, "(NOT pending)")
        plan = _graph_plan(later, base[0].page_content)
        assert f"Index Scan using {SECOND}_hnsw" in plan, plan
        assert _found_first(later, base[::300] + notes(3000, 3000)[::300])
    finally:
        later.close()


@pytest.mark.reliability
@pytest.mark.slow
def test_a_server_stopped_while_a_segment_graph_is_built_leaves_the_old_graph_in_use(
    own_server: Path,  # noqa: F811  (the fixture imported above)
    small_segments: None,
) -> None:
    url = embedded_server_url(own_server)
    kb = KnowledgeBase(url, schema="kb_segments")
    try:
        base = notes(0, 3000)
        kb.ingest(base, collection="port")
        index = _oid(kb, f"{FIRST}_hnsw")
    finally:
        kb.close()
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_DURING_THE_SEGMENT_BUILD, url, "kb_segments"],
        env={**os.environ, **SMALL_SEGMENTS},
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    watch = _Watch(url, "kb_segments")
    try:
        _wait_for(lambda: _builds_second_graph(watch) or child.poll() is not None)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
    finally:
        watch.close()
    stop_embedded_server(own_server)  # as `arcana-loop` stops it: fast, open work rolled back
    child.wait(timeout=120)
    assert child.returncode != 0  # its load ended with the server
    _wait_for(lambda: recorded_pid(own_server) is None, timeout=60)
    started = subprocess.run(
        [sys.executable, "-c", START_IT, str(own_server)],
        env={**os.environ, IDLE_ENV: "600"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    url = started.stdout.strip()
    watch = _Watch(url, "kb_segments")
    try:  # before any knowledge base opens it: the old graph, the new rows without one
        assert watch.one("SELECT %s::regclass::oid", f"{FIRST}_hnsw") == index
        assert watch.one("SELECT to_regclass(%s)", f"{SECOND}_hnsw") is None
        assert watch.one(f"SELECT count(*) FROM {SECOND}") == 3000
    finally:
        watch.close()
    later = KnowledgeBase(url, schema="kb_segments")
    try:
        plan = _graph_plan(later, base[0].page_content)
        assert (
            f"Index Scan using {FIRST}_hnsw" in plan and f"Index Scan using {SECOND}_hnsw" in plan
        )
        assert _oid(later, f"{FIRST}_hnsw") == index
        assert _found_first(later, base[::300] + notes(3000, 3000)[::300])
    finally:
        later.close()
