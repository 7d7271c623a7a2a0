"""The reference paper's evaluation, reproduced: reopt's analogue of every figure and table.

Writes, under ``--out`` (default ``experiments/out/reproduce``), a CSV and a PNG per figure
(``fig5`` .. ``fig14``; Figure 7 with Table 2 and Figure 10 with Table 4 come from Spark runs,
``table3`` is state held) and ``report.md``, which sets the paper's values (``paper.py``) beside
reopt's with a sentence per figure on where they agree and why they differ.

Every re-optimized plan is checked against a full top-down optimization of the same statistics.
Times are medians of ``--repeat`` runs, the compared optimizers timed in turns. ``--quick`` runs
every figure at a small size (two factors, one repeat, small Spark data) to check that every output
is produced; ``--no-spark`` leaves out Figures 7 and 10 (also left out when pyspark is missing).

    .venv/bin/python experiments/reproduce.py [--quick] [--out DIR] [--backend native|python] [--no-spark]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Callable

import reopt
from bench_reopt import Q5_LEVELS
from changes import selectivity_change
from reopt.baselines import (BottomUpOptimizer, IncrementalBottomUpOptimizer, IncrementalTopDownOptimizer,
                             TopDownOptimizer)
from reopt.datalog.engine import BACKENDS, default_backend
from reopt.optimizer.sql import parse_sql
from reopt.optimizer.workloads import TPCH
from figures import Run, plot_panels, progress, series
from report import write_report
from results import OUT
from timing import interleaved_samples, median_time, timed

PRUNING = ("aggsel", "aggsel+refcount", "aggsel+bounding", "all")  # the paper's four combinations
PAPER_NAMES = {"aggsel": "AggSel", "aggsel+refcount": "AggSel+RefCount", "aggsel+bounding": "AggSel+Branch&Bounding",
               "all": "All", "none": "no pruning", "goal": "reopt default (goal bound)"}


def optimizer(name: str, setting: str, run: Run, catalog: reopt.Catalog) -> reopt.Optimizer:
    config = reopt.OptimizerConfig.setting(setting, backend=run.backend)
    return reopt.Optimizer(parse_sql(TPCH[name], catalog), catalog, config)


def same_plan(plan: reopt.Plan, expected: reopt.Plan, where: str) -> None:
    if (plan.cost, plan.key()) != (expected.cost, expected.key()):
        raise AssertionError(f"{where}: the plan differs from a full top-down optimization's")


def topdown_pruning(query: reopt.Query, catalog: reopt.Catalog, space: reopt.OptimizerMetrics) -> tuple[float, float]:
    """The shares of the space's entries and alternatives a top-down optimization never searched:
    its memo holds the groups it visited and, for each, every alternative."""
    topdown = TopDownOptimizer(query, catalog)
    topdown.optimize()
    visited = topdown.visited_groups
    alternatives = sum(len(topdown.space.split(*group)) for group in visited)
    return (1 - len(visited) / space.entries_in_space, 1 - alternatives / space.alternatives_in_space)


# -- Figure 5 and Figure 11: initial optimization --------------------------------------------------

def initial(run: Run, queries: tuple[str, ...], settings: tuple[str, ...], procedural: bool) -> list[dict]:
    catalog = reopt.Catalog.tpch(1)
    rows = []
    for name in queries:
        progress(f"initial optimization of {name}")
        query = parse_sql(TPCH[name], catalog)
        fns: dict[str, Callable[[], object]] = {
            setting: (lambda s=setting: reopt.Optimizer(query, catalog, reopt.OptimizerConfig.setting(
                s, backend=run.backend)).optimize()) for setting in settings}
        fns["topdown"] = lambda: TopDownOptimizer(query, catalog).optimize()
        if procedural:
            fns["bottomup"] = lambda: BottomUpOptimizer(query, catalog).optimize()
        times = {k: statistics.median(v) for k, v in interleaved_samples(fns, run.repeat).items()}
        expected = TopDownOptimizer(query, catalog).optimize()
        for setting in settings:
            opt = optimizer(name, setting, run, catalog)
            same_plan(opt.optimize(), expected, f"{name} {setting}")
            m = opt.metrics()
            rows.append({"query": name, "optimizer": setting, "seconds": times[setting],
                         "time_vs_topdown": times[setting] / times["topdown"],
                         "entries_pruned": m.entries_pruned_ratio, "alternatives_pruned": m.alternatives_pruned_ratio,
                         "state_kb": m.state_bytes / 1024})
        space = optimizer(name, "none", run, catalog)
        space.optimize()
        entries, alternatives = topdown_pruning(query, catalog, space.metrics())
        rows.append({"query": name, "optimizer": "topdown", "seconds": times["topdown"], "time_vs_topdown": 1.0,
                     "entries_pruned": entries, "alternatives_pruned": alternatives, "state_kb": ""})
        if procedural:
            rows.append({"query": name, "optimizer": "bottomup", "seconds": times["bottomup"],
                         "time_vs_topdown": times["bottomup"] / times["topdown"], "entries_pruned": "",
                         "alternatives_pruned": "", "state_kb": ""})
    return rows


# -- Figures 6, 8, 12, 13, 14: re-optimization after one change ------------------------------------

Change = tuple[str, float, reopt.DeltaStats, reopt.DeltaStats]  # (what, factor, delta, revert)


def join_changes(query: reopt.Query, catalog: reopt.Catalog, factors) -> list[Change]:
    return [(level, factor, *selectivity_change(query, catalog, predicate, factor))
            for level, predicate in Q5_LEVELS for factor in factors]


def scan_changes(catalog: reopt.Catalog, tables, factors) -> list[Change]:
    return [(table, factor, reopt.DeltaStats.table(table, rows=max(1.0, catalog.table(table).rows * factor)),
             reopt.DeltaStats.table(table, rows=catalog.table(table).rows))
            for table in tables for factor in factors]


def reoptimization(run: Run, name: str, settings: tuple[str, ...], changes: Callable[[reopt.Query, reopt.Catalog], list[Change]]
                   ) -> list[dict]:
    """Each change made on an optimized optimizer per setting, timed (median of ``repeat``, the change
    reverted in between), beside a full top-down optimization of the changed statistics."""
    catalog = reopt.Catalog.tpch(1)
    optimizers = {s: optimizer(name, s, run, catalog) for s in settings}
    for opt in optimizers.values():
        opt.optimize()
    query = next(iter(optimizers.values())).query
    rows = []
    for what, factor, delta, revert in changes(query, catalog):
        times: dict[str, list[float]] = {s: [] for s in settings}
        plans = {}
        for attempt in range(run.repeat):
            for setting, opt in optimizers.items():
                if attempt:
                    opt.reoptimize(revert)
                plans[setting], seconds = timed(lambda o=opt: o.reoptimize(delta))
                times[setting].append(seconds)
        after = next(iter(optimizers.values())).catalog
        topdown_s = median_time(lambda: TopDownOptimizer(query, after).optimize(), run.repeat)
        expected = TopDownOptimizer(query, after).optimize()
        for setting, opt in optimizers.items():
            same_plan(plans[setting], expected, f"{name} {what} x{factor} {setting}")
            m = opt.metrics()
            seconds = statistics.median(times[setting])
            rows.append({"query": name, "change": what, "factor": factor, "optimizer": setting, "seconds": seconds,
                         "topdown_s": topdown_s, "time_vs_topdown": seconds / topdown_s,
                         "entries_touched": m.entries_touched_ratio, "alternatives_touched": m.alternatives_touched_ratio,
                         "entries_pruned": m.entries_pruned_ratio, "alternatives_pruned": m.alternatives_pruned_ratio})
            opt.reoptimize(revert)
    return rows


# -- Figure 9: the procedural optimizers made incremental ------------------------------------------

def procedural(run: Run) -> list[dict]:
    catalog = reopt.Catalog.tpch(1)
    query = parse_sql(TPCH["Q5"], catalog)
    kinds = {"TD": (IncrementalTopDownOptimizer, TopDownOptimizer),
             "BU": (IncrementalBottomUpOptimizer, BottomUpOptimizer)}
    incremental = {k: inc(query, catalog) for k, (inc, _full) in kinds.items()}
    for opt in incremental.values():
        opt.optimize()
    rows = []
    for what, factor, delta, revert in join_changes(query, catalog, run.factors):
        progress(f"procedural incremental, change {what} x{factor}")
        for kind, opt in incremental.items():
            samples = []
            for attempt in range(run.repeat):
                if attempt:
                    opt.reoptimize(revert)
                plan, seconds = timed(lambda o=opt: o.reoptimize(delta))
                samples.append(seconds)
            full_kind = kinds[kind][1]
            full_s = median_time(lambda k=full_kind: k(query, opt.catalog).optimize(), run.repeat)
            same_plan(plan, TopDownOptimizer(query, opt.catalog).optimize(), f"{kind} {what} x{factor}")
            recomputed = opt.last_recosted if kind == "TD" else opt.last_recomputed
            seconds = statistics.median(samples)
            rows.append({"change": what, "factor": factor, "optimizer": kind, "seconds": seconds, "full_s": full_s,
                         "time_vs_full": seconds / full_s, "entries_updated": opt.last_updated / opt.entry_count,
                         "alternatives_recomputed": recomputed / opt.alternative_count})
            opt.reoptimize(revert)
    return rows


# -- Table 3: state held ----------------------------------------------------------------------------

def state(run: Run) -> list[dict]:
    catalog = reopt.Catalog.tpch(1)
    rows = []
    for name in ("Q10", "Q5", "Q8Join"):
        for setting in ("none", "aggsel", "all"):
            progress(f"state held by {name} with {PAPER_NAMES[setting]}")
            opt = optimizer(name, setting, run, catalog)
            _plan, seconds = timed(opt.optimize)
            m = opt.metrics()
            rows.append({"query": name, "joins": len(opt.query.relations) - 1, "setting": setting,
                         "state_kb": m.state_bytes / 1024, "alternatives_alive": m.alternatives_alive,
                         "alternatives_remembered": m.alternatives_remembered, "seconds": seconds})
    return rows


def reopt_figure(run: Run, name: str, rows: list[dict], label: Callable[[dict], str], title: str,
                 ratios: tuple[str, str] = ("entries_touched", "alternatives_touched")) -> None:
    run.csv(name, rows)
    kind = "touched" if ratios[0].endswith("touched") else "pruned"
    plot_panels(run.out / f"{name}.png", title, [
        ("(a) time / a top-down optimization", series(rows, label, "factor", "time_vs_topdown")),
        (f"(b) plan-table entries {kind}", series(rows, label, "factor", ratios[0])),
        (f"(c) plan alternatives {kind}", series(rows, label, "factor", ratios[1])),
    ], "new value / old value")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every figure at a small size (a few minutes)")
    parser.add_argument("--repeat", type=int, help="timed runs per point (default 5, 1 with --quick)")
    parser.add_argument("--backend", default=default_backend(), choices=BACKENDS)
    parser.add_argument("--no-spark", action="store_true", help="leave out Figures 7 and 10 (Spark runs)")
    parser.add_argument("--out", type=Path, default=OUT / "reproduce", help="output folder (default %(default)s)")
    args = parser.parse_args()
    if args.repeat is not None and args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    run = Run(args.quick, args.repeat or (1 if args.quick else 5), args.backend, args.out)
    run.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    progress(f"reproducing the paper's evaluation into {run.out} ({'quick' if run.quick else 'full'} run, "
             f"{run.backend} backend, {run.repeat} timed run(s) per point)")
    results: dict[str, list[dict]] = {}
    queries = ("Q5", "Q10") if run.quick else ("Q5", "Q10", "Q8Join")

    results["fig5"] = initial(run, queries, ("all", "aggsel", "goal"), procedural=True)
    run.csv("fig5", results["fig5"])
    rows5 = results["fig5"]
    plot_panels(run.out / "fig5.png", "Figure 5: initial optimization by optimizer architecture", [
        ("(a) time / top-down", series(rows5, lambda r: PAPER_NAMES.get(r["optimizer"], r["optimizer"]), "query", "time_vs_topdown")),
        ("(b) plan-table entries pruned", series([r for r in rows5 if r["optimizer"] != "goal"],
                                                 lambda r: PAPER_NAMES.get(r["optimizer"], r["optimizer"]), "query", "entries_pruned")),
        ("(c) plan alternatives pruned", series([r for r in rows5 if r["optimizer"] != "goal"],
                                                lambda r: PAPER_NAMES.get(r["optimizer"], r["optimizer"]), "query", "alternatives_pruned")),
    ], "", bars=True)

    progress("Figure 6: Q5 after each join's selectivity changes")
    results["fig6"] = reoptimization(run, "Q5", ("all", "goal"),
                                     lambda q, c: join_changes(q, c, run.factors))
    reopt_figure(run, "fig6", results["fig6"], lambda r: f"change {r['change']} ({PAPER_NAMES[r['optimizer']]})",
                 "Figure 6: Q5 re-optimization after one join's selectivity changes")

    for name, table in (("fig8", "orders"), ("fig12", "supplier")):
        progress(f"{name}: each pruning technique after a scan-cost change of {table}")
        results[name] = reoptimization(run, "Q5", PRUNING, lambda q, c, t=table: scan_changes(c, [t], run.factors))
        reopt_figure(run, name, results[name], lambda r: PAPER_NAMES[r["optimizer"]],
                     f"Figure {name[3:]}: Q5 re-optimization by pruning technique, {table}'s scan cost changed",
                     ("entries_pruned", "alternatives_pruned"))

    progress("Figure 9: procedural optimizers made incremental")
    results["fig9"] = procedural(run)
    run.csv("fig9", results["fig9"])
    label9 = lambda r: f"change {r['change']} ({r['optimizer']})"  # noqa: E731 - a one-line plot label
    plot_panels(run.out / "fig9.png", "Figure 9: procedural incremental re-optimization of Q5 against its full counterpart", [
        ("(a) time / the same optimizer from scratch", series(results["fig9"], label9, "factor", "time_vs_full")),
        ("(b) plan-table entries updated", series(results["fig9"], label9, "factor", "entries_updated")),
        ("(c) plan alternatives recomputed", series(results["fig9"], label9, "factor", "alternatives_recomputed")),
    ], "new join cost / old join cost")

    results["fig11"] = initial(run, ("Q3", "Q5", "Q10") if run.quick else ("Q3", "Q5", "Q10", "Q8Join"), PRUNING,
                               procedural=False)
    run.csv("fig11", results["fig11"])
    pruning_rows = [r for r in results["fig11"] if r["optimizer"] in PRUNING]
    plot_panels(run.out / "fig11.png", "Figure 11: pruning techniques in initial optimization", [
        ("(a) time / top-down", series(pruning_rows, lambda r: PAPER_NAMES[r["optimizer"]], "query", "time_vs_topdown")),
        ("(b) plan-table entries pruned", series(pruning_rows, lambda r: PAPER_NAMES[r["optimizer"]], "query", "entries_pruned")),
        ("(c) plan alternatives pruned", series(pruning_rows, lambda r: PAPER_NAMES[r["optimizer"]], "query", "alternatives_pruned")),
    ], "", bars=True)

    for name, query, tables in (("fig13", "Q10", ("customer", "orders", "lineitem", "nation")),
                                ("fig14", "Q8Join", ("orders", "lineitem", "customer", "part", "partsupp",
                                                     "supplier", "nation", "region"))):
        if run.quick:
            tables = tables[:2]
        progress(f"{name}: {query} after a base table's cardinality changes")
        results[name] = reoptimization(run, query, ("all", "goal"), lambda q, c, t=tables: scan_changes(c, t, run.factors))
        reopt_figure(run, name, results[name], lambda r: f"{r['change']} changed ({PAPER_NAMES[r['optimizer']]})",
                     f"Figure {name[3:]}: {query} re-optimization after a base table's cardinality changes")

    results["table3"] = state(run)
    run.csv("table3", results["table3"])
    plot_panels(run.out / "table3.png", "Table 3: state held by the declarative optimizer (KB)", [
        ("state (KB)", series(results["table3"], lambda r: PAPER_NAMES[r["setting"]], "query", "state_kb"))], "",
        bars=True)

    spark = not args.no_spark and importlib.util.find_spec("pyspark") is not None
    if spark:
        from reproduce_spark import spark_figures

        results.update(spark_figures(run))
    report = write_report(run.out, results, run.quick, run.backend, time.perf_counter() - started)
    progress(f"wrote {report} and the CSV and PNG of each figure in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
