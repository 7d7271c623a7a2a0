"""Selectivity of local predicates and equi-joins, estimated the standard (System R) way.

* ``col = v``: 1/ndv; ``col <> v``: 1 - 1/ndv; ``col IN (k values)``: k/ndv
* ranges (``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``): the covered fraction of the column's histogram
  or of [min, max] (numbers and dates); 1/3 (one side) or 1/4 (BETWEEN) without them
* ``LIKE``: 1/10 (1/ndv without wildcards); ``IS NULL``: 1/100; anything else: 1/3
* ``AND``: product, ``OR``: inclusion-exclusion, ``NOT``: complement; but range predicates on one
  column (``a >= x AND a < y``) are merged into the fraction of the range they leave
* joins: 1 / max(ndv(a.x), ndv(b.y)) per key equivalence class, in ``estimate.py``

Every result lies in (0, 1]. A selectivity learnt at run time (the catalog's overrides) wins.
"""

from __future__ import annotations

import bisect
import datetime as dt

from sqlglot import exp

from .catalog import ColumnStats, TableStats

MIN_SELECTIVITY = 1e-9
DEFAULT = 1 / 3


def clamp(value: float) -> float:
    return min(1.0, max(MIN_SELECTIVITY, value))


def filter_selectivity(expression: exp.Expression, table: TableStats) -> float:
    return clamp(_estimate(expression, table))


def conjunction_selectivity(expressions: list[exp.Expression], table: TableStats) -> float:
    """Selectivity of predicates on one table that all hold: ranges on one column are intersected,
    the rest are multiplied as independent."""
    selectivity = 1.0
    ranges: dict[str, list[float]] = {}
    for e in expressions:
        bound = _range_bound(e, table)
        if bound is None:
            selectivity *= filter_selectivity(e, table)
            continue
        column, fraction, is_upper = bound
        low_high = ranges.setdefault(column, [0.0, 1.0])
        if is_upper:
            low_high[1] = min(low_high[1], fraction)
        else:
            low_high[0] = max(low_high[0], fraction)
    for column in sorted(ranges):
        low, high = ranges[column]
        selectivity *= clamp(high - low)
    return clamp(selectivity)


def _range_bound(e: exp.Expression, table: TableStats):
    """(column, fraction of values below the bound, whether it is an upper bound) for a one-sided
    range predicate on a column with known range, else None."""
    if not isinstance(e, (exp.LT, exp.LTE, exp.GT, exp.GTE)):
        return None
    column, value, flipped = _column_and_value(e)
    if column is None or value is None:
        return None
    fraction = _fraction_below(table.columns.get(column.name.lower()), value)
    if fraction is None:
        return None
    return column.name.lower(), fraction, isinstance(e, (exp.LT, exp.LTE)) != flipped


def _estimate(e: exp.Expression, table: TableStats) -> float:
    if isinstance(e, exp.Paren):
        return _estimate(e.this, table)
    if isinstance(e, exp.And):
        return _estimate(e.this, table) * _estimate(e.expression, table)
    if isinstance(e, exp.Or):
        a, b = _estimate(e.this, table), _estimate(e.expression, table)
        return a + b - a * b
    if isinstance(e, exp.Not):
        return 1.0 - clamp(_estimate(e.this, table))
    column, value, flipped = _column_and_value(e)
    stats = table.columns.get(column.name.lower()) if column is not None else None
    if isinstance(e, exp.EQ):
        return 1.0 / stats.ndv if stats else 0.1
    if isinstance(e, exp.NEQ):
        return 1.0 - 1.0 / stats.ndv if stats else 0.9
    if isinstance(e, exp.In) and column is not None:
        k = len(e.expressions)
        return min(1.0, k / stats.ndv) if stats else min(1.0, 0.1 * k)
    if isinstance(e, (exp.LT, exp.LTE, exp.GT, exp.GTE)) and column is not None and value is not None:
        below = isinstance(e, (exp.LT, exp.LTE)) != flipped
        fraction = _fraction_below(stats, value)
        if fraction is None:
            return DEFAULT
        return fraction if below else 1.0 - fraction
    if isinstance(e, exp.Between) and isinstance(e.this, exp.Column):
        low, high = _literal(e.args.get("low")), _literal(e.args.get("high"))
        stats = table.columns.get(e.this.name.lower())
        a, b = _fraction_below(stats, low), _fraction_below(stats, high)
        if a is None or b is None:
            return 0.25
        return max(0.0, b - a)
    if isinstance(e, exp.Like):
        pattern = _literal(e.expression)
        if isinstance(pattern, str) and "%" not in pattern and "_" not in pattern and stats:
            return 1.0 / stats.ndv
        return 0.1
    if isinstance(e, exp.Is):
        return 0.01
    return DEFAULT


def _column_and_value(e: exp.Expression):
    left, right = e.args.get("this"), e.args.get("expression")
    if isinstance(left, exp.Column):
        return left, _literal(right), False
    if isinstance(right, exp.Column):
        return right, _literal(left), True
    return None, None, False


def _literal(e):
    """The value of a constant expression (numbers, strings, dates, date +/- interval), else None
    (also for values out of range, such as a date 10^9 years on: the estimate falls back to a default)."""
    try:
        return _constant(e)
    except (ValueError, OverflowError):
        return None


def _constant(e):
    if e is None:
        return None
    if isinstance(e, exp.Paren):
        return _constant(e.this)
    if isinstance(e, exp.Literal):
        return e.this if e.is_string else float(e.this)
    if isinstance(e, exp.Neg):
        inner = _literal(e.this)
        return -inner if isinstance(inner, float) else None
    if isinstance(e, (exp.Cast, exp.TryCast)) or type(e).__name__ in ("Date", "DateStrToDate", "TsOrDsToDate"):
        inner = _literal(e.this)
        return _date(inner) or inner
    if isinstance(e, (exp.Add, exp.Sub)) and isinstance(e.expression, exp.Interval):
        base = _date(_literal(e.this))
        amount = _literal(e.expression.this)
        unit = (e.expression.unit.name if e.expression.unit else "day").lower()
        if base is None or amount is None:
            return None
        months = {"year": 12, "month": 1}.get(unit.rstrip("s"))
        sign = 1 if isinstance(e, exp.Add) else -1
        if months:
            total = base.year * 12 + base.month - 1 + sign * int(float(amount)) * months
            return base.replace(year=total // 12, month=total % 12 + 1)
        return base + sign * dt.timedelta(days=float(amount))
    return None


def _date(value):
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            return None
    return None


def _number(value):
    """Numbers as they are, dates (or ISO date strings) as day ordinals; else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    date = _date(value)
    return float(date.toordinal()) if date else None


def _fraction_below(stats: ColumnStats | None, value) -> float | None:
    if stats is None:
        return None
    v = _number(value)
    if v is None:
        return None
    if stats.histogram:
        bounds = [_number(b) for b in stats.histogram]
        if None not in bounds:
            if v <= bounds[0]:
                return 0.0
            if v >= bounds[-1]:
                return 1.0
            i = bisect.bisect_right(bounds, v) - 1
            width = bounds[i + 1] - bounds[i]
            inside = (v - bounds[i]) / width if width else 0.0
            return (i + inside) / (len(bounds) - 1)
    low, high = _number(stats.min), _number(stats.max)
    if low is None or high is None or high <= low:
        return None
    return min(1.0, max(0.0, (v - low) / (high - low)))
