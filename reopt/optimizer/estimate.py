"""Plan-independent cardinality estimates for every connected sub-expression of a query.

``rows(E)`` is a function of the *set* E, never of a plan: the filtered rows of E's relations times
the selectivities of the join predicates inside E, multiplied in one canonical order, so every plan
of E sees bit-for-bit the same number (the principle of optimality needs it, and incremental results
equal from-scratch ones only if the floats do).

Widths count only the columns a relation contributes (join keys and what the SQL's final step
uses); scans read those plus the columns their filters test, as Spark's column pruning does.

Observed cardinalities correct estimates consistently. Observations are taken in order of size;
each one's residual (observed rows over the current estimate) goes

* to a join predicate's selectivity, when exactly one predicate inside the observed expression is
  not yet fixed by a smaller observation: every expression containing that predicate is corrected,
  including ones never observed (observing {a, b} and {a, b, c} reveals the selectivity of the
  predicate joining c, and so {a, c} too);
* otherwise to the expression itself, and every expression containing it inherits the correction.

Either way each observed expression gets exactly its observed rows. Estimates never go below one row.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Catalog
from .query import Query
from .selectivity import conjunction_selectivity, join_selectivity


def _width(stats, columns: set[str] | None) -> float:
    """Bytes per row of the given columns (columnar storage reads and carries only those)."""
    if columns is None:
        return stats.width
    return sum(stats.column_width(c) for c in sorted(columns)) or 1.0


@dataclass(frozen=True)
class ExprStats:
    rows: float
    width: float  # bytes per output row
    scanned: float  # bytes read from storage (leaves only; 0 for joins)


class Estimator:
    def __init__(self, query: Query, catalog: Catalog):
        self.query = query
        self.catalog = catalog
        self._leaf_rows: list[float] = []
        self._widths: list[float] = []
        self._scanned: list[float] = []
        for alias, table in query.relations:
            stats = catalog.table(table)
            out_columns, read_columns = query.needed_columns(alias), query.read_columns(alias)
            filters = sorted(query.filters_on(alias), key=lambda f: f.text)
            selectivity = 1.0
            for f in filters:  # selectivities learnt at run time win over estimates
                if f.text in catalog.selectivities:
                    selectivity *= catalog.selectivities[f.text]
            estimated = [f.expression for f in filters if f.text not in catalog.selectivities]
            if estimated:
                selectivity *= conjunction_selectivity(estimated, stats)
            self._leaf_rows.append(stats.rows * selectivity)
            self._widths.append(_width(stats, out_columns))
            self._scanned.append(stats.rows * _width(stats, read_columns))
        self._joins: list[list] = []  # [pair mask, selectivity], in canonical order
        for p in sorted(query.joins, key=lambda p: p.text):
            sel = catalog.selectivities.get(p.text) or join_selectivity(
                catalog, query.table_of(p.left.alias), p.left.column, query.table_of(p.right.alias), p.right.column)
            self._joins.append([query.bit(p.left.alias) | query.bit(p.right.alias), sel])
        self._corrections: list[tuple[int, float]] = []
        observed = sorted(((query.mask(names), rows) for names, rows in catalog.observed.items()
                           if set(names) <= set(query.aliases)), key=lambda mr: (bin(mr[0]).count("1"), mr[0]))
        self._observed = {mask: max(rows, 1.0) for mask, rows in observed}
        fixed: set[int] = set()
        for mask, rows in observed:
            residual = max(rows, 1.0) / max(self._corrected(mask), 1.0)
            inside = [join for join in self._joins if join[0] & mask == join[0]]
            open_joins = [join for join in inside if join[0] not in fixed]
            if len(open_joins) == 1:
                open_joins[0][1] *= residual
            else:
                self._corrections.append((mask, residual))
            fixed.update(join[0] for join in inside)

    def _base(self, mask: int) -> float:
        rows = 1.0
        for i, leaf in enumerate(self._leaf_rows):
            if mask >> i & 1:
                rows *= leaf
        for pair, sel in self._joins:
            if pair & mask == pair:
                rows *= sel
        return rows

    def _corrected(self, mask: int) -> float:
        rows = self._base(mask)
        for sub, factor in self._corrections:
            if sub & mask == sub:
                rows *= factor
        return rows

    def rows(self, mask: int) -> float:
        observed = self._observed.get(mask)
        return observed if observed is not None else max(self._corrected(mask), 1.0)

    def stats(self, mask: int) -> ExprStats:
        width = 0.0
        for i, w in enumerate(self._widths):
            if mask >> i & 1:
                width += w
        scanned = self._scanned[mask.bit_length() - 1] if self.query.is_leaf(mask) else 0.0
        return ExprStats(self.rows(mask), width, scanned)
