"""reopt.optimizer: the query model, statistics, plan space and cost model, and the declarative
optimizer that runs rules/optimizer.dl on the incremental engine."""

from .catalog import Catalog, ColumnStats, TableStats
from .cost import CostModel, CostWeights
from .deltas import DeltaStats
from .errors import OptimizerError, QueryError, QueryTooLargeError, StatisticsError, UnsupportedSQLError
from .optimizer import Optimizer, OptimizerConfig, OptimizerMetrics
from .plan import Plan, PlanNode
from .query import Query, QueryBuilder
from .state_file import StateFileError
from .weights_file import WeightsFileError, load_weights, save_weights
from .sql import parse_sql
from . import workloads

__all__ = [
    "Catalog", "ColumnStats", "TableStats", "CostModel", "CostWeights", "DeltaStats", "Optimizer",
    "OptimizerConfig", "OptimizerMetrics", "Plan", "PlanNode", "Query", "QueryBuilder", "parse_sql", "OptimizerError",
    "QueryError", "QueryTooLargeError", "StateFileError", "StatisticsError", "UnsupportedSQLError", "WeightsFileError",
    "load_weights", "save_weights", "workloads",
]
