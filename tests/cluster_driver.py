"""A driver for the standalone-cluster test (test_spark_cluster.py), as its own process: a Spark
application holds one SparkContext, and the test process already has a local one.

``python cluster_driver.py MASTER DATA`` connects to MASTER, plans TPC-H Q5 over the scale 0.01 data
under DATA with ``reopt.spark.optimize``, checks its rows against Spark's own plan of the same SQL,
and prints one JSON line: the master it ran on, the executors it had, and the check's outcome.
"""

from __future__ import annotations

import json
import sys

from reopt.optimizer.workloads import TPCH
from reopt.spark import load_tpch, local_session, optimize


def main() -> None:
    master, data = sys.argv[1], sys.argv[2]
    spark = local_session("reopt-cluster-test", master=master, driver_memory="1g",
                          extra={"spark.executor.memory": "1g", "spark.cores.max": "1"})
    try:
        for name, frame in load_tpch(spark, 0.01, data).items():
            frame.createOrReplaceTempView(name)
        q5 = spark.sql(TPCH["Q5"])
        planned = optimize(q5)
        same = sorted(planned.collect()) == sorted(q5.collect())
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver
        print(json.dumps({"master": spark.sparkContext.master, "executors": executors, "same_rows": same}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
