"""Run a reopt ``Plan`` on Spark with its join order and join strategies forced.

Each scan is the registered table under the query's relation name with its local filters; each join
is a DataFrame join in the plan's order, its strategy forced by a hint on the build side
(``broadcast``, ``shuffle_hash``) or on either side (``merge``). Exchanges and sorts are left to
Spark's EnsureRequirements, which inserts exactly the enforcers reopt costed. The part of the SQL
above the joins (select list, GROUP BY, ORDER BY, LIMIT) runs on the joined result as Spark SQL.
"""

from __future__ import annotations

import itertools
from typing import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from ..optimizer.errors import QueryError
from ..optimizer.plan import Plan, PlanNode
from ..optimizer.plan_space import BROADCAST_HASH_JOIN, JOINS, SCAN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN
from ..optimizer.query import Query
from .session import force_plans

HINTS = {BROADCAST_HASH_JOIN: "broadcast", SHUFFLED_HASH_JOIN: "shuffle_hash", SORT_MERGE_JOIN: "merge"}
_view_names = itertools.count()


def execute(plan: Plan, spark: SparkSession, tables: Mapping[str, DataFrame]) -> DataFrame:
    """The query's result as a DataFrame computed by ``plan`` (``tables``: table name -> DataFrame)."""
    query = plan.query
    missing = sorted({t for _, t in query.relations} - set(tables))
    if missing:
        raise QueryError(f"no DataFrame given for table(s) {', '.join(missing)}")
    force_plans(spark)
    joined = join_tree(plan.root, query, tables)
    return _final_step(query, joined, spark)


def join_tree(node: PlanNode, query: Query, tables: Mapping[str, DataFrame]) -> DataFrame:
    """The DataFrame of one plan node: scans with filters, joins in order with strategy hints."""
    if node.op == SCAN:
        alias = query.names(node.expr)[0]
        frame = tables[query.table_of(alias)].alias(alias)
        for f in query.filters_on(alias):
            frame = frame.where(F.expr(f.expression.sql(dialect="spark")))
        return frame
    if node.op not in JOINS:
        return join_tree(node.children[0], query, tables)  # enforcers: Spark inserts them itself
    left_node, right_node = node.children
    left = join_tree(left_node, query, tables)
    right = join_tree(right_node, query, tables)
    condition = None
    for p in query.joins_between(left_node.expr, right_node.expr):
        term = F.col(str(p.left)) == F.col(str(p.right))
        condition = term if condition is None else condition & term
    return left.join(right.hint(HINTS[node.op]), condition, "inner")


def _final_step(query: Query, joined: DataFrame, spark: SparkSession) -> DataFrame:
    if query.select is None:
        return joined
    names = [c.lower() for c in joined.columns]
    duplicates = sorted({c for c in names if names.count(c) > 1})
    if duplicates:
        raise QueryError(f"columns {', '.join(duplicates)} appear in several relations; "
                         "the final step cannot tell them apart")
    view = f"reopt_joined_{next(_view_names)}"
    joined.createOrReplaceTempView(view)
    final = query.select.copy()
    final.set("from", exp.From(this=exp.to_table(view)))
    final.set("from_", exp.From(this=exp.to_table(view)))
    final.set("joins", None)
    final.set("where", None)
    for column in final.find_all(exp.Column):
        column.set("table", None)
    return spark.sql(final.sql(dialect="spark"))
