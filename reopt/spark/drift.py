"""A drifting workload: a stream of events joined with static dimension tables, where the share of
events that survive each dimension's filter changes over time, so the best join order changes
mid-stream.

Dimension ``d{i}(k, grp, w, label)`` has ``dimension_keys`` keys, each on ``fanout`` rows (so a join
with a dimension multiplies the events it keeps by ``fanout``); the query keeps the rows with
``grp < kept_percent``. Each event carries one key per dimension; in batch ``b``, a key of dimension
``i`` falls in the kept part with probability ``match_share(b, i)``. The selective dimension
rotates: in each phase one dimension keeps 2% of the events and the others 50-90%, so joining a
non-selective dimension first inflates the intermediate result several times over. Keys are drawn
with Zipf-like skew (``u ** zipf`` over the key range). The optimizer's estimates assume uniform data
(``kept_percent`` everywhere), so only runtime feedback reveals which join to do first. The filtered
dimensions are small enough (as stored) to broadcast, so every join can be a broadcast hash join in
one pipeline, and a poor join order costs real time by probing several times more rows.

With ``outriggers`` the schema is a snowflake: the filter sits on an outrigger ``s{i}(k, grp)`` of
each dimension, reached through ``d{i}.sk = s{i}.k`` (ten dimension keys per outrigger key, with the
same ``grp``), so the selective part of the stream's joins is two joins away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SELECTIVE_SHARE = 0.02
OTHER_SHARES = (0.9, 0.6, 0.75, 0.5)


@dataclass(frozen=True)
class DriftConfig:
    batches: int = 12
    rows_per_batch: int = 200_000
    dimensions: int = 3
    dimension_keys: int = 20_000
    fanout: int = 4
    kept_percent: int = 50
    phases: int = 3
    zipf: float = 1.5
    seed: int = 7
    outriggers: bool = False


@dataclass(frozen=True)
class Workload:
    """A drifting workload as the demo and the benchmarks run it: the data, and the Spark settings
    it runs under (applied when the session starts)."""

    name: str
    summary: str
    config: DriftConfig
    session: dict[str, str] = field(default_factory=dict)


WORKLOADS = {
    "shuffled": Workload(
        "shuffled",
        "large dimensions, every join shuffled: the join order decides how many rows each shuffle moves "
        "(broadcasts off, standing for dimensions beyond the broadcast threshold)",
        DriftConfig(rows_per_batch=1_000_000, dimension_keys=200_000),
        {"spark.sql.autoBroadcastJoinThreshold": "-1"}),
    "snowflake": Workload(
        "snowflake",
        "a snowflake of two large dimensions whose filters sit on outriggers, every join shuffled: the "
        "branch joined first decides whether the next shuffle moves 8% or 360% of the events",
        DriftConfig(rows_per_batch=500_000, dimensions=2, dimension_keys=200_000, outriggers=True),
        {"spark.sql.autoBroadcastJoinThreshold": "-1"}),
    "broadcast": Workload(
        "broadcast",
        "small dimensions, all broadcast and probed in one pipeline: the join order changes little",
        DriftConfig(rows_per_batch=1_000_000, dimension_keys=200_000)),
}


def drift_batches(config: DriftConfig) -> list[int]:
    """The batches where a new phase begins: the selective dimension changes there."""
    return [b for b in range(1, config.batches)
            if b * config.phases // config.batches != (b - 1) * config.phases // config.batches]


def match_share(config: DriftConfig, batch: int, dimension: int) -> float:
    """Share of batch ``batch``'s events whose key of ``dimension`` passes the dimension's filter."""
    phase = batch * config.phases // config.batches
    if phase % config.dimensions == dimension:
        return SELECTIVE_SHARE
    return OTHER_SHARES[(dimension + phase) % len(OTHER_SHARES)]


def query_sql(config: DriftConfig, table_prefix: str = "", placeholders: bool = False) -> str:
    """The workload's query; ``table_prefix`` names other copies of the tables (aliases stay), and
    ``placeholders`` writes each table as ``{name}``, for ``spark.sql(text, name=frame, ...)``."""
    dims = range(config.dimensions)
    filtered = "s" if config.outriggers else "d"
    names = ["events"] + [f"d{i}" for i in dims] + ([f"s{i}" for i in dims] if config.outriggers else [])
    tables = ", ".join(f"{{{name}}} {name}" if placeholders else f"{table_prefix}{name} {name}" for name in names)
    joins = " and ".join([f"events.k{i} = d{i}.k" for i in dims]
                         + ([f"d{i}.sk = s{i}.k" for i in dims] if config.outriggers else []))
    filters = " and ".join(f"{filtered}{i}.grp < {config.kept_percent}" for i in dims)
    weights = " + ".join(["events.v"] + [f"d{i}.w" for i in dims])
    return f"select count(*) as matches, sum({weights}) as total from {tables} where {joins} and {filters}"


def _key(config: DriftConfig, matching: bool, seed: int):
    """A key whose ``grp`` (key % 100) is below ``kept_percent`` when ``matching``, not otherwise."""
    blocks = max(1, config.dimension_keys // 100)
    kept = config.kept_percent
    block = F.floor(F.pow(F.rand(seed), F.lit(config.zipf)) * blocks) * 100
    offset = F.floor(F.rand(seed + 1) * kept) if matching else F.floor(F.rand(seed + 2) * (100 - kept)) + kept
    return (block + offset).cast("long")


def events_batch(spark: SparkSession, config: DriftConfig, batch: int) -> DataFrame:
    frame = spark.range(config.rows_per_batch).withColumnRenamed("id", "event_id")
    for i in range(config.dimensions):
        share = match_share(config, batch, i)
        seed = (config.seed * 10_000 + batch * 100 + i * 10) * 7
        frame = frame.withColumn(
            f"k{i}",
            F.when(F.rand(seed) < share, _key(config, True, seed + 3)).otherwise(_key(config, False, seed + 6)))
    return frame.withColumn("v", (F.col("event_id") % 97).cast("long"))


OUTRIGGER_SPREAD = 10  # dimension keys per outrigger key


def dimension(spark: SparkSession, config: DriftConfig, index: int) -> DataFrame:
    frame = (spark.range(config.dimension_keys * config.fanout)
             .withColumn("k", (F.col("id") / config.fanout).cast("long")).drop("id"))
    if config.outriggers:  # an outrigger key with the same grp: (k // 1000) * 100 + k % 100
        frame = frame.withColumn("sk", (F.floor(F.col("k") / (100 * OUTRIGGER_SPREAD)) * 100 + F.col("k") % 100)
                                 .cast("long"))
    else:
        frame = frame.withColumn("grp", (F.col("k") % 100).cast("int"))
    return (frame.withColumn("w", (F.col("k") % 13).cast("long"))
            .withColumn("label", F.concat(F.lit(f"d{index}-"), F.col("k").cast("string"))))


def outrigger(spark: SparkSession, config: DriftConfig, index: int) -> DataFrame:
    """The table a snowflake dimension's ``sk`` refers to, one row per key, filtered on ``grp``."""
    return (spark.range(-(-config.dimension_keys // OUTRIGGER_SPREAD)).withColumnRenamed("id", "k")
            .withColumn("grp", (F.col("k") % 100).cast("int"))
            .withColumn("region", F.concat(F.lit(f"s{index}-"), (F.col("k") % 7).cast("string"))))


def write_workload(spark: SparkSession, config: DriftConfig, directory: str | Path) -> dict[str, Path]:
    """Dimension tables (and outriggers) and one parquet file per event batch (``events/batch=NNNN``)
    under ``directory``."""
    directory = Path(directory)
    paths = {f"d{i}": directory / f"d{i}" for i in range(config.dimensions)}
    for i in range(config.dimensions):
        dimension(spark, config, i).write.mode("overwrite").parquet(str(paths[f"d{i}"]))
        if config.outriggers:
            paths[f"s{i}"] = directory / f"s{i}"
            outrigger(spark, config, i).write.mode("overwrite").parquet(str(paths[f"s{i}"]))
    events = directory / "events"
    for batch in range(config.batches):
        (events_batch(spark, config, batch).coalesce(1).write.mode("overwrite")
         .parquet(str(events / f"batch={batch:04d}")))
    paths["events"] = events
    return paths
