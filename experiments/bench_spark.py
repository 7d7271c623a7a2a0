"""Spark benchmark: the drifting workloads, reopt adaptive (from execution feedback, and from a sample
of each batch) against four ways of planning without it.

The workloads: ``shuffled``, a star whose join order decides what every shuffle moves,
``snowflake``, two large dimensions filtered through outriggers, and ``broadcast``, a star whose
dimensions are all broadcast (``reopt.spark.drift.WORKLOADS``); ``tpch``, ``tpch_q8`` and
``tpch_q9``, TPC-H Q5, Q8 and Q9 over partitions of lineitem skewed differently over regions, years
and parts (``reopt.spark.skewed_tpch``); and ``linear_road``, SegTollS over position reports whose
traffic drifts in phases, a self-join with the previous three batches (``reopt.spark.linear_road``). Each
runs its batches (parquet, one file per batch, fixed seeds) in one Spark session under the
workload's settings. Every variant runs
every batch, in an order that rotates from batch to batch since the first to run reads the batch's
file cold, after one untimed warm-up, and all must return the same rows:

* ``adaptive``: reopt's plan, re-optimized after every batch from the observed join cardinalities;
* ``sampled``: the same, and each batch planned from a sample of its first ``--sample-rows`` rows
  before it runs (``AdaptiveRunner(sample_rows=...)``);
* ``static``: reopt's initial plan throughout (statistics of the first batch; for ``tpch``, of
  TPC-H itself);
* ``hindsight``: the single plan reopt picks knowing the whole stream: every join's true size over
  all batches, counted before the run (untimed);
* ``spark_aqe``: Spark SQL on the batch (AQE on, no statistics), what a user runs today;
* ``spark_cbo``: Spark SQL with CBO join reordering on, the static tables and each batch's tables
  written as tables of database ``cbo`` and analysed (``ANALYZE TABLE ... FOR ALL COLUMNS``; the
  analysis is timed apart).

Prints per batch and per workload the totals, medians, plan changes (and per drift) and
re-optimization share, the model's error as the adaptive runner's judge measured it (median
|measured / predicted - 1|, before and after one scale for the session), the plans it took back
and the batches it ran on Spark's own plan, the adaptive run's ratios to every other variant, the worst batch against Spark AQE outside the first
batch after a drift, and over the workloads run the geometric mean of adaptive over AQE. Keeps the
records in ``--out`` (``results.py``) and draws one PNG of batch times per workload.

    .venv/bin/python experiments/bench_spark.py [--workload shuffled] [--batches 12] [--sample-rows 1000]
        [--weights WEIGHTS.json] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from pyspark.sql import DataFrame
from sqlglot import exp

import reopt
from reopt.optimizer.estimate import Estimator
from reopt.optimizer.optimizer import PRUNING_SETTINGS
from reopt.optimizer.query import Query
from reopt.optimizer.workloads import TPCH
from reopt.spark import catalog_from_spark, load_tpch, session_weights
from reopt.spark.demo_plot import LABELS, draw
from reopt.spark.drift import WORKLOADS, Workload, drift_batches, query_sql, write_workload
from reopt.spark.linear_road import LinearRoadConfig, phase_shares, segtolls_sql, write_linear_road
from reopt.spark.skewed_tpch import SkewConfig, write_partitions
from reopt.spark.runner import AdaptiveRunner
from reopt.spark.sampling import DEFAULT_SAMPLE_ROWS
from results import Results
from spark_work import work_session
from timing import rotated, timed

VARIANTS = ("adaptive", "sampled", "static", "hindsight", "spark_aqe", "spark_cbo")
PLOT_LABELS = {"adaptive": LABELS["adaptive"], "static": LABELS["static"], "spark_aqe": LABELS["aqe"],
               "sampled": "reopt adaptive, each batch sampled first",
               "hindsight": "reopt best static plan in hindsight", "spark_cbo": "Spark SQL with CBO join reordering"}
EXPLOSION = 50
TPCH_WORKLOADS = {"tpch": "Q5", "tpch_q8": "Q8", "tpch_q9": "Q9"}
CBO_KEYS = ("spark.sql.cbo.enabled", "spark.sql.cbo.joinReorder.enabled")


def subset_sql(query: Query, mask: int) -> str:
    """SQL counting the rows of the join of the query's relations in ``mask``, their filters applied."""
    aliases = query.names(mask)
    tables = ", ".join(f"{query.table_of(alias)} {alias}" for alias in aliases)
    terms = [p.text for p in query.joins_within(mask)] + [f.text for a in aliases for f in query.filters_on(a)]
    return f"select count(*) from {tables}" + (f" where {' and '.join(terms)}" if terms else "")


