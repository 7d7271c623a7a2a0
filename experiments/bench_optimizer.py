"""Optimizer benchmark: ``optimize()`` and ``reoptimize()`` times for TPC-H Q5 and the paper's Q8Join.

For each query: the median of several from-scratch optimizations, then re-optimizations after a join
selectivity changes by 1/8, 1/4, 1/2, 2, 4 and 8 times at every join predicate (the paper's changes),
each one reverted before the next. Every re-optimized plan is checked against a full optimization
with the same statistics, so the times are for correct results.

    .venv/bin/python experiments/bench_optimizer.py [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import reopt
from timing import timed
from changes import FACTORS, selectivity_change
from reopt.optimizer.workloads import TPCH


def bench(name: str, sql: str, runs: int) -> dict:
    catalog = reopt.Catalog.tpch(1)
    reopt.Optimizer.from_sql(sql, catalog).optimize()  # warm-up (rule program, caches)
    initial = [timed(lambda: reopt.Optimizer.from_sql(sql, catalog).optimize())[1] for _ in range(runs)]
    optimizer = reopt.Optimizer.from_sql(sql, catalog)
    optimizer.optimize()
    query = optimizer.query
    reopt_times, checked = [], 0
    for predicate in query.joins:
        for factor in FACTORS:
            delta, revert = selectivity_change(query, optimizer.catalog, predicate.text, factor)
            plan, elapsed = timed(lambda: optimizer.reoptimize(delta))
            reopt_times.append(elapsed)
            full = reopt.Optimizer(query, optimizer.catalog).optimize()
            assert (plan.cost, plan.key()) == (full.cost, full.key()), f"{name}: mismatch after {predicate.text}"
            checked += 1
            optimizer.reoptimize(revert)
    record = {
        "query": name,
        "initial_median_s": statistics.median(initial),
        "reopt_median_s": statistics.median(reopt_times),
        "reopt_max_s": max(reopt_times),
        "reoptimizations_checked": checked,
        "plan_alternatives": len(optimizer.engine.rows("PlanCost")),
        "plan_entries": len(optimizer.engine.rows("BestCost")),
    }
    record["speedup"] = record["initial_median_s"] / record["reopt_median_s"]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="write the records to this file")
    args = parser.parse_args()
    records = [bench(name, TPCH[name], args.runs) for name in ("Q5", "Q8Join")]
    print(f"{'query':<8}{'entries':>9}{'alternatives':>14}{'optimize ms':>13}{'reoptimize ms':>15}"
          f"{'max ms':>9}{'speedup':>9}{'checked':>9}")
    for r in records:
        print(f"{r['query']:<8}{r['plan_entries']:>9}{r['plan_alternatives']:>14}{r['initial_median_s'] * 1e3:>13.1f}"
              f"{r['reopt_median_s'] * 1e3:>15.2f}{r['reopt_max_s'] * 1e3:>9.1f}{r['speedup']:>9.1f}"
              f"{r['reoptimizations_checked']:>9}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
