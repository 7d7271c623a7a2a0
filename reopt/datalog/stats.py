"""Per-relation instrumentation: what the last ``run()`` and all runs so far did to each relation.

The optimizer's update and pruning ratios are computed from these counters. Most count work, not
only net effect: a row inserted and deleted again within one run counts once in each column;
``touched`` counts distinct rows (for aggregates, groups) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable


@dataclass
class RelationStats:
    inserted: int = 0  # rows made visible
    deleted: int = 0  # rows made invisible
    updated: int = 0  # aggregate groups whose value was replaced
    fired: int = 0  # derivations computed by rules with this head (added or retracted)
    touched: int = 0  # distinct rows (aggregate relations: distinct groups) whose visibility changed

    def add(self, other: "RelationStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class Stats:
    """``stats.last[name]`` covers the last successful run, ``stats.total[name]`` all of them."""

    def __init__(self, relations: Iterable[str]):
        self._names = list(relations)
        self.last: dict[str, RelationStats] = {n: RelationStats() for n in self._names}
        self.total: dict[str, RelationStats] = {n: RelationStats() for n in self._names}
        self._current: dict[str, RelationStats] = {}

    def begin(self) -> None:
        self._current = {n: RelationStats() for n in self._names}

    def abort(self) -> None:
        self._current = {}

    def commit(self) -> None:
        self.last = self._current
        for name, stats in self.last.items():
            self.total[name].add(stats)
        self._current = {}

    def record_change(self, name: str, inserted: int, deleted: int) -> None:
        stats = self._current[name]
        stats.inserted += inserted
        stats.deleted += deleted

    def record_updates(self, name: str, updated: int) -> None:
        self._current[name].updated += updated

    def record_fired(self, name: str, fired: int) -> None:
        self._current[name].fired += fired

    def record_touched(self, name: str, touched: int) -> None:
        self._current[name].touched += touched
