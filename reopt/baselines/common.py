"""What the procedural optimizers share with the declarative one: the plan space (split), the
estimates and the cost functions, and the same tie-break, so only search strategy differs.

A group's best alternative is the minimum of ``(cost, alternative)``: equal costs are broken by the
alternative tuple ``(kind, operator, left, left_prop, right, right_prop)``, as the declarative
optimizer does when it reads ``BestPlan``. Costs add up in the rules' order (``local + left +
right``), so every optimizer produces bit-identical floats.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..optimizer.catalog import Catalog
from ..optimizer.cost import CostModel
from ..optimizer.estimate import Estimator, ExprStats
from ..optimizer.optimizer import OptimizerConfig
from ..optimizer.plan import Plan, PlanNode
from ..optimizer.plan_space import ANY, OPERATORS, PlanSpace
from ..optimizer.query import Query
from ..optimizer.sql import parse_sql

Alternative = tuple  # (kind, op, left, left_prop, right, right_prop)


def group_order(group: tuple[int, str]) -> tuple:
    """A sort key that puts every group after the groups its alternatives take as inputs: a join's
    inputs have fewer relations, and an enforcer's input is the same expression with a weaker
    property (sorted over hash over any)."""
    expr, prop = group
    strength = 0 if prop == ANY else 1 if prop.startswith("hash[") else 2
    return (expr.bit_count(), expr, strength, prop)


class ProceduralBase:
    """Statistics, costs and plan building for an optimizer written as ordinary Python."""

    def __init__(self, query: Query, catalog: Catalog, config: OptimizerConfig | None = None):
        self.query = query
        self.config = config or OptimizerConfig()
        self.catalog = catalog.copy()
        self.space = PlanSpace(query, self.config.max_join_pairs)
        self.costs = CostModel(self.config.weights)
        self._refresh_statistics()

    @classmethod
    def from_sql(cls, sql: str, catalog: Catalog, config: OptimizerConfig | None = None, dialect: str | None = None):
        return cls(parse_sql(sql, catalog, dialect), catalog, config)

    def _refresh_statistics(self) -> None:
        self.estimator = Estimator(self.query, self.catalog)
        self.stats: dict[int, ExprStats] = {m: self.estimator.stats(m) for m in self.query.connected_subsets()}
        self.factors = {op: self.catalog.cost_factors.get(op, 1.0) for op in OPERATORS}

    def local_cost(self, expr: int, alt: Alternative) -> float | None:
        """The alternative's own cost, or None where it is impossible (broadcast above the threshold)."""
        kind, op, left, _lp, right, _rp = alt
        factor = self.factors[op]
        if kind == "scan":
            s = self.stats[expr]
            return self.costs.scan(s.rows, s.width, s.scanned, factor)[0][0]
        if kind == "unary":
            s = self.stats[left]
            return self.costs.unary(op, s.rows, s.width, factor)[0][0]
        ls, rs = self.stats[left], self.stats[right]
        rows = self.costs.join(op, ls.rows, ls.width, rs.rows, rs.width, self.stats[expr].rows, factor,
                               right_relations=rs.relations)
        return rows[0][0] if rows else None

    def known_local_cost(self, expr: int, alt: Alternative) -> float | None:
        """``local_cost``, or where an optimizer remembers local costs, the one it remembers."""
        return self.local_cost(expr, alt)

    def cost_over(self, expr: int, alt: Alternative,
                  best: Mapping[tuple[int, str], tuple[float, Alternative] | None]) -> float | None:
        """The alternative's cost over its inputs' ``best`` choices (its local cost, then the left
        input's, then the right's, as the rules add them), or None where it or an input has no
        feasible plan. Written out per kind: the incremental optimizer costs an alternative this way
        for every change under it."""
        return self.total_over(alt, self.local_cost(expr, alt), best)

    @staticmethod
    def total_over(alt: Alternative, local: float | None,
                   best: Mapping[tuple[int, str], tuple[float, Alternative] | None]) -> float | None:
        """``cost_over`` from an alternative's local cost, known already."""
        if local is None:
            return None
        kind, _op, left, lprop, right, rprop = alt
        if kind == "scan":
            return local
        left_best = best.get((left, lprop))
        if left_best is None:
            return None
        if kind == "unary":
            return local + left_best[0]
        right_best = best.get((right, rprop))
        if right_best is None:
            return None
        return local + left_best[0] + right_best[0]

    @staticmethod
    def children(alt: Alternative) -> list[tuple[int, str]]:
        kind, _op, left, lprop, right, rprop = alt
        if kind == "scan":
            return []
        if kind == "unary":
            return [(left, lprop)]
        return [(left, lprop), (right, rprop)]

    def build_plan(self, best: Mapping[tuple[int, str], tuple[float, Alternative] | None]) -> Plan:
        """A ``Plan`` from each group's (cost, alternative) choice; every group the root's choice
        reaches has one, since a group with no feasible plan makes its users infeasible too."""

        def node(expr: int, prop: str) -> PlanNode:
            cost, alt = best[(expr, prop)]
            kids = [node(e, p) for e, p in self.children(alt)]
            local = self.known_local_cost(expr, alt)
            return PlanNode(alt[1], expr, prop, cost, local, self.stats[expr].rows, kids)

        return Plan(node(self.query.full, ANY), self.query)
