"""The Spark figures of ``reproduce.py``: Figure 7 with Table 2 (TPC-H Q5 over partitions of skewed
data, re-optimized between them) and Figure 10 with Table 4 (Linear Road's SegTollS, adaptive against
the best static plan, re-optimized every 1, 5 and 10 seconds of stream time), on local Spark.

Every variant runs every batch, in an order that rotates from batch to batch, and all must return the
same rows. Every plan the adaptive runs choose is checked against a full top-down optimization."""

from __future__ import annotations

import tempfile
from pathlib import Path

import reopt
from bench_spark import hindsight_optimizer, prepare_linear_road, prepare_tpch
from pyspark.sql import DataFrame
from reopt.baselines import TopDownOptimizer
from reopt.spark import local_session, session_weights
from reopt.spark.linear_road import LinearRoadConfig
from reopt.spark.runner import AdaptiveRunner
from reopt.spark.skewed_tpch import SkewConfig
from figures import Run, plot_panels, progress
from timing import median_time, rotated


def run_batch(runners: dict[str, AdaptiveRunner], batch: DataFrame, index: int, where: str) -> dict:
    records = {name: runners[name].run_batch(batch, index) for name in rotated(list(runners), index)}
    results = [sorted(record.result) for record in records.values()]
    if any(result != results[0] for result in results):
        raise AssertionError(f"{where}: the variants disagree on batch {index}")
    return records


def check_plan(optimizer: reopt.Optimizer, where: str) -> float:
    """Check the optimizer's plan against top-down's on the same statistics; top-down's median time."""
    query, catalog = optimizer.query, optimizer.catalog
    expected = TopDownOptimizer(query, catalog).optimize()
    plan = optimizer.optimize()
    if (plan.cost, plan.key()) != (expected.cost, expected.key()):
        raise AssertionError(f"{where}: the plan differs from a full top-down optimization's")
    return median_time(lambda: TopDownOptimizer(query, catalog).optimize(), 3)


def skewed_q5(spark, run: Run, work: Path) -> tuple[list[dict], list[dict]]:
    scale, skew = (0.01, SkewConfig(partitions=4)) if run.quick else (1, SkewConfig())
    progress(f"Figure 7: TPC-H scale {scale:g}, lineitem in {skew.partitions} skewed partitions")
    w = prepare_tpch(spark, work, skew, scale)  # TPC-H's own statistics: the single-stage plan's
    config = reopt.OptimizerConfig(weights=session_weights(spark), backend=run.backend)
    runners = {mode: AdaptiveRunner(reopt.Optimizer.from_sql(w.sql, w.catalog, config), spark, w.static, w.stream,
                                    adaptive=mode == "adaptive") for mode in ("adaptive", "single")}
    parts = w.batches
    runners["single"].run_batch(parts[0], -1)  # warm-up, untimed
    runners["single"].records.clear()
    figure, table = [], []
    for index, part in enumerate(parts):
        records = run_batch(runners, part, index, "Q5 over skewed partitions")
        adaptive, single = records["adaptive"], records["single"]
        topdown_s = check_plan(runners["adaptive"].optimizer, f"Q5 split {index + 1}")
        metrics = runners["adaptive"].optimizer.metrics()
        figure.append({"split": index + 1, "reopt_s": adaptive.reopt_s, "topdown_s": topdown_s,
                       "time_vs_topdown": adaptive.reopt_s / topdown_s, "entries_touched": metrics.entries_touched_ratio,
                       "alternatives_touched": metrics.alternatives_touched_ratio})
        table.append({"split": index + 1, "adaptive_s": adaptive.batch_s + adaptive.reopt_s, "static_s": single.batch_s,
                      "plan": adaptive.plan, "changed": adaptive.changed, "rows": adaptive.input_rows})
        progress(f"split {index + 1}: adaptive {table[-1]['adaptive_s']:.2f} s, single plan {single.batch_s:.2f} s, "
                 f"re-optimized in {adaptive.reopt_s * 1e3:.1f} ms (top-down {topdown_s * 1e3:.1f} ms)")
    return figure, table


