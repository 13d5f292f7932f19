"""Ctrl-C during ``arcana-loop ingest``: one line says what was stored, and the status is 130.

The ingest is held at a known point, not raced: the test locks a row every batch
writes to, waits until the ingest's batches wait for it, and only then sends SIGINT
(and lets the lock go once the signal has reached the process).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from arcana_loop.knowledge import KnowledgeBase
from tests.fixtures.processes import clean_env
from tests.fixtures.processes import run_cli as cli

pytestmark = pytest.mark.postgres

WORDS = "harbor rollback deploy ledger cache quorum shard replica beacon vault".split()


@pytest.fixture
def env(pg_url: str) -> dict[str, str]:
    return {**clean_env(), "DATABASE_URL": pg_url}


@pytest.fixture
def kb(pg_url: str) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(pg_url)
    yield base
    base.close()


def write_files(folder: Path, count: int, paragraphs: int) -> list[Path]:
    """`count` text files of `paragraphs` distinct paragraphs (about one chunk each)."""
    folder.mkdir()
    rng = random.Random(7)
    files = []
    for n in range(count):
        text = "\n\n".join(
            f"Note {n}.{p}: " + " ".join(rng.choices(WORDS, k=90)) for p in range(paragraphs)
        )
        files.append(folder / f"f{n:03d}.txt")
        files[-1].write_text(text + "\n")
    return files


def wait_for(found: Callable[[], Any], what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 180
    while not found():
        assert process.poll() is None, f"the ingest ended before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def sigint_pending(pid: int) -> bool:
    """Whether a SIGINT sent to process `pid` has not reached it yet (its pending-signal masks)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    masks = [line.split()[1] for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(int(mask, 16) & (1 << (signal.SIGINT - 1)) for mask in masks)


def interrupt_while_held(
    env: dict[str, str], pg_url: str, collection: str, ingest: Path, *, batches: int = 1
) -> tuple[subprocess.Popen[str], str]:
    """Ingest `ingest` with the collection's BM25 counts locked; SIGINT once `batches` wait for them.

    Every batch that stores new chunks adds to that row (`knowledge.schema`, the
    ``kb_lex_count`` trigger), and opening the knowledge base does not touch it, as it
    alters the tables. With more than one batch, the command's main thread must be
    waiting for a write too (it then waits for the oldest to commit). The lock is let
    go once the signal has reached the process; returns the process, ended, and its stderr.
    """
    with psycopg.connect(pg_url, autocommit=True) as watch, psycopg.connect(pg_url) as lock:
        row = watch.execute("SELECT id FROM kb_collections WHERE name = %s", (collection,))
        (collection_id,) = row.fetchone() or (None,)
        held = lock.execute(
            "SELECT 1 FROM kb_lex_stats WHERE collection_id = %s FOR UPDATE", (collection_id,)
        )
        assert held.fetchone() is not None
        process = subprocess.Popen(
            [sys.executable, "-m", "arcana_loop.cli.main", "ingest", str(ingest), "-c", collection],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        # waits for a row (a transaction or a tuple), behind this one: an index build, say,
        # waits for every transaction (a "virtualxid"), and is not a batch
        waiting = (
            "WITH RECURSIVE behind(pid) AS ("
            " SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
            " UNION SELECT a.pid FROM pg_stat_activity a JOIN behind b"
            " ON b.pid = ANY(pg_blocking_pids(a.pid)))"
            " SELECT count(*) FROM behind JOIN pg_stat_activity USING (pid)"
            " WHERE wait_event IN ('transactionid', 'tuple')"
        )
        me = lock.info.backend_pid
        main = Path(f"/proc/{process.pid}/task/{process.pid}/wchan")
        try:
            wait_for(
                lambda: watch.execute(waiting, (me,)).fetchone() == (batches,),
                f"had {batches} batches waiting for the locked row",
                process,
            )
            if batches > 1:
                wait_for(lambda: "futex" in main.read_text(), "waited for a write", process)
            process.send_signal(signal.SIGINT)
            wait_for(lambda: not sigint_pending(process.pid), "received SIGINT", process)
            lock.rollback()
            _, errors = process.communicate(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return process, errors


def new_collection(env: dict[str, str], tmp_path: Path, name: str) -> None:
    """Make collection `name`, of one document that no test counts."""
    seed = tmp_path / "seed.txt"
    seed.write_text("A seed document that makes the collection.\n")
    # the second reads the answers resting on the collection, which makes the checkpoint
    # tables once: their index builds would wait for any transaction, the test's lock too
    for _ in range(2):
        done = cli("ingest", str(seed), "-c", name, env=env)
        assert done.returncode == 0, done.stderr


def test_ctrl_c_mid_way_through_a_folder_says_how_many_documents_were_stored(
    env: dict[str, str], pg_url: str, kb: KnowledgeBase, tmp_path: Path
) -> None:
    collection = "interrupted-folder"
    # three batches of at most 1,000 chunks: 10 files of 100, 10 more, and a small one, never
    # begun: written two at a time, the first two wait for the lock, the third for the first
    write_files(tmp_path / "docs", count=20, paragraphs=100)
    (tmp_path / "docs" / "last.txt").write_text("The last file, alone in the third batch.\n")
    try:
        new_collection(env, tmp_path, collection)
        process, errors = interrupt_while_held(
            env, pg_url, collection, tmp_path / "docs", batches=2
        )
        assert process.returncode == 130, errors
        # the batches being written when Ctrl-C came were finished, and are counted
        assert errors == (
            f"Interrupted: 20 documents stored in {collection!r} before it stopped;"
            " run it again to finish (it skips them).\n"
        )
        assert len(kb.documents(collection)) == 1 + 20
        again = kb.ingest(tmp_path / "docs", collection=collection)
        assert (again.documents_skipped, again.documents_added) == (20, 1)
    finally:
        kb.delete_collection(collection)


def test_ctrl_c_before_anything_was_written_says_nothing_was_stored(
    env: dict[str, str], pg_url: str, kb: KnowledgeBase, tmp_path: Path
) -> None:
    collection = "interrupted-file"
    (file,) = write_files(tmp_path / "docs", count=1, paragraphs=3)
    try:
        new_collection(env, tmp_path, collection)
        # one batch: written by the command's own thread, whose query Ctrl-C cancels
        process, errors = interrupt_while_held(env, pg_url, collection, file)
        assert (process.returncode, errors) == (
            130,
            "Interrupted: nothing of this run was stored; run it again to finish.\n",
        )
        assert len(kb.documents(collection)) == 1
        assert kb.ingest(file, collection=collection).documents_added == 1
    finally:
        kb.delete_collection(collection)
