"""The physical plan space: Spark's join strategies and its distribution/ordering properties.

A property is a string: ``any``; ``hash[k]`` (hash-partitioned on the join-key equivalence class
k, as after a shuffle exchange); ``sorted[k]`` (hash-partitioned and sorted on k within partitions, as
a sort-merge join needs and delivers). A join whose halves are connected by several key classes may
co-partition on any one of them (rows equal on all keys are equal on each), so it is offered once per
class; keeping properties to single classes bounds their number by the number of key classes. Enforcers add what a requirement lacks: ``exchange`` turns ``any`` into
``hash[K]``, ``sort`` turns ``hash[K]`` into ``sorted[K]``.

``split(e, p)`` lists the alternatives (AND nodes) that produce expression ``e`` with property ``p``
as rows ``(kind, operator, left, left_prop, right, right_prop)``:

* a leaf with ``any``: a scan;
* ``hash[k]`` or ``sorted[k]``: the enforcer over the same expression with the weaker property;
* a join expression, for every split into two connected halves (l, r) (no cross products):
  ``broadcast_hash_join`` (r is broadcast and built; l streams, so l's property passes through, and
  a property on key class k is asked of l only if l holds a column of k),
  ``shuffled_hash_join`` (both sides hash-partitioned on a join key class; r is built), both orders;
  ``sort_merge_join`` (both sides sorted on a join key class; symmetric, so one order).
An expression holding no column of a key class cannot be partitioned or sorted on it, so
``split(e, hash[k])`` and ``split(e, sorted[k])`` are empty for it: a broadcast join that passed
such a property on would serve entries no plan can deliver (36% of TPC-H Q5's alternatives, 42% of
JOB 26a's) and could be chosen with its cost understated.
The order of the rows is deterministic, and every row is a canonical, comparable tuple.
"""

from __future__ import annotations

from dataclasses import dataclass

from .query import Query

ANY = "any"
SCAN = "scan"
EXCHANGE = "exchange"
SORT = "sort"
BROADCAST_HASH_JOIN = "broadcast_hash_join"
SHUFFLED_HASH_JOIN = "shuffled_hash_join"
SORT_MERGE_JOIN = "sort_merge_join"
OPERATORS = (SCAN, EXCHANGE, SORT, BROADCAST_HASH_JOIN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN)
JOINS = (BROADCAST_HASH_JOIN, SHUFFLED_HASH_JOIN, SORT_MERGE_JOIN)

NO_EXPR = 0
NO_PROP = ""


def hashed(keys: str) -> str:
    return f"hash[{keys}]"


def sorted_on(keys: str) -> str:
    return f"sorted[{keys}]"


def keys_of(prop: str) -> str:
    return prop[prop.index("[") + 1:-1]


@dataclass(frozen=True)
class SpaceSize:
    """The whole plan space reachable from the root: what an optimizer without pruning holds."""

    entries: int
    alternatives: int
    parents: dict[tuple[int, str], int]  # (expr, prop) -> (alternative, side) pairs that take it as input


