"""The main job: an adaptive stream on Spark over drifting data, against the initial plan kept static.

Both runs read the same micro-batches (a file source, ``trigger(availableNow=True)``) and must return
the same results batch by batch; the adaptive run re-optimizes after every batch from what Spark
observed. A warm-up batch runs first so that neither run pays Spark's start-up costs alone.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from pyspark.sql import SparkSession

from ..optimizer.optimizer import Optimizer, OptimizerConfig
from .drift import DriftConfig, query_sql, write_workload
from .runner import AdaptiveRunner, BatchRecord, run_stream
from .session import session_weights
from .statistics import catalog_from_spark


@dataclass
class Comparison:
    adaptive: list[BatchRecord]
    static: list[BatchRecord]

    @property
    def adaptive_s(self) -> float:
        return sum(r.batch_s + r.reopt_s for r in self.adaptive)

    @property
    def static_s(self) -> float:
        return sum(r.batch_s for r in self.static)

    @property
    def reopt_share(self) -> float:
        return sum(r.reopt_s for r in self.adaptive) / self.adaptive_s

    @property
    def plan_changes(self) -> int:
        return sum(r.changed for r in self.adaptive)

    @property
    def same_results(self) -> bool:
        return [sorted(r.result) for r in self.adaptive] == [sorted(r.result) for r in self.static]

    def summary(self) -> str:
        return (f"summary: batches={len(self.adaptive)} plan_changes={self.plan_changes} "
                f"adaptive_s={self.adaptive_s:.2f} static_s={self.static_s:.2f} "
                f"speedup={self.static_s / self.adaptive_s:.2f} reopt_share={self.reopt_share:.4f}")


def compare(spark: SparkSession, config: DriftConfig, directory: str | Path | None = None,
            on_batch: Callable[[str, BatchRecord], None] | None = None,
            optimizer_config: OptimizerConfig | None = None) -> Comparison:
    """Run the drifting stream twice, static then adaptive, after a warm-up batch. Without a
    ``directory`` the data lives in a temporary one that is removed afterwards. reopt prices
    broadcasts with the session's broadcast threshold."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="reopt-demo-") as temporary:
            return compare(spark, config, temporary, on_batch, optimizer_config)
    directory = Path(directory)
    base = optimizer_config or OptimizerConfig()
    optimizer_config = replace(base, weights=session_weights(spark, base.weights))
    paths = write_workload(spark, config, directory / "data")
    static_tables = {name: spark.read.parquet(str(path)) for name, path in paths.items() if name != "events"}
    first_batch = spark.read.parquet(str(paths["events"] / "batch=0000"))
    catalog = catalog_from_spark(spark, {**static_tables, "events": first_batch})
    sql = query_sql(config)
    AdaptiveRunner(Optimizer.from_sql(sql, catalog, optimizer_config), spark, static_tables, "events",
                   adaptive=False).run_batch(
        first_batch, -1)
    schema = spark.read.parquet(str(paths["events"])).schema
    records = {}
    for mode in ("static", "adaptive"):
        runner = AdaptiveRunner(Optimizer.from_sql(sql, catalog, optimizer_config), spark, static_tables, "events",
                                adaptive=mode == "adaptive",
                                on_batch=(lambda r, m=mode: on_batch(m, r)) if on_batch else None)
        source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(paths["events"]))
        records[mode] = run_stream(runner, source, str(directory / f"checkpoint-{mode}"))
    return Comparison(records["adaptive"], records["static"])