def hindsight_optimizer(spark, sql: str, catalog: reopt.Catalog, config: reopt.OptimizerConfig,
                        batches: list[dict]) -> reopt.Optimizer:
    """An optimizer told the whole stream's size and every join's true size over it, counted batch
    by batch (a count over the whole stream at once runs out of memory here): its plan is the best
    single plan for the stream as one batch (joins estimated over ``EXPLOSION`` times their largest
    input keep their estimates). ``batches`` maps, per batch, each table that changes
    from batch to batch to its DataFrame in that batch; the other tables are views already, and a
    join of those alone is counted once."""
    optimizer = reopt.Optimizer.from_sql(sql, catalog, config)
    query = optimizer.query
    estimate = Estimator(query, catalog)
    # a join estimated far larger than its largest input (a join on a low-cardinality key, as Q5's
    # customer x supplier on the nation) would take Spark minutes to count, and no good plan runs it
    joins = [m for m in query.connected_subsets() if not query.is_leaf(m) and estimate.rows(m) <= EXPLOSION * max(
        estimate.rows(query.mask([alias])) for alias in query.names(m))]
    changing = set(batches[0])
    moving = [m for m in joins if any(query.table_of(alias) in changing for alias in query.names(m))]
    counts = {m: spark.sql(subset_sql(query, m)).first()[0] for m in joins if m not in moving}  # the same in every batch
    counts.update(dict.fromkeys(moving, 0))
    rows: dict[str, int] = {}
    for tables in batches:
        for name, frame in tables.items():
            frame.createOrReplaceTempView(name)
            rows[name] = rows.get(name, 0) + frame.count()
        for mask in moving:
            counts[mask] += spark.sql(subset_sql(query, mask)).first()[0]
    delta = reopt.DeltaStats.batch(reopt.DeltaStats.cardinality(query.names(m), n) for m, n in counts.items())
    for name, total in rows.items():
        delta = delta + reopt.DeltaStats.table(name, rows=max(1, total))
    optimizer.reoptimize(delta)
    return optimizer


@dataclass
class Prepared:
    """A workload ready to run: its query, the tables that stay, the table each batch replaces (and
    the window over the previous batches, for a windowed self-join), the batches, the batches where
    the data drifts, and the statistics reopt starts from."""

    sql: str
    static: dict
    stream: str
    batches: list
    drifts: list[int]
    catalog: reopt.Catalog
    window: tuple[str, int] | None = None

    def views(self, batch: int) -> dict:
        """The tables that change, as they are in ``batch``."""
        tables = {self.stream: self.batches[batch]}
        if self.window is not None:
            previous = self.batches[max(0, batch - self.window[1]):batch]
            tables[self.window[0]] = (functools.reduce(DataFrame.unionByName, previous) if previous
                                      else self.batches[batch].limit(0))
        return tables


def prepare_drift(spark, workload: Workload, batches: int | None, work: Path) -> Prepared:
    config = dataclasses.replace(workload.config, **({"batches": batches} if batches else {}))
    print(f"generating {config.batches} batches of {config.rows_per_batch:,} events ...", flush=True)
    paths = write_workload(spark, config, work / workload.name)
    dims = {name: spark.read.parquet(str(path)) for name, path in paths.items() if name != "events"}
    frames = [spark.read.parquet(str(paths["events"] / f"batch={b:04d}")) for b in range(config.batches)]
    sql = query_sql(config)
    return Prepared(sql, dims, "events", frames, drift_batches(config),
                    catalog_from_spark(spark, {**dims, "events": frames[0]}, sql=sql))


def prepare_tpch(spark, work: Path, skew: SkewConfig, scale: float = 1, query: str = "Q5") -> Prepared:
    """TPC-H ``query`` over skewed partitions of lineitem (generated once per ``work`` folder)."""
    folder = work / f"tpch-partitions-sf{scale:g}-{skew.partitions}"
    paths = [folder / f"part={index:02d}" for index in range(skew.partitions)]
    if not all((path / "_SUCCESS").exists() for path in paths):  # Spark marks a completed write
        print(f"generating TPC-H at scale {scale:g} and lineitem in {skew.partitions} skewed partitions ...", flush=True)
        write_partitions(load_tpch(spark, scale, work / "tpch"), skew, folder)
    tables = load_tpch(spark, scale, work / "tpch")
    parts = [spark.read.parquet(str(path)) for path in paths]
    sql = TPCH[query]
    static = {name: frame for name, frame in tables.items() if name != "lineitem"}
    # the statistics of TPC-H itself, uniform over regions and years; every partition flips the skew
    return Prepared(sql, static, "lineitem", parts, list(range(1, len(parts))),
                    catalog_from_spark(spark, tables, sql=sql))


