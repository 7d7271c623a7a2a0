"""What a Join Order Benchmark join change re-derives, and what a lazy bound on grown costs could spare.

Issue 14 suggests lazy propagation: after a change, move a new cost up only where it can change a
parent's choice. This script measures the most that could save on the default optimizer, before
anyone builds it. For each query it optimizes, snapshots every plan cost and best cost, makes the
benchmark's join changes (``bench_job.py``'s: the first join predicate's selectivity x8 and x1/8,
each on the original statistics), and compares:

* ``fired``: plan-cost derivations and retractions the engine made (``engine.stats``);
* ``net``: plan-cost rows that differ between the two snapshots, a changed cost counted twice (its
  old row retracted, its new one derived). Exact maintenance must make at least these;
* ``grown`` / ``fell``: plan costs present before and after whose cost rose or fell; ``new`` and
  ``gone``: plan costs derived or retracted outright (entries released or held, plans that stop or
  start waiting);
* ``spared``: grown plan costs whose old cost is still above their entry's new best (its least plan
  cost, also where the release holds the entry). A lazy bound could leave those uncosted, waiting
  at their old cost, a lower bound of the new one (costs only grow with a plan's inputs and
  statistics), until their entry's best rose to it. Their old rows must still be retracted (the
  entry's minimum must lose them), so only the new derivation is spared. Nothing bounds a fallen
  cost by its old one, so after x1/8 nothing is spared;
* ``at most``: the speed-up of the change's plan-cost work if the spared derivations cost nothing
  and every other one cost as much as now, ``fired / (fired - spared)``. Session 31 built such a
  bound and measured what it does (docs/pruning.md, "Session 31").

A diagnostic: it counts, it does not time.

    .venv/bin/python experiments/change_reach.py [--only 13a,20a,22a,26a,30a | --min-relations N]
"""

from __future__ import annotations

import argparse
import statistics

import reopt
from bench_job import JOB, _changes
from reopt.optimizer import parse_sql

JOIN_CHANGES = ("join x8", "join x1/8")


def plan_costs(optimizer: reopt.Optimizer) -> dict[tuple, float]:
    """Every plan cost by its alternative."""
    return {row[:8]: row[8] for row in optimizer.engine.rows("PlanCost")}


def reach(plans0: dict[tuple, float], plans1: dict[tuple, float]) -> dict[str, int]:
    # each entry's least plan cost: its best, also where the release holds the entry (hidden)
    best1: dict[tuple, float] = {}
    for alternative, cost in plans1.items():
        entry = alternative[:2]
        best1[entry] = min(cost, best1.get(entry, cost))
    counts = {"grown": 0, "fell": 0, "spared": 0}
    for alternative in plans0.keys() & plans1.keys():
        old, new = plans0[alternative], plans1[alternative]
        if new > old:
            counts["grown"] += 1
            if old > best1[alternative[:2]]:
                counts["spared"] += 1
        elif new < old:
            counts["fell"] += 1
    counts["new"] = len(plans1.keys() - plans0.keys())
    counts["gone"] = len(plans0.keys() - plans1.keys())
    counts["net"] = 2 * (counts["grown"] + counts["fell"]) + counts["new"] + counts["gone"]
    return counts


def queries(only: str | None, min_relations: int | None, catalog: reopt.Catalog) -> list[str]:
    if only:
        return only.split(",")
    names = sorted(p.stem for p in (JOB / "queries").glob("*.sql"))
    return [n for n in names
            if len(parse_sql((JOB / "queries" / f"{n}.sql").read_text(), catalog).relations) >= min_relations]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", help="comma-separated JOB queries (default: 13a,20a,22a,26a,30a)")
    which.add_argument("--min-relations", type=int, help="every JOB query joining at least this many relations")
    args = parser.parse_args()
    if args.only is None and args.min_relations is None:
        args.only = "13a,20a,22a,26a,30a"
    catalog = reopt.Catalog.load(JOB / "imdb_stats.json")
    names = queries(args.only, args.min_relations, catalog)
    columns = ("fired", "net", "grown", "fell", "new", "gone", "spared")
    print(f"{'query':<7}{'rels':>5}  {'change':<10}" + "".join(f"{c:>8}" for c in columns) + f"{'at most':>9}")
    ceilings: dict[str, list[float]] = {change: [] for change in JOIN_CHANGES}
    redundant = 0
    for name in names:
        query = parse_sql((JOB / "queries" / f"{name}.sql").read_text(), catalog)
        for label, change, _undo in _changes(query, catalog):
            if label not in JOIN_CHANGES:
                continue
            optimizer = reopt.Optimizer(query, catalog)
            optimizer.optimize()
            before = plan_costs(optimizer)
            optimizer.reoptimize(change)
            counts = reach(before, plan_costs(optimizer))
            counts["fired"] = optimizer.engine.stats.last["PlanCost"].fired
            redundant += counts["fired"] - counts["net"]
            ceiling = counts["fired"] / max(counts["fired"] - counts["spared"], 1)
            ceilings[label].append(ceiling)
            print(f"{name:<7}{len(query.relations):>5}  {label:<10}" + "".join(f"{counts[c]:>8,}" for c in columns)
                  + f"{ceiling:>8.2f}x", flush=True)
    print(f"derivations beyond the net change, over all {sum(map(len, ceilings.values()))} changes: {redundant:,}")
    for label, values in ceilings.items():
        print(f"{label}: a lazy bound on grown costs would speed the plan-cost work at most "
              f"{statistics.median(values):.2f}x at the median ({min(values):.2f}x to {max(values):.2f}x)")


if __name__ == "__main__":
    main()
