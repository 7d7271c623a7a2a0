"""Procedural incremental re-optimization, bottom-up (reference paper, section 5.4, the "(BU)" rows
of its Figure 9).

A System R-style dynamic program that keeps its whole table across calls: every group (connected
expression, interesting property) with its best choice. Given a ``DeltaStats`` it works out the
groups whose alternatives read a changed statistic or cost factor, then revisits groups in size
order, each by costing all of its alternatives again over its inputs' current best choices, and
queues a group's users only when its best cost moved. Dynamic programming prunes nothing it could
skip later, so a revisited group recomputes every alternative: that is the contrast with the
top-down incremental optimizer, which keeps every alternative's cost and bounds what it re-costs.
"""

from __future__ import annotations

import heapq

from ..optimizer.catalog import Catalog
from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import OptimizerError
from ..optimizer.estimate import Estimator
from ..optimizer.fact_deltas import resolve
from ..optimizer.optimizer import OptimizerConfig
from ..optimizer.plan import Plan
from ..optimizer.plan_space import ANY, NO_EXPR, OPERATORS
from ..optimizer.query import Query
from .bottomup import BottomUpOptimizer


class IncrementalBottomUpOptimizer(BottomUpOptimizer):
    def __init__(self, query: Query, catalog: Catalog, config: OptimizerConfig | None = None):
        super().__init__(query, catalog, config)
        self._best: dict[tuple[int, str], tuple[float, tuple] | None] = {}  # every group's choice, once optimized
        self.last_recomputed = 0  # alternatives costed by the last reoptimize
        self.last_updated = 0  # groups whose best choice the last reoptimize changed

    def optimize(self) -> Plan:
        groups = self.groups()
        self._alternatives = {group: self.space.split(*group) for group in groups}
        self._order = groups
        self._place = {group: place for place, group in enumerate(groups)}
        # who to revisit after a change: the groups whose alternatives read an expression's
        # statistics (their own, or an input's), and the groups whose alternatives take a group as input
        self._readers: dict[int, set[tuple[int, str]]] = {}
        self._users: dict[tuple[int, str], set[tuple[int, str]]] = {}
        for group, alternatives in self._alternatives.items():
            for alt in alternatives:
                for read in {group[0], alt[2], alt[4]} - {NO_EXPR}:
                    self._readers.setdefault(read, set()).add(group)
                for child in self.children(alt):
                    self._users.setdefault(child, set()).add(group)
        self._best = {}
        for group in groups:
            self._best[group] = self.choose(group, self._best, self._alternatives[group])
        self.last_recomputed = 0
        self.last_updated = 0
        return self._plan()

    @property
    def alternative_count(self) -> int:
        return sum(len(alts) for alts in self._alternatives.values())

    @property
    def entry_count(self) -> int:
        return len(self._alternatives)

    @property
    def best_costs(self) -> dict[tuple[int, str], float]:
        return {group: best[0] for group, best in self._best.items() if best is not None}

    def reoptimize(self, delta: DeltaStats) -> Plan:
        if not self._best:
            self.optimize()
        resolved = resolve(delta, self.query, self.catalog)
        estimator = Estimator(self.query, resolved.catalog, self.estimator, resolved.leaves)
        estimates = {m: estimator.stats(m) for m in resolved.expressions(self.query.connected_subsets())}
        changed = [m for m, stats in estimates.items() if stats != self.stats[m]]
        factors = {op: resolved.catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
        changed_ops = {op for op in OPERATORS if factors[op] != self.factors[op]}
        self.catalog, self.estimator, self.factors = resolved.catalog, estimator, factors
        self.stats.update((m, estimates[m]) for m in changed)

        heap: list[int] = []
        queued: set[tuple[int, str]] = set()

        def queue(groups) -> None:
            for group in groups:
                if group not in queued:
                    queued.add(group)
                    heapq.heappush(heap, self._place[group])

        for mask in changed:
            queue(self._readers.get(mask, ()))
        if changed_ops:
            queue(group for group, alts in self._alternatives.items() if any(alt[1] in changed_ops for alt in alts))
        self.last_recomputed = self.last_updated = 0
        while heap:
            group = self._order[heapq.heappop(heap)]
            old = self._best[group]
            choice = self._best[group] = self.choose(group, self._best, self._alternatives[group])
            self.last_recomputed += len(self._alternatives[group])
            if (choice is None) != (old is None) or (choice is not None and choice[0] != old[0]):
                self.last_updated += 1
                queue(self._users.get(group, ()))
            elif choice != old:
                self.last_updated += 1  # same cost, another alternative: the plan table entry changed
        return self._plan()

    def _plan(self) -> Plan:
        if self._best.get((self.query.full, ANY)) is None:
            raise OptimizerError(f"no feasible plan for {self.query.label(self.query.full)}")
        return self.build_plan(self._best)
