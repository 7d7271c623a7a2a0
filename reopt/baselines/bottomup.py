"""Bottom-up optimization, System R style: dynamic programming over the connected sub-expressions in
order of size, keeping the best plan of each sub-expression for every interesting property (each
join key class partitioned, and partitioned and sorted). Splits are the connected-subgraph /
complement pairs the shared plan space enumerates (by testing the sub-masks of an expression).
"""

from __future__ import annotations

from ..optimizer.plan import Plan
from ..optimizer.plan_space import ANY, hashed, sorted_on
from .common import ProceduralBase


class BottomUpOptimizer(ProceduralBase):
    def optimize(self) -> Plan:
        classes = sorted(set(self.query.key_class.values()))
        properties = [ANY] + [hashed(k) for k in classes] + [sorted_on(k) for k in classes]
        best: dict[tuple[int, str], tuple[float, tuple]] = {}
        for expr in sorted(self.stats, key=lambda m: (bin(m).count("1"), m)):
            for prop in properties:
                choice = None
                for alt in self.space.split(expr, prop):
                    cost = self.cost_over(expr, alt, best)
                    if cost is not None and (choice is None or (cost, alt) < choice):
                        choice = (cost, alt)
                if choice is not None:
                    best[(expr, prop)] = choice
        return self.build_plan(best)
