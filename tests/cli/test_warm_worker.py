"""The warm worker runs a command as its own process would, and never leaves one worse off.

Each worker here lives in a data folder of its own (``XDG_DATA_HOME``, short: a Unix
socket's path has 107 bytes) and is stopped, or killed, when its test ends. Commands run
through the entry point (`cli.entry`), as the installed ``arcana-loop`` does.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import psutil  # type: ignore[import-untyped]  # psutil ships no type hints
import pytest

from arcana_loop.cli import warm
from arcana_loop.cli.entry import is_served
from arcana_loop.cli.worker import ORPHAN_GRACE

ENTRY = [sys.executable, "-m", "arcana_loop.cli.entry"]
PROMPT_COLLECTION = "warm-prompt"
PROMPTING = ["delete", "-c", PROMPT_COLLECTION]
"""A command that asks on stdin (``Delete ...? [y/N]``) and exits 1 on ``n``: the collection,
made by the `shared` worker's first commands, is never deleted (nobody says yes)."""
FAILING = ["ingest", "no/such/file.md"]
"""A command that fails at once, on stderr, with status 1."""


class Worker:
    """A data folder of its own for a worker, and the environment of the commands that use it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {
            **os.environ,
            "XDG_DATA_HOME": str(folder),
            "ARCANA_LOOP_WARM_WORKER": "on",
            "ARCANA_LOOP_SERVER_IDLE_SECONDS": "300",  # one left behind by a crash ends anyway
        }

    def here(self) -> Any:
        """This process's environment pointed at the folder, for `warm`'s own functions."""
        return mock.patch.dict(os.environ, {"XDG_DATA_HOME": str(self.folder)})

    def run(self, *args: str, warm_worker: bool = True, **kwargs: Any) -> tuple[str, str, int]:
        env = {**self.env, "ARCANA_LOOP_WARM_WORKER": "on" if warm_worker else "off"}
        done = subprocess.run(
            [*ENTRY, *args], capture_output=True, text=True, env=env, timeout=180, **kwargs
        )
        return done.stdout, done.stderr, done.returncode

    def start(self, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
        kwargs.setdefault("env", self.env)
        return subprocess.Popen(
            [*ENTRY, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,
        )

    def pid(self, timeout: float = 180, other_than: int | None = None) -> int:
        """The running worker's PID, once it has imported the loop and listens."""
        with self.here():
            found = wait_for(lambda: (warm.worker_state() or {}).get("pid"), timeout)
            while found == other_than:
                time.sleep(0.1)
                found = wait_for(lambda: (warm.worker_state() or {}).get("pid"), timeout)
        return int(found)

    def stop(self) -> None:
        """Stop the worker, and kill it with its children if it is still there."""
        with self.here():
            state = warm.worker_state()
            warm.stop_worker()
        if state is None:
            return
        try:
            process = psutil.Process(state["pid"])
            for each in [*process.children(), process]:
                each.kill()
        except psutil.Error:
            pass  # gone, as it should be


def wait_for(found: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"nothing after {timeout} s")


def child_of(worker: int) -> psutil.Process:
    return wait_for(lambda: next(iter(psutil.Process(worker).children()), None), 60)


@contextlib.contextmanager
def own_worker(started: bool) -> Iterator[Worker]:
    """A folder of its own, with a worker started by a first command (run in its own process)."""
    made = Worker(Path(tempfile.mkdtemp(prefix="aw", dir="/tmp")))
    try:
        if started:
            made.run(*FAILING)
            made.pid()
        yield made
    finally:
        made.stop()
        shutil.rmtree(made.folder, ignore_errors=True)


@pytest.fixture
def worker() -> Iterator[Worker]:
    """No worker yet."""
    with own_worker(started=False) as made:
        yield made


@pytest.fixture
def started() -> Iterator[Worker]:
    """A worker this test may kill or stop."""
    with own_worker(started=True) as made:
        yield made


@pytest.fixture(scope="module")
def shared() -> Iterator[Worker]:
    """A worker the module's tests share, holding the collection `PROMPTING` asks about: they leave it serving."""
    with own_worker(started=True) as made:
        note = made.folder / "note.md"
        note.write_text("# Note\n\nA note to be asked about.\n")
        ingested = made.run(
            "ingest", str(note), "-c", PROMPT_COLLECTION, "--embeddings", "wordllama"
        )
        assert ingested[2] == 0, ingested[1]
        yield made


