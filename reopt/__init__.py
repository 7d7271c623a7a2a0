"""reopt: incremental query re-optimization for Apache Spark, written as recursive datalog rules."""

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
    StatisticsError,
    UnsupportedSQLError,
)

__all__ = [
    "Catalog", "CostWeights", "DeltaStats", "Optimizer", "OptimizerConfig", "OptimizerError", "Plan", "Query",
    "QueryError", "StatisticsError", "UnsupportedSQLError",
]
