"""How much an exact per-entry bound could prune beyond the goal bound, on Join Order Benchmark queries.

The evaluator's pruning releases a plan-table entry (an expression with a property) to its parents
only while a bound allows; the alternatives over entries never released are never costed. This script
asks, before anyone builds a finer bound: how many alternatives would each release rule still cost?

Each query's whole space is optimized once (the procedural incremental optimizer keeps every entry's
best cost and every alternative's cost). Each rule is applied to those final costs, and an
alternative counts as costed when all its inputs are released:

* ``none``: every entry (the unpruned optimizer);
* ``goal``: best(e) <= best(root), the default (``.ordered BestCost up to Goal``, docs/pruning.md);
* ``scans``: best(e) + h(e) <= best(root), with h(e) 0.999 times the scans of the relations outside
  e, which every completion of e into a whole plan pays (an admissible, consistent heuristic: A*);
* ``joins``: the same with h(e) also charging the least a join takes per input row (a probe, build
  or merge row) for every relation outside e and for e itself, each being some join's input: the
  floor the default release adds since session 25 (``CostModel.completion_floors``, as the
  optimizer calls it);
* ``relaxed``: the same with h(e) the exact optimum of completing e under a relaxed cost model (each
  join charged only that least per-input-row weight and ``row_out`` per output row, enforcers
  free), the strongest floor of that kind (measured in session 25, not adopted: it prunes no more);
* ``oracle``: best(e) + outside(e) <= best(root), outside(e) the least cost of completing e into a
  whole plan. These are the entries of the optimal plans; no bound known before the answer prunes
  more. It is the floor for any exact per-entry bound, at initial optimization and after a change.

Beside the release rules, ``inputs``: a bound inside an entry's minimum rather than on its release.
Of the alternatives the goal bound costs, those whose inputs' best costs add up to at most their own
entry's best; the others cost more than that best whatever their local cost (local costs are never
negative), so a minimum that skipped candidates whose inputs alone exceed it would never cost them.

Next to them, ``top-down``: the alternatives the Volcano-style baseline's branch-and-bound computes
a local cost for (every alternative of every entry it visits), its budgets taken from plans found
earlier in its depth-first search.

A diagnostic, not a benchmark: it counts, it does not time.

    .venv/bin/python experiments/bound_headroom.py [--only 1a,8c,13a,17a,22a,26a,33a]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import reopt
from reopt.baselines import IncrementalTopDownOptimizer, TopDownOptimizer
from reopt.baselines.common import group_order
from reopt.optimizer.plan_space import ANY

JOB = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "job"
RULES = ("none", "goal", "scans", "joins", "relaxed", "oracle")
TOLERANCE = 1e-9  # relative: costs summed in another order may differ in the last bits


def outside_costs(optimizer: IncrementalTopDownOptimizer, best: dict, root: tuple) -> dict:
    """The least cost of completing each entry into a plan of the root, parents before children."""
    outside = {root: 0.0}
    for group in sorted(best, key=group_order, reverse=True):
        if group not in outside:
            continue
        for alt, cost in optimizer.memo[group].items():
            if cost is None:
                continue
            for child in optimizer.children(alt):
                through = outside[group] + cost - best[child]
                if through < outside.get(child, float("inf")):
                    outside[child] = through
    return outside


def released(optimizer: IncrementalTopDownOptimizer, rule: str) -> set:
    best = optimizer.best_costs
    root = (optimizer.query.full, ANY)
    limit = best[root] * (1 + TOLERANCE)
    if rule == "none":
        return set(best)
    if rule == "goal":
        return {g for g, c in best.items() if c <= limit}
    if rule == "scans":
        scans = {g[0]: c for g, c in best.items() if g[1] == ANY and g[0].bit_count() == 1}
        return {g for g, c in best.items()
                if c + 0.999 * sum(s for leaf, s in scans.items() if not leaf & g[0]) <= limit}
    if rule == "joins":  # the default release's floor, computed as the optimizer computes it
        query = optimizer.query
        floors = optimizer.costs.completion_floors(optimizer.stats, optimizer.factors,
                                                   [query.bit(a) for a in query.aliases], query.full, optimizer.stats)
        return {g for g, c in best.items() if c + floors[g[0]] <= limit}
    if rule == "relaxed":
        floors = relaxed_floors(optimizer)
        return {g for g, c in best.items() if c + floors[g[0]] <= limit}
    outside = outside_costs(optimizer, best, root)
    return {g for g, c in best.items() if g in outside and c + outside[g] <= limit}


def relaxed_floors(optimizer: IncrementalTopDownOptimizer) -> dict[int, float]:
    """The exact optimum of completing each expression under a relaxed cost model: a join charges
    only the least per-input-row weight for each input's rows and ``row_out`` for its output's,
    enforcers nothing, a relation its scan. A dynamic program over the connected pairs: below each
    expression the least relaxed cost of building it, above it the least of completing it."""
    w, stats, query = optimizer.costs.w, optimizer.stats, optimizer.query
    per_input = min(w.probe_row, w.build_row, w.merge_row)
    splits: dict[int, list[tuple[int, int]]] = {}
    for a, b in query.connected_pairs():
        splits.setdefault(a | b, []).append((a, b))

    def step(a: int, b: int) -> float:
        return per_input * (stats[a].rows + stats[b].rows) + w.row_out * stats[a | b].rows

    below: dict[int, float] = {}
    for mask in sorted(stats, key=int.bit_count):
        s = stats[mask]
        below[mask] = (optimizer.costs.scan(s.rows, s.width, s.scanned, 1.0)[0][0] if mask.bit_count() == 1
                       else min(step(a, b) + below[a] + below[b] for a, b in splits[mask]))
    above = {query.full: 0.0}
    for mask in sorted(splits, key=int.bit_count, reverse=True):
        for a, b in splits[mask]:
            for part, other in ((a, b), (b, a)):
                through = above.get(mask, float("inf")) + step(a, b) + below[other]
                if through < above.get(part, float("inf")):
                    above[part] = through
    return above


def costed(optimizer: IncrementalTopDownOptimizer, inputs: set) -> int:
    return sum(1 for alts in optimizer.memo.values() for alt in alts
               if all(child in inputs for child in optimizer.children(alt)))


def inputs_costed(optimizer: IncrementalTopDownOptimizer, inputs: set) -> int:
    """Alternatives over ``inputs`` whose inputs' best costs add up to at most their entry's best."""
    best = optimizer.best_costs
    count = 0
    for group, alts in optimizer.memo.items():
        limit = best.get(group, float("inf")) * (1 + TOLERANCE)
        for alt in alts:
            children = optimizer.children(alt)
            if all(child in inputs for child in children) and sum(best[c] for c in children) <= limit:
                count += 1
    return count


def top_down_costed(sql: str, catalog: reopt.Catalog) -> int:
    optimizer = TopDownOptimizer.from_sql(sql, catalog)
    optimizer.optimize()
    return sum(len(optimizer.space.split(*group)) for group in optimizer.visited_groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="1a,8c,13a,17a,22a,26a,33a", help="comma-separated JOB queries")
    args = parser.parse_args()
    catalog = reopt.Catalog.load(JOB / "imdb_stats.json")
    columns = [*RULES[1:], "inputs", "top-down"]
    print(f"{'query':<7}{'relations':>10}{'alternatives':>14}" + "".join(f"{c:>16}" for c in columns))
    shares: dict[str, list[float]] = {c: [] for c in columns}
    for name in args.only.split(","):
        sql = (JOB / "queries" / f"{name}.sql").read_text()
        optimizer = IncrementalTopDownOptimizer.from_sql(sql, catalog)
        optimizer.optimize()
        total = costed(optimizer, released(optimizer, "none"))
        row = f"{name:<7}{len(optimizer.query.relations):>10}{total:>14,}"
        counts = {rule: costed(optimizer, released(optimizer, rule)) for rule in RULES[1:]}
        counts["inputs"] = inputs_costed(optimizer, released(optimizer, "goal"))
        counts["top-down"] = top_down_costed(sql, catalog)
        for column, n in counts.items():
            shares[column].append(n / total)
            row += f"{n:>9,} {n / total:>5.0%}"
        print(row, flush=True)
    print("median share of the alternatives costed: "
          + ", ".join(f"{rule} {statistics.median(s):.0%}" for rule, s in shares.items()))


if __name__ == "__main__":
    main()
