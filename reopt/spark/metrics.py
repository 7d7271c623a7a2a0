"""What Spark really did: the executed join tree and each join's output rows, read through py4j
from a query's executed plan (AQE's adaptive plan and query stages unwrapped), and their mapping to
``DeltaStats`` observations of the query's expressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import DataFrame

from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import QueryError
from ..optimizer.plan_space import JOINS, SCAN
from ..optimizer.query import Query

SPARK_JOINS = {
    "BroadcastHashJoin": "broadcast_hash_join",
    "ShuffledHashJoin": "shuffled_hash_join",
    "SortMergeJoin": "sort_merge_join",
    "BroadcastNestedLoopJoin": "broadcast_nested_loop_join",
    "CartesianProduct": "cartesian_product",
}


@dataclass
class ExecutedNode:
    """A join or scan of the executed plan, with the query relations below it."""

    strategy: str  # a reopt join operator name, or "scan"
    relations: frozenset[str]
    rows: int | None
    build_right: bool | None = None
    children: list["ExecutedNode"] = field(default_factory=list)
    bytes: int | None = None  # for scans: bytes of the files read, where the source reports them

    def nodes(self) -> list["ExecutedNode"]:
        """Every node, children before parents."""
        return [node for child in self.children for node in child.nodes()] + [self]

    def joins(self) -> list["ExecutedNode"]:
        return [node for node in self.nodes() if node.strategy != "scan"]

    def scans(self) -> list["ExecutedNode"]:
        return [node for node in self.nodes() if node.strategy == "scan"]


def _seq(scala_seq) -> list:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _unwrap(node):
    """Step through AQE wrappers to the physical operator they hold."""
    while True:
        name = node.nodeName()
        if name == "AdaptiveSparkPlan":
            node = node.executedPlan()
        elif name.endswith("QueryStage") or name == "ResultQueryStage":
            node = node.plan()
        else:
            return node


def _metric(node, name: str) -> int | None:
    option = node.metrics().get(name)
    return int(option.get().value()) if option.isDefined() else None


def _rows(node) -> int | None:
    return _metric(node, "numOutputRows")


def _relation_of(node, query: Query) -> str | None:
    """The query relation an operator's output belongs to, from the ``relation__column`` names that
    ``execute`` gives every scanned column; None if it mixes relations or is not renamed."""
    prefixes = {a.name().split("__", 1)[0] for a in _seq(node.output()) if "__" in a.name()}
    names = [a.name() for a in _seq(node.output())]
    if len(prefixes) == 1 and all("__" in n for n in names):
        alias = prefixes.pop()
        return alias if alias in query.aliases else None
    return None


def _leaf(node):
    """The scan at the bottom of a single-input chain of operators."""
    while _seq(node.children()):
        node = _unwrap(_seq(node.children())[0])
    return node


def executed_tree(df: DataFrame, query: Query) -> ExecutedNode:
    """The join tree Spark executed for ``df``, a frame built by ``execute`` (call it after an action,
    so that AQE's final plan and the metrics are there)."""
    return executed_tree_of(df._jdf.queryExecution().executedPlan(), query)


def executed_tree_of(physical_plan, query: Query,
                     relation_of: Callable[[Any], str | None] | None = None) -> ExecutedNode:
    """The join tree of a JVM physical plan (``QueryExecution.executedPlan()``) of a frame built by
    ``execute``; ``QueryError`` if it is not a plan of ``query``. ``relation_of(operator)`` names the
    query relation whose rows an operator produces (default: by the names ``execute`` gives columns)."""
    relation_of = relation_of or (lambda node: _relation_of(node, query))

    def walk(node) -> list[ExecutedNode]:
        node = _unwrap(node)
        name = node.nodeName()
        if name in SPARK_JOINS:
            children = [n for child in _seq(node.children()) for n in walk(child)]
            relations = frozenset().union(*(c.relations for c in children))
            build_right = None
            if name in ("BroadcastHashJoin", "ShuffledHashJoin"):
                build_right = "BuildRight" in node.buildSide().toString()
            return [ExecutedNode(SPARK_JOINS[name], relations, _rows(node), build_right, children)]
        alias = relation_of(node)
        if alias is not None and not _contains_join(node):
            leaf = _leaf(node)
            return [ExecutedNode("scan", frozenset([alias]), _rows(leaf), bytes=_metric(leaf, "filesSize"))]
        return [n for child in _seq(node.children()) for n in walk(child)]

    roots = [n for n in walk(physical_plan) if n.relations]
    if len(roots) != 1:
        raise QueryError(f"expected one join tree in the executed plan, found {len(roots)}")
    return roots[0]


def _contains_join(node) -> bool:
    node = _unwrap(node)
    return node.nodeName() in SPARK_JOINS or any(_contains_join(c) for c in _seq(node.children()))


def observed_cardinalities(tree: ExecutedNode, query: Query) -> DeltaStats:
    """One ``DeltaStats.cardinality`` per join of the executed tree that reported its output rows."""
    deltas = [DeltaStats.cardinality(sorted(node.relations), node.rows)
              for node in tree.joins() if node.rows is not None and set(node.relations) <= set(query.aliases)]
    return DeltaStats.batch(deltas)


def describe(tree: ExecutedNode) -> Any:
    """A compact nested tuple (strategy, children...) for comparisons in tests and logs."""
    if tree.strategy == "scan":
        return next(iter(tree.relations))
    return (tree.strategy, *(describe(c) for c in tree.children))


def plan_shape(plan) -> Any:
    """The same compact form as ``describe`` for a reopt ``Plan`` (enforcers are Spark's business)."""
    def walk(node):
        if node.op == SCAN:
            return plan.query.names(node.expr)[0]
        if node.op not in JOINS:
            return walk(node.children[0])
        return (node.op, *(walk(c) for c in node.children))

    return walk(plan.root)