def test_which_commands_the_worker_runs() -> None:
    assert is_served(["arcana-loop", "ask", "q"])
    assert is_served(["arcana-loop", "-v", "collections"])
    assert is_served(["arcana-loop", "ask", "--", "--help"])
    assert not is_served(["arcana-loop"])
    assert not is_served(["arcana-loop", "--version"])
    assert not is_served(["arcana-loop", "ask", "--help"])
    assert not is_served(["arcana-loop", "server", "status"])


def test_a_command_runs_in_a_child_of_the_worker_with_the_clients_stdin_output_and_exit_code(
    shared: Worker, tmp_path: Path
) -> None:
    started = shared
    worker = started.pid()
    client = started.start(*PROMPTING, cwd=tmp_path)
    child = child_of(worker)
    assert child.ppid() == worker and child.pid != client.pid
    assert child.cwd() == str(tmp_path)
    served = client.communicate("n\n", timeout=120)
    in_process = started.run(*PROMPTING, input="n\n", warm_worker=False, cwd=tmp_path)
    assert (*served, client.returncode) == in_process
    assert f"Delete collection '{PROMPT_COLLECTION}'? [y/N]" in served[0]
    assert client.returncode == 1


def test_a_failing_command_says_the_same_with_the_same_status(shared: Worker) -> None:
    started = shared
    served = started.run(*FAILING)
    assert served == started.run(*FAILING, warm_worker=False)
    assert served[2] == 1 and "does not exist" in served[1]
    assert psutil.Process(started.pid()).is_running()  # it served, and serves on


def interrupted_at_the_prompt(client: subprocess.Popen[str]) -> tuple[str, int]:
    """Send SIGINT once `client` asks; what it then says on stderr, and its status."""
    assert client.stdout is not None
    asked = b""
    while b"[y/N]" not in asked:
        ready, _, _ = select.select([client.stdout], [], [], 120)
        assert ready, asked
        asked += os.read(client.stdout.fileno(), 4096)
    client.send_signal(signal.SIGINT)
    client.wait(timeout=60)  # stdin still open: the interrupt, not its end, stops the prompt
    _, errors = client.communicate(timeout=60)
    return errors, client.returncode


def test_ctrl_c_in_the_client_interrupts_the_command_as_in_its_own_process(
    shared: Worker,
) -> None:
    client = shared.start(*PROMPTING)
    child = child_of(shared.pid())
    served = interrupted_at_the_prompt(client)
    child.wait(timeout=10)
    alone = shared.start(*PROMPTING, env={**shared.env, "ARCANA_LOOP_WARM_WORKER": "off"})
    assert served == interrupted_at_the_prompt(alone)
    assert served == ("Error: aborted.\n", 1)


def test_a_killed_client_does_not_leave_its_command_running(shared: Worker) -> None:
    started = shared
    client = started.start(*PROMPTING)
    child = child_of(started.pid())
    client.kill()
    client.wait(timeout=10)
    child.wait(timeout=ORPHAN_GRACE + 10)


def test_a_worker_of_another_code_version_is_not_used(worker: Worker) -> None:
    stale = subprocess.Popen(
        [sys.executable, "-P", "-m", "arcana_loop.cli.worker", "another version"],
        env=worker.env,
        cwd="/",
        start_new_session=True,
    )
    assert worker.pid() == stale.pid
    assert worker.run(*FAILING) == worker.run(*FAILING, warm_worker=False)
    assert stale.wait(timeout=30) == 0  # it refused the command and ended
    worker.run(*FAILING)  # finds no worker, and starts one of this version
    assert worker.pid(other_than=stale.pid) != stale.pid


def test_a_dead_worker_leaves_the_command_to_its_own_process(started: Worker) -> None:
    dead = started.pid()
    os.kill(dead, signal.SIGKILL)
    psutil.Process(dead).wait(timeout=10)
    with started.here():
        assert warm.socket_path().exists()  # left behind
    assert started.run(*FAILING) == started.run(*FAILING, warm_worker=False)
    assert started.pid(other_than=dead) != dead


def test_status_shows_the_worker_and_stop_ends_it(started: Worker) -> None:
    pid = started.pid()
    status, _, code = started.run("server", "status")
    assert code == 0 and f"warm worker: PID {pid}" in status
    with started.here():
        assert warm.stop_worker() == pid
        assert warm.worker_state() is None
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=30)
    assert started.run(*FAILING) == started.run(*FAILING, warm_worker=False)


def test_off_runs_every_command_in_its_own_process_and_starts_no_worker(worker: Worker) -> None:
    worker.run(*FAILING, warm_worker=False)
    time.sleep(1)
    with worker.here():
        assert warm.worker_state() is None
        assert not warm.socket_path().exists()
