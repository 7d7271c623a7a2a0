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


# A change as data: its kind's key, and the value keys it may hold.
_SHAPES = {"table": ("rows", "bytes", "width"), "selectivity": ("value",), "cardinality": ("rows",),
           "cost_factor": ("value",)}
_EXAMPLES = ('{"table": NAME, "rows": N}', '{"selectivity": PREDICATE, "value": S}',
             '{"cardinality": [RELATION, ...], "rows": N}', '{"cost_factor": OPERATOR, "value": F}')


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

    def without_cardinalities(self, expressions: Iterable[Iterable[str]]) -> "DeltaStats":
        """The same changes less the cardinalities of ``expressions`` (each a set of relation names):
        for a caller that measures those joins another way."""
        dropped = {frozenset(name.lower() for name in expression) for expression in expressions}
        return DeltaStats(c for c in self.changes if not (c.kind == "cardinality" and c.target in dropped))

    def cardinalities(self) -> dict[frozenset[str], float]:
        """The join sizes the changes state, by the set of relations joined."""
        return {c.target: c.values[0] for c in self.changes if c.kind == "cardinality"}

    def __add__(self, other: "DeltaStats") -> "DeltaStats":
        return DeltaStats(self.changes + other.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __repr__(self) -> str:
        return f"DeltaStats({list(self.changes)!r})"

    def describe(self) -> str:
        """The changes for a person to read: ``{customer, orders} rows=5e+07; table orders rows=2e+06``."""
        return "; ".join(change.describe() for change in self.changes) or "no change"

    def to_dict(self) -> list[dict]:
        """The changes as plain data (JSON-ready), one object per change; ``from_dict`` reads it back."""
        out = []
        for change in self.changes:
            if change.kind == "table":
                sizes = zip(("rows", "bytes", "width"), change.values)
                out.append({"table": change.target, **{name: value for name, value in sizes if value is not None}})
            elif change.kind == "cardinality":
                out.append({"cardinality": sorted(change.target), "rows": change.values[0]})
            else:
                out.append({change.kind: change.target, "value": change.values[0]})
        return out

    @classmethod
    def from_dict(cls, data: object) -> "DeltaStats":
        """Changes written as ``to_dict`` writes them, e.g. ``[{"table": "orders", "rows": 2e6},
        {"selectivity": "c.c_custkey = o.o_custkey", "value": 0.01}, {"cardinality": ["c", "o"],
        "rows": 5e7}, {"cost_factor": "sort_merge_join", "value": 1.5}]``. Values are checked when the
        delta is applied; a change of an unknown shape raises ``StatisticsError`` here."""
        if not isinstance(data, list):
            raise StatisticsError(f"a delta is a list of changes, got {shown(data)}")
        deltas = []
        for index, change in enumerate(data):
            kinds = [kind for kind in _SHAPES if isinstance(change, dict) and kind in change]
            if len(kinds) != 1 or set(change) - {kinds[0], *_SHAPES[kinds[0]]}:
                raise StatisticsError(
                    f"change {index + 1} of the delta must be one of {', '.join(_EXAMPLES)}, got {shown(change)}")
            kind = kinds[0]
            values = {name: change[name] for name in _SHAPES[kind] if name in change}
            if kind == "table":
                deltas.append(cls.table(change[kind], **values))
            elif "rows" not in values and "value" not in values:
                raise StatisticsError(f"change {index + 1} of the delta ({kind}) needs a value, got {shown(change)}")
            elif kind == "cardinality":
                deltas.append(cls.cardinality(change[kind], values["rows"]))
            else:
                deltas.append(getattr(cls, kind)(change[kind], values["value"]))
        return cls.batch(deltas)

    def apply(self, catalog: Catalog, query: Query) -> Catalog:
        """A new catalog with every change applied; any invalid change raises before anything changes
        (``fact_deltas.resolve``, which also says what the changes may move)."""
        return resolve(self, query, catalog).catalog
