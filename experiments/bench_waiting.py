"""One pruning switch of the default optimizer, on and off: plans that wait, or the floor on the rest of the plan.

``--switch wait`` (the default) compares the default optimizer with ``plans_wait=False``: under the
goal bound, a plan whose inputs alone cost more than its entry's best plan waits uncosted
(docs/pruning.md, "Plans that wait"). ``--switch floor`` compares it with ``completion_floor=False``:
the release ordered by best cost alone instead of best cost plus a floor on completing the plan
(docs/pruning.md, "A floor on the rest of the plan"). For TPC-H Q5, Q10 and Q8Join (every join's
selectivity x1/8 to x8) and for Join Order Benchmark queries (their first join x8 and x1/8, their
largest table x8), this prints the plan costs derived at initial optimization and per change
(derived or retracted), and the times: the two optimizers' initial optimizations timed in turns, and
each change made, timed and reverted in turns, medians. Every re-optimized plan is checked against a
full top-down optimization, so the times are for correct results.

    .venv/bin/python experiments/bench_waiting.py [--switch wait|floor] [--job 8c,13a,17a,22a,26a] [--repeat 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics

import reopt
from results import Results
from changes import join_changes, selectivity_change
from reopt.baselines import TopDownOptimizer
from reopt.optimizer.sql import parse_sql
from reopt.optimizer.workloads import TPCH, job_catalog, job_sql
from timing import timed

SWITCHES = {"wait": "plans_wait", "floor": "completion_floor"}  # --switch: the OptimizerConfig field


def costs_derived(optimizer: reopt.Optimizer) -> int:
    return optimizer.engine.stats.total["PlanCost"].fired


def measure(name: str, query: reopt.Query, catalog: reopt.Catalog, changes: list, repeat: int,
            variants: dict[str, reopt.OptimizerConfig]) -> dict:
    initial: dict[str, list[float]] = {v: [] for v in variants}
    optimizers: dict[str, reopt.Optimizer] = {}
    for _ in range(repeat + 2):
        for variant, config in variants.items():
            optimizer = reopt.Optimizer(query, catalog, config)
            initial[variant].append(timed(optimizer.optimize)[1])
            optimizers[variant] = optimizer
    record = {"query": name, "relations": len(query.relations)}
    for variant, optimizer in optimizers.items():
        record[f"initial_{variant}_s"] = statistics.median(initial[variant])
        record[f"initial_costs_{variant}"] = costs_derived(optimizer)
    times: dict[str, list[float]] = {v: [] for v in variants}
    derived: dict[str, list[int]] = {v: [] for v in variants}
    for delta, revert in changes:
        per_change: dict[str, list[float]] = {v: [] for v in variants}
        for attempt in range(repeat):
            for variant, optimizer in optimizers.items():
                before = costs_derived(optimizer)
                plan, seconds = timed(lambda: optimizer.reoptimize(delta))
                per_change[variant].append(seconds)
                if not attempt:
                    derived[variant].append(costs_derived(optimizer) - before)
                    full = TopDownOptimizer(query, optimizer.catalog).optimize()
                    assert (plan.cost, plan.key()) == (full.cost, full.key()), f"{name}: {variant} differs"
                optimizer.reoptimize(revert)
        for variant in variants:
            times[variant].append(statistics.median(per_change[variant]))
    for variant in variants:
        record[f"reopt_{variant}_s"] = statistics.median(times[variant])
        record[f"reopt_costs_{variant}"] = statistics.median(derived[variant])
    record["reopt_speedup"] = statistics.median(a / b for a, b in zip(times["without"], times["with"]))
    record["initial_speedup"] = record["initial_without_s"] / record["initial_with_s"]
    return record


def cases(job: list[str]):
    catalog = reopt.Catalog.tpch(1)
    for name in ("Q5", "Q10", "Q8Join"):
        query = parse_sql(TPCH[name], catalog)
        yield name, query, catalog, join_changes(query, catalog)
    imdb = job_catalog()
    for name in job:
        query = parse_sql(job_sql(name), imdb)
        predicate = sorted(p.text for p in query.joins)[0]
        table = max({t for _, t in query.relations}, key=lambda t: (imdb.table(t).rows, t))
        rows = imdb.table(table).rows
        yield name, query, imdb, [selectivity_change(query, imdb, predicate, 8.0),
                                  selectivity_change(query, imdb, predicate, 0.125),
                                  (reopt.DeltaStats.table(table, rows=rows * 8), reopt.DeltaStats.table(table, rows=rows))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", choices=sorted(SWITCHES), default="wait", help="the pruning switch turned off")
    parser.add_argument("--job", default="8c,13a,17a,22a,26a", help="comma-separated JOB queries ('' for none)")
    parser.add_argument("--repeat", type=int, default=3, help="times each change is made and timed")
    Results.option(parser, "bench_waiting")
    args = parser.parse_args()
    variants = {"without": reopt.OptimizerConfig(**{SWITCHES[args.switch]: False}), "with": reopt.OptimizerConfig()}
    print("| query | relations | plan costs derived, initial (without / with) | initial ms | initial speed-up "
          "| plan costs derived or retracted per change | re-optimization ms | re-optimization speed-up |")
    print("| --- " * 8 + "|")
    records = []
    for name, query, catalog, changes in cases([q for q in args.job.split(",") if q]):
        r = measure(name, query, catalog, changes, args.repeat, variants)
        records.append(r)
        print(f"| {name} | {r['relations']} | {r['initial_costs_without']:,} / {r['initial_costs_with']:,} "
              f"| {r['initial_without_s'] * 1e3:.2f} / {r['initial_with_s'] * 1e3:.2f} | {r['initial_speedup']:.2f}x "
              f"| {r['reopt_costs_without']:,.0f} / {r['reopt_costs_with']:,.0f} "
              f"| {r['reopt_without_s'] * 1e3:.2f} / {r['reopt_with_s'] * 1e3:.2f} | {r['reopt_speedup']:.2f}x |",
              flush=True)
    print("(speed-ups: the time without over the time with; for re-optimization the median over the changes)")
    print(f"wrote {Results.of(args, 'bench_waiting').json(records)}")


if __name__ == "__main__":
    main()
