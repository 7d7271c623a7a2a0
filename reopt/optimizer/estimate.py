"""Plan-independent cardinality estimates for every connected sub-expression of a query.

``rows(E)`` is a function of the *set* E, never of a plan: the filtered rows of E's relations times
the selectivities of the join predicates inside E, multiplied in one canonical order, so every plan
of E sees bit-for-bit the same number (the principle of optimality needs it, and incremental results
equal from-scratch ones only if the floats do).

Widths count only the columns a relation contributes (join keys and what the SQL's final step
uses); scans read those plus the columns their filters test, as Spark's column pruning does.

Equi-joins count once per key equivalence class, never once per predicate written: the columns the
equalities inside E connect are all equal, and a connected group of k columns contributes k-1
selectivities, as PostgreSQL's equivalence classes and Spark's join estimation do. Redundant,
transitive and repeated predicates (JOB writes ``t.id = mc.movie_id``, ``t.id = mi.movie_id`` and
``mc.movie_id = mi.movie_id``) change no estimate. Within a group, selectivities learnt at run time
come first (Kruskal's rule in one canonical order: each learnt predicate counts unless earlier ones
already made its columns equal); what they leave unjoined is estimated under the containment
assumption: with the parts' distinct counts (each the smallest of its columns), every part but the
one with the fewest distinct values divides by its count. With no learnt selectivity that is
1/max(ndv) for two columns, and the product of all distinct counts but the smallest for k.

Observed cardinalities correct estimates consistently. Observations are taken in order of size;
each one's residual (observed rows over the current estimate) goes

* to a join predicate's selectivity, when exactly one predicate inside the observed expression is
  not yet fixed by a smaller observation (it becomes learnt, with the selectivity that gives the
  observed rows): every expression containing that predicate is corrected,
  including ones never observed (observing {a, b} and {a, b, c} reveals the selectivity of the
  predicate joining c, and so {a, c} too);
* otherwise to the expression itself, and every expression containing it inherits the correction.

Either way each observed expression gets exactly its observed rows. Estimates never go below one row
nor above ``MAX_ROWS``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from .catalog import Catalog
from .query import Query
from .selectivity import clamp, conjunction_selectivity


def _width(stats, columns: set[str] | None) -> float:
    """Bytes per row of the given columns (columnar storage reads and carries only those)."""
    if columns is None:
        return stats.width
    return sum(stats.column_width(c) for c in sorted(columns)) or 1.0


# Estimates saturate here: a join of many huge tables with unselective predicates would otherwise
# overflow to inf (and costs to NaN). Saturating is monotone, so costs stay monotone in their inputs.
MAX_ROWS = 1e30


def _root(parent: dict[int, int], c: int) -> int:
    """``c``'s part in a union-find over column numbers held as a dict (a column absent from it is a
    part of its own); the smallest column of a part is its root."""
    while (up := parent.get(c, c)) != c:
        c = up
    return c


def _union(parent: dict[int, int], a: int, b: int) -> bool:
    """Merge the parts of a and b; False if they were one part already."""
    a, b = _root(parent, a), _root(parent, b)
    if a == b:
        return False
    parent[max(a, b)] = min(a, b)
    return True


def _containment(ndvs: Iterable[float]) -> tuple[float, ...]:
    """The selectivities of joining parts with these distinct counts: every part but the one with
    the fewest divides by its count (containment), taken in order of count."""
    return tuple(clamp(1.0 / ndv) for ndv in sorted(ndvs)[1:])


class _JoinGraph:
    """What join estimation takes from the query alone, worked out once per query and shared by
    every estimator of it (re-optimization builds one per change): the equi-join predicates in
    canonical order with their columns numbered, and for each expression the predicates inside it
    and the key equivalence classes they form."""

    def __init__(self, query: Query):
        self.joins = sorted(query.joins, key=lambda p: p.text)
        column_ids: dict[object, int] = {}
        self.columns: list[tuple[str, str]] = []  # (table, column) of each numbered column
        self.ends: list[tuple[int, int]] = []
        for p in self.joins:
            ends = []
            for ref in (p.left, p.right):
                if ref not in column_ids:
                    column_ids[ref] = len(column_ids)
                    self.columns.append((query.table_of(ref.alias), ref.column))
                ends.append(column_ids[ref])
            self.ends.append((ends[0], ends[1]))
        self.pairs = [query.bit(p.left.alias) | query.bit(p.right.alias) for p in self.joins]
        self.texts = [p.text for p in self.joins]
        self._classes: dict[int, tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]] = {}

    def classes(self, mask: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """The predicates inside ``mask`` (by number) and its key classes: each a sorted tuple of
        columns, the classes in order of their smallest column."""
        known = self._classes.get(mask)
        if known is None:
            inside = tuple(j for j, pair in enumerate(self.pairs) if pair & mask == pair)
            equal: dict[int, int] = {}
            for j in inside:
                _union(equal, *self.ends[j])
            groups: dict[int, list[int]] = {}
            for column in sorted({column for j in inside for column in self.ends[j]}):
                groups.setdefault(_root(equal, column), []).append(column)
            known = self._classes[mask] = (inside, tuple(tuple(groups[root]) for root in sorted(groups)))
        return known


_join_graphs: "weakref.WeakKeyDictionary[Query, _JoinGraph]" = weakref.WeakKeyDictionary()


def _join_graph(query: Query) -> _JoinGraph:
    """The query's join graph, kept as long as the query lives."""
    graph = _join_graphs.get(query)
    if graph is None:
        graph = _join_graphs[query] = _JoinGraph(query)
    return graph