def prepare_linear_road(spark, work: Path, config: LinearRoadConfig) -> Prepared:
    print(f"generating {config.batches} batches of {config.reports_per_batch:,} position reports ...", flush=True)
    paths = write_linear_road(spark, config, work / "linear-road")
    static = {name: spark.read.parquet(str(path)) for name, path in paths.items() if name != "reports"}
    frames = [spark.read.parquet(str(paths["reports"] / f"batch={b:04d}")) for b in range(config.batches)]
    drifts = [b for b in range(1, config.batches) if phase_shares(config, b) != phase_shares(config, b - 1)]
    return Prepared(segtolls_sql(), static, "reports", frames, drifts,
                    catalog_from_spark(spark, {**static, "reports": frames[0], "recent": frames[0]}),
                    window=("recent", config.window))


SUMMARIES = {
    **{name: workload.summary for name, workload in WORKLOADS.items()},
    **{name: f"TPC-H {query} over partitions of lineitem skewed differently over regions, years and parts (scale 1)"
       for name, query in TPCH_WORKLOADS.items()},
    "linear_road": "Linear Road's SegTollS, a windowed self-join of position reports, traffic drifting in phases",
}


def prepare(spark, name: str, batches: int | None, work: Path) -> Prepared:
    if name in WORKLOADS:
        return prepare_drift(spark, WORKLOADS[name], batches, work)
    if name in TPCH_WORKLOADS:
        return prepare_tpch(spark, work, SkewConfig(**({"partitions": batches} if batches else {})),
                            query=TPCH_WORKLOADS[name])
    return prepare_linear_road(spark, work, LinearRoadConfig(batches=batches or 20, reports_per_batch=50_000,
                                                             seconds_per_batch=1, phases=5))


