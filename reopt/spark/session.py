"""Spark sessions configured so that reopt's plans run as chosen.

Join order and strategies are forced by hints: every join reopt builds carries one (``broadcast``,
``shuffle_hash`` or ``merge``), hints take precedence over Spark's size-based strategy choice (also when
AQE re-plans), and Spark's rule-based ``ReorderJoin`` leaves hinted joins alone. The one setting that
could still reorder them, cost-based join reordering, is switched off. The tests check all of this
against the executed plan, so a Spark version that behaves otherwise fails them.
"""

from __future__ import annotations

from typing import Mapping

from pyspark.sql import SparkSession

FORCING_CONFIG = {
    "spark.sql.cbo.joinReorder.enabled": "false",
}


def local_session(app: str = "reopt", master: str = "local[2]", shuffle_partitions: int = 4,
                  driver_memory: str = "2g", extra: Mapping[str, str] | None = None) -> SparkSession:
    """A small, quiet session (UI off) with the settings that let reopt force its plans; ``extra``
    adds settings (static ones, such as the warehouse directory, only take effect here)."""
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.driver.memory", driver_memory))
    for key, value in {**FORCING_CONFIG, **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def force_plans(spark: SparkSession) -> None:
    """Apply the forcing settings to an existing session (runtime SQL configs only)."""
    for key, value in FORCING_CONFIG.items():
        spark.conf.set(key, value)
