"""Bottom-up optimization, System R style: dynamic programming over the connected sub-expressions in
order of size, keeping the best plan of each sub-expression for every interesting property (each
join key class partitioned, and partitioned and sorted). Splits are the connected-subgraph /
complement pairs the shared plan space enumerates (by testing the sub-masks of an expression).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..optimizer.plan import Plan
from ..optimizer.plan_space import ANY, hashed, sorted_on
from .common import ProceduralBase


class BottomUpOptimizer(ProceduralBase):
    def optimize(self) -> Plan:
        best: dict[tuple[int, str], tuple[float, tuple]] = {}
        for group in self.groups():
            choice = self.choose(group, best)
            if choice is not None:
                best[group] = choice
        return self.build_plan(best)

    def groups(self) -> list[tuple[int, str]]:
        """Every (expression, interesting property) group, each after the groups its alternatives
        take as inputs."""
        classes = sorted(set(self.query.key_class.values()))
        properties = [ANY] + [hashed(k) for k in classes] + [sorted_on(k) for k in classes]
        return [(expr, prop) for expr in sorted(self.stats, key=lambda m: (m.bit_count(), m)) for prop in properties]

    def choose(self, group: tuple[int, str], best: Mapping[tuple[int, str], tuple[float, tuple] | None],
               alternatives: Iterable[tuple] | None = None) -> tuple[float, tuple] | None:
        """The group's cheapest alternative over its inputs' ``best`` choices (ties broken by the
        alternative), or None if none is feasible."""
        choice = None
        for alt in self.space.split(*group) if alternatives is None else alternatives:
            cost = self.cost_over(group[0], alt, best)
            if cost is not None and (choice is None or (cost, alt) < choice):
                choice = (cost, alt)
        return choice
