"""Procedural incremental re-optimization (reference paper, section 5.4).

A top-down optimizer that keeps its whole memo across calls (every group reachable from the root and
every alternative's cost) with a reverse index from each group to the alternatives that use it.
Given a ``DeltaStats`` it marks only the alternatives whose local cost reads a changed statistic or
cost factor, then walks affected groups children-first (by expression size, then property strength)
and marks parents only where a group's best cost changed (lazy propagation). A marked alternative is
costed when its group is reached, once, from its children's final best costs: a join whose statistics
and inputs both changed is not costed once per cause.

Costs that can only have grown are not computed again at once. The cost model never falls when its
inputs grow (tests/test_cost_model_properties.py), so when every statistic, factor and input cost
under an alternative grew, its remembered cost is a lower bound of its new one: it stays, marked,
and a group costs a marked alternative again only when that bound comes first among the group's
costs (a bounded memo, as in branch and bound). The chosen alternative is always costed exactly, so
every group's best equals a full optimization's. Anything that fell is costed at once.

Local costs are remembered apart from totals: they read statistics and cost factors only, so an
alternative reached because an input's best cost moved adds its inputs up again without calling the
cost model, and alternatives that differ only in their inputs' properties share one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from ..optimizer.catalog import Catalog
from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import OptimizerError
from ..optimizer.estimate import Estimator, ExprStats
from ..optimizer.fact_deltas import resolve
from ..optimizer.optimizer import OptimizerConfig
from ..optimizer.plan import Plan
from ..optimizer.plan_space import ANY, NO_EXPR, OPERATORS
from ..optimizer.query import Query
from .common import ProceduralBase, group_order

_UNKNOWN = object()  # a local cost not yet computed (None is an infeasible alternative's)


def _grew(old: ExprStats, new: ExprStats) -> bool:
    """Whether no statistic the cost model reads fell."""
    return new.rows >= old.rows and new.width >= old.width and new.scanned >= old.scanned


class IncrementalTopDownOptimizer(ProceduralBase):
    def __init__(self, query: Query, catalog: Catalog, config: OptimizerConfig | None = None):
        super().__init__(query, catalog, config)
        self._alternatives: dict[tuple[int, str], dict[tuple, float | None]] = {}
        self._best: dict[tuple[int, str], tuple[float, tuple] | None] = {}
        # who to revise after a change: a group's parent alternatives, by the group they belong to
        # (their local costs read the group's statistics, their costs its best), and the groups of
        # each expression (every alternative of which reads its statistics)
        self._users: dict[tuple[int, str], dict[tuple[int, str], list[tuple]]] = {}
        self._groups_of: dict[int, list[tuple[int, str]]] = {}
        # per group, the alternatives whose remembered cost is a lower bound of their cost (see _revise)
        self._stale: dict[tuple[int, str], set[tuple]] = {}
        # each alternative's local cost, shared by the alternatives that differ only in their inputs'
        # properties; and which of them read each expression's statistics, to forget after a change
        self._locals: dict[tuple, float | None] = {}
        self._local_readers: dict[int, set[tuple]] = {}
        # during reoptimize: groups with a change under some alternatives (those where every change
        # grew, and the others), and the queue of those groups, children first
        self._marked: dict[tuple[int, str], tuple[set[tuple], set[tuple]]] = {}
        self._heap: list[int] = []
        # every group by its place children-first (group_order), and that place by group: the queue
        # holds places, so that marking a group does not work out its order again
        self._in_order: list[tuple[int, str]] = []
        self._place: dict[tuple[int, str], int] = {}
        self.last_recosted = 0  # alternatives costed by the last reoptimize
        self.last_updated = 0  # groups whose best choice the last reoptimize changed

    @property
    def memo(self) -> Mapping[tuple[int, str], Mapping[tuple, float | None]]:
        """Every group reachable from the root, with each alternative's remembered cost (None where
        infeasible), read-only. Exact after ``optimize()``; after a change, a cost that could only
        have grown may be a lower bound until the group needs it."""
        return MappingProxyType(self._alternatives)

    @property
    def best_costs(self) -> dict[tuple[int, str], float]:
        """Each group's best cost; groups with no feasible plan are left out."""
        return {group: best[0] for group, best in self._best.items() if best is not None}

    @property
    def entry_count(self) -> int:
        """Groups held in the memo (every group reachable from the root)."""
        return len(self._alternatives)

    @property
    def alternative_count(self) -> int:
        """Alternatives held in the memo (every alternative of every group reachable from the root)."""
        return sum(len(alts) for alts in self._alternatives.values())

    def optimize(self) -> Plan:
        if not self._alternatives:
            self._explore((self.query.full, ANY))
            self._in_order = sorted(self._alternatives, key=group_order)
            self._place = {group: place for place, group in enumerate(self._in_order)}
            for group in self._in_order:
                for alt in self._alternatives[group]:
                    self._alternatives[group][alt] = self._cost(group, alt)
                self._best[group] = self._choose(group)
        return self._plan()

    def reoptimize(self, delta: DeltaStats) -> Plan:
        if not self._alternatives:
            self.optimize()
        resolved = resolve(delta, self.query, self.catalog)
        catalog = resolved.catalog
        estimator = Estimator(self.query, catalog, self.estimator, resolved.leaves)
        estimates = {m: estimator.stats(m) for m in resolved.expressions(self.query.connected_subsets())}
        changed = {m: _grew(self.stats[m], stats) for m, stats in estimates.items() if stats != self.stats[m]}
        factors = {op: catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
        changed_ops = {op: factors[op] >= self.factors[op] for op in OPERATORS if factors[op] != self.factors[op]}
        self.catalog, self.estimator = catalog, estimator
        for mask in changed:
            self.stats[mask] = estimates[mask]
            for key in self._local_readers.get(mask, ()):
                self._locals.pop(key, None)
        if changed_ops:
            for key in [key for key in self._locals if key[1] in changed_ops]:
                del self._locals[key]
        self.factors = factors

        # Each alternative whose local cost reads a changed statistic or factor, and whether every
        # such change grew: then its remembered cost is a lower bound of its new one. A statistic
        # is read by its expression's groups, and by their parents as inputs: those are marked
        # when the group is revised, with its best cost's change.
        self._marked = {}
        self._heap = []
        for mask, grew in changed.items():
            self._mark(((group, self._alternatives[group]) for group in self._groups_of.get(mask, ())), grew)
        for op, grew in changed_ops.items():
            self._mark(((group, using) for group, alts in self._alternatives.items()
                        if (using := [alt for alt in alts if alt[1] == op])), grew)
        # Groups children-first: a group's marked alternatives are costed once, when it is reached,
        # from its children's final best costs.
        self.last_recosted = self.last_updated = 0
        while self._heap:
            group = self._in_order[heapq.heappop(self._heap)]
            only_grew, may_fall = self._marked.pop(group)
            self._revise(group, only_grew, may_fall)
            old = choice = self._best[group]
            # unless the chosen alternative is as it was and every other one only grew (it still wins)
            if may_fall or old is None or old[1] in only_grew:
                choice = self._best[group] = self._choose(group)
            # the parents read the group's best cost and statistics: did either change, and only grow?
            self.last_updated += choice != old
            cost_moved = choice != old and (choice is None or old is None or choice[0] != old[0])
            statistic_grew = changed.get(group[0])
            if not cost_moved and statistic_grew is None:
                continue
            grew = statistic_grew is not False and (
                not cost_moved or (old is not None and (choice is None or choice[0] >= old[0])))
            self._mark(self._users.get(group, {}).items(), grew)
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
            self._groups_of.setdefault(expr, []).append(group)
            for alt in alternatives:
                key = self._local_key(expr, alt)
                for read in {expr, alt[2], alt[4]} - {NO_EXPR}:  # a scan or an enforcer has no (right) input
                    self._local_readers.setdefault(read, set()).add(key)
                for child in self.children(alt):
                    self._users.setdefault(child, {}).setdefault(group, []).append(alt)
                    stack.append(child)

    @staticmethod
    def _local_key(expr: int, alt: tuple) -> tuple:
        """What an alternative's local cost depends on: its expression, operator and inputs'
        expressions (through their statistics), not the inputs' properties."""
        return expr, alt[1], alt[2], alt[4]

    def known_local_cost(self, expr: int, alt: tuple) -> float | None:
        key = self._local_key(expr, alt)
        local = self._locals.get(key, _UNKNOWN)
        if local is _UNKNOWN:
            local = self._locals[key] = self.local_cost(expr, alt)
        return local

    def _cost(self, group: tuple[int, str], alt: tuple) -> float | None:
        return self.total_over(alt, self.known_local_cost(group[0], alt), self._best)

    def _mark(self, groups: Iterable[tuple[tuple[int, str], list[tuple]]], grew: bool) -> None:
        """Note a change under some alternatives of each group (``grew``: it cannot have lowered
        their costs); the groups are queued to be revised."""
        side = 0 if grew else 1
        for group, alts in groups:
            marked = self._marked.get(group)
            if marked is None:
                marked = self._marked[group] = (set(), set())
                heapq.heappush(self._heap, self._place[group])
            marked[side].update(alts)

    def _revise(self, group: tuple[int, str], grew: set[tuple], fell: set[tuple]) -> None:
        """A group's alternatives after changes under them. Where every change grew, a cost cannot
        have fallen (the cost model never falls when its inputs grow): the remembered cost stays,
        as a lower bound, and ``_choose`` costs it again only if the bound could win. The others
        (``fell``: some change under them may have lowered them) are costed now."""
        alternatives = self._alternatives[group]
        stale = self._stale.setdefault(group, set())
        stale |= grew
        stale -= fell
        for alt in fell:
            alternatives[alt] = self._cost(group, alt)
        self.last_recosted += len(fell)

    def _choose(self, group: tuple[int, str]) -> tuple[float, tuple] | None:
        """The cheapest alternative (ties broken by its key), costing again any whose lower bound
        comes first, until the first is exact: every other costs at least its bound, so it wins."""
        alternatives = self._alternatives[group]
        ranked = [(cost, alt) for alt, cost in alternatives.items() if cost is not None]
        stale = self._stale.get(group)
        if not stale:
            return min(ranked, default=None)
        heapq.heapify(ranked)
        while ranked:
            cost, alt = ranked[0]
            if alt not in stale:
                return cost, alt
            stale.discard(alt)
            cost = alternatives[alt] = self._cost(group, alt)
            self.last_recosted += 1
            if cost is None:
                heapq.heappop(ranked)
            else:
                heapq.heapreplace(ranked, (cost, alt))
        return None

    def _plan(self) -> Plan:
        if self._best.get((self.query.full, ANY)) is None:
            raise OptimizerError(f"no feasible plan for {self.query.label(self.query.full)}")
        return self.build_plan(self._best)
