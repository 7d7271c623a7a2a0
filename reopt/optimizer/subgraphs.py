"""Connected subgraphs and connected-subgraph/complement pairs of a join graph, enumerated directly.

Moerkotte and Neumann's DPccp enumeration ("Analysis of Two Existing and One New Dynamic Programming
Algorithm for the Generation of Optimal Bushy Join Trees without Cross Products", VLDB 2006): grow
each connected set only through its neighbourhood, and forbid the vertices an earlier start already
covers, so that every connected set and every pair is produced exactly once and nothing else is
looked at. The work is proportional to the output, where testing every subset of an expression costs
2^n per expression and 3^n over a query (a 30-relation chain has 465 connected sets, and 2^30 subsets).

A graph is a list of adjacency bitmasks: bit ``j`` of ``adjacency[i]`` is set when vertex i and j are
joined. Sets of vertices are int bitmasks.
"""

from __future__ import annotations

from typing import Callable, Iterator


class TooMany(Exception):
    """More sets or pairs than the caller's limit: enumeration stopped there."""

    def __init__(self, limit: int):
        super().__init__(f"more than {limit:,}")
        self.limit = limit


class _Collector(list):
    """A list that refuses to grow past a limit, so a huge space is refused before it is held."""

    def __init__(self, limit: int | None):
        super().__init__()
        self.limit = limit

    def append(self, item) -> None:
        if self.limit is not None and len(self) >= self.limit:
            raise TooMany(self.limit)
        super().append(item)


def _below(i: int) -> int:
    """The vertices numbered at most ``i``."""
    return (1 << (i + 1)) - 1


def _neighbours(adjacency: list[int], vertices: int) -> int:
    out = 0
    while vertices:
        low = vertices & -vertices
        out |= adjacency[low.bit_length() - 1]
        vertices ^= low
    return out


def _nonempty_subsets(mask: int) -> Iterator[int]:
    sub = mask
    while sub:
        yield sub
        sub = (sub - 1) & mask


def _grow(adjacency: list[int], start: int, excluded: int, emit: Callable[[int], None]) -> None:
    """Emit every connected set that strictly contains ``start`` and avoids ``excluded``, growing
    ``start`` through its neighbourhood (each set exactly once)."""
    stack = [(start, excluded)]
    while stack:
        current, forbidden = stack.pop()
        frontier = _neighbours(adjacency, current) & ~current & ~forbidden
        if not frontier:
            continue
        # one subset at a time, each emitted before it is kept: a frontier of k vertices has 2^k
        # subsets (a star's hub, 2^29 for 30 relations), and a limit must stop the emitting before
        # they are all held
        for sub in _nonempty_subsets(frontier):
            emit(current | sub)
            stack.append((current | sub, forbidden | frontier))


def connected_sets(adjacency: list[int], limit: int | None = None) -> list[int]:
    """Every connected vertex set of the graph, each once, in increasing mask order; ``TooMany``
    if there are more than ``limit``."""
    out = _Collector(limit)
    for i in range(len(adjacency) - 1, -1, -1):
        out.append(1 << i)
        _grow(adjacency, 1 << i, _below(i), out.append)
    return sorted(out)


def ccp_pairs(adjacency: list[int], limit: int | None = None) -> list[tuple[int, int]]:
    """Every unordered pair (s1, s2) of disjoint connected sets joined by at least one edge, each once
    (with the lowest vertex in s1): the splits of ``s1 | s2`` into two connected halves. ``TooMany``
    if there are more than ``limit``."""
    pairs = _Collector(limit)
    # Each connected set of two or more vertices has a split, so a limit on pairs bounds sets too.
    sets_limit = None if limit is None else limit + len(adjacency)
    for s1 in connected_sets(adjacency, sets_limit):
        first = (s1 & -s1).bit_length() - 1
        forbidden = _below(first) | s1
        frontier = _neighbours(adjacency, s1) & ~forbidden
        vertices = frontier
        while vertices:  # highest vertex first, so each complement's own start forbids the rest
            top = vertices.bit_length() - 1
            vertices ^= 1 << top
            start = 1 << top
            pairs.append((s1, start))
            _grow(adjacency, start, forbidden | (_below(top) & frontier),
                  lambda s2, s1=s1: pairs.append((s1, s2)))
    return list(pairs)
