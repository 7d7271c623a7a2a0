"""Spark sessions for reopt: small and quiet.

reopt needs no setting changed to run its plans as chosen. Every join it builds carries a strategy
hint (``broadcast``, ``shuffle_hash`` or ``merge``); hints take precedence over Spark's size-based
strategy choice (also when AQE re-plans), and neither the rule-based ``ReorderJoin`` nor the
cost-based ``CostBasedJoinReorder`` touches a hinted join (both match only joins whose hint is
``JoinHint.NONE``). The tests check the executed plan with cost-based join reordering on.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from pyspark.sql import SparkSession

from ..optimizer.cost import CostWeights


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


def session_weights(spark: SparkSession, weights: CostWeights | None = None) -> CostWeights:
    """``weights`` (default: ``CostWeights()``) with the session's broadcast threshold, so that reopt
    broadcasts only what Spark would: ``spark.sql.autoBroadcastJoinThreshold`` in bytes, and -1
    (broadcasts off) makes every broadcast of a non-empty input infeasible."""
    threshold = int(spark._jsparkSession.sessionState().conf().autoBroadcastJoinThreshold())
    return dataclasses.replace(weights or CostWeights(), broadcast_threshold=float(max(threshold, 0)))
