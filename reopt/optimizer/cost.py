"""The cost model, in terms a Spark user recognises, with every weight in ``CostWeights``.

Local cost of each operator (before its runtime cost factor, which multiplies it):

| operator | cost |
| --- | --- |
| scan | bytes scanned x ``scan_byte`` + rows out x ``row_out`` |
| exchange | rows x ``shuffle_row`` + bytes shuffled (rows x width) x ``shuffle_byte`` |
| sort | rows x log2(rows) x ``sort_row`` |
| broadcast_hash_join | build bytes x ``broadcast_byte`` + build rows x (``build_row`` + ``broadcast_row``) + probe rows x ``probe_row`` + rows out x ``row_out``, + ``broadcast_job`` when the build side is a join; impossible when the build side exceeds ``broadcast_threshold`` bytes |
| shuffled_hash_join | build rows x ``build_row`` + probe rows x ``probe_row`` + rows out x ``row_out``; impossible when the build side's share of one task (build bytes / ``shuffle_partitions``) exceeds ``hash_build_memory`` |
| sort_merge_join | (left + right rows) x ``merge_row`` + rows out x ``row_out`` |

The unit is roughly a second of one core. Widths are bytes as Spark sizes data (compressed where
it is stored compressed, see ``reopt.spark.statistics``), so the byte weights stand for I/O and
network; the per-row weights, which dominate on one machine, are what
``reopt calibrate`` (``reopt.spark.calibrate``) measured on local Spark (rounded): a row costs about 400 ns to
shuffle, 500 ns to broadcast and build, 250 ns to build locally and 100 ns to probe, and Spark's
radix sort costs a few nanoseconds per row and comparison level.

Spark runs a chain of broadcast hash joins over scanned tables as one pipeline: every scan's broadcast
starts at once, side by side, and the probe side streams through all the hash tables in one stage.
A join result is broadcast only after the job computing it has finished and its rows are collected
on the driver; the stages after it wait. ``broadcast_job`` prices that wait, per broadcast of a join
result: ``reopt calibrate`` measured 0.33 s on ``local[1]`` and 0.41 s on ``local[2]`` (one run
each, on a shared machine), and the default is 0.3 s. It is a wait, not work, so it does not scale with
the per-row weights. It depends only on the plan's shape, never on statistics, so every cost stays
monotone in its inputs' costs and rows, which pruning relies on.

A hash table must fit in memory. A broadcast one is held whole by every task, so Spark bounds it
by ``spark.sql.autoBroadcastJoinThreshold``. A shuffled hash join's table is split over the shuffle
partitions, and each task holds its share in execution memory without spilling, so a build side
whose share exceeds what one task may hold would fail, not merely run slowly. Both limits make a
plan infeasible (no cost at all), and as inputs only ever grow past them, feasibility too is
monotone. ``reopt.spark.session_weights`` reads the limits from a session.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .plan_space import BROADCAST_HASH_JOIN, EXCHANGE, JOINS, SCAN, SHUFFLED_HASH_JOIN, SORT, SORT_MERGE_JOIN

if TYPE_CHECKING:
    from .estimate import ExprStats


@dataclass(frozen=True)
class CostWeights:
    scan_byte: float = 1e-9
    shuffle_row: float = 3.5e-7
    shuffle_byte: float = 4e-9
    broadcast_row: float = 2.5e-7
    broadcast_byte: float = 8e-9
    sort_row: float = 5e-9
    build_row: float = 2.5e-7
    probe_row: float = 1e-7
    merge_row: float = 1.2e-7
    row_out: float = 2e-8
    broadcast_job: float = 0.3  # seconds per broadcast of a join result
    broadcast_threshold: float = 10 * 1024 * 1024  # bytes; Spark's spark.sql.autoBroadcastJoinThreshold
    shuffle_partitions: int = 200  # tasks a shuffled join's inputs are split over; spark.sql.shuffle.partitions
    hash_build_memory: float = 256 * 1024 * 1024  # bytes of execution memory one task may hold


class CostModel:
    """The cost functions the optimizer's rules call; pure functions of their arguments."""

    def __init__(self, weights: CostWeights | None = None):
        self.w = weights or CostWeights()

    def scan(self, rows: float, width: float, scanned: float, factor: float) -> list[tuple[float]]:
        return [((scanned * self.w.scan_byte + rows * self.w.row_out) * factor,)]

    def unary(self, op: str, rows: float, width: float, factor: float) -> list[tuple[float]]:
        if op == EXCHANGE:
            cost = rows * (self.w.shuffle_row + width * self.w.shuffle_byte)
        elif op == SORT:
            cost = rows * math.log2(max(rows, 2.0)) * self.w.sort_row
        else:
            raise ValueError(f"unknown unary operator {op!r}")
        return [(cost * factor,)]

    def join(self, op: str, lrows: float, lwidth: float, rrows: float, rwidth: float, rows: float,
             factor: float, *, right_relations: int) -> list[tuple[float]]:
        """A join's local cost; ``right_relations`` is how many relations its right (build) input joins."""
        w = self.w
        if op == BROADCAST_HASH_JOIN:
            build_bytes = rrows * rwidth
            if build_bytes > w.broadcast_threshold:
                return []
            cost = (build_bytes * w.broadcast_byte + rrows * (w.build_row + w.broadcast_row) + lrows * w.probe_row
                    + rows * w.row_out)
            if right_relations > 1:
                cost += w.broadcast_job
        elif op == SHUFFLED_HASH_JOIN:
            if rrows * rwidth / w.shuffle_partitions > w.hash_build_memory:
                return []
            cost = rrows * w.build_row + lrows * w.probe_row + rows * w.row_out
        elif op == SORT_MERGE_JOIN:
            cost = (lrows + rrows) * w.merge_row + rows * w.row_out
        else:
            raise ValueError(f"unknown join operator {op!r}")
        return [(cost * factor,)]

    def input_row_floor(self, factors: Mapping[str, float]) -> float:
        """The least any join charges per row of one of its inputs, cost factors included: a probe,
        a build or a merge row (a broadcast build pays its build row and more)."""
        w = self.w
        return min(w.probe_row, w.build_row, w.merge_row) * min(factors[op] for op in JOINS)

    def completion_floors(self, stats: Mapping[int, "ExprStats"], factors: Mapping[str, float],
                          leaves: Iterable[int], full: int, masks: Iterable[int]) -> dict[int, float]:
        """For each expression of ``masks`` (a set of the ``leaves``, relations as bits, of the whole
        query ``full``), a floor on what completing it into a whole plan costs: every whole plan scans
        each relation outside it, and takes each of those relations, and the expression itself unless
        it is the whole query, as some join's input, at no less than ``input_row_floor`` a row. Added
        up in one order, so that every caller, and both engine backends, see the same floats."""
        per_row = self.input_row_floor(factors)
        outside = []
        for bit in leaves:
            leaf = stats[bit]
            outside.append((bit, self.scan(leaf.rows, leaf.width, leaf.scanned, factors[SCAN])[0][0]
                            + per_row * leaf.rows))
        floors = {}
        for mask in masks:
            floor = 0.0
            if mask != full:
                floor = per_row * stats[mask].rows
                for bit, cost in outside:
                    if not bit & mask:
                        floor += cost
            floors[mask] = floor
        return floors

    def local(self, op: str, stats, left=None, right=None, factor: float = 1.0) -> float | None:
        """The local cost of one plan node (None if impossible), for procedural optimizers and explain."""
        if op == SCAN:
            rows = self.scan(stats.rows, stats.width, stats.scanned, factor)
        elif op in (EXCHANGE, SORT):
            rows = self.unary(op, left.rows, left.width, factor)
        else:
            rows = self.join(op, left.rows, left.width, right.rows, right.width, stats.rows, factor,
                             right_relations=right.relations)
        return rows[0][0] if rows else None

