"""Peak memory of one `arcana-loop ask` on the demo corpus, against the interpreter alone.

Run: `python -m bench.memory_bench [--runs 3]`. Each measurement is a fresh subprocess;
its peak resident set size comes from the kernel (``ru_maxrss`` of the child). The
demo corpus is ingested before the first measured run, so ingest is not counted.
Medians go to `bench/results/memory.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "memory.json"
QUESTION = "How do I run a coroutine with a timeout?"
VARIANTS = {
    "python alone": [sys.executable, "-c", "pass"],
    "from arcana_loop import graph, knowledge": [
        sys.executable,
        "-c",
        "from arcana_loop import graph, knowledge",
    ],
    "arcana-loop ask (offline, local grounding)": [
        sys.executable,
        "-m",
        "arcana_loop.cli.main",
        "ask",
        QUESTION,
        "--json",
        "--checkpointer",
        "none",
    ],
}


def peak_mib(command: list[str]) -> float:
    """Peak RSS of one child process, in MiB (Linux reports ru_maxrss in KiB)."""
    pid = os.fork()
    if pid == 0:  # the child: replace it by the command, output discarded
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(command[0], command)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed")
    return usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    subprocess.run(
        VARIANTS["arcana-loop ask (offline, local grounding)"], check=True, capture_output=True
    )  # ingest the demo corpus
    medians = {
        name: statistics.median(peak_mib(cmd) for _ in range(args.runs))
        for name, cmd in VARIANTS.items()
    }
    base = medians["python alone"]
    print(f"peak RSS, median of {args.runs} fresh processes")
    for name, mib in medians.items():
        print(f"{name:<45} {mib:>8.0f} MiB  {mib / base:>5.1f}x python alone")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": args.runs, "peak_mib": medians}, indent=2) + "\n")
    return medians


if __name__ == "__main__":
    main()
