"""The native core's instructions per Join Order Benchmark optimization and join change, under callgrind.

This host's wall clock moves by 10-20% between repetitions of the same code, more than most changes
to the core make; instruction counts do not. For each query, a child process optimizes it and then
makes its first join's selectivity x8 and undoes it in turn, under ``valgrind --tool=callgrind``
with collection only inside the core's runs (``Engine::run``), three times: with no change (the
initial optimization's count), with the first change alone (which also builds the indexes that only
a change reads, once), and with ``--pairs`` undos and changes after it (their difference to the
second, divided by the pairs, is what a change and its undo cost from then on). The child runs
with ``PYTHONHASHSEED=0``: Python's string hashing orders some of the engine's input, and with a
random seed the counts moved by about half a percent from run to run, as much as many changes to
the core; with the seed fixed, a run repeats its count exactly and two trees are compared on the
same order. Needs valgrind (not installed by the project: ``apt-get install valgrind``); set
PYTHONPATH to measure another tree.

    .venv/bin/python experiments/core_instructions.py [--only 9a,22a] [--pairs 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

JOB = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "job"


def child(query: str, steps: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import reopt
    from bench_job import _changes
    from reopt.optimizer import parse_sql

    catalog = reopt.Catalog.load(JOB / "imdb_stats.json")
    parsed = parse_sql((JOB / "queries" / f"{query}.sql").read_text(), catalog)
    optimizer = reopt.Optimizer(parsed, catalog)
    optimizer.optimize()
    _label, change, undo = next(c for c in _changes(parsed, catalog) if c[0].startswith("join"))
    for step in range(steps):
        optimizer.reoptimize(undo if step % 2 else change)


def instructions(query: str, steps: int) -> int:
    """Instructions inside the core's runs of a child that optimizes and then re-optimizes ``steps``
    times, making the change and undoing it in turn."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=*Engine::run*",
                        f"--callgrind-out-file={out}", sys.executable, __file__, "--child", query,
                        "--steps", str(steps)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})
        summary = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
        if summary is None:
            raise RuntimeError(f"no instruction count in callgrind's output for {query}")
        return int(summary.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="9a,22a,30a", help="comma-separated JOB queries")
    parser.add_argument("--pairs", type=int, default=2, help="changes made and undone, after the optimization")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    print(f"{'query':<7}{'optimize() M':>14}{'first change M':>16}{'per change and undo M':>23}", flush=True)
    for query in args.only.split(","):
        initial, first, later = (instructions(query, steps) for steps in (0, 1, 1 + 2 * args.pairs))
        print(f"{query:<7}{initial / 1e6:>14.1f}{(first - initial) / 1e6:>16.1f}"
              f"{(later - first) / args.pairs / 1e6:>23.1f}", flush=True)


if __name__ == "__main__":
    main()
