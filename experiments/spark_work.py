"""A Spark benchmark's work folder and local session, shared by the Spark benchmark scripts."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from reopt.spark import local_session


def work_session(name: str, master: str) -> tuple[Path, SparkSession]:
    """A fresh temporary folder and a local session named ``name`` whose warehouse lives in it."""
    work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    return work, local_session(name, master=master, extra={"spark.sql.warehouse.dir": str(work / "warehouse")})
