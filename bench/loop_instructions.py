"""Loop orchestration by instruction count: the loop benchmark's ratios, without the machine's noise.

Run: `python -m bench.loop_instructions [--variants floor stategraph create_agent arcana_compiled arcana_run]`.
Needs valgrind. Each variant of ``bench.loop_bench`` (no checkpointer) runs in its own
process under ``valgrind --tool=callgrind``, once with ``LOW`` and once with ``HIGH`` loops
after the same warm-up; the difference divided by ``HIGH - LOW`` is the instructions of one
loop, with imports and set-up cancelled out. Instruction counts do not move with the load of
a shared machine, so ratios of a few percent are real; they are not seconds (a cache miss
costs more than an add, and waiting costs none), so read them beside the timed benchmark,
not instead of it. The prebuilt agents run their tools in a thread pool, whose hand-offs are
time but hardly instructions: their counts understate them, and no ratio is taken to them.
Results go to `bench/results/loop_instructions.json`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.report import write_results

RESULTS = Path(__file__).parent / "results" / "loop_instructions.json"
VARIANTS = ("floor", "stategraph", "react_agent", "create_agent", "arcana_compiled", "arcana_run")
LOW, HIGH, WARMUP = 5, 25, 5
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def run_variant(name: str, loops: int) -> None:
    """Warm up, then run one variant ``loops`` times (the body of a measured process)."""
    from bench import loop_bench as lb

    runners = lb.make_runners(lb.InstantChatModel(), {"none": None})
    runner = runners[name if name == "floor" else f"{name}/none"]
    for _ in range(WARMUP + loops):
        runner()


def instructions(name: str, loops: int) -> int:
    """Instructions of a whole process that runs ``name`` for ``loops`` loops."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "bench.loop_instructions",
        "--child",
        name,
        str(loops),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent
    )
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(
            f"no instruction count in valgrind's output for {name}:\n{done.stderr[-2000:]}"
        )
    return int(found.group(1))


def per_loop(name: str, workers: ThreadPoolExecutor) -> int:
    low, high = workers.submit(instructions, name, LOW), workers.submit(instructions, name, HIGH)
    return (high.result() - low.result()) // (HIGH - LOW)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "LOOPS"), help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.child:
        run_variant(args.child[0], int(args.child[1]))
        return {}
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed; the timed benchmark is bench.loop_bench")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as workers:
        counts = {name: per_loop(name, workers) for name in args.variants}
    ratios = {
        f"{ours}/{ref}": round(counts[ours] / counts[ref], 3)
        for ours in ("arcana_compiled", "arcana_run")
        if ours in counts
        for ref in ("stategraph", "floor")
        if ref in counts
    }
    print(f"{'variant':<18}{'instructions per loop':>24}")
    for name, count in counts.items():
        print(f"{name:<18}{count:>24,}")
    print()
    for label, ratio in ratios.items():
        print(f"{label:<36}{ratio:>8.3f}")
    result = {
        "benchmark": "loop_instructions",
        "loops": HIGH - LOW,
        "instructions_per_loop": counts,
        "ratios": ratios,
    }
    write_results(args.output, result)
    return result


if __name__ == "__main__":
    main()
