"""reopt.spark: run reopt's plans on Apache Spark with their join order and strategies forced, read
back what happened, and compute statistics from data."""

from .data import generate_tpch, load_tpch
from .catalyst import NotPlannable
from .dataframes import PlannedFrame, optimize, plan_frame
from .execute import execute
from .hook import MetricsHook, attach, detach
from .metrics import ExecutedNode, executed_tree, observed_cardinalities
from .session import local_session, session_weights
from .statistics import catalog_from_spark

__all__ = ["optimize", "plan_frame", "PlannedFrame", "NotPlannable", "execute", "attach", "detach", "MetricsHook", "catalog_from_spark", "executed_tree", "observed_cardinalities", "ExecutedNode",
           "local_session", "session_weights", "generate_tpch", "load_tpch"]
