"""Relation storage: indexed row sets, read-only overlays for old/new views, and aggregate state.

Every mutation is recorded in a journal (a list of undo steps) so that a failed ``run()`` can put the
engine back exactly as it was.
"""

from __future__ import annotations

import math
from operator import itemgetter
from typing import Any, Callable, Hashable, Iterable

from sortedcontainers import SortedDict

Row = tuple
Journal = list  # of (undo function, argument) pairs


def _key_function(positions: tuple[int, ...]) -> Callable[[Row], tuple]:
    if len(positions) == 1:
        (p,) = positions
        return lambda row: (row[p],)
    return itemgetter(*positions)  # a tuple for two or more positions


class Relation:
    """The visible rows of one relation, with hash indexes on the bound-position patterns plans use."""

    __slots__ = ("name", "arity", "rows", "_indexes")

    def __init__(self, name: str, arity: int, patterns: Iterable[tuple[int, ...]] = ()):
        self.name = name
        self.arity = arity
        self.rows: set[Row] = set()
        self._indexes: dict[tuple[int, ...], tuple[Callable[[Row], tuple], dict[tuple, set[Row]]]] = {}
        for positions in patterns:
            self._indexes[positions] = (_key_function(positions), {})

    def index(self, positions: tuple[int, ...]) -> dict[tuple, set[Row]]:
        return self._indexes[positions][1]

    def ensure_index(self, positions: tuple[int, ...]) -> dict[tuple, set[Row]]:
        """The index on ``positions``, built from the current rows if no plan asked for it."""
        if positions not in self._indexes:
            key_of = _key_function(positions)
            index: dict[tuple, set[Row]] = {}
            for row in self.rows:
                index.setdefault(key_of(row), set()).add(row)
            self._indexes[positions] = (key_of, index)
        return self._indexes[positions][1]

    def has(self, row: Row) -> bool:
        return row in self.rows

    def scan(self) -> set[Row]:
        return self.rows

    def add(self, row: Row, journal: Journal) -> None:
        self.rows.add(row)
        for key_of, index in self._indexes.values():
            key = key_of(row)
            bucket = index.get(key)
            if bucket is None:
                index[key] = {row}
            else:
                bucket.add(row)
        journal.append((self._remove, row))

    def discard(self, row: Row, journal: Journal) -> None:
        self._remove(row)
        journal.append((self._insert, row))

    def _insert(self, row: Row) -> None:
        self.add(row, [])

    def _remove(self, row: Row) -> None:
        self.rows.discard(row)
        for key_of, index in self._indexes.values():
            key = key_of(row)
            bucket = index.get(key)
            if bucket is not None:
                bucket.discard(row)
                if not bucket:
                    del index[key]


class _OverlayIndex:
    __slots__ = ("base", "hide", "show")

    def __init__(self, base: dict, hide: set, show: dict):
        self.base, self.hide, self.show = base, hide, show

    def get(self, key: tuple, default: Any = ()) -> Iterable[Row]:
        rows = self.base.get(key, ())
        if self.hide:
            rows = [r for r in rows if r not in self.hide]
        extra = self.show.get(key)
        if extra:
            return list(rows) + extra
        return rows or default


class OverlayView:
    """A relation as it was or will be: its rows minus ``hide`` plus ``show``, without copying it."""

    __slots__ = ("base", "hide", "show", "_show_indexes")

    def __init__(self, base: Relation, hide: set[Row], show: set[Row]):
        self.base, self.hide, self.show = base, hide, show
        self._show_indexes: dict[tuple[int, ...], dict] = {}

    def index(self, positions: tuple[int, ...]) -> _OverlayIndex:
        show_index = self._show_indexes.get(positions)
        if show_index is None:
            key_of = _key_function(positions)
            show_index = {}
            for row in self.show:
                show_index.setdefault(key_of(row), []).append(row)
            self._show_indexes[positions] = show_index
        return _OverlayIndex(self.base.index(positions), self.hide, show_index)

    def has(self, row: Row) -> bool:
        return (row in self.base.rows and row not in self.hide) or row in self.show

    def scan(self) -> list[Row]:
        rows = [r for r in self.base.rows if r not in self.hide] if self.hide else list(self.base.rows)
        return rows + list(self.show)


def set_count(counts: dict, key: Hashable, value: int, journal: Journal) -> None:
    """Set a derivation count (0 removes it), journaling the old value."""
    old = counts.get(key, 0)
    if value:
        counts[key] = value
    else:
        counts.pop(key, None)
    journal.append((_restore_count, (counts, key, old)))


def _restore_count(args) -> None:
    counts, key, old = args
    if old:
        counts[key] = old
    else:
        counts.pop(key, None)


class AggregateState:
    """Per group, every candidate value with its derivation count, and the value currently shown.

    min/max keep candidates ordered (SortedDict), so when the best is deleted or worsens the next
    best is at hand; count and sum are recomputed from the group's candidate multiset, so the result
    never depends on the order in which changes arrived.
    """

    def __init__(self, relation: Relation, func: str, position: int):
        self.relation = relation
        self.func = func
        self.position = position
        self.candidates: dict[tuple, Any] = {}
        self.current: dict[tuple, Any] = {}

    def row(self, group: tuple, value: Any) -> Row:
        p = self.position
        return group[:p] + (value,) + group[p:]

    def split(self, row: Row) -> tuple[tuple, Any]:
        p = self.position
        return row[:p] + row[p + 1:], row[p]

    def count_of(self, group: tuple, value: Any) -> int:
        values = self.candidates.get(group)
        return values.get(value, 0) if values is not None else 0

    def add_candidate(self, group: tuple, value: Any, delta: int, journal: Journal) -> None:
        values = self.candidates.get(group)
        if values is None:
            values = SortedDict() if self.func in ("min", "max") else {}
            self.candidates[group] = values
            journal.append((self._drop_group_if_empty, group))
        set_count(values, value, values.get(value, 0) + delta, journal)
        if not values:
            del self.candidates[group]
            journal.append((self._restore_group, (group, values)))

    def _drop_group_if_empty(self, group: tuple) -> None:
        if not self.candidates.get(group, True):
            del self.candidates[group]

    def _restore_group(self, args) -> None:
        group, values = args
        self.candidates[group] = values

    def best(self, group: tuple) -> Any:
        """The aggregate of the group's current candidates, or ``None`` if it has none."""
        values = self.candidates.get(group)
        if not values:
            return None
        if self.func == "min":
            return values.peekitem(0)[0]
        if self.func == "max":
            return values.peekitem(-1)[0]
        if self.func == "count":
            return sum(values.values())
        return math.fsum(v * c for v, c in values.items()) if any(isinstance(v, float) for v in values) else sum(
            v * c for v, c in values.items())

    def improves(self, new: Any, old: Any) -> bool:
        """Whether replacing ``old`` by ``new`` moves a min/max group towards its fixpoint."""
        return new < old if self.func == "min" else new > old

    def show(self, group: tuple, value: Any, journal: Journal) -> None:
        self.current[group] = value
        journal.append((self.current.pop, group))  # each change journaled before the next is made
        self.relation.add(self.row(group, value), journal)

    def hide(self, group: tuple, journal: Journal) -> None:
        value = self.current.pop(group)
        journal.append((self._reshow, (group, value)))
        self.relation.discard(self.row(group, value), journal)

    def _reshow(self, args) -> None:
        group, value = args
        self.current[group] = value
