"""``reopt calibrate``: the cost model's weights measured on the user's own Spark.

Short probes over generated data (events with four long columns, a filtered dimension of two long
columns), AQE off so each job runs as written, each timed ``repeat`` times in turns. Each operator's
cost is the difference between a job with it and the same job without it, divided by the rows it
handles:

* scan: reading and summing the events, less a one-row job's time (Spark's fixed cost of a job);
* exchange: hash-repartitioning the events;
* broadcast build: broadcasting the dimension and building its hash table;
* shuffled build: a shuffled hash join building the dimension, less the dimension's exchange;
* probe: streaming the events through a broadcast hash table of 1,000 rows;
* sort: sorting the repartitioned events within partitions, per row and log2 of the rows per partition;
* sort and merge: a sort-merge join of the events and the dimension, less its scans and exchanges;
* the broadcast of a join result: a chain (the small join result broadcast) against a pipeline (both
  tables broadcast), less what the per-row weights already charge for the difference: the wait for
  a job whose result is collected and broadcast, per broadcast.

The weights follow from those figures (``fit_weights``); the byte weights are kept, since one
machine cannot tell bytes from rows. The model's unit is a second of one core, so calibrate on one
core (``local[1]``, the default): two stages running side by side would make the differences
overlap. Each figure's spread is the median distance of the per-repetition figures from it: how
far one measurement of this machine can be trusted.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..optimizer.cost import CostWeights
from .drift import DriftConfig, dimension, events_batch

FLOOR = 1e-10  # the least a fitted per-row weight may be: a weight must stay positive


@dataclass(frozen=True)
class Figure:
    """One measured operator cost, beside what the weights charged before for the same work."""

    operator: str
    unit: str
    measured: float  # seconds per unit
    spread: float  # median |repetition / measured - 1|
    before: float  # what the weights given to calibrate charge

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Calibration:
    weights: CostWeights
    figures: list[Figure]
    about: dict

    def table(self) -> str:
        lines = [f"{'operator':<34}{'unit':<22}{'measured':>11}{'spread':>8}{'before':>11}{'ratio':>7}"]
        for f in self.figures:
            scale, unit = (1e3, "ms") if f.unit == "job" else (1e9, "ns")
            lines.append(f"{f.operator:<34}{f.unit + ' (' + unit + ')':<22}{f.measured * scale:>11.1f}"
                         f"{f.spread:>8.0%}{f.before * scale:>11.1f}{f.measured / f.before:>7.2f}")
        return "\n".join(lines)


def calibrate(spark: SparkSession, rows: int = 1_000_000, keys: int = 200_000, repeat: int = 5,
              base: CostWeights | None = None, progress: Callable[[str], None] = lambda _: None) -> Calibration:
    """Measure the operators on ``spark`` and fit weights from ``base`` (default ``CostWeights()``).
    AQE is turned off for the probes and restored after them."""
    base = base or CostWeights()
    config = DriftConfig(rows_per_batch=rows, dimension_keys=keys)
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        with tempfile.TemporaryDirectory(prefix="reopt-calibrate-") as folder:
            return _probe(spark, config, Path(folder), repeat, base, progress)
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)


def _probe(spark: SparkSession, config: DriftConfig, work: Path, repeat: int, base: CostWeights,
           progress: Callable[[str], None]) -> Calibration:
    progress(f"writing {config.rows_per_batch:,} events and a dimension of {config.dimension_keys:,} keys ...")
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    dimension(spark, config, 0).write.parquet(str(work / "dimension"))
    events_batch(spark, config, 0).drop("event_id").coalesce(1).write.parquet(str(work / "events"))
    events = spark.read.parquet(str(work / "events"))
    dim = spark.read.parquet(str(work / "dimension")).where("grp < 50").select("k", "w")
    n, m = events.count(), dim.count()
    one = events.limit(1).cache()
    small = dim.limit(1000).cache()
    for cached in (one, small):
        cached.count()
    result = events.join(F.broadcast(small.select(F.col("k").alias("s"))), events.k0 == F.col("s"))
    r = result.count()
    count = F.count(F.lit(1))
    probes: dict[str, tuple[DataFrame, object]] = {
        "overhead": (one, count),
        "scan_events": (events.select(F.sum("k0").alias("s")), count),
        "scan_dim": (dim.select(F.sum("k").alias("s")), count),
        "repartition": (events.repartition(partitions, "k0"), count),
        "broadcast_build": (one.join(F.broadcast(dim), one.k0 == dim.k), count),
        "shuffled_build": (one.join(dim.hint("shuffle_hash"), one.k0 == dim.k), count),
        "probe": (events.join(F.broadcast(small), events.k0 == small.k), count),
        # first() depends on the order, so Spark keeps the sort (it drops sorts below order-blind aggregates)
        "sorted": (events.repartition(partitions, "k0").sortWithinPartitions("k0"), F.first("k0")),
        "unsorted": (events.repartition(partitions, "k0"), F.first("k0")),
        "merge": (events.join(dim.hint("merge"), events.k0 == dim.k), count),
        "pipeline": (result.join(F.broadcast(dim), result.k1 == dim.k), count),
        "chain": (dim.join(F.broadcast(result), dim.k == result.k1), count),
    }
    times: dict[str, list[float]] = {name: [] for name in probes}
    for frame, aggregate in probes.values():
        frame.agg(aggregate).collect()  # warm-up
    for round_ in range(repeat):
        progress(f"probing {len(probes)} jobs, round {round_ + 1} of {repeat} ...")
        for name, (frame, aggregate) in probes.items():
            start = time.perf_counter()
            frame.agg(aggregate).collect()
            times[name].append(time.perf_counter() - start)
    width = sum(p.stat().st_size for p in (work / "events").glob("*.parquet")) / n  # stored bytes per row
    log_rows = math.log2(max(2.0, n / partitions))
    merge_log = math.log2(max(2.0, (n + m) / 2 / partitions))

    def figures_of(t: dict[str, float]) -> dict[str, float]:
        exchange = t["repartition"] - t["scan_events"]
        built = base.build_row + base.broadcast_row + 16 * base.broadcast_byte  # two long columns a row
        charged = (r * built + m * base.probe_row) - (m * built + r * base.probe_row)
        return {
            "scan": (t["scan_events"] - t["overhead"]) / n,
            "exchange": exchange / n,
            "broadcast build": (t["broadcast_build"] - t["scan_dim"]) / m,
            "shuffled build": (t["shuffled_build"] - t["scan_dim"] - exchange * m / n) / m,
            "probe": (t["probe"] - t["scan_events"]) / n,
            "sort": (t["sorted"] - t["unsorted"]) / n / log_rows,
            "sort and merge": (t["merge"] - t["scan_events"] - t["scan_dim"] + t["overhead"]
                               - exchange * (n + m) / n) / (n + m),
            "broadcast of a join result": t["chain"] - t["pipeline"] - charged,
        }

    measured = figures_of({name: statistics.median(ts) for name, ts in times.items()})
    rounds = [figures_of({name: ts[i] for name, ts in times.items()}) for i in range(repeat)]
    before = {
        "scan": base.row_out + base.scan_byte * width, "exchange": base.shuffle_row + base.shuffle_byte * width,
        "broadcast build": base.build_row + base.broadcast_row, "shuffled build": base.build_row,
        "probe": base.probe_row, "sort": base.sort_row,
        "sort and merge": base.sort_row * merge_log + base.merge_row, "broadcast of a join result": base.broadcast_job,
    }
    units = {"sort": "row and log2 row", "sort and merge": "input row", "broadcast of a join result": "job"}
    figures = [Figure(name, units.get(name, "row"), value,
                      statistics.median(abs(rnd[name] / value - 1.0) for rnd in rounds) if value else float("inf"),
                      before[name])
               for name, value in measured.items()]
    weights = fit_weights(measured, base, width, merge_log)
    about = {"master": spark.sparkContext.master, "spark": spark.version, "events": n, "dimension_rows": m,
             "join_result_rows": r, "shuffle_partitions": partitions, "repeat": repeat,
             "measured": time.strftime("%Y-%m-%d")}
    return Calibration(weights, figures, about)


def fit_weights(measured: dict[str, float], base: CostWeights, width: float, merge_log: float) -> CostWeights:
    """The weights that charge what was ``measured`` (operator -> seconds per unit): each per-row
    weight is the figure less what the byte weights already charge for the same work, never below
    ``FLOOR``; a broadcast build splits into the local build and the broadcast."""
    build = max(FLOOR, measured["shuffled build"])
    sort = max(FLOOR, measured["sort"])
    return dataclasses.replace(
        base,
        row_out=max(FLOOR, measured["scan"] - base.scan_byte * width),
        shuffle_row=max(FLOOR, measured["exchange"] - base.shuffle_byte * width),
        build_row=build,
        broadcast_row=max(FLOOR, measured["broadcast build"] - build),
        probe_row=max(FLOOR, measured["probe"]),
        sort_row=sort,
        merge_row=max(FLOOR, measured["sort and merge"] - sort * merge_log),
        broadcast_job=max(1e-3, measured["broadcast of a join result"]),
    )