class PlanSpace:
    """Enumerates alternatives for one query; memoizes splits, as the reference paper does."""

    def __init__(self, query: Query, max_pairs: int | None = None, *, memoize: bool = True,
                 pairs: list[tuple[int, int]] | None = None):
        """``max_pairs`` refuses (``QueryTooLargeError``) a query with more connected splits than
        that, after enumerating at most that many. ``memoize=False`` keeps no split: a caller that
        stores the alternatives itself, as the declarative optimizer's engine does, need not hold
        them twice (92,369 tuples on JOB 26a). ``pairs`` restricts the space to those splits (one
        join tree's, see ``greedy.py``) instead of every connected one."""
        self.query = query
        self._pairs = pairs
        if pairs is None:
            query.connected_pairs(max_pairs)
        self._memo: dict[tuple[int, str], list[tuple]] | None = {} if memoize else None
        self._halves: dict[int, list[tuple[int, int, tuple[tuple[str, str], ...]]]] = {}
        self._size: SpaceSize | None = None
        # the relations with a column in each key class, by the properties on that class
        holders: dict[str, int] = {}
        for column, key in query.key_class.items():
            holders[key] = holders.get(key, 0) | query.bit(column.alias)
        self._holders = {prop: mask for key, mask in holders.items() for prop in (hashed(key), sorted_on(key))}

    def split(self, expr: int, prop: str) -> list[tuple]:
        if self._memo is None:
            return self._alternatives(expr, prop)
        key = (expr, prop)
        memo = self._memo.get(key)
        if memo is None:
            memo = self._memo[key] = self._alternatives(expr, prop)
        return memo

    def size(self) -> SpaceSize:
        """Enumerate the whole space once (splits only, no costs) to count entries and parents."""
        if self._size is None:
            root = (self.query.full, ANY)
            parents: dict[tuple[int, str], int] = {}
            seen, todo, alternatives = {root}, [root], 0
            while todo:
                for kind, _op, left, lprop, right, rprop in self.split(*todo.pop()):
                    alternatives += 1
                    inputs = [] if kind == SCAN else [(left, lprop)] if kind == "unary" else [(left, lprop), (right, rprop)]
                    for child in inputs:
                        parents[child] = parents.get(child, 0) + 1
                        if child not in seen:
                            seen.add(child)
                            todo.append(child)
            self._size = SpaceSize(len(seen), alternatives, parents)
        return self._size

    def parent_count(self, expr: int, prop: str) -> list[tuple[int]]:
        """``Fn_parentcount``: how many (alternative, side) pairs of the whole space use (expr, prop)."""
        return [(self.size().parents.get((expr, prop), 0),)]

    def halves(self, expr: int) -> list[tuple[int, int, tuple[tuple[str, str], ...]]]:
        """Ordered pairs (l, r) of connected halves of ``expr`` with the properties of their join key
        classes, (hash[k], sorted[k]) per class k: made once per pair, not once per split asked for."""
        if not self._halves:
            by_union: dict[int, list[tuple[int, int, tuple[tuple[str, str], ...]]]] = {}
            # pairs joined on the same classes share one tuple of their properties (JOB 26a: 6,143
            # pairs over a few classes, 1.6 MB of copies otherwise)
            shared: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {}
            for a, b in self.query.connected_pairs() if self._pairs is None else self._pairs:
                classes = tuple(self.query.join_keys(a, b))
                keys = shared.get(classes)
                if keys is None:
                    keys = shared[classes] = tuple((hashed(key), sorted_on(key)) for key in classes)
                by_union.setdefault(a | b, []).extend(((a, b, keys), (b, a, keys)))
            for pairs in by_union.values():
                pairs.sort()
            self._halves = by_union
        return self._halves.get(expr, [])

    def _alternatives(self, expr: int, prop: str) -> list[tuple]:
        holders = 0 if prop == ANY else self._holders.get(prop, 0)
        if prop != ANY and not holders & expr:
            return []  # no column of the key class to partition or sort on
        out: list[tuple] = []
        if prop.startswith("hash["):
            out.append(("unary", EXCHANGE, expr, ANY, NO_EXPR, NO_PROP))
        elif prop.startswith("sorted["):
            out.append(("unary", SORT, expr, hashed(keys_of(prop)), NO_EXPR, NO_PROP))
        if self.query.is_leaf(expr):
            if prop == ANY:
                out.append(("scan", SCAN, NO_EXPR, NO_PROP, NO_EXPR, NO_PROP))
            return out
        for left, right, keys in self.halves(expr):
            if not holders or holders & left:  # the streamed side's partitioning is the join's
                out.append(("join", BROADCAST_HASH_JOIN, left, prop, right, ANY))
            for on_hash, on_sorted in keys:
                if prop == ANY or prop == on_hash:
                    out.append(("join", SHUFFLED_HASH_JOIN, left, on_hash, right, on_hash))
                if left < right and (prop == ANY or prop == on_hash or prop == on_sorted):
                    out.append(("join", SORT_MERGE_JOIN, left, on_sorted, right, on_sorted))
        return out
