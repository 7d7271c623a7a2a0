"""An independent brute-force enumerator of physical plan trees, written from the plan-space
specification (reopt/optimizer/plan_space.py's docstring) without memo, pruning or datalog.

It yields every complete plan tree with its cost, so the optimizer's best cost can be checked against
the minimum over all of them. It shares only the estimator and the cost functions (the built-ins).
"""

from __future__ import annotations

import itertools
from typing import Iterator

from reopt.optimizer.cost import CostModel
from reopt.optimizer.estimate import Estimator
from reopt.optimizer.query import Query


def _connected(query: Query, mask: int) -> bool:
    members = [i for i in range(len(query.aliases)) if mask >> i & 1]
    seen = {members[0]}
    stack = [members[0]]
    while stack:
        i = stack.pop()
        for j in members:
            if j not in seen and query.adjacency[i] >> j & 1:
                seen.add(j)
                stack.append(j)
    return len(seen) == len(members)


def all_plans(query: Query, catalog, weights=None) -> list[tuple[float, str]]:
    """(cost, key) of every plan tree producing the whole query with property 'any'."""
    estimator = Estimator(query, catalog)
    costs = CostModel(weights)
    factor = lambda op: catalog.cost_factors.get(op, 1.0)  # noqa: E731

    def stats(mask):
        return estimator.stats(mask)

    holders: dict[str, int] = {}  # key class -> the relations with a column in it
    for predicate in query.joins:
        key = query.key_class[predicate.left]
        holders[key] = holders.get(key, 0) | query.bit(predicate.left.alias) | query.bit(predicate.right.alias)

    def plans(mask: int, prop: str) -> Iterator[tuple[float, str]]:
        if prop != "any" and not holders[prop[prop.index("[") + 1:-1]] & mask:
            return  # nothing to partition or sort on
        if prop.startswith("hash["):
            local = costs.unary("exchange", stats(mask).rows, stats(mask).width, factor("exchange"))[0][0]
            for c, key in plans(mask, "any"):
                yield local + c, f"exchange({key})"
        if prop.startswith("sorted["):
            key_class = prop[len("sorted["):-1]
            local = costs.unary("sort", stats(mask).rows, stats(mask).width, factor("sort"))[0][0]
            for c, key in plans(mask, f"hash[{key_class}]"):
                yield local + c, f"sort({key})"
        if mask & (mask - 1) == 0:
            if prop == "any":
                s = stats(mask)
                name = query.aliases[mask.bit_length() - 1]
                yield costs.scan(s.rows, s.width, s.scanned, factor("scan"))[0][0], f"scan({name})"
            return
        members = [1 << i for i in range(len(query.aliases)) if mask >> i & 1]
        for size in range(1, len(members)):
            for combo in itertools.combinations(members, size):
                left = sum(combo)
                right = mask ^ left
                if not (_connected(query, left) and _connected(query, right)):
                    continue
                classes = sorted({query.key_class[p.left] for p in query.joins_between(left, right)})
                ls, rs, out = stats(left), stats(right), stats(mask).rows
                options = [("broadcast_hash_join", prop, "any")]
                for k in classes:
                    if prop in ("any", f"hash[{k}]"):
                        options.append(("shuffled_hash_join", f"hash[{k}]", f"hash[{k}]"))
                    if left < right and prop in ("any", f"hash[{k}]", f"sorted[{k}]"):
                        options.append(("sort_merge_join", f"sorted[{k}]", f"sorted[{k}]"))
                for op, lprop, rprop in options:
                    local = costs.join(op, ls.rows, ls.width, rs.rows, rs.width, out, factor(op),
                                       right_relations=right.bit_count())
                    if not local:
                        continue
                    for (lc, lkey), (rc, rkey) in itertools.product(list(plans(left, lprop)), list(plans(right, rprop))):
                        yield local[0][0] + lc + rc, f"{op}({lkey},{rkey})"

    return list(plans(query.full, "any"))
