"""Statistics: per table row counts and widths, per column distinct counts, ranges and histograms,
plus what runtime feedback has taught (selectivity overrides, observed cardinalities, operator cost
factors). The optimizer never mutates a catalog it was given: it applies deltas to its own copy.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..datalog.errors import shown
from .errors import StatisticsError, UnknownTableError

DEFAULT_WIDTH = 100.0


@dataclass
class ColumnStats:
    ndv: float
    min: Any = None
    max: Any = None
    histogram: list[Any] | None = None  # equi-depth bucket bounds, ascending; each bucket holds 1/(n-1)
    width: float | None = None  # bytes per value; unknown: an even share of the row width


@dataclass
class TableStats:
    rows: float
    width: float = DEFAULT_WIDTH  # bytes per row
    columns: dict[str, ColumnStats] = field(default_factory=dict)

    @property
    def bytes(self) -> float:
        return self.rows * self.width

    def column_width(self, column: str) -> float:
        """Bytes per value of one column: measured if known, else an even share of the row."""
        stats = self.columns.get(column.lower())
        if stats is not None and stats.width is not None:
            return stats.width
        return self.width / max(1, len(self.columns))


# The largest count, size, width or factor a statistic may hold. Anything a real system measures is
# far below it, and with it every estimate and cost stays a finite float (see estimate.MAX_ROWS).
MAX_STATISTIC = 1e18


def check_count(value: Any, what: str, allow_zero: bool = True) -> float:
    """A non-negative number at most ``MAX_STATISTIC``, or a ``StatisticsError`` naming ``what`` and
    the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StatisticsError(f"{what} must be a number, got {shown(value)}")
    bound = "positive" if not allow_zero else "non-negative"
    if value != value or not (0 <= value <= MAX_STATISTIC) or (not allow_zero and value == 0):
        raise StatisticsError(f"{what} must be a {bound} number of at most {MAX_STATISTIC:.0e}, got {shown(value)}")
    return float(value)


def check_selectivity(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise StatisticsError(f"{what}: a selectivity must lie in (0, 1], got {shown(value)}")
    return float(value)


def _object(value: Any, what: str) -> dict:
    """A JSON object (absent: empty), or a ``StatisticsError``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StatisticsError(f"{what} must be an object, got {shown(value)}")
    return value


def _bound(value: Any, what: str) -> Any:
    """A column's minimum or maximum: a number, a string (dates are ISO strings) or absent."""
    if value is None or isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                                   and value == value):
        return value
    raise StatisticsError(f"{what} must be a number or a string, got {shown(value)}")


def _histogram(value: Any, what: str) -> list | None:
    """Equi-depth bounds: at least two, ascending, all numbers or all strings."""
    if value is None:
        return None
    numbers = isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    strings = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not (numbers or strings) or len(value) < 2 or value != sorted(value):
        raise StatisticsError(f"histogram of {what} must be at least two ascending bounds, all numbers or all "
                              f"strings, got {shown(value)}")
    return value


