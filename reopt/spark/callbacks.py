"""Python objects that implement JVM interfaces through py4j callbacks."""

from __future__ import annotations

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession


def jvm_proxy(spark: SparkSession, listener: object):
    """The JVM proxy of ``listener``, made once.

    py4j makes a new proxy each time a Python object crosses over, and Spark unregisters listeners by
    identity, so a caller keeps this reference (and the Python object) for adding and removing alike.
    """
    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    return gateway.jvm.java.util.Collections.singletonList(listener).get(0)
