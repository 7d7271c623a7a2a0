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

from dataclasses import dataclass
from typing import Iterable

from ..datalog.errors import shown
from .catalog import Catalog
from .errors import StatisticsError
from .fact_deltas import resolve
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

    def apply(self, catalog: Catalog, query: Query) -> Catalog:
        """A new catalog with every change applied; any invalid change raises before anything changes
        (``fact_deltas.resolve``, which also says what the changes may move)."""
        return resolve(self, query, catalog).catalog
