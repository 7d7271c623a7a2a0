"""The main job: an adaptive stream on Spark over drifting data, against the initial plan kept static
and against Spark SQL planning each micro-batch itself (with adaptive query execution, as a user
would run it).

One stream (a file source, ``trigger(availableNow=True)``) runs every micro-batch three ways, in an
order that rotates from batch to batch, since whoever reads a batch first reads it cold. All three
must return the same results batch by batch. The adaptive run re-optimizes after every batch from
what Spark observed, and with ``sample_rows`` plans each batch from a sample of it first. Before
the first timed batch, the static plan and Spark SQL run once on it, untimed, inside the stream, so
that no run pays the start-up costs of that path alone.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession

from ..optimizer.optimizer import Optimizer, OptimizerConfig
from .drift import DriftConfig, query_sql, write_workload
from .runner import AdaptiveRunner, BatchRecord, stream_batches
from .session import session_weights
from .statistics import catalog_from_spark

MODES = ("adaptive", "static", "aqe")
PHASES = ("generating data", "statistics", "warm-up", "batches")


@dataclass
class Comparison:
    adaptive: list[BatchRecord]
    static: list[BatchRecord]
    aqe: list[BatchRecord]  # Spark SQL planning each batch itself
    first: list[str]  # per batch, the run that read it first
    setup_s: float = 0.0  # the adaptive run's sampler reading the static tables' key frequencies, once

    @property
    def adaptive_s(self) -> float:
        return sum(r.batch_s + r.reopt_s for r in self.adaptive)

    @property
    def static_s(self) -> float:
        return sum(r.batch_s for r in self.static)

    @property
    def aqe_s(self) -> float:
        return sum(r.batch_s for r in self.aqe)

    @property
    def reopt_share(self) -> float:
        return sum(r.reopt_s for r in self.adaptive) / self.adaptive_s

    @property
    def plan_changes(self) -> int:
        """Batches that ran a different plan from the batch before them."""
        return sum(r.changed for r in self.adaptive)

    @property
    def same_results(self) -> bool:
        results = [[sorted(r.result) for r in records] for records in (self.adaptive, self.static, self.aqe)]
        return results[0] == results[1] == results[2]

    def summary(self) -> str:
        return (f"summary: batches={len(self.adaptive)} plan_changes={self.plan_changes} "
                f"adaptive_s={self.adaptive_s:.2f} static_s={self.static_s:.2f} "
                f"speedup={self.static_s / self.adaptive_s:.2f} reopt_share={self.reopt_share:.4f} "
                f"aqe_s={self.aqe_s:.2f} speedup_vs_aqe={self.aqe_s / self.adaptive_s:.2f}")


def rotation(batch: int) -> list[str]:
    """The order the runs take a batch in: each run reads every third batch first."""
    shift = batch % len(MODES)
    return list(MODES[shift:] + MODES[:shift])


def compare(spark: SparkSession, config: DriftConfig, directory: str | Path | None = None,
            on_batch: Callable[[str, BatchRecord], None] | None = None,
            optimizer_config: OptimizerConfig | None = None,
            on_phase: Callable[[str], None] | None = None, sample_rows: int = 0) -> Comparison:
    """Run the drifting stream once, each micro-batch adaptive, static and by Spark SQL, after a
    warm-up batch. ``on_phase`` hears each of ``PHASES`` as it starts, ``on_batch(mode, record)``
    each run of a batch. Without a ``directory`` the data lives in a temporary one that is removed
    afterwards. reopt prices broadcasts with the session's broadcast threshold."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="reopt-demo-") as temporary:
            return compare(spark, config, temporary, on_batch, optimizer_config, on_phase, sample_rows)
    phase = on_phase or (lambda name: None)
    directory = Path(directory)
    base = optimizer_config or OptimizerConfig()
    optimizer_config = replace(base, weights=session_weights(spark, base.weights))
    phase("generating data")
    paths = write_workload(spark, config, directory / "data")
    dimensions = {name: str(path) for name, path in paths.items() if name != "events"}
    static_tables = {name: spark.read.parquet(path) for name, path in dimensions.items()}
    first_batch = spark.read.parquet(str(paths["events"] / "batch=0000"))  # statistics start from it
    phase("statistics")
    sql = query_sql(config)
    catalog = catalog_from_spark(spark, {**static_tables, "events": first_batch}, sql=sql)
    runners = {mode: AdaptiveRunner(Optimizer.from_sql(sql, catalog, optimizer_config), spark, static_tables, "events",
                                    adaptive=mode == "adaptive", sample_rows=sample_rows if mode == "adaptive" else 0)
               for mode in ("adaptive", "static")}
    aqe_sql = query_sql(config, placeholders=True)

    def spark_sql(batch: DataFrame, batch_id: int) -> BatchRecord:
        session = batch.sparkSession  # inside foreachBatch, a clone whose views the caller cannot see
        tables = {name: session.read.parquet(path) for name, path in dimensions.items()}
        start = time.perf_counter()
        result = [tuple(row) for row in session.sql(aqe_sql, events=batch, **tables).collect()]
        return BatchRecord(batch_id, "Spark SQL", False, 0.0, time.perf_counter() - start, None, result)

    records: dict[str, list[BatchRecord]] = {mode: [] for mode in MODES}
    first: list[str] = []

    def each(batch: DataFrame, batch_id: int) -> None:
        if not first:  # warm up the path every batch takes (a micro-batch's own session), untimed
            phase("warm-up")
            runners["static"].run_batch(batch, -1)
            runners["static"].records.clear()
            spark_sql(batch, -1)
            phase("batches")
        order = rotation(batch_id)
        first.append(order[0])
        for mode in order:
            record = spark_sql(batch, batch_id) if mode == "aqe" else runners[mode].run_batch(batch, batch_id)
            records[mode].append(record)
            if on_batch is not None:
                on_batch(mode, record)

    schema = spark.read.parquet(str(paths["events"])).schema
    source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(paths["events"]))
    stream_batches(spark, source, str(directory / "checkpoint"), each)
    return Comparison(records["adaptive"], records["static"], records["aqe"], first, runners["adaptive"].setup_s)
