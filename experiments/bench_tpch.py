"""TPC-H through ``optimize(df)``: all 22 queries, reopt against Spark AQE and Spark CBO, planning counted.

Each query runs three ways, in an order that rotates from run to run, a fresh DataFrame every time
(collecting one DataFrame twice reuses its shuffle files and broadcasts):

* ``spark_aqe``: ``spark.sql(q).collect()``, what a user runs today;
* ``reopt``: ``plan_frame(spark.sql(q)).frame.collect()``, the planning included in the time (its
  share reported apart); statistics as ``plan_frame`` finds them by default (Parquet footers and a
  sample, remembered for the session), so the first run of a query may plan cold and later runs
  from memory;
* ``spark_cbo``: the same SQL over copies of the tables analysed with ``ANALYZE TABLE ... FOR ALL
  COLUMNS`` (its time reported apart, not counted), with CBO join reordering on.

The results of all three are checked equal on every run. Before the timed runs each query runs once
under AQE, untimed, so the first timed variant does not pay for cold files. Prints a table per
query (medians), the queries reopt leaves as Spark planned them with the reason, and the geometric
means; writes JSON, CSV and a PNG of the speedups over Spark AQE.

    .venv/bin/python experiments/bench_tpch.py [--scale 1] [--runs 3] [--query Q5 ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
from decimal import Decimal
from pathlib import Path

import sqlglot
from sqlglot import exp

from reopt.spark import load_tpch, plan_frame
from results import Results
from spark_work import work_session
from timing import rotated, timed
from tpch_queries import QUERIES

VARIANTS = ("spark_aqe", "reopt", "spark_cbo")
CBO_KEYS = ("spark.sql.cbo.enabled", "spark.sql.cbo.joinReorder.enabled")


def normalized(rows) -> list[tuple]:
    """Rows comparable across plans: sorted, floating values to 9 significant digits (sums add up
    in another order under another plan)."""
    def value(v):
        if isinstance(v, float):
            return float(f"{v:.9g}")
        if isinstance(v, Decimal):
            return float(f"{float(v):.9g}")
        return v
    return sorted((tuple(value(v) for v in row) for row in rows), key=repr)


def cbo_sql(sql: str, tables: list[str]) -> str:
    return exp.replace_tables(sqlglot.parse_one(sql, read="spark"),
                              {table: f"cbo.{table}" for table in tables}).sql("spark")


def run_query(spark, name: str, sql: str, tables: list[str], runs: int) -> dict:
    with_cbo = cbo_sql(sql, tables)
    spark.sql(sql).collect()  # untimed: the files are warm for whichever variant goes first
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    planning: list[float] = []
    planned = None

    def aqe():
        return spark.sql(sql).collect()

    def reopt():
        nonlocal planned
        planned, plan_s = timed(lambda: plan_frame(spark.sql(sql)))
        planning.append(plan_s)
        return planned.frame.collect()

    def cbo():
        for key in CBO_KEYS:
            spark.conf.set(key, "true")
        try:
            return spark.sql(with_cbo).collect()
        finally:
            for key in CBO_KEYS:
                spark.conf.set(key, "false")

    variants = {"spark_aqe": aqe, "reopt": reopt, "spark_cbo": cbo}
    for turn in range(runs):
        answers = {}
        for variant in rotated(VARIANTS, turn):
            rows, seconds = timed(variants[variant])
            times[variant].append(seconds)
            answers[variant] = normalized(rows)
        assert answers["reopt"] == answers["spark_aqe"] == answers["spark_cbo"], f"{name}: the variants disagree"
    left = planned.plan is None or planned.spark_plan
    median = {v: statistics.median(times[v]) for v in VARIANTS}
    return {"query": name, **{f"{v}_s": median[v] for v in VARIANTS},
            "plan_s": statistics.median(planning), "first_plan_s": planning[0], "max_plan_s": max(planning),
            "vs_aqe": median["spark_aqe"] / median["reopt"], "cbo_vs_aqe": median["spark_aqe"] / median["spark_cbo"],
            "left_to_spark": left, "reason": planned.reason or "",
            "plan": "" if planned.plan is None else planned.plan.join_order()}


def draw(records: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 6))
    names = [r["query"] for r in records]
    ys = range(len(records))
    axes.barh([y - 0.2 for y in ys], [r["vs_aqe"] for r in records], height=0.4, color="tab:green",
              label="reopt optimize(df), planning counted")
    axes.barh([y + 0.2 for y in ys], [r["cbo_vs_aqe"] for r in records], height=0.4, color="tab:orange",
              label="Spark CBO after ANALYZE (analysis not counted)")
    axes.axvline(1.0, color="black", linewidth=1)
    axes.set_yticks(list(ys), names)
    axes.invert_yaxis()
    axes.set_xlabel("speedup over Spark SQL with AQE (higher is better)")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def geomean(values) -> float:
    values = list(values)
    return math.exp(statistics.fmean(map(math.log, values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1; 10 on request)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each variant per query (default 3)")
    parser.add_argument("--query", action="append", choices=list(QUERIES), help="a query to run (repeatable; default all)")
    parser.add_argument("--master", default="local[2]")
    Results.option(parser, "bench_tpch")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs is at least 1, got {args.runs}")
    results = Results.of(args, "bench_tpch")
    work, spark = work_session("reopt-bench-tpch", args.master)
    try:
        print(f"generating TPC-H at scale {args.scale:g} ...", flush=True)
        tables = load_tpch(spark, args.scale, work / "tpch")
        spark.sql("create database if not exists cbo")
        analyze_s = 0.0
        for table, frame in tables.items():
            frame.createOrReplaceTempView(table)
            frame.write.mode("overwrite").saveAsTable(f"cbo.{table}")
            analyze_s += timed(lambda: spark.sql(f"ANALYZE TABLE cbo.{table} COMPUTE STATISTICS FOR ALL COLUMNS"))[1]
        print(f"Spark CBO: tables analysed in {analyze_s:.1f} s (not counted)", flush=True)
        records = []
        header = f"{'query':<5} {'Spark AQE':>9} {'reopt':>8} {'planning':>9} {'CBO':>8} {'reopt/AQE':>9} {'CBO/AQE':>8}  plan"
        print(header)
        for name in args.query or QUERIES:
            r = run_query(spark, name, QUERIES[name], list(tables), args.runs)
            records.append(r)
            plan = "Spark's own plan" if r["left_to_spark"] else r["plan"]
            print(f"{name:<5} {r['spark_aqe_s']:>8.2f}s {r['reopt_s']:>7.2f}s {r['plan_s']:>8.3f}s "
                  f"{r['spark_cbo_s']:>7.2f}s {r['vs_aqe']:>8.2f}x {r['cbo_vs_aqe']:>7.2f}x  {plan}", flush=True)
    finally:
        spark.stop()
    print("\nqueries reopt leaves as Spark planned them:")
    for r in records:
        if r["left_to_spark"]:
            print(f"  {r['query']}: {r['reason']}")
    planned = [r for r in records if not r["left_to_spark"]]
    summary = {
        "scale": args.scale, "runs": args.runs, "queries": len(records), "analyze_s": analyze_s,
        "geomean_vs_aqe": geomean(r["vs_aqe"] for r in records),
        "geomean_cbo_vs_aqe": geomean(r["cbo_vs_aqe"] for r in records),
        "geomean_vs_aqe_where_reopt_planned": geomean(r["vs_aqe"] for r in planned) if planned else None,
        "slowest_vs_aqe": min(r["vs_aqe"] for r in records),
        "median_plan_s": statistics.median(r["plan_s"] for r in records),
        "max_plan_s": max(r["max_plan_s"] for r in records),
        "reopt_planned": len(planned),
    }
    print(f"\ngeometric mean over Spark AQE, planning counted: reopt {summary['geomean_vs_aqe']:.2f}x "
          f"(slowest query {summary['slowest_vs_aqe']:.2f}x), Spark CBO {summary['geomean_cbo_vs_aqe']:.2f}x; "
          f"reopt planned {len(planned)} of {len(records)} queries"
          + (f" ({summary['geomean_vs_aqe_where_reopt_planned']:.2f}x on those)" if planned else ""))
    print(f"planning: median {summary['median_plan_s']:.3f} s, slowest {summary['max_plan_s']:.3f} s")
    title = (f"TPC-H at scale {args.scale:g}, local[2]: reopt {summary['geomean_vs_aqe']:.2f}x Spark AQE "
             f"(geometric mean, planning counted), Spark CBO {summary['geomean_cbo_vs_aqe']:.2f}x")
    png = draw(records, results.path("png"), title)
    print(f"wrote {results.json({'summary': summary, 'records': records})}, {results.csv(records)}, {png}")


if __name__ == "__main__":
    main()
