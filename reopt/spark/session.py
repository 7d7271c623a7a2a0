"""Spark sessions for reopt: small and quiet.

reopt needs no setting changed to run its plans as chosen. Every join it builds carries a strategy
hint (``broadcast``, ``shuffle_hash`` or ``merge``); hints take precedence over Spark's size-based
strategy choice (also when AQE re-plans), and neither the rule-based ``ReorderJoin`` nor the
cost-based ``CostBasedJoinReorder`` touches a hinted join (both match only joins whose hint is
``JoinHint.NONE``). The tests check the executed plan with cost-based join reordering on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping

from pyspark.sql import SparkSession

from ..optimizer.cost import CostWeights
from ..optimizer.weights_file import load_weights

WEIGHTS_CONF = "spark.reopt.costWeights"  # a session setting: the weights file every reopt plan uses


def local_session(app: str = "reopt", master: str = "local[2]", shuffle_partitions: int = 4,
                  driver_memory: str = "2g", extra: Mapping[str, str] | None = None) -> SparkSession:
    """A small, quiet session (UI off); ``extra`` adds settings (static ones, such as the warehouse
    directory, only take effect here)."""
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.driver.memory", driver_memory))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


RESERVED_MEMORY = 300 * 1024 * 1024  # bytes of heap Spark's unified memory manager sets aside


def session_weights(spark: SparkSession, weights: CostWeights | str | Path | None = None) -> CostWeights:
    """``weights`` with the session's memory limits, so that reopt plans only what can run there:
    the broadcast threshold (``spark.sql.autoBroadcastJoinThreshold`` in bytes; -1, broadcasts off,
    makes every broadcast of a non-empty input infeasible), the shuffle partitions, and the
    execution memory one task may hold for a shuffled hash join's table.

    ``weights`` is a ``CostWeights``, or the path of a weights file written by ``reopt calibrate``;
    by default the file named by the session's ``spark.reopt.costWeights`` setting, else
    ``CostWeights()``. A file that cannot be used raises ``WeightsFileError`` naming it."""
    if weights is None:
        configured = spark.conf.get(WEIGHTS_CONF, None)
        weights = configured or CostWeights()
    if not isinstance(weights, CostWeights):
        weights = load_weights(weights)
    threshold = broadcast_threshold(spark)
    return dataclasses.replace(weights, broadcast_threshold=float(max(threshold, 0)),
                               shuffle_partitions=int(spark.conf.get("spark.sql.shuffle.partitions")),
                               hash_build_memory=task_memory(spark))


def broadcast_threshold(spark: SparkSession) -> int:
    """The session's ``spark.sql.autoBroadcastJoinThreshold`` in bytes, as Spark parses it; -1:
    broadcasts off."""
    return int(spark._jsparkSession.sessionState().conf().autoBroadcastJoinThreshold())


def task_memory(spark: SparkSession) -> float:
    """Bytes of execution memory one task may hold when every task slot of an executor runs: the
    unified memory pool ((heap - 300 MB) x ``spark.memory.fraction``) shared by the slots. In local
    mode the executor is the driver's JVM."""
    context = spark.sparkContext
    conf = context.getConf()
    if context.master.startswith("local"):
        heap = float(context._jvm.java.lang.Runtime.getRuntime().maxMemory())
        slots = context.defaultParallelism
    else:
        size = conf.get("spark.executor.memory", "1g")
        heap = float(context._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(size))
        slots = int(conf.get("spark.executor.cores", "1")) // int(conf.get("spark.task.cpus", "1"))
    fraction = float(conf.get("spark.memory.fraction", "0.6"))
    return max(heap - RESERVED_MEMORY, 0.0) * fraction / max(slots, 1)