@dataclass(frozen=True)
class ExprStats:
    rows: float
    width: float  # bytes per output row
    scanned: float  # bytes read from storage (leaves only; 0 for joins)
    relations: int = 1  # how many of the query's relations the expression joins


class Estimator:
    """Estimates under one catalog. ``previous`` (an estimator of the same query) with ``changed``
    (a mask of relations) reuses what ``previous`` worked out for every relation outside
    ``changed``: re-optimization re-estimates only the relations a change touched (their filters'
    selectivities are the costly part)."""

    def __init__(self, query: Query, catalog: Catalog, previous: "Estimator | None" = None, changed: int = 0):
        if previous is not None and previous.query is not query:
            raise ValueError("an estimator reuses only an estimator of the same query")
        self.query = query
        self.catalog = catalog
        self._leaves: list[tuple[float, float, float]] = [
            previous._leaves[i] if previous is not None and not changed >> i & 1 else self._leaf(alias, table)
            for i, (alias, table) in enumerate(query.relations)]
        self._leaf_rows = [leaf[0] for leaf in self._leaves]
        self._widths = [leaf[1] for leaf in self._leaves]
        self._scanned = [leaf[2] for leaf in self._leaves]
        graph = self._graph = _join_graph(query)
        self._ndv = [max(catalog.column(table, column).ndv, 1.0) for table, column in graph.columns]
        # each key class's containment selectivities, kept while the distinct counts stay as they were
        self._group_factors: dict[tuple[int, ...], tuple[float, ...]] = (
            previous._group_factors if previous is not None and previous._ndv == self._ndv else {})
        # each predicate's selectivity as learnt at run time (an override or an observation), or None
        self._learnt: list[float | None] = [catalog.selectivities.get(text) for text in graph.texts]
        # what a set of learnt predicates contributes (see _learnt_part), by the predicates: many
        # expressions hold the same learnt predicates
        self._learnt_parts: dict[tuple[int, ...], tuple[float, dict[int, int]]] = {}
        self._corrections: list[tuple[int, float]] = []
        # each expression's join selectivity: a function of the learnt selectivities and distinct
        # counts alone, so kept from ``previous`` while both are as they were (a table's size changed)
        self._selectivities: dict[int, float] = {}
        observed = sorted(((query.mask(names), rows) for names, rows in catalog.observed.items()
                           if set(names) <= set(query.aliases)), key=lambda mr: (bin(mr[0]).count("1"), mr[0]))
        self._observed = {mask: max(rows, 1.0) for mask, rows in observed}
        fixed: set[int] = set()
        for mask, rows in observed:
            inside = graph.classes(mask)[0]
            open_joins = [j for j in inside if j not in fixed]
            if len(open_joins) == 1:
                j = open_joins[0]
                self._learnt[j] = 1.0  # counted first, so the estimate without it is what remains
                self._learnt[j] = clamp(max(rows, 1.0) / max(self._corrected(mask), 1e-300))
                self._learnt_parts.clear()  # they hold what was learnt before
                self._selectivities.clear()
            else:
                self._corrections.append((mask, max(rows, 1.0) / max(self._corrected(mask), 1.0)))
            fixed.update(inside)
        if previous is not None and previous._learnt == self._learnt and previous._ndv == self._ndv:
            self._selectivities = previous._selectivities

    def _leaf(self, alias: str, table: str) -> tuple[float, float, float]:
        """A relation's filtered rows, output width and bytes scanned."""
        stats = self.catalog.table(table)
        query, catalog = self.query, self.catalog
        filters = sorted(query.filters_on(alias), key=lambda f: f.text)
        selectivity = 1.0
        for f in filters:  # selectivities learnt at run time win over estimates
            if f.text in catalog.selectivities:
                selectivity *= catalog.selectivities[f.text]
        estimated = [f.expression for f in filters if f.text not in catalog.selectivities]
        if estimated:
            selectivity *= conjunction_selectivity(estimated, stats)
        return (stats.rows * selectivity, _width(stats, query.needed_columns(alias)),
                stats.rows * _width(stats, query.read_columns(alias)))

    def _learnt_part(self, known: tuple[int, ...]) -> tuple[float, dict[int, int]]:
        """The product of the learnt predicates' selectivities that count (Kruskal's rule over
        ``known``, learnt predicates inside one expression), and the union-find of the columns they
        make equal."""
        part = self._learnt_parts.get(known)
        if part is None:
            graph, learnt = self._graph, self._learnt
            selectivity = 1.0
            merged: dict[int, int] = {}
            for j in sorted(known, key=lambda j: (-learnt[j], graph.texts[j])):
                if _union(merged, *graph.ends[j]):
                    selectivity *= learnt[j]
            part = self._learnt_parts[known] = (selectivity, merged)
        return part

    def _join_selectivity(self, mask: int) -> float:
        """The product of the selectivities that count for ``mask`` (see the module docstring)."""
        selectivity = self._selectivities.get(mask)
        if selectivity is None:
            selectivity = self._selectivities[mask] = self._worked_out_selectivity(mask)
        return selectivity

    def _worked_out_selectivity(self, mask: int) -> float:
        learnt = self._learnt
        inside, groups = self._graph.classes(mask)
        known = tuple(j for j in inside if learnt[j] is not None)
        selectivity, merged = self._learnt_part(known) if known else (1.0, None)
        for group in groups:
            # each union gave one column of the class a parent: with none the class is as estimated,
            # with one fewer than its columns it is one part, which divides by nothing
            unions = sum(column in merged for column in group) if merged else 0
            if unions == len(group) - 1:
                continue
            if unions:
                # a part's distinct count is the smallest of its columns'
                counts: dict[int, float] = {}
                for column in group:
                    root = _root(merged, column)
                    counts[root] = min(counts.get(root, self._ndv[column]), self._ndv[column])
                factors = _containment(counts.values())
            else:
                factors = self._group_factors.get(group)
                if factors is None:
                    factors = self._group_factors[group] = _containment(self._ndv[c] for c in group)
            for factor in factors:
                selectivity *= factor
        return selectivity

    def _base(self, mask: int) -> float:
        rows = 1.0
        for i, leaf in enumerate(self._leaf_rows):
            if mask >> i & 1:
                rows *= leaf
        return rows * self._join_selectivity(mask)

    def _corrected(self, mask: int) -> float:
        rows = self._base(mask)
        for sub, factor in self._corrections:
            if sub & mask == sub:
                rows *= factor
        return rows

    def rows(self, mask: int) -> float:
        observed = self._observed.get(mask)
        return observed if observed is not None else min(max(self._corrected(mask), 1.0), MAX_ROWS)

    def stats(self, mask: int) -> ExprStats:
        width = 0.0
        for i, w in enumerate(self._widths):
            if mask >> i & 1:
                width += w
        scanned = self._scanned[mask.bit_length() - 1] if self.query.is_leaf(mask) else 0.0
        return ExprStats(self.rows(mask), width, scanned, mask.bit_count())
