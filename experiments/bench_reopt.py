"""Re-optimization benchmark (reference paper, sections 6.1, 6.2 and 6.4), in one process.

1. Initial optimization: declarative (the default configuration: the goal bound), the Evita Raced setting (declarative with
   aggregate selection only), top-down and bottom-up, each as a ratio to top-down, for TPC-H Q5, Q10,
   Q8Join and generated graphs of 10 and 12 relations (paper Figure 5a).
2. Re-optimization of Q5 after one join's selectivity changes by 1/8 .. 8 times, for each join level
   (A = region-nation up to F = customer-orders), and after a scan-cost change (table size x 1/8 .. 8)
   of each table: declarative incremental and procedural incremental, each as a ratio to a full
   top-down re-optimization (and the procedural incremental also to itself run from scratch), and
   the share of plan-table entries and alternatives the declarative optimizer touched (paper
   Figures 6, 8, 9), and how many costings the procedural one made, over its alternatives.
3. A feedback stream: Q5 re-optimized after each of 10 statistics updates drawn from Zipf-skewed data
   partitions (observed cardinalities of the current plan's joins), per update (paper Figure 7).

Every re-optimized plan is checked against the full top-down re-optimization. Full optimizations
are timed as medians of ``--repeat`` runs after a warm-up, each change of part 2 as the median of
``--repeat`` re-optimizations (the change made, reverted and made again), and each update of the
stream once. Prints tables, and writes JSON, CSV and a PNG of part 2 under ``--out`` (``results.py``):
each change's speedup over a full top-down re-optimization by factor, the declarative and the
procedural incremental optimizer side by side, on a log scale.

    .venv/bin/python experiments/bench_reopt.py [--repeat 3] [--backend native|python] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

import reopt
from reopt.datalog.engine import BACKENDS, default_backend
from results import Results
from timing import interleaved_samples, median_time, timed
from reopt.baselines import BottomUpOptimizer, IncrementalTopDownOptimizer, TopDownOptimizer
from changes import FACTORS, selectivity_change
from reopt.optimizer.estimate import Estimator
from reopt.optimizer.workloads import TPCH, generated

# Q5's join predicates from the bottom of the usual plan upwards (the paper's changes A..E, and F).
Q5_LEVELS = [
    ("A", "nation.n_regionkey = region.r_regionkey"),
    ("B", "nation.n_nationkey = supplier.s_nationkey"),
    ("C", "customer.c_nationkey = supplier.s_nationkey"),
    ("D", "lineitem.l_suppkey = supplier.s_suppkey"),
    ("E", "lineitem.l_orderkey = orders.o_orderkey"),
    ("F", "customer.c_custkey = orders.o_custkey"),
]





def initial_optimization(repeat: int, backend: str) -> list[dict]:
    catalog = reopt.Catalog.tpch(1)
    cases = [(name, reopt.Optimizer.from_sql(TPCH[name], catalog).query, catalog) for name in ("Q5", "Q10", "Q8Join")]
    cases += [(f"chain-{n}", *generated("chain", n, seed=n)) for n in (10, 12)]
    cases += [(f"cycle-{n}", *generated("cycle", n, seed=n)) for n in (10, 12)]
    records = []
    evita = reopt.OptimizerConfig.setting("aggsel", backend=backend)
    declarative = reopt.OptimizerConfig(backend=backend)
    for name, query, cat in cases:
        samples = interleaved_samples({  # in turns, so that the ratios to top-down hold on a loaded machine
            "declarative": lambda: reopt.Optimizer(query, cat, declarative).optimize(),
            "evita": lambda: reopt.Optimizer(query, cat, evita).optimize(),
            "topdown": lambda: TopDownOptimizer(query, cat).optimize(),
            "bottomup": lambda: BottomUpOptimizer(query, cat).optimize(),
        }, repeat)
        times = {optimizer: statistics.median(seconds) for optimizer, seconds in samples.items()}
        for optimizer, seconds in times.items():
            records.append({"section": "initial", "query": name, "optimizer": optimizer, "seconds": seconds,
                            "ratio_vs_topdown": seconds / times["topdown"]})
    return records


def reoptimization(repeat: int, backend: str) -> list[dict]:
    catalog = reopt.Catalog.tpch(1)
    declarative = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, reopt.OptimizerConfig(backend=backend))
    declarative.optimize()
    procedural = IncrementalTopDownOptimizer(declarative.query, catalog)
    procedural.optimize()
    query = declarative.query
    records = []

    def run(label: str, change: str, delta: reopt.DeltaStats, revert: reopt.DeltaStats) -> None:
        # each change made and reverted `repeat` times, both incremental optimizers timed each time:
        # medians, as for the full optimizations they are compared with
        declarative_times, procedural_times = [], []
        for attempt in range(repeat):
            if attempt:
                declarative.reoptimize(revert)
                procedural.reoptimize(revert)
            plan, seconds = timed(lambda: declarative.reoptimize(delta))
            declarative_times.append(seconds)
            procedural_plan, seconds = timed(lambda: procedural.reoptimize(delta))
            procedural_times.append(seconds)
        declarative_s, procedural_s = statistics.median(declarative_times), statistics.median(procedural_times)
        metrics = declarative.metrics()
        entries, alternatives = metrics.entries_touched_ratio, metrics.alternatives_touched_ratio
        full_catalog = declarative.catalog
        full = TopDownOptimizer(query, full_catalog)
        full_s = median_time(lambda: TopDownOptimizer(query, full_catalog).optimize(), repeat)
        own_full_s = median_time(lambda: IncrementalTopDownOptimizer(query, full_catalog).optimize(), repeat)
        expected = full.optimize()
        assert (plan.cost, plan.key()) == (expected.cost, expected.key()), f"declarative differs at {label} {change}"
        assert (procedural_plan.cost, procedural_plan.key()) == (expected.cost, expected.key())
        records.append({
            "section": "reoptimize", "query": "Q5", "change": label, "factor": change,
            "declarative_s": declarative_s, "procedural_s": procedural_s, "full_topdown_s": full_s,
            "declarative_speedup": full_s / declarative_s, "procedural_speedup": full_s / procedural_s,
            "procedural_full_s": own_full_s, "procedural_speedup_vs_own_full": own_full_s / procedural_s,
            "entries_touched": entries, "alternatives_touched": alternatives,
            "procedural_recosted": procedural.last_recosted / procedural.alternative_count,
        })
        declarative.reoptimize(revert)
        procedural.reoptimize(revert)

    for level, predicate in Q5_LEVELS:
        for factor in FACTORS:
            run(level, str(factor), *selectivity_change(query, declarative.catalog, predicate, factor))
    for alias, table in query.relations:
        rows = declarative.catalog.table(table).rows
        for factor in FACTORS:
            run(f"scan {table}", str(factor), reopt.DeltaStats.table(table, rows=max(1.0, rows * factor)),
                reopt.DeltaStats.table(table, rows=rows))
    return records


def feedback_stream(updates: int, seed: int, backend: str) -> list[dict]:
    rng = random.Random(seed)
    catalog = reopt.Catalog.tpch(1)
    declarative = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, reopt.OptimizerConfig(backend=backend))
    plan = declarative.optimize()
    query = declarative.query
    records = []
    for update in range(updates):
        skew = rng.paretovariate(1.2)  # Zipf-like: most partitions near the estimate, a few far off
        deltas = []
        estimator = Estimator(query, declarative.catalog)
        for node in plan.joins():
            observed = estimator.rows(node.expr) * skew * rng.uniform(0.5, 2.0)
            deltas.append(reopt.DeltaStats.cardinality(query.names(node.expr), observed))
        delta = reopt.DeltaStats.batch(deltas)
        new_plan, declarative_s = timed(lambda: declarative.reoptimize(delta))
        full_catalog = declarative.catalog
        full_s = median_time(lambda: TopDownOptimizer(query, full_catalog).optimize(), 3)
        expected = TopDownOptimizer(query, full_catalog).optimize()
        assert (new_plan.cost, new_plan.key()) == (expected.cost, expected.key())
        records.append({"section": "stream", "update": update + 1, "plan_changed": new_plan.key() != plan.key(),
                        "declarative_s": declarative_s, "full_topdown_s": full_s, "speedup": full_s / declarative_s})
        plan = new_plan
    return records


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    changes = list(dict.fromkeys(r["change"] for r in records))
    fig, ax = plt.subplots(figsize=(10, 5))
    for offset, (key, label, marker) in ((-0.15, ("declarative_speedup", "declarative incremental", "o")),
                                        (0.15, ("procedural_speedup", "procedural incremental", "s"))):
        points = [(changes.index(r["change"]) + offset, r[key]) for r in records]
        ax.scatter(*zip(*points), s=16, marker=marker, label=f"{label} (one point per factor)", alpha=0.7)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axhline(30.0, color="tab:red", linewidth=0.8, linestyle="--", label="30x")
    ax.set_yscale("log")
    ax.set_xticks(range(len(changes)), changes, rotation=30, ha="right")
    ax.set_ylabel("speedup over a full top-down re-optimization (log scale)")
    ax.set_title("TPC-H Q5 re-optimization after a change by 1/8 to 8x (above 1: faster than optimizing again)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--backend", default=default_backend(), choices=BACKENDS,
                        help="the declarative optimizer's evaluation backend (default: %(default)s)")
    Results.option(parser, "bench_reopt")
    args = parser.parse_args()

    print(f"declarative optimizer on the {args.backend} backend")
    initial = initial_optimization(args.repeat, args.backend)
    print("Initial optimization (median seconds, ratio to top-down)")
    print(f"{'query':<10}{'declarative':>16}{'evita':>16}{'top-down':>12}{'bottom-up':>16}")
    for name in dict.fromkeys(r["query"] for r in initial):
        row = {r["optimizer"]: r for r in initial if r["query"] == name}
        print(f"{name:<10}" + "".join(
            f"{row[o]['seconds']:>9.4f} ({row[o]['ratio_vs_topdown']:>4.1f}x)" for o in ("declarative", "evita"))
              + f"{row['topdown']['seconds']:>12.4f}{row['bottomup']['seconds']:>9.4f} "
              f"({row['bottomup']['ratio_vs_topdown']:>4.1f}x)")

    reopt_records = reoptimization(args.repeat, args.backend)
    print("\nQ5 re-optimization: speedup over a full top-down re-optimization (median over the 6 factors)")
    print("(procedural own: the procedural incremental optimizer against itself run from scratch;")
    print(" proc. costed: its costings over its alternatives, for factors above 1 / below 1,")
    print(" each alternative at most once)")
    print(f"{'change':<16}{'declarative':>12}{'procedural':>12}{'proc. own':>11}{'entries touched':>17}"
          f"{'alts touched':>14}{'proc. costed':>15}")
    for change in dict.fromkeys(r["change"] for r in reopt_records):
        rows = [r for r in reopt_records if r["change"] == change]
        print(f"{change:<16}{statistics.median(r['declarative_speedup'] for r in rows):>11.2f}x"
              f"{statistics.median(r['procedural_speedup'] for r in rows):>11.2f}x"
              f"{statistics.median(r['procedural_speedup_vs_own_full'] for r in rows):>10.2f}x"
              f"{statistics.median(r['entries_touched'] for r in rows):>16.0%}"
              f"{statistics.median(r['alternatives_touched'] for r in rows):>14.0%}"
              f"{statistics.median(r['procedural_recosted'] for r in rows if float(r['factor']) > 1):>8.0%} /"
              f"{statistics.median(r['procedural_recosted'] for r in rows if float(r['factor']) < 1):>5.0%}")

    stream = feedback_stream(args.updates, args.seed, args.backend)
    print("\nFeedback stream on Q5 (per update)")
    for r in stream:
        print(f"update {r['update']:>2}: plan changed {str(r['plan_changed']):<5} declarative "
              f"{r['declarative_s'] * 1e3:7.2f} ms  full top-down {r['full_topdown_s'] * 1e3:7.2f} ms  "
              f"speedup {r['speedup']:.2f}x")

    level_records = [r for r in reopt_records if not r["change"].startswith("scan")]
    procedural_full = [r["full_topdown_s"] / r["procedural_s"] for r in reopt_records]
    summary = {
        "initial_ratio_vs_topdown": {r["query"]: r["ratio_vs_topdown"] for r in initial if r["optimizer"] == "declarative"},
        "evita_initial_ratio_vs_topdown": {r["query"]: r["ratio_vs_topdown"] for r in initial if r["optimizer"] == "evita"},
        "reopt_speedup_median": statistics.median(r["declarative_speedup"] for r in level_records),
        "reopt_speedup_worst": min(r["declarative_speedup"] for r in level_records),
        "procedural_incremental_speedup_median": statistics.median(procedural_full),
        "procedural_incremental_speedup_vs_own_full_median": statistics.median(
            r["procedural_speedup_vs_own_full"] for r in reopt_records),
        "stream_speedup_median": statistics.median(r["speedup"] for r in stream),
    }
    print("\nsummary:", json.dumps(summary, indent=1))
    records = initial + reopt_records + stream
    results = Results.of(args, "bench_reopt")
    plot(reopt_records, results.png())
    print(f"wrote {results.json({'records': records, 'summary': summary})}, {results.csv(records)}, {results.png()}")


if __name__ == "__main__":
    main()
