"""``DeltaStats``: what runtime feedback can say, as a batch of changes to a catalog.

* ``DeltaStats.table(name, rows=..., bytes=..., width=...)``: a table's size changed;
* ``DeltaStats.selectivity(predicate, s)``: a predicate of the query (join or filter, written as SQL)
  has selectivity ``s``;
* ``DeltaStats.cardinality(relations, rows)``: the join of these relations of the query, filters
  included, produced ``rows`` (estimates of every expression containing it are corrected too);
* ``DeltaStats.cost_factor(operator, f)``: an operator's local cost is ``f`` times the model's.

Deltas combine with ``+`` or ``DeltaStats.batch``. ``apply`` validates the whole batch before
changing anything and returns a new catalog; the one given is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from ..datalog.errors import shown
from .catalog import Catalog, check_count, check_selectivity
from .errors import QueryError, StatisticsError
from .plan_space import OPERATORS
from .query import Query


def _check_name(value: object, what: str) -> None:
    if not isinstance(value, str):
        raise StatisticsError(f"{what} is named by a string, got {shown(value)}")


@dataclass(frozen=True)
class _Change:
    kind: str  # table, selectivity, cardinality, cost_factor
    target: object
    values: tuple

    def describe(self) -> str:
        if self.kind == "table":
            sizes = ", ".join(f"{name}={value:,.6g}" for name, value in zip(("rows", "bytes", "width"), self.values)
                              if value is not None)
            return f"table {self.target} {sizes}"
        if self.kind == "cardinality":
            return f"{{{', '.join(sorted(self.target))}}} rows={self.values[0]:,.6g}"
        return f"{self.kind.replace('_', ' ')} {self.target} = {self.values[0]:.6g}"


class DeltaStats:
    def __init__(self, changes: Iterable[_Change] = ()):
        self.changes: tuple[_Change, ...] = tuple(changes)

    @classmethod
    def table(cls, name: str, rows: float | None = None, bytes: float | None = None,
              width: float | None = None) -> "DeltaStats":
        _check_name(name, "a table")
        if rows is None and bytes is None and width is None:
            raise StatisticsError(f"DeltaStats.table('{name[:60]}') needs rows, bytes or width")
        return cls([_Change("table", name.lower(), (rows, bytes, width))])

    @classmethod
    def selectivity(cls, predicate: str, selectivity: float) -> "DeltaStats":
        _check_name(predicate, "a predicate")
        return cls([_Change("selectivity", predicate, (selectivity,))])

    @classmethod
    def cardinality(cls, relations: Iterable[str], rows: float) -> "DeltaStats":
        if isinstance(relations, str):
            relations = [relations]
        if not isinstance(relations, Iterable):
            raise StatisticsError(f"DeltaStats.cardinality takes relation names, got {shown(relations)}")
        relations = list(relations)
        for name in relations:
            _check_name(name, "a relation")
        return cls([_Change("cardinality", frozenset(r.lower() for r in relations), (rows,))])

    @classmethod
    def cost_factor(cls, operator: str, factor: float) -> "DeltaStats":
        _check_name(operator, "an operator")
        return cls([_Change("cost_factor", operator, (factor,))])

    @classmethod
    def batch(cls, deltas: Iterable["DeltaStats"]) -> "DeltaStats":
        return cls(change for delta in deltas for change in delta.changes)

    def __add__(self, other: "DeltaStats") -> "DeltaStats":
        return DeltaStats(self.changes + other.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __repr__(self) -> str:
        return f"DeltaStats({list(self.changes)!r})"

    def describe(self) -> str:
        """The changes for a person to read: ``{customer, orders} rows=5e+07; table orders rows=2e+06``."""
        return "; ".join(change.describe() for change in self.changes) or "no change"

    def leaves_touched(self, query: Query) -> int:
        """A mask of the relations whose leaf estimates (filtered rows, width, bytes scanned) may
        change: the aliases of a changed table, and the relation of a filter whose selectivity
        changed. A join's selectivity, an observed cardinality or a cost factor changes no leaf
        (observations correct join estimates only), so an ``Estimator`` reuses every other leaf."""
        mask = 0
        for change in self.changes:
            if change.kind == "table":
                mask |= query.mask([a for a, t in query.relations if t == change.target])
            elif change.kind == "selectivity":
                predicate = query.predicate(change.target)
                if hasattr(predicate, "alias"):
                    mask |= query.bit(predicate.alias)
        return mask

    def expressions_touched(self, query: Query, catalog: Catalog, among: Sequence[int] | None = None) -> list[int]:
        """The connected sub-expressions (of ``among``, by default all the query's) whose estimates
        may change, given the catalog the changes apply to: those holding a changed table, or both
        ends of a join predicate whose selectivity changed (estimates count a join predicate only
        inside an expression that holds both ends); all of them for an observed cardinality, or for
        any change while the catalog holds observations: an observed cardinality can move
        corrections between join predicates anywhere in the query (see ``estimate.py``), and any
        change moves the residuals of those held."""
        needs = self._needs(query, catalog)
        masks = query.connected_subsets() if among is None else list(among)
        if 0 in needs:
            return masks
        return [m for m in masks if any(needed & m == needed for needed in needs)]

    def _needs(self, query: Query, catalog: Catalog) -> list[int]:
        """Masks such that an expression's estimate may change only if it holds all the relations of
        one of them (0: every expression)."""
        if catalog.observed and any(change.kind != "cost_factor" for change in self.changes):
            return [0]
        needs = []
        for change in self.changes:
            if change.kind == "table":
                needs += [query.bit(a) for a, t in query.relations if t == change.target]
            elif change.kind == "cardinality":
                needs.append(0)
            elif change.kind == "selectivity":
                predicate = query.predicate(change.target)
                aliases = [predicate.alias] if hasattr(predicate, "alias") else [
                    predicate.left.alias, predicate.right.alias]
                needs.append(query.mask(aliases))
        return needs

    def apply(self, catalog: Catalog, query: Query) -> Catalog:
        """A new catalog with every change applied; any invalid change raises before anything changes.

        Tables no change touches are shared with ``catalog``, not copied: the optimizers treat a
        catalog as a value (a changed table is replaced here, never changed in place), and copying
        every table and column took a third of a small query's re-optimization bookkeeping.
        """
        result = Catalog(dict(catalog.tables), catalog.selectivities, catalog.observed, catalog.cost_factors)
        for change in self.changes:
            if change.kind == "table":
                stats = result.tables[change.target] = replace(result.table(change.target))
                rows, size, width = change.values
                if rows is not None:
                    stats.rows = check_count(rows, f"rows of table '{change.target}'")
                if width is not None:
                    stats.width = check_count(width, f"width of table '{change.target}'", allow_zero=False)
                if size is not None:
                    size = check_count(size, f"bytes of table '{change.target}'")
                    if stats.rows:
                        stats.width = max(size / stats.rows, 1e-9)
            elif change.kind == "selectivity":
                value = check_selectivity(change.values[0], f"selectivity of {change.target!r}")
                try:
                    canonical = query.resolve_predicate(change.target)
                except QueryError as exc:
                    raise StatisticsError(str(exc)) from None
                result.selectivities[canonical] = value
            elif change.kind == "cardinality":
                names = change.target
                unknown = sorted(names - set(query.aliases))
                if unknown or not names:
                    raise StatisticsError(
                        f"{', '.join(unknown) or 'an empty set'} is not a relation of the query "
                        f"({', '.join(query.aliases)})")
                if not query.is_connected(query.mask(names)):
                    raise StatisticsError(
                        f"{{{', '.join(sorted(names))}}} is not a connected expression of the query, "
                        "so no plan computes it")
                result.observed[names] = check_count(change.values[0], f"observed rows of {{{', '.join(sorted(names))}}}")
            elif change.kind == "cost_factor":
                if change.target not in OPERATORS:
                    raise StatisticsError(f"unknown operator {change.target!r}; operators: {', '.join(OPERATORS)}")
                result.cost_factors[change.target] = check_count(
                    change.values[0], f"cost factor of {change.target!r}", allow_zero=False)
        return result
