"""A DataFrame's inner equi-joins read out of Catalyst's optimized logical plan, and a reopt plan put
back in their place.

Catalyst's optimized plan of a query is, from the root down: the operators above the joins (project,
aggregate, sort, limit, ...), a tree of inner joins with column-pruning projects and filters between
them, and the join inputs, each with the filters and projections Catalyst pushed into it. reopt takes
the join tree as its query: each input becomes a relation (its filters stay inside it, so its rows
are counted after them) and each equality of two inputs' columns a join predicate. The new DataFrame
joins the same inputs in reopt's order with reopt's strategies, under the original operators above
the joins. Catalyst names columns by expression id and the inputs keep theirs, so those operators
read the new join tree as they read the old one.

What reopt does not model stays as Spark planned it: ``NotPlannable`` says why (the caller logs it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.column import Column

from ..optimizer.errors import QueryError
from ..optimizer.query import ColumnRef, JoinPredicate, Query

JavaObject = Any  # a py4j reference to a Catalyst object

_PASS_THROUGH = ("Project", "Filter")  # between joins: column pruning, and conditions over several inputs


class NotPlannable(Exception):
    """The DataFrame has no part reopt plans; the message says what it found instead."""


@dataclass
class JoinRegion:
    """A DataFrame's inner-join tree as a reopt query over its inputs."""

    query: Query
    inputs: dict[str, DataFrame]  # relation name -> the input, its own filters applied
    plans: dict[str, JavaObject]  # relation name -> the input's Catalyst plan
    keys: dict[str, dict[str, JavaObject]]  # relation name -> join column -> its Catalyst attribute
    output: list[JavaObject]  # the attributes the join tree gives the operators above it, in order
    above: list[JavaObject]  # the operators above the join tree, lowest first
    owners: dict[int, str]  # expression id of each input column -> its relation

    def relation_of(self, operator: JavaObject) -> str | None:
        """The relation whose columns a (logical or physical) operator outputs, if exactly one."""
        output = operator.output()
        owners = {self.owners.get(output.apply(i).exprId().id()) for i in range(output.size())}
        return owners.pop() if len(owners) == 1 and None not in owners else None


def _children(node: JavaObject) -> list[JavaObject]:
    children = node.children()
    return [children.apply(i) for i in range(children.size())]


def _scala_list(seq: JavaObject) -> list[JavaObject]:
    return [seq.apply(i) for i in range(seq.size())]


def _is_inner_join(node: JavaObject) -> bool:
    return node.nodeName() == "Join" and node.joinType().toString() == "Inner"


def _over_join(node: JavaObject) -> bool:
    """Whether ``node`` is a project or filter standing between inner joins (not inside an input)."""
    while node.nodeName() in _PASS_THROUGH:
        node = _children(node)[0]
    return _is_inner_join(node)


def _conjuncts(condition: JavaObject) -> list[JavaObject]:
    if condition.nodeName() == "And":
        return _conjuncts(condition.left()) + _conjuncts(condition.right())
    return [condition]


def _sql(expression: JavaObject, limit: int = 120) -> str:
    text = expression.sql()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _input_name(plan: JavaObject) -> str:
    """A readable relation name: the table's, the first file's stem, or the operator's."""
    node = plan
    while _children(node):
        node = _children(node)[0]
    name = node.nodeName()
    try:
        table = node.catalogTable()
        if table.isDefined():
            name = table.get().identifier().table()
        elif name == "LogicalRelation":
            name = node.relation().location().rootPaths().apply(0).getName().split(".")[0]
    except Exception:  # py4j: an operator without these accessors keeps its operator name
        pass
    name = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_") or "input"
    return name if name[0].isalpha() else f"t_{name}"


