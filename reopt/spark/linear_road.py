"""A Linear Road-style stream: car position reports on expressways, and the toll query SegTollS, a
windowed self-join of the reports with those of the last few micro-batches in the same segment.

Every micro-batch holds ``reports_per_batch`` position reports ``(time, car, speed, xway, dir, seg,
sid, lane, pos)``; ``sid`` identifies a segment of one direction of one expressway. Two static tables
describe the road and the cars: ``segments(sid, xway, dir, seg, toll, speed_limit)``, where a tenth of
the segments charge a toll, and ``cars(car, kind)``, a fifth of them commercial.

SegTollS counts, for every report of a commercial car in a tolled segment, the reports of the window
(``recent``: the previous ``window`` micro-batches) in the same segment, and sums the tolls:

    select count(*) as pairs, sum(s.toll) as tolls from reports r, recent w, segments s, cars c
    where r.sid = w.sid and r.sid = s.sid and r.car = c.car and s.toll > 0 and c.kind = 'commercial'

Traffic drifts in phases: at first few reports fall in tolled segments and many come from commercial
cars, so joining the segments first filters the most; then congestion moves into the toll zones while
commercial traffic thins out, and joining the cars first becomes the better order (with more than two
``phases``, the two patterns alternate). Estimates from the static tables see neither, so only
runtime feedback does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

TOLLED_SHARE = 0.1  # segments that charge a toll
COMMERCIAL_SHARE = 0.2  # cars that are commercial
# Per phase: share of reports in tolled segments, share of reports from commercial cars.
PHASES = ((0.03, 0.7), (0.7, 0.03))


@dataclass(frozen=True)
class LinearRoadConfig:
    batches: int = 8
    reports_per_batch: int = 20_000
    cars: int = 10_000
    xways: int = 2
    segments: int = 100  # per expressway and direction
    window: int = 3  # micro-batches the self-join looks back
    seconds_per_batch: int = 30
    phases: int = 2  # phases over the stream; the two traffic patterns take turns from phase to phase
    seed: int = 11

    @property
    def sids(self) -> int:
        return self.xways * 2 * self.segments


def phase_shares(config: LinearRoadConfig, batch: int) -> tuple[float, float]:
    """(share of reports in tolled segments, share of reports from commercial cars) in ``batch``."""
    return PHASES[batch * config.phases // config.batches % len(PHASES)]


def segtolls_sql() -> str:
    return ("select count(*) as pairs, sum(s.toll) as tolls from reports r, recent w, segments s, cars c "
            "where r.sid = w.sid and r.sid = s.sid and r.car = c.car and s.toll > 0 and c.kind = 'commercial'")


def _tolled(sid):
    """Segment ids are tolled when ``sid % 10 == 0``: a tenth of them, spread over the road."""
    return sid % round(1 / TOLLED_SHARE) == 0


def segments(spark: SparkSession, config: LinearRoadConfig) -> DataFrame:
    sid = F.col("id")
    return (spark.range(config.sids)
            .select(sid.alias("sid"),
                    (sid / (2 * config.segments)).cast("int").alias("xway"),
                    ((sid / config.segments) % 2).cast("int").alias("dir"),
                    (sid % config.segments).cast("int").alias("seg"),
                    F.when(_tolled(sid), (sid % 7 + 1) * 5).otherwise(0).cast("int").alias("toll"),
                    F.lit(90).alias("speed_limit")))


def cars(spark: SparkSession, config: LinearRoadConfig) -> DataFrame:
    commercial = F.col("id") % round(1 / COMMERCIAL_SHARE) == 0
    return spark.range(config.cars).select(
        F.col("id").alias("car"), F.when(commercial, "commercial").otherwise("private").alias("kind"))


def reports_batch(spark: SparkSession, config: LinearRoadConfig, batch: int) -> DataFrame:
    """One micro-batch of position reports with the phase's shares of tolled segments and commercial cars."""
    tolled_share, commercial_share = phase_shares(config, batch)
    seed = config.seed * 1_000 + batch * 10
    step = round(1 / TOLLED_SHARE)
    tolled = F.floor(F.rand(seed) * (config.sids // step)) * step
    untolled = F.floor(F.rand(seed + 1) * (config.sids // step)) * step + 1 + F.floor(F.rand(seed + 2) * (step - 1))
    cars_step = round(1 / COMMERCIAL_SHARE)
    commercial = F.floor(F.rand(seed + 3) * (config.cars // cars_step)) * cars_step
    private = F.floor(F.rand(seed + 4) * (config.cars // cars_step)) * cars_step + 1 + F.floor(
        F.rand(seed + 5) * (cars_step - 1))
    sid = F.when(F.rand(seed + 6) < tolled_share, tolled).otherwise(untolled).cast("long")
    return (spark.range(config.reports_per_batch)
            .withColumn("sid", sid)
            .withColumn("car", F.when(F.rand(seed + 7) < commercial_share, commercial).otherwise(private).cast("long"))
            .select((F.lit(batch * config.seconds_per_batch) + F.col("id") % config.seconds_per_batch).alias("time"),
                    "car",
                    (F.rand(seed + 8) * 100).cast("int").alias("speed"),
                    (F.col("sid") / (2 * config.segments)).cast("int").alias("xway"),
                    ((F.col("sid") / config.segments) % 2).cast("int").alias("dir"),
                    (F.col("sid") % config.segments).cast("int").alias("seg"),
                    "sid",
                    (F.rand(seed + 9) * 4).cast("int").alias("lane"),
                    (F.rand(seed + 10) * 5280).cast("long").alias("pos")))


def write_linear_road(spark: SparkSession, config: LinearRoadConfig, directory: str | Path) -> dict[str, Path]:
    """``segments``, ``cars`` and one parquet file per micro-batch of reports (``reports/batch=NNNN``)."""
    directory = Path(directory)
    paths = {"segments": directory / "segments", "cars": directory / "cars"}
    segments(spark, config).write.mode("overwrite").parquet(str(paths["segments"]))
    cars(spark, config).write.mode("overwrite").parquet(str(paths["cars"]))
    reports = directory / "reports"
    for batch in range(config.batches):
        (reports_batch(spark, config, batch).coalesce(1).write.mode("overwrite")
         .parquet(str(reports / f"batch={batch:04d}")))
    paths["reports"] = reports
    return paths
