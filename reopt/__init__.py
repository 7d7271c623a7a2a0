"""reopt: incremental query re-optimization for Apache Spark, written as recursive datalog rules."""

from importlib.metadata import PackageNotFoundError, version

from .optimizer import (
    Catalog,
    CostWeights,
    DeltaStats,
    Optimizer,
    OptimizerConfig,
    OptimizerError,
    Plan,
    Query,
    QueryError,
    QueryTooLargeError,
    StateFileError,
    StatisticsError,
    UnsupportedSQLError,
    WeightsFileError,
    load_weights,
)

try:
    __version__ = version("reopt")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Catalog", "CostWeights", "DeltaStats", "Optimizer", "OptimizerConfig", "OptimizerError", "Plan", "Query",
    "QueryError", "QueryTooLargeError", "StateFileError", "StatisticsError", "UnsupportedSQLError", "WeightsFileError",
    "load_weights", "__version__",
]
