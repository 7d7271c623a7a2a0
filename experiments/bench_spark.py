"""Spark benchmark: the drifting workload, adaptive reopt vs its initial plan kept static vs Spark's
own planning of the same SQL.

All variants run the same batches (parquet, one per batch) in one Spark session, in turn per batch
after a warm-up (the order rotates from batch to batch, since the first to run reads the batch's file
cold), and must return the same results:

* ``adaptive``: reopt's plan, re-optimized after every batch from the observed join cardinalities;
* ``static``: reopt's initial plan throughout;
* ``spark-aqe``: Spark SQL on the batch (AQE on, default broadcast threshold, no statistics);
* ``spark-cbo``: Spark SQL with CBO and join reordering on, the dimensions and each batch written as
  tables and analysed (``ANALYZE TABLE ... FOR ALL COLUMNS``; the analysis time is reported apart).

Prints per-variant totals and medians, the adaptive speedups, and re-optimization as a share of the
adaptive total. The per-batch records and the summary go to ``--out`` (``results.py``).

    .venv/bin/python experiments/bench_spark.py [--batches 21] [--rows 1000000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import reopt
from reopt.optimizer.optimizer import PRUNING_SETTINGS
from results import Results
from timing import timed
from reopt.spark import catalog_from_spark, local_session
from reopt.spark.drift import DriftConfig, query_sql, write_workload
from reopt.spark.runner import AdaptiveRunner




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=21)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--broadcast-mb", type=float, default=10.0,
                        help="reopt's broadcast threshold in MB of estimated bytes as Spark sizes them (default 10, as Spark's)")
    parser.add_argument("--pruning", default="goal", choices=list(PRUNING_SETTINGS),
                        help="the optimizer's pruning setting (default goal, as in the demo and the library)")
    Results.option(parser, "bench_spark")
    args = parser.parse_args()

    config = DriftConfig(batches=args.batches, rows_per_batch=args.rows, dimension_keys=args.keys, seed=args.seed)
    work = Path(tempfile.mkdtemp(prefix="reopt-bench-spark-"))
    spark = local_session("reopt-bench-spark", master=args.master,
                          extra={"spark.sql.warehouse.dir": str(work / "warehouse")})
    paths = write_workload(spark, config, work / "data")
    dims = {name: spark.read.parquet(str(path)) for name, path in paths.items() if name != "events"}
    batches = [spark.read.parquet(str(paths["events"] / f"batch={b:04d}")) for b in range(config.batches)]
    sql = query_sql(config)
    catalog = catalog_from_spark(spark, {**dims, "events": batches[0]}, sql=sql)

    settings = reopt.OptimizerConfig.setting(
        args.pruning, reopt.CostWeights(broadcast_threshold=args.broadcast_mb * 1024 * 1024))
    adaptive = AdaptiveRunner(reopt.Optimizer.from_sql(sql, catalog, settings), spark, dims, "events")
    static = AdaptiveRunner(reopt.Optimizer.from_sql(sql, catalog, settings), spark, dims, "events", adaptive=False)
    for name, frame in dims.items():
        frame.createOrReplaceTempView(name)
        frame.write.mode("overwrite").saveAsTable(f"cbo_{name}")
        spark.sql(f"ANALYZE TABLE cbo_{name} COMPUTE STATISTICS FOR ALL COLUMNS")
    cbo_sql = query_sql(config, table_prefix="cbo_")

    def spark_aqe(batch):
        batch.createOrReplaceTempView("events")
        return [tuple(r) for r in spark.sql(sql).collect()]

    def analyze(batch):
        """The batch written as a table and analysed, as CBO needs (timed apart from the query)."""
        batch.write.mode("overwrite").saveAsTable("cbo_events")
        spark.sql("ANALYZE TABLE cbo_events COMPUTE STATISTICS FOR ALL COLUMNS")

    def spark_cbo(batch):
        for key in ("spark.sql.cbo.enabled", "spark.sql.cbo.joinReorder.enabled"):
            spark.conf.set(key, "true")
        try:
            return [tuple(r) for r in spark.sql(cbo_sql).collect()]
        finally:
            for key in ("spark.sql.cbo.enabled", "spark.sql.cbo.joinReorder.enabled"):
                spark.conf.set(key, "false")

    static.run_batch(batches[0], -1)  # warm-up
    spark_aqe(batches[0])
    records = []
    for b, batch in enumerate(batches):
        row = {"batch": b}
        variants = {
            "adaptive": lambda: adaptive.run_batch(batch, b),
            "static": lambda: static.run_batch(batch, b),
            "spark_aqe": lambda: timed(lambda: spark_aqe(batch)),
            "spark_cbo": lambda: (timed(lambda: analyze(batch))[1], timed(lambda: spark_cbo(batch))),
        }
        names = list(variants)
        order = names[b % len(names):] + names[:b % len(names)]  # whoever runs first reads the batch cold
        out = {name: variants[name]() for name in order}
        a, s = out["adaptive"], out["static"]
        aqe_result, row["spark_aqe_s"] = out["spark_aqe"]
        row["analyze_s"], (cbo_result, row["spark_cbo_s"]) = out["spark_cbo"]
        row.update(adaptive_s=a.batch_s + a.reopt_s, reopt_s=a.reopt_s, plan=a.plan, changed=a.changed,
                   static_s=s.batch_s, first=order[0], retried=[n for n, r in (("adaptive", a), ("static", s)) if r.retried])
        assert sorted(a.result) == sorted(s.result) == sorted(aqe_result) == sorted(cbo_result), f"batch {b}"
        records.append(row)
        print(f"batch {b:>2}: adaptive {row['adaptive_s']:.2f}s (reopt {a.reopt_s * 1e3:.1f} ms{', changed' if a.changed else ''})"
              f"  static {row['static_s']:.2f}s  spark-aqe {row['spark_aqe_s']:.2f}s  spark-cbo {row['spark_cbo_s']:.2f}s"
              f" (+analyze {row['analyze_s']:.2f}s)  plan {a.plan}"
              + (f"  retried with sort-merge joins: {', '.join(row['retried'])}" if row["retried"] else ""))

    totals = {k: sum(r[k] for r in records) for k in ("adaptive_s", "static_s", "spark_aqe_s", "spark_cbo_s", "analyze_s")}
    summary = {
        "batches": len(records),
        "plan_changes": sum(r["changed"] for r in records),
        "retried": {name: sum(name in r["retried"] for r in records) for name in ("adaptive", "static")},
        **{f"total_{k}": v for k, v in totals.items()},
        **{f"median_{k}": statistics.median(r[k] for r in records) for k in ("adaptive_s", "static_s", "spark_aqe_s", "spark_cbo_s")},
        "speedup_vs_static": totals["static_s"] / totals["adaptive_s"],
        "speedup_vs_spark_aqe": totals["spark_aqe_s"] / totals["adaptive_s"],
        "speedup_vs_spark_cbo": totals["spark_cbo_s"] / totals["adaptive_s"],
        "reopt_share": sum(r["reopt_s"] for r in records) / totals["adaptive_s"],
    }
    print("\nsummary:", json.dumps(summary, indent=1))
    results = Results.of(args, "bench_spark")
    print(f"wrote {results.json({'records': records, 'summary': summary})}, {results.csv(records)}")
    spark.stop()


if __name__ == "__main__":
    main()