def linear_road(spark, run: Run, work: Path) -> tuple[list[dict], list[dict]]:
    config = (LinearRoadConfig(batches=10, reports_per_batch=3_000, cars=2_000, segments=50, window=2,
                               seconds_per_batch=1, phases=4) if run.quick else
              LinearRoadConfig(batches=20, reports_per_batch=20_000, seconds_per_batch=1, phases=5))
    progress(f"Figure 10: Linear Road, {config.batches} one-second batches of {config.reports_per_batch:,} reports")
    w = prepare_linear_road(spark, work, config)
    settings = reopt.OptimizerConfig(weights=session_weights(spark), backend=run.backend)

    def runner(optimizer: reopt.Optimizer, **options) -> AdaptiveRunner:
        return AdaptiveRunner(optimizer, spark, w.static, w.stream, window=w.window, **options)

    progress("counting every join over the whole stream for the best static plan in hindsight")
    for name, frame in w.static.items():
        frame.createOrReplaceTempView(name)
    runners = {f"every {k} s": runner(reopt.Optimizer.from_sql(w.sql, w.catalog, settings), reoptimize_every=k)
               for k in (1, 5, 10)}
    runners["initial plan, static"] = runner(reopt.Optimizer.from_sql(w.sql, w.catalog, settings), adaptive=False)
    runners["best static plan in hindsight"] = runner(
        hindsight_optimizer(spark, w.sql, w.catalog, settings, [w.views(b) for b in range(len(w.batches))]),
        adaptive=False)
    every1 = runners["every 1 s"]
    figure = []
    for index, frame in enumerate(w.batches):
        records = run_batch(runners, frame, index, "Linear Road")
        topdown_s = check_plan(every1.optimizer, f"Linear Road batch {index}")
        query, catalog_now = every1.optimizer.query, every1.optimizer.catalog
        scratch_s = median_time(lambda: reopt.Optimizer(query, catalog_now, settings).optimize(), 3)
        row = {"batch": index, "reopt_s": records["every 1 s"].reopt_s, "topdown_s": topdown_s,
               "from_scratch_s": scratch_s, "plan": records["every 1 s"].plan}
        row.update({f"{name} exec_s": record.batch_s for name, record in records.items()})
        figure.append(row)
        progress(f"batch {index}: " + ", ".join(f"{name} {records[name].batch_s:.2f} s" for name in runners))
    table = []
    for name, each in runners.items():
        every = int(name.split()[1]) if name.startswith("every") else ""
        reopt_s = sum(r.reopt_s for r in each.records)
        exec_s = sum(r.batch_s for r in each.records)
        table.append({"variant": name, "every": every, "reopt_s": reopt_s, "exec_s": exec_s, "total_s": reopt_s + exec_s,
                      "plan_changes": sum(r.changed for r in each.records)})
    return figure, table


def spark_figures(run: Run) -> dict[str, list[dict]]:
    """Figures 7 and 10 and Tables 2 and 4: their rows, their CSVs and PNGs written."""
    with tempfile.TemporaryDirectory(prefix="reopt-reproduce-") as temporary:
        work = Path(temporary)
        spark = local_session("reopt-reproduce", extra={"spark.sql.warehouse.dir": str(work / "warehouse")})
        try:
            fig7, table2 = skewed_q5(spark, run, work)
            fig10, table4 = linear_road(spark, run, work)
        finally:
            spark.stop()
    for name, rows in (("fig7", fig7), ("table2", table2), ("fig10", fig10), ("table4", table4)):
        run.csv(name, rows)
    plot_panels(run.out / "fig7.png", "Figure 7: Q5 re-optimized between skewed partitions, on Spark", [
        ("(a) re-optimization / a top-down optimization", {"reopt": [(r["split"], r["time_vs_topdown"]) for r in fig7]}),
        ("(b) plan-table entries touched", {"reopt": [(r["split"], r["entries_touched"]) for r in fig7]}),
        ("(c) plan alternatives touched", {"reopt": [(r["split"], r["alternatives_touched"]) for r in fig7]}),
    ], "split", log_x=False)
    plot_panels(run.out / "table2.png", "Table 2: Q5 per split on Spark, adaptive against the single plan (s)", [
        ("seconds", {"re-optimized between splits": [(r["split"], r["adaptive_s"]) for r in table2],
                     "single plan": [(r["split"], r["static_s"]) for r in table2]})], "split", bars=True)
    variants = [name for name in fig10[0] if name.endswith(" exec_s")]
    plot_panels(run.out / "fig10.png", "Figure 10: Linear Road SegTollS on Spark", [
        ("execution per batch (s)", {v[:-len(" exec_s")]: [(r["batch"], r[v]) for r in fig10] for v in variants}),
        ("optimization per batch (ms)", {
            "reopt incremental": [(r["batch"], 1e3 * r["reopt_s"]) for r in fig10],
            "reopt from scratch": [(r["batch"], 1e3 * r["from_scratch_s"]) for r in fig10],
            "top-down from scratch": [(r["batch"], 1e3 * r["topdown_s"]) for r in fig10]}),
    ], "batch (one second of stream time)", log_x=False)
    plot_panels(run.out / "table4.png", "Table 4: frequency of adaptation (s)", [
        ("seconds", {"re-optimization": [(r["variant"], r["reopt_s"]) for r in table4],
                     "execution": [(r["variant"], r["exec_s"]) for r in table4]})], "", bars=True)
    return {"fig7": fig7, "table2": table2, "fig10": fig10, "table4": table4}

