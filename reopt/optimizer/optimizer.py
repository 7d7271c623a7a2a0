"""The declarative optimizer: rules/optimizer.dl evaluated by the incremental engine.

``optimize()`` loads the query and its statistics as facts and reads the best plan out of
``BestPlan``; ``reoptimize(delta)`` turns a ``DeltaStats`` into updates of the ``Stats`` and
``CostFactor`` facts that actually changed, lets the engine propagate only those, and reads the plan
again. The result equals ``Optimizer(query, new_catalog).optimize()``: same cost, same plan key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from ..datalog import Engine, Program
from .catalog import Catalog
from .cost import CostModel, CostWeights
from .deltas import DeltaStats
from .errors import OptimizerError, StatisticsError
from .estimate import Estimator, ExprStats
from .plan import Plan, PlanNode
from .plan_space import ANY, OPERATORS, PlanSpace
from .query import Query
from .sql import parse_sql

RULES = Path(__file__).resolve().parents[2] / "rules" / "optimizer.dl"


@functools.lru_cache(maxsize=1)
def optimizer_program() -> Program:
    return Program.load(RULES)


@dataclass(frozen=True)
class OptimizerMetrics:
    """What the optimizer holds and what its last call did, in the reference paper's terms: plan-table
    entries are (expression, property) pairs (OR nodes), plan alternatives are AND nodes."""

    entries_alive: int
    alternatives_alive: int
    entries_derived_total: int  # entries made visible over all calls
    alternatives_derived_total: int
    entries_touched_last: int  # distinct entries inserted, deleted or given a new best cost by the last call
    alternatives_touched_last: int  # distinct alternatives added, removed or re-costed by the last call
    state_values: int  # Engine.state_size(): values held, a repeatable measure of state

    @property
    def entries_touched_ratio(self) -> float:
        return self.entries_touched_last / max(1, self.entries_alive)

    @property
    def alternatives_touched_ratio(self) -> float:
        return self.alternatives_touched_last / max(1, self.alternatives_alive)


@dataclass(frozen=True)
class OptimizerConfig:
    """Everything that shapes the optimizer's choices besides statistics."""

    weights: CostWeights = field(default_factory=CostWeights)


class Optimizer:
    def __init__(self, query: Query, catalog: Catalog, config: OptimizerConfig | None = None):
        self.query = query
        self.config = config or OptimizerConfig()
        self._check_catalog(catalog)
        self._catalog = catalog.copy()
        self.space = PlanSpace(query)
        self.costs = CostModel(self.config.weights)
        self.engine = Engine(optimizer_program(), {
            "Fn_split": self.space.split,
            "Fn_scancost": self.costs.scan,
            "Fn_unarycost": self.costs.unary,
            "Fn_joincost": self.costs.join,
        })
        self._subsets = list(query.connected_subsets())
        self._stats: dict[int, ExprStats] = {}
        self._factors: dict[str, float] = {}
        self._loaded = False

    @classmethod
    def from_sql(cls, sql: str, catalog: Catalog, config: OptimizerConfig | None = None) -> "Optimizer":
        return cls(parse_sql(sql, catalog), catalog, config)

    @property
    def catalog(self) -> Catalog:
        """The statistics with every delta applied so far (a copy)."""
        return self._catalog.copy()

    def optimize(self) -> Plan:
        if not self._loaded:
            self._load()
        return self._extract()

    def reoptimize(self, delta: DeltaStats) -> Plan:
        """Apply runtime statistics and return the new best plan, re-deriving only what they affect.

        Invalid statistics raise ``StatisticsError`` and leave the optimizer exactly as it was.
        """
        if not isinstance(delta, DeltaStats):
            raise StatisticsError(f"reoptimize takes a DeltaStats, got {type(delta).__name__}")
        if not self._loaded:
            self._load()
        catalog = delta.apply(self._catalog, self.query)
        touched = delta.tables_touched(self.query)
        estimator = Estimator(self.query, catalog)
        new_stats = {}
        for mask in self._subsets:
            if mask & touched:
                stats = estimator.stats(mask)
                if stats != self._stats[mask]:
                    new_stats[mask] = stats
        new_factors = {op: catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
        for mask, stats in new_stats.items():
            self.engine.update("Stats", old=self._stats_row(mask, self._stats[mask]), new=self._stats_row(mask, stats))
        for op, factor in new_factors.items():
            if factor != self._factors[op]:
                self.engine.update("CostFactor", old=(op, self._factors[op]), new=(op, factor))
        try:
            self.engine.run()
        except BaseException:
            self.engine.discard_pending()
            raise
        self._catalog = catalog
        self._stats.update(new_stats)
        self._factors = new_factors
        return self._extract()

    def metrics(self) -> OptimizerMetrics:
        stats = self.engine.stats
        best = stats.last["BestCost"]
        return OptimizerMetrics(
            entries_alive=len(self.engine.rows("Want")),
            alternatives_alive=len(self.engine.rows("PlanCost")),
            entries_derived_total=stats.total["Want"].inserted,
            alternatives_derived_total=stats.total["PlanCost"].inserted,
            entries_touched_last=best.touched,
            alternatives_touched_last=len({row[:-1] for row in self.engine.touched_rows("PlanCost")}),
            state_values=self.engine.state_size(),
        )

    # -- internals -------------------------------------------------------------------------------

    def _check_catalog(self, catalog: Catalog) -> None:
        for alias, table in self.query.relations:
            catalog.table(table)
        for predicate in self.query.joins:
            for ref in (predicate.left, predicate.right):
                catalog.column(self.query.table_of(ref.alias), ref.column)

    @staticmethod
    def _stats_row(mask: int, stats: ExprStats) -> tuple:
        return (mask, stats.rows, stats.width, stats.scanned)

    def _load(self) -> None:
        estimator = Estimator(self.query, self._catalog)
        stats = {mask: estimator.stats(mask) for mask in self._subsets}
        factors = {op: self._catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
        self.engine.insert("Query", [(self.query.full,)])
        self.engine.insert("Stats", [self._stats_row(m, s) for m, s in stats.items()])
        self.engine.insert("CostFactor", list(factors.items()))
        try:
            self.engine.run()
        except BaseException:
            self.engine.discard_pending()
            raise
        self._stats, self._factors, self._loaded = stats, factors, True

    def _extract(self) -> Plan:
        return Plan(self._node(self.query.full, ANY), self.query)

    def _node(self, expr: int, prop: str) -> PlanNode:
        rows = self.engine.lookup("BestPlan", (0, 1), (expr, prop))
        if not rows:
            raise OptimizerError(f"no feasible plan for {self.query.label(expr)} with property {prop}")
        _e, _p, kind, op, left, lprop, right, rprop, cost = min(rows, key=lambda r: r[2:8])
        children = []
        if kind != "scan":
            children.append(self._node(left, lprop))
        if kind == "join":
            children.append(self._node(right, rprop))
        stats = self._stats[expr]
        factor = self._factors[op]
        local = self.costs.local(op, stats, *(self._stats[c.expr] for c in children), factor=factor)
        return PlanNode(op, expr, prop, cost, local, stats.rows, children)
