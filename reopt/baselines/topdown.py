"""Top-down optimization, Volcano style: a memo of (expression, required property) groups filled by
recursive descent, with branch-and-bound against the best plan found so far and the parent's budget.
"""

from __future__ import annotations

import math

from ..optimizer.errors import OptimizerError
from ..optimizer.plan import Plan
from ..optimizer.plan_space import ANY
from .common import ProceduralBase

# Budgets handed to children are relaxed by this relative margin, so that a float rounding in
# "bound - cost so far" can never prune a plan whose exact total is within the budget.
_SLACK = 1e-9


class TopDownOptimizer(ProceduralBase):
    def optimize(self) -> Plan:
        self._best: dict[tuple[int, str], tuple[float, tuple]] = {}
        self._no_plan_within: dict[tuple[int, str], float] = {}
        self.groups_optimized = 0
        if self._optimize(self.query.full, ANY, math.inf) is None:
            raise OptimizerError(f"no feasible plan for {self.query.label(self.query.full)}")
        return self.build_plan(self._best)

    @property
    def visited_groups(self) -> set[tuple[int, str]]:
        """The groups the last ``optimize()`` searched (each had every alternative's local cost
        computed); branch-and-bound never reached the others."""
        return set(self._best) | set(self._no_plan_within)

    def _optimize(self, expr: int, prop: str, limit: float) -> float | None:
        """The group's optimal cost if it is at most ``limit``; None if every plan costs more."""
        key = (expr, prop)
        known = self._best.get(key)
        if known is not None:
            return known[0] if known[0] <= limit else None
        if limit <= self._no_plan_within.get(key, -math.inf):
            return None
        self.groups_optimized += 1
        best: tuple[float, tuple] | None = None
        bound = limit
        for alt in self.space.split(expr, prop):
            local = self.local_cost(expr, alt)
            if local is None or local > bound:
                continue
            total = local  # inputs added left to right, as the rules add them
            for child in self.children(alt):
                budget = (bound - total) * (1 + _SLACK) + _SLACK
                cost = self._optimize(*child, budget)
                if cost is None:
                    break
                total += cost
            else:
                if total <= bound and (best is None or (total, alt) < best):
                    best, bound = (total, alt), total
        if best is None:
            self._no_plan_within[key] = max(limit, self._no_plan_within.get(key, -math.inf))
            return None
        self._best[key] = best
        return best[0]
