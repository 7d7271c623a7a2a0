"""How approximate the greedy join order is: its plans against exact optimization on the Join Order
Benchmark.

``OptimizerConfig(beyond_limit="greedy")`` optimizes a query over the plan-space limit over one join
order chosen greedily (``reopt/optimizer/greedy.py``). This script forces that on every JOB query up
to ``--max-relations`` (a limit of one pair puts every query over it) and compares each plan's
estimated cost with the exact optimum's, and the times of both (median of ``--repeat``, each
optimizer built afresh). It prints the cost ratio by size class, writes the rows as CSV, and plots
the cost ratio and both times against the number of relations (a PNG under ``--out``).

    .venv/bin/python experiments/greedy_quality.py [--max-relations 12] [--repeat 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

import reopt
from reopt.optimizer.sql import parse_sql
from reopt.optimizer.workloads import JOB_NAMES, job_catalog, job_sql
from results import Results
from timing import median_time

GREEDY = reopt.OptimizerConfig(max_join_pairs=1, beyond_limit="greedy")
CLASSES = ((4, 6), (7, 9), (10, 12), (13, 17))


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cost, time) = plt.subplots(1, 2, figsize=(11, 4.5))
    sizes = [r["relations"] for r in rows]
    cost.scatter(sizes, [r["ratio"] for r in rows], s=14, alpha=0.6)
    cost.axhline(1.0, color="grey", linewidth=0.8)
    cost.set_xlabel("relations")
    cost.set_ylabel("greedy plan's cost / optimal plan's cost")
    cost.set_title("how approximate (1: the optimum)")
    for key, label in (("exact_s", "exact (the default)"), ("greedy_s", "greedy join order")):
        time.scatter(sizes, [r[key] * 1e3 for r in rows], s=14, alpha=0.6, label=label)
    time.set_yscale("log")
    time.set_xlabel("relations")
    time.set_ylabel("optimize() ms (log scale)")
    time.set_title("how fast")
    time.legend()
    fig.suptitle("JOB queries optimized over one greedy join order against exact optimization")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-relations", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    Results.option(parser, "greedy_quality")
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)  # the greedy optimizer says it approximates, every time
    catalog = job_catalog()
    rows = []
    for name in JOB_NAMES:
        query = parse_sql(job_sql(name), catalog)
        n = len(query.aliases)
        if n > args.max_relations:
            continue
        greedy = reopt.Optimizer(query, catalog, GREEDY).optimize()
        exact = reopt.Optimizer(query, catalog).optimize()
        rows.append({
            "query": name, "relations": n, "greedy_cost": greedy.cost, "exact_cost": exact.cost,
            "ratio": greedy.cost / exact.cost, "same_plan": greedy.key() == exact.key(),
            "greedy_s": median_time(lambda: reopt.Optimizer(query, catalog, GREEDY).optimize(), args.repeat),
            "exact_s": median_time(lambda: reopt.Optimizer(query, catalog).optimize(), args.repeat),
        })
        print(f"{name:>5} {n:>3} relations  greedy/exact cost {rows[-1]['ratio']:8.3f}  "
              f"greedy {rows[-1]['greedy_s'] * 1e3:8.1f} ms  exact {rows[-1]['exact_s'] * 1e3:9.1f} ms", flush=True)
    print(f"\n{'relations':>10} {'queries':>8} {'same plan':>10} {'cost ratio median':>18} {'p90':>8} {'max':>8} "
          f"{'greedy ms':>10} {'exact ms':>10}")
    for low, high in CLASSES:
        group = [r for r in rows if low <= r["relations"] <= high]
        if not group:
            continue
        ratios = sorted(r["ratio"] for r in group)
        print(f"{f'{low}-{high}':>10} {len(group):>8} {sum(r['same_plan'] for r in group):>10} "
              f"{statistics.median(ratios):>18.3f} {ratios[int(0.9 * (len(ratios) - 1))]:>8.3f} {ratios[-1]:>8.2f} "
              f"{statistics.median(r['greedy_s'] for r in group) * 1e3:>10.1f} "
              f"{statistics.median(r['exact_s'] for r in group) * 1e3:>10.1f}")
    results = Results.of(args, "greedy_quality")
    plot(rows, results.png())
    print(f"wrote {results.json(rows)}, {results.csv(rows, list(rows[0]))}, {results.png()}")


if __name__ == "__main__":
    main()