def read_join_region(df: DataFrame) -> JoinRegion:
    """The inner-join tree of ``df``'s optimized plan as a reopt query; ``NotPlannable`` if there is
    none reopt can plan (no join, a join of another type on the way down, a non-equi condition)."""
    spark = df.sparkSession
    node = df._jdf.queryExecution().optimizedPlan()
    above = []
    while not _is_inner_join(node):
        children = _children(node)
        if not children:
            raise NotPlannable("the plan has no inner join")
        if len(children) > 1:
            kind = f"{node.joinType().toString()} join" if node.nodeName() == "Join" else node.nodeName()
            raise NotPlannable(f"a {kind} above the inner joins (reopt plans inner equi-joins only)")
        above.append(node)
        node = children[0]
    above.reverse()
    region_root = node
    conditions: list[JavaObject] = []
    leaves: list[JavaObject] = []
    pending = [region_root]
    while pending:
        node = pending.pop()
        if _is_inner_join(node):
            if node.condition().isDefined():
                conditions += _conjuncts(node.condition().get())
            pending += reversed(_children(node))
        elif node.nodeName() in _PASS_THROUGH and _over_join(node):
            if node.nodeName() == "Filter":
                conditions += _conjuncts(node.condition())
            elif any(e.nodeName() != "AttributeReference" for e in _scala_list(node.projectList())):
                raise NotPlannable("a column computed between joins (reopt reorders joins of plain inputs only)")
            pending.append(_children(node)[0])
        else:
            leaves.append(node)
    return _region(spark, region_root, above, leaves, conditions)


def _region(spark: SparkSession, root: JavaObject, above: list[JavaObject], leaves: list[JavaObject],
            conditions: list[JavaObject]) -> JoinRegion:
    names: list[str] = []
    for leaf in leaves:
        base = name = _input_name(leaf)
        n = 1
        while name in names:
            n += 1
            name = f"{base}_{n}"
        names.append(name)
    owner = {a.exprId().id(): i for i, leaf in enumerate(leaves) for a in _scala_list(leaf.output())}
    filters: dict[int, list[JavaObject]] = {}
    keys: dict[str, dict[str, JavaObject]] = {name: {} for name in names}
    joins = []

    def key(attribute: JavaObject) -> ColumnRef:
        relation = names[owner[attribute.exprId().id()]]
        column = attribute.name().lower()
        known = keys[relation].get(column)
        if known is not None and known.exprId().id() != attribute.exprId().id():
            column = f"{column}_{attribute.exprId().id()}"  # two columns of one input share a name
        keys[relation][column] = attribute
        return ColumnRef(relation, column)

    for condition in conditions:
        inputs = {owner.get(a.exprId().id()) for a in _scala_list(condition.references().toSeq())}
        if None in inputs:
            raise NotPlannable(f"the join condition {_sql(condition)} refers to a column no input gives")
        if len(inputs) == 1:
            filters.setdefault(inputs.pop(), []).append(condition)
            continue
        sides = [condition.left(), condition.right()] if condition.nodeName() == "EqualTo" else []
        if len(inputs) != 2 or any(s.nodeName() != "AttributeReference" for s in sides) or not sides:
            raise NotPlannable(f"the join condition {_sql(condition)} is not an equality of two inputs' columns")
        joins.append(JoinPredicate(key(sides[0]), key(sides[1])))
    try:
        query = Query([(name, name) for name in names], joins)
    except QueryError as exc:
        raise NotPlannable(str(exc)) from None
    frames = {}
    for i, (name, leaf) in enumerate(zip(names, leaves)):
        frame = _frame(spark, leaf)
        for condition in filters.get(i, []):
            frame = frame.where(_column(spark, condition))
        frames[name] = frame
    owners = {expr_id: names[i] for expr_id, i in owner.items()}
    return JoinRegion(query, frames, dict(zip(names, leaves)), keys, _scala_list(root.output()), above, owners)


def _frame(spark: SparkSession, plan: JavaObject) -> DataFrame:
    dataset = spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan)
    return DataFrame(dataset, spark)


def _column(spark: SparkSession, expression: JavaObject) -> Column:
    return Column(spark._jvm.org.apache.spark.sql.classic.ExpressionUtils.column(expression))


def key_column(region: JoinRegion, ref: ColumnRef) -> Column:
    """The Spark column of one of the region's join keys."""
    return _column(region.inputs[ref.alias].sparkSession, region.keys[ref.alias][ref.column])


def rebuild(region: JoinRegion, joined: DataFrame) -> DataFrame:
    """The original query with ``joined`` (the region's inputs joined) in place of its join tree."""
    spark = joined.sparkSession
    plan = joined.select([_column(spark, a) for a in region.output])._jdf.queryExecution().analyzed()
    to_seq = spark._jvm.org.apache.spark.api.python.PythonUtils.toSeq
    for node in region.above:
        plan = node.withNewChildren(to_seq([plan]))
    return _frame(spark, plan)
