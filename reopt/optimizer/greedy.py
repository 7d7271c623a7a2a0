"""A greedy join order for queries whose exact plan space is over the configured limit.

Exact optimization holds every connected split of the query; past ``OptimizerConfig.max_join_pairs``
it refuses the query (``QueryTooLargeError``). ``OptimizerConfig(beyond_limit="greedy")`` asks for an
approximate plan instead, as DuckDB does above 12 relations: greedy operator ordering (Fegaras, 1998)
picks one join tree, joining at each step the two connected parts whose join the estimator expects
to be smallest, and the optimizer then chooses strategies, build sides and properties exactly over
that tree alone (its n - 1 splits). The join order is a heuristic, so the plan may cost more than
the optimum; everything else about it is exact for that order.
"""

from __future__ import annotations

from .estimate import Estimator
from .query import Query


def _neighbours(query: Query, part: int) -> int:
    """The relations one join predicate away from ``part``."""
    reach, rest = 0, part
    while rest:
        low = rest & -rest
        rest ^= low
        reach |= query.adjacency[low.bit_length() - 1]
    return reach & ~part


def greedy_join_tree(query: Query, estimator: Estimator) -> list[tuple[int, int]]:
    """The splits of a join tree over all of the query's relations, one per join, each as (smaller
    mask, larger mask), in the order the joins were chosen. Each step joins the two parts, connected
    by a join predicate, with the fewest estimated rows (ties: the smaller masks first), so the same
    statistics always give the same tree. Only the joins of the two merged parts with the others are
    estimated anew, so choosing costs O(n^2) estimates."""
    parts = {query.bit(alias) for alias in query.aliases}
    candidates: dict[tuple[int, int], float] = {}

    def offer(part: int) -> None:
        for other in parts:
            if other != part and other & _neighbours(query, part):
                pair = (min(part, other), max(part, other))
                candidates[pair] = estimator.rows(part | other)

    for part in sorted(parts):
        offer(part)
    tree: list[tuple[int, int]] = []
    while candidates:
        a, b = min(candidates, key=lambda pair: (candidates[pair], pair))
        parts -= {a, b}
        for pair in [pair for pair in candidates if a in pair or b in pair]:
            del candidates[pair]
        parts.add(a | b)
        offer(a | b)
        tree.append((a, b))
    return tree
