"""How much of the declarative optimizer's time its Python functions take (issue 13: "measure their share").

The rules call Python for the plan space (``Fn_split``) and the cost model (``Fn_scancost``,
``Fn_unarycost``, ``Fn_joincost``); the native core calls them through PyO3 and remembers recent
results. Each function is wrapped with a timer, and its time is divided by the time of the call that
ran it: ``optimize()`` (median of ``--runs`` optimizers built afresh) and ``reoptimize()`` (median
over a join's selectivity x1/8 and x8 at every join predicate, each reverted before the next). The
timer's own cost is counted in both, so the shares are a little high.

    .venv/bin/python experiments/function_share.py [--runs 5] [--backend native|python] [--job 26a]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import reopt
from changes import selectivity_change
from reopt.datalog import engine
from reopt.optimizer import parse_sql
from reopt.optimizer.workloads import TPCH

JOB = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "job"


class TimedFunctions:
    """Builds engines whose functions add their time to ``seconds``."""

    def __init__(self):
        self.seconds = 0.0
        self._init = engine.Engine.__init__

    def __enter__(self) -> "TimedFunctions":
        timed, init = self, self._init

        def wrap(fn):
            def call(*args):
                start = time.perf_counter()
                try:
                    return fn(*args)
                finally:
                    timed.seconds += time.perf_counter() - start
            return call

        def patched(eng, program, functions, *args, **kwargs):
            init(eng, program, {name: wrap(fn) for name, fn in functions.items()}, *args, **kwargs)

        engine.Engine.__init__ = patched
        return self

    def __exit__(self, *exc) -> None:
        engine.Engine.__init__ = self._init

    def share(self, fn) -> float:
        self.seconds = 0.0
        start = time.perf_counter()
        fn()
        return self.seconds / (time.perf_counter() - start)


def measure(timed: TimedFunctions, query, catalog, config, runs: int, predicates: list[str]) -> tuple[float, float]:
    initial = []
    for _ in range(runs):
        optimizer = reopt.Optimizer(query, catalog, config)
        initial.append(timed.share(optimizer.optimize))
    changes = []
    for predicate in predicates:
        for factor in (0.125, 8.0):
            delta, revert = selectivity_change(query, optimizer.catalog, predicate, factor)
            changes.append(timed.share(lambda: optimizer.reoptimize(delta)))
            optimizer.reoptimize(revert)
    return statistics.median(initial), statistics.median(changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", default="native")
    parser.add_argument("--job", default="26a", help="a Join Order Benchmark query to add ('' for none)")
    args = parser.parse_args()
    catalog = reopt.Catalog.tpch(1)
    cases = [(name, parse_sql(TPCH[name], catalog), catalog) for name in ("Q5", "Q10", "Q8Join")]
    if args.job:
        job_catalog = reopt.Catalog.load(JOB / "imdb_stats.json")
        cases.append((args.job, parse_sql((JOB / "queries" / f"{args.job}.sql").read_text(), job_catalog),
                      job_catalog))
    print(f"{'query':<8}{'setting':<9}{'share of optimize()':>21}{'share of reoptimize()':>23}")
    with TimedFunctions() as timed:
        for name, query, cat in cases:
            predicates = sorted(p.text for p in query.joins)
            if name == args.job:
                predicates = predicates[:2]  # each JOB re-optimization takes seconds
            for setting in ("none", "goal"):
                config = reopt.OptimizerConfig.setting(setting, backend=args.backend)
                initial, changes = measure(timed, query, cat, config, args.runs, predicates)
                print(f"{name:<8}{setting:<9}{initial:>21.0%}{changes:>23.0%}")


if __name__ == "__main__":
    main()
