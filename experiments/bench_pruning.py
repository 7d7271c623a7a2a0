"""Pruning benchmark (reference paper, Figures 5b/c and 6b/c), in one process.

For TPC-H Q5, Q10 and the paper's Q8Join, each evaluation backend (native and python side by side)
and each pruning setting (none, goal, aggsel, aggsel+refcount, aggsel+bounding, all):

* pruning ratios: the share of the whole plan space's entries (expression, property pairs) and
  alternatives that the plan table does not hold after optimization, and the share of alternatives
  costed (the goal bound keeps the space enumerated and prunes by not costing);
* the state held (engine values, 8 bytes each);
* initial optimization time (median of ``--repeat`` after a warm-up), from a parsed query;
* re-optimization time, median over every join predicate's selectivity scaled by 1/8 .. 8 (each
  change reverted before the next), with the median share of the space touched per change.

Every re-optimized plan is checked against a fresh unpruned optimization.

    .venv/bin/python experiments/bench_pruning.py [--repeat 3] [--backends native,python] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics

import reopt
from results import Results
from changes import FACTORS, selectivity_change
from timing import median_time, timed
from reopt.optimizer.optimizer import PRUNING_SETTINGS
from reopt.optimizer.sql import parse_sql
from reopt.optimizer.workloads import TPCH

QUERIES = ("Q5", "Q10", "Q8Join")


def measure(name: str, setting: str, catalog: reopt.Catalog, repeat: int, backend: str) -> dict:
    config = reopt.OptimizerConfig.setting(setting, backend=backend)
    query = parse_sql(TPCH[name], catalog)  # parsed once: the times are optimization's alone
    initial_s = median_time(lambda: reopt.Optimizer(query, catalog, config).optimize(), repeat)
    optimizer = reopt.Optimizer(query, catalog, config)
    optimizer.optimize()
    metrics = optimizer.metrics()
    none = reopt.OptimizerConfig.setting("none")
    reopt_times, entries_touched, alternatives_touched = [], [], []
    for predicate in sorted(p.text for p in query.joins):
        for factor in FACTORS:
            delta, revert = selectivity_change(query, optimizer.catalog, predicate, factor)
            plan, seconds = timed(lambda: optimizer.reoptimize(delta))
            expected = reopt.Optimizer(query, optimizer.catalog, none).optimize()
            assert (plan.cost, plan.key()) == (expected.cost, expected.key()), (name, setting, predicate, factor)
            reopt_times.append(seconds)
            touched = optimizer.metrics()
            entries_touched.append(touched.entries_touched_ratio)
            alternatives_touched.append(touched.alternatives_touched_ratio)
            optimizer.reoptimize(revert)
    return {
        "query": name,
        "backend": backend,
        "setting": setting,
        "entries_in_space": metrics.entries_in_space,
        "alternatives_in_space": metrics.alternatives_in_space,
        "entries_alive": metrics.entries_alive,
        "alternatives_alive": metrics.alternatives_alive,
        "entries_pruned_ratio": metrics.entries_pruned_ratio,
        "alternatives_pruned_ratio": metrics.alternatives_pruned_ratio,
        "alternatives_costed_ratio": metrics.alternatives_costed / max(1, metrics.alternatives_in_space),
        "alternatives_remembered": metrics.alternatives_remembered,
        "state_bytes": metrics.state_bytes,
        "initial_s": initial_s,
        "reopt_median_s": statistics.median(reopt_times),
        "reopt_max_s": max(reopt_times),
        "reopt_changes": len(reopt_times),
        "entries_touched_median": statistics.median(entries_touched),
        "alternatives_touched_median": statistics.median(alternatives_touched),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="native,python", help="comma-separated evaluation backends")
    Results.option(parser, "bench_pruning")
    args = parser.parse_args()
    catalog = reopt.Catalog.tpch(1)
    backends = args.backends.split(",")
    records = [measure(name, setting, catalog, args.repeat, backend)
               for name in QUERIES for backend in backends for setting in PRUNING_SETTINGS]
    print(f"{'query':<8}{'backend':<8}{'setting':<17}{'entries':>9}{'alts':>7}{'alts':>7}{'state KB':>10}"
          f"{'initial ms':>12}{'reopt ms':>10}{'vs aggsel':>10}{'touched e/a':>13}")
    print(f"{'':<33}{'pruned':>9}{'pruned':>7}{'costed':>7}")
    for name in QUERIES:
        for backend in backends:
            rows = {r["setting"]: r for r in records if r["query"] == name and r["backend"] == backend}
            for setting, r in rows.items():
                print(f"{name:<8}{backend:<8}{setting:<17}{r['entries_pruned_ratio']:>9.0%}{r['alternatives_pruned_ratio']:>7.0%}"
                      f"{r['alternatives_costed_ratio']:>7.0%}{r['state_bytes'] / 1024:>10.0f}{r['initial_s'] * 1e3:>12.1f}{r['reopt_median_s'] * 1e3:>10.1f}"
                      f"{r['reopt_median_s'] / rows['aggsel']['reopt_median_s']:>9.2f}x"
                      f"{r['entries_touched_median']:>7.0%}/{r['alternatives_touched_median']:.0%}")
    print(f"wrote {Results.of(args, 'bench_pruning').json(records)}")


if __name__ == "__main__":
    main()
