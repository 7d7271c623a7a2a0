"""Run a reopt ``Plan`` on Spark with its join order and join strategies forced.

Each scan is the table given for the relation with its local filters, its columns renamed to
``relation__column`` so that relations with equal column names stay apart; each join is a DataFrame
join in the plan's order, its strategy forced by a hint on the build side (``broadcast``,
``shuffle_hash``) or on either side (``merge``). Exchanges and sorts are left to Spark's
EnsureRequirements, which inserts the enforcers reopt costed. The part of the SQL above the joins
(select list, GROUP BY, ORDER BY, LIMIT) runs on the joined result as Spark SQL, its column
references rewritten to the renamed columns.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from ..optimizer.errors import QueryError
from ..optimizer.plan import Plan, PlanNode
from ..optimizer.plan_space import BROADCAST_HASH_JOIN, JOINS, SCAN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN
from ..optimizer.query import ColumnRef, Query
from .session import broadcast_threshold

log = logging.getLogger(__name__)

HINTS = {BROADCAST_HASH_JOIN: "broadcast", SHUFFLED_HASH_JOIN: "shuffle_hash", SORT_MERGE_JOIN: "merge"}
_JOINED = "reopt_joined_result"  # stands for the joined frame in the final step's SQL


def execute(plan: Plan, tables: Mapping[str, DataFrame], join_strategy: str | None = None) -> DataFrame:
    """The query's result as a DataFrame computed by ``plan`` (``tables``: table name -> DataFrame),
    in the tables' own session (inside ``foreachBatch`` that is a clone of the caller's session).

    ``join_strategy`` (a join operator of ``reopt.optimizer.plan_space``) runs every join with that
    strategy instead of the plan's, in the plan's order: sort-merge joins spill to disk where hash
    tables run out of memory, so the runners retry a failed batch that way.
    """
    query = plan.query
    missing = sorted({t for _, t in query.relations} - set(tables))
    if missing:
        raise QueryError(f"no DataFrame given for table(s) {', '.join(missing)}")
    if join_strategy is not None and join_strategy not in HINTS:
        raise QueryError(f"unknown join strategy {join_strategy!r} (one of {', '.join(sorted(HINTS))})")
    session = next(iter(tables.values())).sparkSession
    broadcasts = broadcasts_allowed(session)
    if not broadcasts and join_strategy is None and any(n.op == BROADCAST_HASH_JOIN for n in plan.joins()):
        log.warning("the session turns broadcasts off (spark.sql.autoBroadcastJoinThreshold=-1): the plan's "
                    "broadcast hash joins run as sort-merge joins; optimize with session_weights(spark) to plan for it")
    joined = join_tree(plan.root, query, renamed_scan(query, tables), renamed_key, join_strategy, broadcasts)
    return _final_step(query, joined)


def broadcasts_allowed(spark: SparkSession) -> bool:
    """Whether the session lets joins broadcast: ``spark.sql.autoBroadcastJoinThreshold`` -1 turns
    them off, and a broadcast hint would otherwise override it."""
    return broadcast_threshold(spark) >= 0


def column_name(alias: str, column: str) -> str:
    return f"{alias}__{column.lower()}"


def _renamed(expression: exp.Expression) -> exp.Expression:
    """A copy whose qualified columns refer to the renamed ``relation__column`` columns."""
    if isinstance(expression, exp.Column):
        return exp.column(column_name(expression.table, expression.name)) if expression.table else expression.copy()
    expression = expression.copy()
    for column in list(expression.find_all(exp.Column)):
        if column.table:
            column.replace(exp.column(column_name(column.table, column.name)))
    return expression


def renamed_columns(source: DataFrame, alias: str) -> DataFrame:
    """``source`` with every column renamed ``alias__column``."""
    return source.select([F.col(f"`{c}`").alias(column_name(alias, c)) for c in source.columns])


def filter_condition(query: Query, alias: str) -> Column | None:
    """The relation's local filters as one condition over its renamed columns (None: no filter)."""
    condition = None
    for f in query.filters_on(alias):
        term = F.expr(_renamed(f.expression).sql(dialect="spark"))
        condition = term if condition is None else condition & term
    return condition


def renamed_scan(query: Query, tables: Mapping[str, DataFrame]) -> Callable[[str], DataFrame]:
    def scan(alias: str) -> DataFrame:
        frame = renamed_columns(tables[query.table_of(alias)], alias)
        condition = filter_condition(query, alias)
        return frame if condition is None else frame.where(condition)
    return scan


def renamed_key(ref: ColumnRef) -> Column:
    return F.col(column_name(ref.alias, ref.column))


def join_tree(node: PlanNode, query: Query, scan: Callable[[str], DataFrame], key: Callable[[ColumnRef], Column],
              join_strategy: str | None = None, broadcasts: bool = True) -> DataFrame:
    """The DataFrame of one plan node: ``scan(relation)`` at the leaves, joins in the plan's order
    on ``key(column)`` equalities, each with its strategy hint; without ``broadcasts``, a broadcast
    hash join runs as a sort-merge join (Spark's own choice when it may not broadcast)."""
    if node.op == SCAN:
        return scan(query.names(node.expr)[0])
    if node.op not in JOINS:  # enforcers: Spark inserts them
        return join_tree(node.children[0], query, scan, key, join_strategy, broadcasts)
    left_node, right_node = node.children
    left = join_tree(left_node, query, scan, key, join_strategy, broadcasts)
    right = join_tree(right_node, query, scan, key, join_strategy, broadcasts)
    condition = None
    for p in query.joins_between(left_node.expr, right_node.expr):
        term = key(p.left) == key(p.right)
        condition = term if condition is None else condition & term
    strategy = join_strategy or node.op
    if strategy == BROADCAST_HASH_JOIN and not broadcasts:
        strategy = SORT_MERGE_JOIN
    return left.join(right.hint(HINTS[strategy]), condition, "inner")


def _final_step(query: Query, joined: DataFrame) -> DataFrame:
    if query.select is None:
        return joined
    final = query.select.copy()
    final.set("from", exp.From(this=exp.to_table(_JOINED)))
    final.set("from_", exp.From(this=exp.to_table(_JOINED)))
    final.set("joins", None)
    final.set("where", None)
    items = []
    for item in final.expressions:
        if isinstance(item, exp.Column) and item.table:
            item = exp.alias_(_renamed(item), item.name)  # keep the column's own name in the output
        elif not isinstance(item, exp.Star):
            item = _renamed(item)
        items.append(item)
    final.set("expressions", items)
    for key in ("group", "having", "order"):
        if final.args.get(key) is not None:
            final.set(key, _renamed(final.args[key]))
    # The joined frame's own session: inside foreachBatch that is a clone of the caller's session.
    # Passing the frame as an argument lets Spark name it for this one statement and drop the name
    # at once, so the session's catalog keeps no view of reopt's.
    text = final.sql(dialect="spark").replace("{", "{{").replace("}", "}}").replace(_JOINED, "{joined}")
    return joined.sparkSession.sql(text, joined=joined)