class Catalog:
    """Statistics the optimizer estimates from. Build with ``Catalog.tpch``, ``from_dict`` or ``load``."""

    def __init__(
        self,
        tables: dict[str, TableStats],
        selectivities: dict[str, float] | None = None,
        observed: dict[frozenset[str], float] | None = None,
        cost_factors: dict[str, float] | None = None,
    ):
        self.tables = tables
        self.selectivities = dict(selectivities or {})  # predicate text -> selectivity
        self.observed = dict(observed or {})  # set of the query's relation names -> observed rows
        self.cost_factors = dict(cost_factors or {})  # operator -> multiplier of its local cost

    def table(self, name: str) -> TableStats:
        try:
            return self.tables[name.lower()]
        except KeyError:
            known = ", ".join(sorted(self.tables))
            raise UnknownTableError(f"unknown table '{str(name)[:60]}' (the catalog has: {known[:200]})") from None

    def column(self, table: str, column: str) -> ColumnStats:
        stats = self.table(table)
        try:
            return stats.columns[column.lower()]
        except KeyError:
            raise StatisticsError(f"unknown column '{column}' of table '{table}'") from None

    def has_column(self, table: str, column: str) -> bool:
        return table.lower() in self.tables and column.lower() in self.tables[table.lower()].columns

    def copy(self) -> "Catalog":
        """An independent copy; written out because ``copy.deepcopy`` took most of a re-optimization's
        bookkeeping time on wide schemas."""
        tables = {
            name: TableStats(t.rows, t.width, {
                c: ColumnStats(s.ndv, s.min, s.max, None if s.histogram is None else list(s.histogram), s.width)
                for c, s in t.columns.items()})
            for name, t in self.tables.items()
        }
        return Catalog(tables, self.selectivities, self.observed, self.cost_factors)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Catalog) and self.to_dict() == other.to_dict()

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Catalog":
        """``{"tables": {name: {"rows": n, "width": bytes (or "bytes": total), "columns": {col: {"ndv": n,
        "min": v, "max": v, "histogram": [bounds]}}}}, "selectivities": {...}, "cost_factors": {...}}``."""
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            raise StatisticsError('statistics must be an object with a "tables" object')
        tables = {}
        for name, spec in data["tables"].items():
            if not isinstance(spec, dict) or "rows" not in spec:
                raise StatisticsError(f"table '{name}' needs \"rows\"")
            rows = check_count(spec["rows"], f"rows of table '{name}'")
            if "width" in spec:
                width = check_count(spec["width"], f"width of table '{name}'", allow_zero=False)
            elif "bytes" in spec:
                width = check_count(spec["bytes"], f"bytes of table '{name}'") / rows if rows else DEFAULT_WIDTH
            else:
                width = DEFAULT_WIDTH
            columns = {}
            for col, cspec in _object(spec.get("columns"), f'"columns" of table \'{name}\'').items():
                if not isinstance(cspec, dict) or "ndv" not in cspec:
                    raise StatisticsError(f"column '{name}.{col}' needs \"ndv\"")
                what = f"'{name}.{col}'"
                ndv = check_count(cspec["ndv"], f"ndv of column {what}", allow_zero=False)
                low, high = (_bound(cspec.get(k), f"{k} of column {what}") for k in ("min", "max"))
                histogram = _histogram(cspec.get("histogram"), what)
                col_width = cspec.get("width")
                if col_width is not None:
                    col_width = check_count(col_width, f"width of column {what}", allow_zero=False)
                columns[col.lower()] = ColumnStats(ndv, low, high, histogram, col_width)
            tables[name.lower()] = TableStats(rows, width, columns)
        selectivities = {k: check_selectivity(v, f"selectivity of '{k}'")
                         for k, v in _object(data.get("selectivities"), '"selectivities"').items()}
        factors = {k: check_count(v, f"cost factor of '{k}'", allow_zero=False)
                   for k, v in _object(data.get("cost_factors"), '"cost_factors"').items()}
        observed = {frozenset(k.split(",")): check_count(v, f"observed rows of '{k}'")
                    for k, v in _object(data.get("observed"), '"observed"').items()}
        return cls(tables, selectivities, observed, factors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tables": {
                name: {
                    "rows": t.rows,
                    "width": t.width,
                    "columns": {c: {k: v for k, v in vars(s).items() if v is not None} for c, s in t.columns.items()},
                }
                for name, t in sorted(self.tables.items())
            },
            "selectivities": dict(sorted(self.selectivities.items())),
            "observed": {",".join(sorted(k)): v for k, v in sorted(self.observed.items(), key=lambda kv: sorted(kv[0]))},
            "cost_factors": dict(sorted(self.cost_factors.items())),
        }

    @classmethod
    def load(cls, path: str | Path) -> "Catalog":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise StatisticsError(f"cannot read statistics file {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise StatisticsError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
        return cls.from_dict(data)

    @classmethod
    def tpch(cls, scale: float = 1.0) -> "Catalog":
        """Statistics of a TPC-H database at ``scale``, from the specification's sizes and domains."""
        scale = check_count(scale, "TPC-H scale factor", allow_zero=False)
        s = scale
        spec = {
            "region": (5, 124, {"r_regionkey": (5, 0, 4), "r_name": (5,), "r_comment": (5,)}),
            "nation": (25, 128, {"n_nationkey": (25, 0, 24), "n_name": (25,), "n_regionkey": (5, 0, 4),
                                 "n_comment": (25,)}),
            "supplier": (10_000 * s, 159, {"s_suppkey": (10_000 * s, 1, 10_000 * s), "s_name": (10_000 * s,),
                                           "s_address": (10_000 * s,), "s_nationkey": (25, 0, 24),
                                           "s_phone": (10_000 * s,), "s_acctbal": (10_000 * s, -999.99, 9999.99),
                                           "s_comment": (10_000 * s,)}),
            "customer": (150_000 * s, 179, {"c_custkey": (150_000 * s, 1, 150_000 * s), "c_name": (150_000 * s,),
                                            "c_address": (150_000 * s,), "c_nationkey": (25, 0, 24),
                                            "c_phone": (150_000 * s,), "c_acctbal": (150_000 * s, -999.99, 9999.99),
                                            "c_mktsegment": (5,), "c_comment": (150_000 * s,)}),
            "part": (200_000 * s, 155, {"p_partkey": (200_000 * s, 1, 200_000 * s), "p_name": (200_000 * s,),
                                        "p_mfgr": (5,), "p_brand": (25,), "p_type": (150,), "p_size": (50, 1, 50),
                                        "p_container": (40,), "p_retailprice": (20_000 * s, 900.0, 2100.0),
                                        "p_comment": (200_000 * s,)}),
            "partsupp": (800_000 * s, 144, {"ps_partkey": (200_000 * s, 1, 200_000 * s),
                                            "ps_suppkey": (10_000 * s, 1, 10_000 * s),
                                            "ps_availqty": (9_999, 1, 9_999), "ps_supplycost": (99_901, 1.0, 1000.0),
                                            "ps_comment": (800_000 * s,)}),
            "orders": (1_500_000 * s, 104, {"o_orderkey": (1_500_000 * s, 1, 6_000_000 * s),
                                            "o_custkey": (100_000 * s, 1, 150_000 * s), "o_orderstatus": (3,),
                                            "o_totalprice": (1_500_000 * s, 850.0, 560_000.0),
                                            "o_orderdate": (2_406, "1992-01-01", "1998-08-02"),
                                            "o_orderpriority": (5,), "o_clerk": (1_000 * s,),
                                            "o_shippriority": (1, 0, 0), "o_comment": (1_500_000 * s,)}),
            "lineitem": (6_000_000 * s, 112, {"l_orderkey": (1_500_000 * s, 1, 6_000_000 * s),
                                              "l_partkey": (200_000 * s, 1, 200_000 * s),
                                              "l_suppkey": (10_000 * s, 1, 10_000 * s), "l_linenumber": (7, 1, 7),
                                              "l_quantity": (50, 1, 50), "l_extendedprice": (1_000_000 * s, 900.0, 105_000.0),
                                              "l_discount": (11, 0.0, 0.1), "l_tax": (9, 0.0, 0.08),
                                              "l_returnflag": (3,), "l_linestatus": (2,),
                                              "l_shipdate": (2_526, "1992-01-02", "1998-12-01"),
                                              "l_commitdate": (2_466, "1992-01-31", "1998-10-31"),
                                              "l_receiptdate": (2_555, "1992-01-03", "1998-12-31"),
                                              "l_shipinstruct": (4,), "l_shipmode": (7,), "l_comment": (4_500_000 * s,)}),
        }
        tables = {}
        for name, (rows, width, columns) in spec.items():
            cols = {}
            for col, stats in columns.items():
                ndv = float(max(1, round(stats[0])))
                cols[col] = ColumnStats(ndv, *(stats[1:] if len(stats) == 3 else (None, None)))
            tables[name] = TableStats(float(round(rows)), float(width), cols)
        return cls(tables)
