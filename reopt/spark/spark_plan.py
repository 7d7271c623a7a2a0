"""The plan Spark itself would run, as a reopt plan: the yardstick every reopt plan must beat.

Spark keeps a query's join order as Catalyst's rule-based optimizer leaves it (the order written,
cross products avoided) and picks each join's strategy from its size estimates at the session's
broadcast threshold. ``spark_sql_frame`` builds that plan for a reopt query over given DataFrames
(the query's own SQL, handed to ``spark.sql``); ``spark_plan`` reads the join tree out of the
physical plan Spark prepared for a frame, before it runs, and turns it into a reopt ``Plan`` with
the exchanges and sorts that Spark's ``EnsureRequirements`` inserts, so that reopt's cost model
prices it as it prices its own plans (``Optimizer.costed``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from ..optimizer.errors import QueryError
from ..optimizer.plan import Plan, PlanNode
from ..optimizer.plan_space import (ANY, BROADCAST_HASH_JOIN, EXCHANGE, SCAN, SHUFFLED_HASH_JOIN, SORT,
                                    SORT_MERGE_JOIN, hashed, keys_of, sorted_on)
from ..optimizer.query import Query
from .metrics import ExecutedNode, _seq, executed_tree_of

_INPUT = "reopt_input_"  # stands for an input DataFrame in the SQL handed to spark.sql


class NoSparkPlan(Exception):
    """Spark's plan of the query has a shape reopt's plan space does not hold (for example a cross
    product); the message says which."""


def spark_sql_frame(query: Query, tables: Mapping[str, DataFrame], session: SparkSession | None = None) -> DataFrame:
    """The query as Spark SQL over ``tables`` (table name -> DataFrame), planned as Spark plans it:
    what a user runs without reopt. Each relation keeps its alias, so ``alias_owners`` finds it.
    ``session`` (default: the first table's) runs it; inside ``foreachBatch`` that is the batch's
    own, a clone of the caller's, and every input is handed to it."""
    if query.select is None:
        raise QueryError("the query was not built from SQL: Spark has no plan of its own for it")
    missing = sorted({table for _alias, table in query.relations} - set(tables))
    if missing:
        raise QueryError(f"no DataFrame given for table(s) {', '.join(missing)}")
    names = {table: f"{_INPUT}{index}" for index, table in enumerate(sorted(tables))}

    def bind(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.name.lower() in names:
            alias = node.alias_or_name.lower()
            return exp.alias_(exp.to_table(names[node.name.lower()]), alias, table=True)
        return node

    text = query.select.transform(bind).sql(dialect="spark").replace("{", "{{").replace("}", "}}")
    for table, name in names.items():
        text = text.replace(name, "{" + name + "}")
    session = session or next(iter(tables.values())).sparkSession
    return session.sql(text, **{name: _in_session(tables[table], session) for table, name in names.items()})


def _in_session(frame: DataFrame, session: SparkSession) -> DataFrame:
    """``frame`` in ``session``: spark.sql names a DataFrame argument in the frame's own session."""
    if frame.sparkSession is session:
        return frame
    plan = frame._jdf.queryExecution().logical()
    return DataFrame(session._jvm.org.apache.spark.sql.classic.Dataset.ofRows(session._jsparkSession, plan), session)


def alias_owners(frame: DataFrame, query: Query) -> Callable[[Any], str | None]:
    """``relation_of`` for ``frame`` (built by ``spark_sql_frame``): the alias whose columns an
    operator outputs, by the expression ids under each ``SubqueryAlias`` of the analyzed plan."""
    owner: dict[int, str] = {}
    pending = [frame._jdf.queryExecution().analyzed()]
    while pending:
        node = pending.pop()
        if node.nodeName() == "SubqueryAlias":
            alias = node.alias().lower()
            if alias in query.aliases:
                for attribute in _seq(node.output()):
                    owner.setdefault(attribute.exprId().id(), alias)
        pending += _seq(node.children())

    def relation_of(operator) -> str | None:
        owners = {owner.get(a.exprId().id()) for a in _seq(operator.output())}
        return owners.pop() if len(owners) == 1 and None not in owners else None

    return relation_of


def prepared_tree(frame: DataFrame, query: Query, relation_of: Callable[[Any], str | None]) -> ExecutedNode:
    """The join tree of the physical plan Spark prepared for ``frame``, before any of it runs (with
    AQE, the initial plan: strategies from Spark's own size estimates)."""
    return executed_tree_of(frame._jdf.queryExecution().executedPlan(), query, relation_of)


def spark_plan(frame: DataFrame, query: Query, relation_of: Callable[[Any], str | None]) -> Plan:
    """Spark's plan of ``frame`` as a reopt plan of ``query`` (costs 0: cost it with
    ``Optimizer.costed``); ``NoSparkPlan`` if reopt's plan space does not hold it."""
    try:
        tree = prepared_tree(frame, query, relation_of)
    except QueryError as exc:
        raise NoSparkPlan(str(exc)) from None
    return plan_of_tree(tree, query)


def plan_of_tree(tree: ExecutedNode, query: Query) -> Plan:
    """A Spark join tree as a reopt plan over ``query``: each join's strategy and build side as Spark
    chose them, with the exchanges and sorts its inputs need; ``NoSparkPlan`` if a join is not one
    reopt plans (a cross product, a nested-loop join) or the tree does not cover the query."""
    if tree.relations != frozenset(query.aliases):
        raise NoSparkPlan(f"the join tree covers {sorted(tree.relations)}, not the query's {sorted(query.aliases)}")
    return Plan(_node(tree, ANY, query), query)


def _node(tree: ExecutedNode, prop: str, query: Query) -> PlanNode:
    """The entry (``tree``'s relations, ``prop``) as the plan space builds it: the join itself where
    it can deliver ``prop``, else an enforcer over the entry it needs (as ``PlanSpace.split``)."""
    mask = query.mask(tree.relations)
    if tree.strategy == "scan":
        if prop == ANY:
            return PlanNode(SCAN, mask, ANY, 0.0, 0.0, 0.0)
        return _enforced(tree, prop, query, mask)
    if tree.strategy not in (BROADCAST_HASH_JOIN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN) or len(tree.children) != 2:
        raise NoSparkPlan(f"Spark runs a {tree.strategy.replace('_', ' ')}, which reopt does not plan")
    left, right = _sides(tree)
    lmask, rmask = query.mask(left.relations), query.mask(right.relations)
    classes = query.join_keys(lmask, rmask)
    if not classes:
        raise NoSparkPlan(f"Spark joins {sorted(left.relations)} with {sorted(right.relations)} without a join key")
    if tree.strategy == BROADCAST_HASH_JOIN:
        if prop == ANY or prop in _delivered(left, query):  # the streamed side's partitioning passes through
            return _join(BROADCAST_HASH_JOIN, mask, prop, [_node(left, prop, query), _node(right, ANY, query)])
        return _enforced(tree, prop, query, mask)
    key = keys_of(prop) if prop != ANY and keys_of(prop) in classes else classes[0]
    if tree.strategy == SHUFFLED_HASH_JOIN:
        if prop in (ANY, hashed(key)):
            return _join(SHUFFLED_HASH_JOIN, mask, prop, [_node(left, hashed(key), query), _node(right, hashed(key), query)])
        return _enforced(tree, prop, query, mask)
    if prop in (ANY, hashed(key), sorted_on(key)):
        inputs = sorted([left, right], key=lambda child: query.mask(child.relations))  # symmetric: one order
        return _join(SORT_MERGE_JOIN, mask, prop, [_node(child, sorted_on(key), query) for child in inputs])
    return _enforced(tree, prop, query, mask)


def _enforced(tree: ExecutedNode, prop: str, query: Query, mask: int) -> PlanNode:
    """``prop`` delivered by an enforcer: an exchange over any partitioning, a sort over a hash
    partitioning on the same keys."""
    if prop.startswith("hash["):
        return _join(EXCHANGE, mask, prop, [_node(tree, ANY, query)])
    return _join(SORT, mask, prop, [_node(tree, hashed(keys_of(prop)), query)])


def _join(op: str, mask: int, prop: str, children: list[PlanNode]) -> PlanNode:
    return PlanNode(op, mask, prop, 0.0, 0.0, 0.0, children)


def _sides(tree: ExecutedNode) -> tuple[ExecutedNode, ExecutedNode]:
    """A join's (streamed, built) inputs as reopt orders them: the build on the right."""
    left, right = tree.children
    return (right, left) if tree.strategy != SORT_MERGE_JOIN and tree.build_right is False else (left, right)


def _delivered(tree: ExecutedNode, query: Query) -> set[str]:
    """The properties a subtree's output has without an enforcer above it, as Spark's
    ``EnsureRequirements`` sees them: it adds an exchange or a sort right below the operator that
    requires one, unless the input already satisfies it."""
    if tree.strategy not in (BROADCAST_HASH_JOIN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN) or len(tree.children) != 2:
        return set()  # a scan; or a join reopt does not plan, which ``_node`` refuses
    left, right = _sides(tree)
    if tree.strategy == BROADCAST_HASH_JOIN:
        return _delivered(left, query)
    keys = query.join_keys(query.mask(left.relations), query.mask(right.relations))
    if not keys:
        return set()
    return {hashed(keys[0])} if tree.strategy == SHUFFLED_HASH_JOIN else {hashed(keys[0]), sorted_on(keys[0])}
