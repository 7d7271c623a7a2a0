"""TPC-H data generated offline with the ``tpchgen-cli`` package (a Rust generator shipped on PyPI)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


class DataGenerationError(RuntimeError):
    """The TPC-H generator could not be run or did not produce the expected files."""


def generate_tpch(scale: float, directory: str | Path) -> dict[str, Path]:
    """Parquet files of every TPC-H table at ``scale`` in ``directory``/sf<scale> (reused if present:
    each scale has its own folder, so a cache never answers for another scale)."""
    directory = Path(directory) / f"sf{scale:g}"
    paths = {t: directory / f"{t}.parquet" for t in TPCH_TABLES}
    if all(p.exists() for p in paths.values()):
        return paths
    executable = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
    if not Path(executable).exists():
        raise DataGenerationError("tpchgen-cli is not installed (pip install tpchgen-cli)")
    directory.mkdir(parents=True, exist_ok=True)
    command = [executable, "parquet", "-s", str(scale), f"--output-dir={directory}"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise DataGenerationError(f"{' '.join(command)} failed: {result.stderr.strip()[:500]}")
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise DataGenerationError(f"tpchgen-cli did not write {', '.join(missing)}")
    return paths


def load_tpch(spark: SparkSession, scale: float, directory: str | Path) -> dict[str, DataFrame]:
    return {name: spark.read.parquet(str(path)) for name, path in generate_tpch(scale, directory).items()}