def run_workload(spark, name: str, batches: int | None, work: Path, pruning: str, sample_rows: int,
                 results: Results, weights: Path | None = None) -> dict:
    session = WORKLOADS[name].session if name in WORKLOADS else {}
    for key in {key for other in WORKLOADS.values() for key in other.session}:
        spark.conf.unset(key)
    for key, value in session.items():
        spark.conf.set(key, value)
    print(f"\n== workload {name}: {SUMMARIES[name]}")
    w = prepare(spark, name, batches, work)
    settings = reopt.OptimizerConfig.setting(pruning, session_weights(spark, weights))

    def runner(optimizer: reopt.Optimizer, adaptive: bool = True, sample: int = 0) -> AdaptiveRunner:
        return AdaptiveRunner(optimizer, spark, w.static, w.stream, adaptive=adaptive, window=w.window,
                              sample_rows=sample)

    adaptive = runner(reopt.Optimizer.from_sql(w.sql, w.catalog, settings))
    sampled = runner(reopt.Optimizer.from_sql(w.sql, w.catalog, settings), sample=sample_rows)
    print(f"set-up: static joins counted in {adaptive.setup_s:.2f} s; sampler: {len(sampled.sampler.expressions)} "
          f"joins measured on {sample_rows:,} rows of each batch, key frequencies of the static tables and static "
          f"joins in {sampled.setup_s:.2f} s", flush=True)
    static = runner(reopt.Optimizer.from_sql(w.sql, w.catalog, settings), adaptive=False)
    spark.sql("create database if not exists cbo")
    for table, frame in w.static.items():
        frame.createOrReplaceTempView(table)
        frame.write.mode("overwrite").saveAsTable(f"cbo.{table}")
        spark.sql(f"ANALYZE TABLE cbo.{table} COMPUTE STATISTICS FOR ALL COLUMNS")
    print("counting every join over the whole stream for the plan in hindsight ...", flush=True)
    hindsight = runner(hindsight_optimizer(spark, w.sql, w.catalog, settings,
                                           [w.views(b) for b in range(len(w.batches))]), adaptive=False)
    changing = list(w.views(0))
    cbo_sql = exp.replace_tables(sqlglot.parse_one(w.sql, read="spark"),
                                 {table: f"cbo.{table}" for table in changing}).sql("spark")

    def spark_aqe(b):
        for table, frame in w.views(b).items():
            frame.createOrReplaceTempView(table)
        return [tuple(r) for r in spark.sql(w.sql).collect()]

    def analyze(b):
        for table, frame in w.views(b).items():
            frame.write.mode("overwrite").saveAsTable(f"cbo.{table}")
            spark.sql(f"ANALYZE TABLE cbo.{table} COMPUTE STATISTICS FOR ALL COLUMNS")

    def spark_cbo():
        for key in CBO_KEYS:
            spark.conf.set(key, "true")
        try:
            return [tuple(r) for r in spark.sql(cbo_sql).collect()]
        finally:
            for key in CBO_KEYS:
                spark.conf.set(key, "false")

    warm_up = runner(reopt.Optimizer.from_sql(w.sql, w.catalog, settings), adaptive=False)
    warm_up.run_batch(w.batches[0], -1)  # untimed, in its own runner: the others' windows start empty
    spark_aqe(0)
    records = []
    for b, batch in enumerate(w.batches):
        # the CBO variant's tables are written and analysed before any variant runs: done inside the
        # rotation, that work (writing the batch, a job per column) slowed whichever variant came next
        analyze_s = timed(lambda: analyze(b))[1]
        variants = {
            "adaptive": lambda: adaptive.run_batch(batch, b),
            "sampled": lambda: sampled.run_batch(batch, b),
            "static": lambda: static.run_batch(batch, b),
            "hindsight": lambda: hindsight.run_batch(batch, b),
            "spark_aqe": lambda: timed(lambda: spark_aqe(b)),
            "spark_cbo": lambda: timed(spark_cbo),
        }
        order = rotated(VARIANTS, b)
        out = {variant: variants[variant]() for variant in order}
        a, p, s, h = out["adaptive"], out["sampled"], out["static"], out["hindsight"]
        aqe_result, aqe_s = out["spark_aqe"]
        cbo_result, cbo_s = out["spark_cbo"]
        answers = [sorted(rows) for rows in (a.result, p.result, s.result, h.result, aqe_result, cbo_result)]
        assert all(rows == answers[0] for rows in answers), f"{name}: the variants disagree on batch {b}"
        row = {"workload": name, "batch": b, "adaptive_s": a.batch_s + a.reopt_s, "reopt_s": a.reopt_s,
               "sampled_s": p.batch_s + p.reopt_s, "sampled_reopt_s": p.reopt_s, "sample_s": p.sample_s,
               "static_s": s.batch_s, "hindsight_s": h.batch_s, "spark_aqe_s": aqe_s, "spark_cbo_s": cbo_s,
               "analyze_s": analyze_s, "changed": a.changed, "plan": a.plan, "sampled_changed": p.changed,
               "sampled_plan": p.plan, "first": order[0], "why": a.why, "sampled_why": p.why,
               "retried": [n for n, r in (("adaptive", a), ("sampled", p), ("static", s), ("hindsight", h))
                           if r.retried]}
        records.append(row)
        print(f"batch {b:>2}: " + "  ".join(f"{v} {row[v + '_s']:.2f}s" for v in VARIANTS)
              + f"  (reopt {a.reopt_s * 1e3:.1f} ms{', new plan' if a.changed else ''}; sample "
              f"{p.sample_s * 1e3:.0f} ms{', new plan' if p.changed else ''})  {a.plan}  sampled: {p.plan}", flush=True)
    summary = summarize(records, w.drifts, sampled.setup_s)
    summary.update(adaptive_setup_s=adaptive.setup_s, workload=name, static_plan=static.plan.join_order(), hindsight_plan=hindsight.plan.join_order(),
                   model=adaptive.judge.summary(), sampled_model=sampled.judge.summary(),
                   spark_plan_batches=sum(r.spark_plan for r in adaptive.records))
    print(json.dumps(summary, indent=1))
    runs = {PLOT_LABELS[v]: [r[f"{v}_s"] for r in records] for v in VARIANTS}
    title = (f"{name}: adaptive {summary['adaptive_vs']['spark_aqe']:.2f}x Spark AQE, "
             f"{summary['adaptive_vs']['hindsight']:.2f}x the best static plan in hindsight; "
             f"sampled {summary['sampled_vs']['spark_aqe']:.2f}x Spark AQE")
    png = draw(runs, PLOT_LABELS["adaptive"], [r["batch"] for r in records if r["changed"]], w.drifts, title,
               results.path(f"{name}.png"))
    print(f"drew {png}")
    return {"records": records, "summary": summary}


