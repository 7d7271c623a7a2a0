"""Cost-model calibration: what each operator of reopt's cost model costs on this Spark, per row.

Runs small Spark jobs over the drifting workload's data (events with four long columns, a filtered
dimension of two long columns), AQE off so each job runs as written, and takes each operator's
cost as the difference between a job with it and the same job without it (median of ``--repeat``
runs, wall time on ``--master``), divided by the rows it handles:

* scan: reading and summing the events, less a trivial job's time (Spark's fixed cost of a job), per
  row (bytes read are the file's);
* exchange: hash-repartitioning the events, per row;
* broadcast build: broadcasting the dimension and building its hash table, per dimension row;
* shuffled build: a shuffled hash join building the dimension, less the dimension's exchange;
* probe: streaming the events through a broadcast hash table of 1,000 rows;
* sort: sorting the repartitioned events within partitions, per row and log2 of the rows per partition;
* sort and merge: a sort-merge join of events and dimension, less its scans and exchanges, per input
  row (the two sides' stages overlap on two cores, so sorts and merge are measured together);
* broadcast of a join result, per broadcast: the events joined with a 1,000-row table and then with
  the dimension, once as a pipeline (both tables broadcast, the events streaming through both hash
  tables) and once as a chain (the small join result broadcast, the dimension streaming through
  it). What the chain takes beyond the pipeline, less the difference the per-row weights already
  charge, is the wait: a join result is broadcast only after the job computing it has finished and
  been collected on the driver, while scans' broadcasts start together at once.

Prints each figure next to what the ``reopt.CostWeights`` defaults charge for it. The defaults are
such figures rounded, measured with ``--master "local[1]"`` (one core, so that no two stages overlap
and the differences add up; the model's unit is a second of one core) on a shared, noisy machine:
expect 30% either way from run to run, and use the ratios to see which weights are off by more.

    .venv/bin/python experiments/calibrate_costs.py [--master "local[1]"] [--rows 1000000] [--keys 200000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from pyspark.sql import functions as F

import reopt
from reopt.spark import local_session
from reopt.spark.drift import DriftConfig, dimension, events_batch
from results import Results
from timing import median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--master", default="local[1]")
    Results.option(parser, "calibrate_costs")
    args = parser.parse_args()

    config = DriftConfig(rows_per_batch=args.rows, dimension_keys=args.keys)
    work = Path(tempfile.mkdtemp(prefix="reopt-calibrate-"))
    spark = local_session("reopt-calibrate", master=args.master)
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    dimension(spark, config, 0).write.parquet(str(work / "dimension"))
    events_batch(spark, config, 0).drop("event_id").coalesce(1).write.parquet(str(work / "events"))
    events = spark.read.parquet(str(work / "events"))
    dim = spark.read.parquet(str(work / "dimension")).where("grp < 50").select("k", "w")
    n, m = events.count(), dim.count()
    one = events.limit(1).cache()
    small = dim.limit(1000).cache()
    for cached in (one, small):  # materialise the caches before any timing
        cached.count()

    def seconds(frame, aggregate=F.count(F.lit(1))) -> float:
        return median_time(lambda: frame.agg(aggregate).collect(), args.repeat)

    overhead = seconds(one)
    scan_events = seconds(events.select(F.sum("k0").alias("s")))
    scan_dim = seconds(dim.select(F.sum("k").alias("s")))
    exchange = seconds(events.repartition(partitions, "k0")) - scan_events
    broadcast_build = seconds(one.join(F.broadcast(dim), one.k0 == dim.k)) - scan_dim
    shuffled_build = seconds(one.join(dim.hint("shuffle_hash"), one.k0 == dim.k)) - scan_dim - exchange * m / n
    probe = seconds(events.join(F.broadcast(small), events.k0 == small.k)) - scan_events
    # first() depends on the order, so Spark keeps the sort (it drops sorts below order-blind aggregates)
    sort = (seconds(events.repartition(partitions, "k0").sortWithinPartitions("k0"), F.first("k0"))
            - seconds(events.repartition(partitions, "k0"), F.first("k0")))
    log_rows = math.log2(max(2.0, n / partitions))
    merge = (seconds(events.join(dim.hint("merge"), events.k0 == dim.k)) - scan_events - scan_dim + overhead
             - exchange * (n + m) / n)

    w = reopt.CostWeights()
    result = events.join(F.broadcast(small.select(F.col("k").alias("s"))), events.k0 == F.col("s"))
    r = result.count()
    pipeline = seconds(result.join(F.broadcast(dim), result.k1 == dim.k))
    chain = seconds(dim.join(F.broadcast(result), dim.k == result.k1))
    built = w.build_row + w.broadcast_row + 16 * w.broadcast_byte  # two long columns a row
    charged = (r * built + m * w.probe_row) - (m * built + r * w.probe_row)  # chain less pipeline, per row
    broadcast_join = chain - pipeline - charged
    width = sum(p.stat().st_size for p in (work / "events").glob("*.parquet")) / n  # stored bytes per row
    figures = [
        ("scan, per row (with its bytes)", (scan_events - overhead) / n, w.row_out + w.scan_byte * width),
        ("exchange, per row (with its bytes)", exchange / n, w.shuffle_row + w.shuffle_byte * width),
        ("broadcast build, per row", broadcast_build / m, w.build_row + w.broadcast_row),
        ("shuffled build, per row", shuffled_build / m, w.build_row),
        ("probe, per row", probe / n, w.probe_row),
        ("sort, per row and log2 row", sort / n / log_rows, w.sort_row),
        ("sort and merge, per input row", merge / (n + m),
         w.sort_row * math.log2(max(2.0, (n + m) / 2 / partitions)) + w.merge_row),
    ]
    jobs = [("broadcast of a join result, per job", broadcast_join, w.broadcast_job)]
    print(f"{n:,} events, {m:,} dimension rows, {r:,} rows in the broadcast join result, "
          f"{partitions} shuffle partitions, master {args.master}")
    print(f"{'operator':<36}{'measured ns':>12}{'default ns':>12}{'ratio':>8}")
    for name, measured, default in figures:
        print(f"{name:<36}{measured * 1e9:>12.0f}{default * 1e9:>12.0f}{measured / default:>8.2f}")
    print(f"{'':<36}{'measured ms':>12}{'default ms':>12}")
    for name, measured, default in jobs:
        print(f"{name:<36}{measured * 1e3:>12.1f}{default * 1e3:>12.1f}{measured / default:>8.2f}")
    spark.stop()
    rows = [{"operator": name, "measured_s": measured, "default_s": default} for name, measured, default in figures + jobs]
    results = Results.of(args, "calibrate_costs")
    print(f"wrote {results.json(rows)}, {results.csv(rows, list(rows[0]))}")


if __name__ == "__main__":
    main()
