"""Procedural incremental re-optimization (reference paper, section 5.4).

A top-down optimizer that keeps its whole memo across calls (every group reachable from the root and
every alternative's cost) with a reverse index from each group to the alternatives that use it.
Given a ``DeltaStats`` it re-costs only the alternatives whose local cost reads a changed statistic
or cost factor, then walks affected groups children-first (by expression size, then property
strength) and propagates upward only where a group's best cost or choice changed (lazy propagation).
"""

from __future__ import annotations

import heapq

from ..optimizer.catalog import Catalog
from ..optimizer.deltas import DeltaStats
from ..optimizer.estimate import Estimator
from ..optimizer.optimizer import OptimizerConfig
from ..optimizer.errors import OptimizerError
from ..optimizer.plan import Plan
from ..optimizer.plan_space import ANY, OPERATORS
from ..optimizer.query import Query
from .common import ProceduralBase


def _order(group: tuple[int, str]) -> tuple:
    expr, prop = group
    strength = 0 if prop == ANY else 1 if prop.startswith("hash[") else 2
    return (bin(expr).count("1"), expr, strength, prop)


class IncrementalTopDownOptimizer(ProceduralBase):
    def __init__(self, query: Query, catalog: Catalog, config: OptimizerConfig | None = None):
        super().__init__(query, catalog, config)
        self._alternatives: dict[tuple[int, str], dict[tuple, float | None]] = {}
        self._best: dict[tuple[int, str], tuple[float, tuple] | None] = {}
        self._users: dict[tuple[int, str], list[tuple[tuple[int, str], tuple]]] = {}
        self._readers: dict[int, list[tuple[tuple[int, str], tuple]]] = {}
        self.last_recosted = 0
        self.last_groups_touched = 0

    @property
    def alternative_count(self) -> int:
        """Alternatives held in the memo (every alternative of every group reachable from the root)."""
        return sum(len(alts) for alts in self._alternatives.values())

    def optimize(self) -> Plan:
        if not self._alternatives:
            self._explore((self.query.full, ANY))
            for group in sorted(self._alternatives, key=_order):
                for alt in self._alternatives[group]:
                    self._alternatives[group][alt] = self._cost(group, alt)
                self._best[group] = self._choose(group)
        return self._plan()

    def reoptimize(self, delta: DeltaStats) -> Plan:
        if not self._alternatives:
            self.optimize()
        catalog = delta.apply(self.catalog, self.query)
        touched = delta.tables_touched(self.query, self.catalog)
        estimator = Estimator(self.query, catalog)
        changed = {m for m in self.stats if m & touched and estimator.stats(m) != self.stats[m]}
        factors = {op: catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
        changed_ops = {op for op in OPERATORS if factors[op] != self.factors[op]}
        self.catalog = catalog
        for mask in changed:
            self.stats[mask] = estimator.stats(mask)
        self.factors = factors

        dirty: set[tuple[tuple[int, str], tuple]] = set()
        for mask in changed:
            dirty.update(self._readers.get(mask, ()))
        if changed_ops:
            dirty.update((g, alt) for g, alts in self._alternatives.items() for alt in alts if alt[1] in changed_ops)
        heap: list = []
        queued: set = set()
        for group, alt in dirty:
            self._alternatives[group][alt] = self._cost(group, alt)
            if group not in queued:
                queued.add(group)
                heapq.heappush(heap, (_order(group), group))
        self.last_recosted = len(dirty)
        self.last_groups_touched = 0
        while heap:
            _, group = heapq.heappop(heap)
            queued.discard(group)
            self.last_groups_touched += 1
            choice = self._choose(group)
            if choice == self._best[group]:
                continue
            old = self._best[group]
            self._best[group] = choice
            if choice is not None and old is not None and choice[0] == old[0]:
                continue  # same cost, other alternative: the parents' costs do not change
            for parent, alt in self._users.get(group, ()):
                self._alternatives[parent][alt] = self._cost(parent, alt)
                self.last_recosted += 1
                if parent not in queued:
                    queued.add(parent)
                    heapq.heappush(heap, (_order(parent), parent))
        return self._plan()

    # -- internals -------------------------------------------------------------------------------

    def _explore(self, root: tuple[int, str]) -> None:
        stack = [root]
        while stack:
            group = stack.pop()
            if group in self._alternatives:
                continue
            expr = group[0]
            alternatives = self.space.split(*group)
            self._alternatives[group] = {alt: None for alt in alternatives}
            for alt in alternatives:
                kind, _op, left, _lp, right, _rp = alt
                for mask in {expr, left, right} - {0} if kind == "join" else {expr, left} - {0}:
                    self._readers.setdefault(mask, []).append((group, alt))
                for child in self.children(alt):
                    self._users.setdefault(child, []).append((group, alt))
                    stack.append(child)

    def _cost(self, group: tuple[int, str], alt: tuple) -> float | None:
        local = self.local_cost(group[0], alt)
        if local is None:
            return None
        costs = []
        for child in self.children(alt):
            best = self._best.get(child)
            if best is None:
                return None
            costs.append(best[0])
        return self.total(local, costs)

    def _choose(self, group: tuple[int, str]) -> tuple[float, tuple] | None:
        choice = None
        for alt, cost in self._alternatives[group].items():
            if cost is not None and (choice is None or (cost, alt) < choice):
                choice = (cost, alt)
        return choice

    def _plan(self) -> Plan:
        if self._best.get((self.query.full, ANY)) is None:
            raise OptimizerError(f"no feasible plan for {self.query.label(self.query.full)}")
        return self.build_plan({g: b for g, b in self._best.items() if b is not None})
