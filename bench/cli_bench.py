"""How long the command line takes to answer: `--version`, `--help` and a warm offline `ask`.

A warm offline `ask` is measured twice: in its own process (``python -m
arcana_loop.cli.main``, as without a warm worker) and through the entry point with the
warm worker up (`cli.warm`: a resident process with the loop imported forks one child
per command), the way the installed ``arcana-loop`` runs it.

Run: `python -m bench.cli_bench [--runs 7]`. Each measurement is a fresh process, the
commands interleaved run by run (so a burst of load on a shared machine falls on all of
them), against `python -c pass` measured in the same run. Reported per command: the
median wall time, the median CPU time (user + system, from the kernel's accounting of
the child), and the wall time as a multiple of the baseline's.

Beside the commands, two probes say where an `ask`'s time goes: importing the loop
(`arcana_loop.graph.run` and the CLI, what every `ask` imports before its question),
and one search of the demo corpus from a fresh process (the knowledge base's imports,
opening it, loading the collection's embedder, one query).

Conditions: the embedded server is started and the demo corpus ingested before the
first measured run (neither is counted: the server stays up between commands); each
command runs once unmeasured first. The children write and read bytecode caches
(``PYTHONPYCACHEPREFIX`` in a temporary directory, ``PYTHONDONTWRITEBYTECODE`` unset),
as an installed package does; without them every run compiles the project's modules
again. `ARCANA_LOOP_PGDATA` or `DATABASE_URL` choose the knowledge base, as for the CLI. The
warm worker is the user's (it stays, as after any command); the warm-up waits for one of
this code version to listen.
Results go to `bench/results/cli.json`, with the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import write_results

RESULTS = Path(__file__).parent / "results" / "cli.json"
QUESTION = "How do I run a coroutine with a timeout?"
CLI = [sys.executable, "-m", "arcana_loop.cli.main"]
"""A command in its own process, as without a warm worker."""
ENTRY = [sys.executable, "-m", "arcana_loop.cli.entry"]
"""What the installed ``arcana-loop`` runs: the warm worker when it listens, else the process."""
COMMANDS = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "arcana-loop --version": [*ENTRY, "--version"],
    "arcana-loop --help": [*ENTRY, "--help"],
    "import the loop (graph.run, cli.main)": [
        sys.executable,
        "-c",
        "import arcana_loop.graph.run, arcana_loop.cli.main",
    ],
    "one search from a fresh process": [
        sys.executable,
        "-c",
        "from arcana_loop.knowledge import KnowledgeBase;"
        f"KnowledgeBase().search({QUESTION!r}, collection='python-docs')",
    ],
    "arcana-loop ask (warm, offline, own process)": [*CLI, "ask", QUESTION],
    "arcana-loop ask (warm, offline, warm worker)": [*ENTRY, "ask", QUESTION],
}
SERVED = "arcana-loop ask (warm, offline, warm worker)"
BASELINE = "python -c pass (baseline)"
TARGETS = {
    "arcana-loop --version": 0.5,
    "arcana-loop --help": 0.5,
    "arcana-loop ask (warm, offline, warm worker)": 1.5,
}
"""Seconds of wall time each command should take at most."""


def timed(
    command: list[str], env: dict[str, str], worker: int | None = None
) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of `command`, its output discarded.

    With the PID of a `worker`, the CPU time of the child it ran the command in counts too
    (what the worker's reaped children used meanwhile).
    """
    served_before = _children_cpu(worker)
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped above: Popen must not wait again
    errors = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {errors[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime + _children_cpu(worker) - served_before


def _children_cpu(pid: int | None) -> float:
    """The CPU seconds process `pid`'s reaped children have used (0 without a process)."""
    if pid is None:
        return 0.0
    import psutil  # type: ignore[import-untyped]  # psutil ships no type hints

    times = psutil.Process(pid).cpu_times()
    return float(times.children_user + times.children_system)


def wait_for_worker(env: dict[str, str], timeout: float = 300) -> dict[str, object]:
    """The warm worker's state once one of this code version listens (the served row's warm-up)."""
    from arcana_loop.cli import warm

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = warm.worker_state()
        # with none, the command starts one; one of another code version refuses it and ends
        timed(COMMANDS[SERVED], env)
        if state is not None and warm.worker_state() == state:
            return state
        time.sleep(1)
    raise RuntimeError(f"no warm worker listened within {timeout:g} s (see {warm.home()})")


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="cli-bench-pycache-")
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, "COLUMNS": "100"}
    env["ARCANA_LOOP_WARM_WORKER"] = "on"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for command in COMMANDS.values():  # the server up, the demo corpus in, the caches written
        timed(command, env)
    worker = wait_for_worker(env)
    load_before = os.getloadavg()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            served_by = int(worker["pid"]) if name == SERVED else None  # type: ignore[call-overload]
            samples[name].append(timed(command, env, served_by))
    load_after = os.getloadavg()
    base = statistics.median(wall for wall, _ in samples[BASELINE])
    rows = {
        name: {
            "wall_s": statistics.median(wall for wall, _ in runs),
            "cpu_s": statistics.median(cpu for _, cpu in runs),
            "x_baseline": statistics.median(wall for wall, _ in runs) / base,
            "target_s": TARGETS.get(name),
        }
        for name, runs in samples.items()
    }
    print(
        f"median of {args.runs} fresh processes; load average {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print(f"{'command':<40} {'wall s':>7} {'cpu s':>7} {'x base':>8}  target")
    for name, row in rows.items():
        target = row["target_s"]
        verdict = (
            "" if target is None else f"{target} s {'met' if row['wall_s'] <= target else 'MISSED'}"
        )
        print(
            f"{name:<40} {row['wall_s']:>7.2f} {row['cpu_s']:>7.2f} {row['x_baseline']:>7.1f}x  {verdict}"
        )
    result: dict[str, object] = {
        "runs": args.runs,
        "question": QUESTION,
        "load_average": {"before": load_before, "after": load_after},
        "warm_worker": {k: worker.get(k) for k in ("import_seconds", "threads")},
        "commands": rows,
    }
    write_results(RESULTS, result)
    return result


if __name__ == "__main__":
    main()
