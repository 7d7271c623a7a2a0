"""Optimizer benchmark: ``optimize()`` and ``reoptimize()`` times per backend, against top-down.

For TPC-H Q5, Q10 and the paper's Q8Join, and for each evaluation backend (native and python side
by side): the median of several from-scratch optimizations with no pruning, with the goal bound (the
default) and with the paper's memo-based pruning (all), the top-down optimizer's median as the
yardstick. Every optimizer is built from the same parsed query, so SQL parsing is timed for none;
all of a query's from-scratch optimizations are timed in turns, one of each per round, so that the
ratios between them survive a shared machine's changing load. Then re-optimizations after a join
selectivity changes by 1/8, 1/4, 1/2, 2, 4 and 8 times at every join predicate (the paper's changes),
each one reverted before the next. Every re-optimized plan is checked against a full optimization
with the same statistics, so the times are for correct results.

    .venv/bin/python experiments/bench_optimizer.py [--runs 7] [--backends native,python] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics

import reopt
from results import Results
from changes import FACTORS, selectivity_change
from reopt.baselines import TopDownOptimizer
from reopt.optimizer.sql import parse_sql
from reopt.optimizer.workloads import TPCH
from timing import interleaved_samples, timed

QUERIES = ("Q5", "Q10", "Q8Join")
SETTINGS = ("none", "goal", "all")


def reoptimization_times(sql: str, config: reopt.OptimizerConfig) -> list[float]:
    optimizer = reopt.Optimizer.from_sql(sql, reopt.Catalog.tpch(1), config)
    optimizer.optimize()
    query, times = optimizer.query, []
    for predicate in query.joins:
        for factor in FACTORS:
            delta, revert = selectivity_change(query, optimizer.catalog, predicate.text, factor)
            plan, elapsed = timed(lambda: optimizer.reoptimize(delta))
            times.append(elapsed)
            full = TopDownOptimizer(query, optimizer.catalog).optimize()
            assert (plan.cost, plan.key()) == (full.cost, full.key()), f"mismatch after {predicate.text} x{factor}"
            optimizer.reoptimize(revert)
    return times


def bench(name: str, backends: list[str], runs: int) -> list[dict]:
    """One record per backend. The from-scratch optimizations of every backend and setting and the
    top-down one are timed in turns, so that the ratios between them are fair on a loaded machine."""
    sql, catalog = TPCH[name], reopt.Catalog.tpch(1)
    query = parse_sql(sql, catalog)  # parsed once: parsing is the same for every optimizer, not optimization
    configs = {(backend, setting): reopt.OptimizerConfig.setting(setting, backend=backend)
               for backend in backends for setting in SETTINGS}
    variants = {f"{backend} {setting}": (lambda c=config: reopt.Optimizer(query, catalog, c).optimize())
                for (backend, setting), config in configs.items()}
    variants["top-down"] = lambda: TopDownOptimizer(query, catalog).optimize()
    # each warmed right before it is timed: top-down comes after the Python backend's runs
    medians = {k: statistics.median(v) for k, v in interleaved_samples(variants, runs, warm_each=True).items()}
    records = []
    for backend in backends:
        record = {"query": name, "backend": backend, "topdown_s": medians["top-down"]}
        for setting in SETTINGS:
            record[f"optimize_{setting}_s"] = medians[f"{backend} {setting}"]
            record[f"reoptimize_{setting}_s"] = statistics.median(
                reoptimization_times(sql, configs[(backend, setting)]))
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds of from-scratch optimizations, timed in turns")
    parser.add_argument("--backends", default="native,python", help="comma-separated evaluation backends")
    Results.option(parser, "bench_optimizer")
    args = parser.parse_args()
    records = [record for name in QUERIES for record in bench(name, args.backends.split(","), args.runs)]
    print(f"{'query':<8}{'backend':<9}" + "".join(f"{'optimize ' + x + ' ms':>20}" for x in SETTINGS)
          + "".join(f"{'reopt ' + x + ' ms':>17}" for x in SETTINGS) + f"{'top-down ms':>13}")
    for r in records:
        print(f"{r['query']:<8}{r['backend']:<9}" + "".join(f"{r[f'optimize_{x}_s'] * 1e3:>20.2f}" for x in SETTINGS)
              + "".join(f"{r[f'reoptimize_{x}_s'] * 1e3:>17.3f}" for x in SETTINGS) + f"{r['topdown_s'] * 1e3:>13.2f}")
    print("re-optimization against the same setting from scratch (median re-optimization):")
    for r in records:
        print(f"  {r['query']:<8}{r['backend']:<9}" + "  ".join(
            f"{x} {r[f'optimize_{x}_s'] / r[f'reoptimize_{x}_s']:.1f}x" for x in SETTINGS)
            + f"  | default vs top-down from scratch {r['topdown_s'] / r['reoptimize_goal_s']:.1f}x")
    by = {(r["query"], r["backend"]): r for r in records}
    for name in QUERIES:
        if (name, "native") in by and (name, "python") in by:
            n, p = by[(name, "native")], by[(name, "python")]
            print(f"{name}: native vs python, optimize() with no pruning {p['optimize_none_s'] / n['optimize_none_s']:.1f}x,"
                  f" with the goal bound {p['optimize_goal_s'] / n['optimize_goal_s']:.1f}x; native at "
                  f"{n['optimize_none_s'] / n['topdown_s']:.2f}x top-down with no pruning, the goal bound at "
                  f"{n['optimize_goal_s'] / n['topdown_s']:.2f}x")
    print(f"wrote {Results.of(args, 'bench_optimizer').json(records)}")


if __name__ == "__main__":
    main()
