"""TPC-H lineitem split into partitions skewed differently from one to the next: the reference paper's
setting for re-optimizing a prepared statement (TPC-H Q5) between runs over partitions of skewed data.

Each partition is a sample of lineitem in which a row's chance depends on its supplier's region and
its order's year, with Zipf-like weights ``1 / (1 + rank) ** skew``: rank 0 is the partition's
favoured region (year), rank 1 the next one round, and so on. Even partitions favour Q5's region
(so Q5's region filter keeps most of their rows) and a year Q5 does not ask for; odd partitions the
reverse. Which of Q5's two filters, the region's through the suppliers or the year's through the
orders, is selective therefore flips from partition to partition, and with it the best join order;
the static tables' statistics, uniform over regions and years, see neither.

The parts flip too, every two partitions: in partitions 0-1, 4-5, ... a row whose part is green (the
parts TPC-H Q9 keeps) is kept at full weight and any other at ``1 / 2 ** (2 * skew)``, and in the
others the reverse, so Q9's part filter keeps about a third of some partitions' rows and under one
percent of others'.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

REGIONS = 5
YEARS = tuple(range(1992, 1999))
Q5_REGION = 2  # ASIA, the region TPC-H Q5 (reopt.optimizer.workloads.TPCH["Q5"]) keeps
Q5_YEAR = 1994
Q9_PART = "green"  # TPC-H Q9 keeps the parts whose name holds it


@dataclass(frozen=True)
class SkewConfig:
    partitions: int = 10
    skew: float = 1.5  # Zipf exponent of the weights over regions and years; parts: 1 / 2 ** (2 * skew)
    seed: int = 17

    def favoured(self, partition: int) -> tuple[int, int]:
        """(region key, year) partition ``partition`` favours."""
        shift = partition // 2
        if partition % 2 == 0:  # Q5's region, another year each time
            return Q5_REGION, YEARS[(YEARS.index(Q5_YEAR) + 1 + shift % (len(YEARS) - 1)) % len(YEARS)]
        return (Q5_REGION + 1 + shift % (REGIONS - 1)) % REGIONS, Q5_YEAR

    def favours_green(self, partition: int) -> bool:
        """Whether partition ``partition`` favours the parts Q9 keeps (two partitions in four)."""
        return partition // 2 % 2 == 0


def _weight(value: F.Column, favoured: int, count: int, skew: float) -> F.Column:
    rank = (value - F.lit(favoured) + F.lit(count)) % F.lit(count)
    return F.lit(1.0) / F.pow(rank + F.lit(1.0), F.lit(skew))


def partition(tables: dict[str, DataFrame], config: SkewConfig, index: int) -> DataFrame:
    """Partition ``index``: lineitem's rows, each kept with its region's weight times its year's
    times its part's (``tables``: TPC-H's tables by name)."""
    lineitem, supplier, nation, orders = (tables[n] for n in ("lineitem", "supplier", "nation", "orders"))
    region, year = config.favoured(index)
    regions = supplier.join(nation, supplier.s_nationkey == nation.n_nationkey).select(
        F.col("s_suppkey").alias("_suppkey"), F.col("n_regionkey").alias("_region"))
    years = orders.select(F.col("o_orderkey").alias("_orderkey"), F.year("o_orderdate").alias("_year"))
    green = F.col("p_name").like(f"%{Q9_PART}%")
    parts = tables["part"].select(F.col("p_partkey").alias("_partkey"),
                                  (green if config.favours_green(index) else ~green).alias("_favoured"))
    chance = (_weight(F.col("_region"), region, REGIONS, config.skew)
              * _weight(F.col("_year") - F.lit(YEARS[0]), YEARS.index(year), len(YEARS), config.skew)
              * F.when(F.col("_favoured"), F.lit(1.0)).otherwise(F.lit(1 / 2 ** (2 * config.skew))))
    return (lineitem.join(F.broadcast(regions), lineitem.l_suppkey == F.col("_suppkey"))
            .join(years, lineitem.l_orderkey == F.col("_orderkey"))
            .join(parts, lineitem.l_partkey == F.col("_partkey"))
            .where(F.rand(config.seed * 1000 + index) < chance)
            .select(*lineitem.columns))


def write_partitions(tables: dict[str, DataFrame], config: SkewConfig, directory: str | Path) -> list[Path]:
    """Every partition as its own parquet folder under ``directory`` (``part=NN``)."""
    directory = Path(directory)
    paths = []
    for index in range(config.partitions):
        path = directory / f"part={index:02d}"
        partition(tables, config, index).write.mode("overwrite").parquet(str(path))
        paths.append(path)
    return paths
