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


class JvmObject:
    """The java.lang.Object methods py4j forwards to a Python implementation of a JVM interface
    (Spark compares listeners when it removes one)."""

    def equals(self, other) -> bool:
        return other is self

    def hashCode(self) -> int:  # noqa: N802 - java.lang.Object
        return id(self) & 0x7FFFFFFF

    def toString(self) -> str:  # noqa: N802 - java.lang.Object
        return f"{type(self).__module__}.{type(self).__qualname__}"