def summarize(records: list[dict], drifts: list[int], setup_s: float = 0.0) -> dict:
    """Totals and ratios. ``setup_s``, the sampler's reading of the static tables' key frequencies,
    is reported beside the totals, not in them: it is done once per stream, like the static tables'
    statistics every variant starts from (and CBO's analysis of them)."""
    totals = {v: sum(r[f"{v}_s"] for r in records) for v in VARIANTS}
    after_drift = set(drifts)

    def worst(variant: str) -> float:
        return max((r[f"{variant}_s"] / r["spark_aqe_s"] for r in records if r["batch"] not in after_drift),
                   default=float("nan"))

    return {
        "batches": len(records),
        "plan_changes": sum(r["changed"] for r in records),
        "plan_changes_per_drift": sum(r["changed"] for r in records) / max(1, len(drifts)),
        "sampled_plan_changes": sum(r["sampled_changed"] for r in records),
        "total_s": totals,
        "median_s": {v: statistics.median(r[f"{v}_s"] for r in records) for v in VARIANTS},
        "analyze_s": sum(r["analyze_s"] for r in records),
        "setup_s": setup_s,
        "adaptive_vs": {v: totals[v] / totals["adaptive"] for v in VARIANTS if v != "adaptive"},
        "sampled_vs": {v: totals[v] / totals["sampled"] for v in VARIANTS if v != "sampled"},
        "reopt_share": sum(r["reopt_s"] for r in records) / totals["adaptive"],
        "sampled_reopt_share": sum(r["sampled_reopt_s"] - r["sample_s"] for r in records) / totals["sampled"],
        "sample_share": sum(r["sample_s"] for r in records) / totals["sampled"],
        "worst_batch_vs_spark_aqe": worst("adaptive"),
        "sampled_worst_batch_vs_spark_aqe": worst("sampled"),
        "retried": sum(bool(r["retried"]) for r in records),
    }


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=list(SUMMARIES),
                        help="a workload to run (repeatable; default: every workload)")
    parser.add_argument("--batches", type=int, help="batches per workload (default: the workload's, 12)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--pruning", default="goal", choices=list(PRUNING_SETTINGS),
                        help="the optimizer's pruning setting (default goal, as in the demo and the library)")
    parser.add_argument("--sample-rows", type=int, default=DEFAULT_SAMPLE_ROWS,
                        help="rows of each batch the sampled run samples before planning it (default %(default)s)")
    parser.add_argument("--weights", type=Path, help="cost weights measured by reopt calibrate (default: built-in)")
    Results.option(parser, "bench_spark")
    args = parser.parse_args()
    if args.sample_rows < 1:
        parser.error(f"--sample-rows is a number of rows, at least 1, got {args.sample_rows}")
    results = Results.of(args, "bench_spark")
    work, spark = work_session("reopt-bench-spark", args.master)
    try:
        runs = {name: run_workload(spark, name, args.batches, work, args.pruning, args.sample_rows, results,
                                   args.weights)
                for name in args.workload or SUMMARIES}
    finally:
        spark.stop()
    overall = {"workloads": list(runs)}
    for variant in ("adaptive", "sampled"):
        ratios = [run["summary"][f"{variant}_vs"]["spark_aqe"] for run in runs.values()]
        overall[f"geomean_{variant}_vs_spark_aqe"] = math.exp(statistics.fmean(map(math.log, ratios)))
    print()
    for name, run in runs.items():
        summary = run["summary"]
        print(f"{name}: adaptive {summary['adaptive_vs']['spark_aqe']:.2f}x Spark AQE, "
              f"{summary['adaptive_vs']['static']:.2f}x its static plan, {summary['adaptive_vs']['hindsight']:.2f}x "
              f"hindsight; sampled {summary['sampled_vs']['spark_aqe']:.2f}x Spark AQE, "
              f"{summary['sampled_vs']['static']:.2f}x the static plan; plan changes per drift "
              f"{summary['plan_changes_per_drift']:.2f}; model error {_share(summary['model']['error'])} "
              f"(after one scale for the session {_share(summary['model']['error_after_scale'])}), "
              f"plans taken back {summary['model']['went_back']}, batches on Spark's own plan "
              f"{summary['spark_plan_batches']} of {summary['batches']}")
    print(f"geometric mean over Spark AQE: adaptive {overall['geomean_adaptive_vs_spark_aqe']:.2f}x, "
          f"sampled {overall['geomean_sampled_vs_spark_aqe']:.2f}x")
    records = [row for run in runs.values() for row in run["records"]]
    print(f"wrote {results.json({'overall': overall, 'workloads': {n: r['summary'] for n, r in runs.items()}, 'records': records})}, "
          f"{results.csv(records)}")


if __name__ == "__main__":
    main()
