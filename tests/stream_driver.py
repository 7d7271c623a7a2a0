"""A streaming query's driver, as its own process, for the restart test (test_spark_restart.py).

``python stream_driver.py DATA CHECKPOINT STATE RECORDS [--kill-after BATCH]`` runs the drifting
stream written under DATA adaptively, keeping Spark's checkpoint in CHECKPOINT and reopt's state in
STATE, and appends one JSON line per micro-batch to RECORDS. With ``--kill-after``, the process kills
itself (SIGKILL: no clean-up of any kind) once that batch's record is written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

from pyspark.sql import SparkSession

from reopt import Optimizer, OptimizerConfig
from reopt.spark.drift import DriftConfig, query_sql
from reopt.spark.runner import AdaptiveRunner, BatchRecord, run_stream
from reopt.spark.session import local_session, session_weights
from reopt.spark.statistics import catalog_from_spark

DRIFT = DriftConfig(batches=6, rows_per_batch=40_000, dimension_keys=4_000, phases=3)


def runner(spark: SparkSession, data: Path, state: Path | None, on_batch=None) -> AdaptiveRunner:
    """The adaptive runner of the drifting stream, its statistics from the dimensions and the first batch."""
    dimensions = {f"d{i}": spark.read.parquet(str(data / f"d{i}")) for i in range(DRIFT.dimensions)}
    first = spark.read.parquet(str(data / "events" / "batch=0000"))
    sql = query_sql(DRIFT)
    catalog = catalog_from_spark(spark, {**dimensions, "events": first}, sql=sql)
    config = OptimizerConfig(weights=session_weights(spark, OptimizerConfig().weights))
    return AdaptiveRunner(Optimizer.from_sql(sql, catalog, config), spark, dimensions, "events",
                          on_batch=on_batch, state_dir=state, switch_margin=0.0,
                          trust_model=True)


def stream(spark: SparkSession, data: Path, checkpoint: Path, state: Path | None, on_batch=None) -> AdaptiveRunner:
    adaptive = runner(spark, data, state, on_batch)
    schema = spark.read.parquet(str(data / "events")).schema
    source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(data / "events"))
    run_stream(adaptive, source, str(checkpoint))
    return adaptive


def as_line(record: BatchRecord) -> str:
    return json.dumps({"batch": record.batch, "key": record.key, "changed": record.changed,
                       "result": [list(row) for row in sorted(record.result)]})


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("data", "checkpoint", "state", "records"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--kill-after", type=int)
    args = parser.parse_args()
    spark = local_session("reopt-restart", master="local[1]")

    def on_batch(record: BatchRecord) -> None:
        with args.records.open("a") as out:
            out.write(as_line(record) + "\n")
            out.flush()
            os.fsync(out.fileno())
        if record.batch == args.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    adaptive = stream(spark, args.data, args.checkpoint, args.state, on_batch)
    print(json.dumps({"resumed_after": adaptive.resumed_after}))
    spark.stop()


if __name__ == "__main__":
    main()
