"""TPC-H lineitem in skewed partitions: which of Q5's filters is selective flips from one partition
to the next, and Q5 re-optimized between them returns Spark's own rows."""

import pytest
from pyspark.sql import functions as F

import reopt
from reopt.optimizer.workloads import TPCH
from reopt.spark import catalog_from_spark
from reopt.spark.runner import AdaptiveRunner, run_partitions
from reopt.spark.skewed_tpch import Q5_REGION, Q5_YEAR, Q9_PART, SkewConfig, write_partitions

SKEW = SkewConfig(partitions=4)


@pytest.fixture(scope="module")
def partitions(spark, tables, tmp_path_factory):
    paths = write_partitions(tables, SKEW, tmp_path_factory.mktemp("partitions"))
    return [spark.read.parquet(str(path)) for path in paths]


def shares(part, tables) -> tuple[float, float]:
    """(share of the partition's rows whose supplier is in Q5's region, whose order is of Q5's year)."""
    joined = (part.join(tables["supplier"], part.l_suppkey == tables["supplier"].s_suppkey)
              .join(tables["nation"], F.col("s_nationkey") == F.col("n_nationkey"))
              .join(tables["orders"], part.l_orderkey == tables["orders"].o_orderkey))
    row = joined.agg(F.avg((F.col("n_regionkey") == Q5_REGION).cast("double")).alias("region"),
                     F.avg((F.year("o_orderdate") == Q5_YEAR).cast("double")).alias("year")).first()
    return row["region"], row["year"]


def test_even_partitions_favour_q5s_region_and_odd_ones_its_year(partitions, tables):
    region_0, year_0 = shares(partitions[0], tables)
    region_1, year_1 = shares(partitions[1], tables)
    assert region_0 > 0.4 and year_0 < 0.1  # uniform data would give 0.2 and 1/7
    assert year_1 > 0.3 and region_1 < 0.15


def green_share(part, tables) -> float:
    joined = part.join(tables["part"], part.l_partkey == tables["part"].p_partkey)
    return joined.agg(F.avg(F.col("p_name").like(f"%{Q9_PART}%").cast("double"))).first()[0]


def test_partitions_favour_q9s_green_parts_two_in_four(partitions, tables):
    shares = [green_share(part, tables) for part in partitions]
    assert min(shares[0], shares[1]) > 0.2 and max(shares[2], shares[3]) < 0.02  # uniform data: about 0.05


def test_partitions_are_samples_of_lineitem(partitions, tables):
    columns = tables["lineitem"].columns
    for part in partitions:
        assert part.columns == columns
        assert 0 < part.count() < tables["lineitem"].count()
        assert part.exceptAll(tables["lineitem"]).count() == 0


def test_q5_reoptimized_between_partitions_returns_sparks_rows(spark, partitions, tables):
    catalog = catalog_from_spark(spark, tables, sql=TPCH["Q5"])
    static = {name: frame for name, frame in tables.items() if name != "lineitem"}
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(TPCH["Q5"], catalog), spark, static, "lineitem")
    records = run_partitions(runner, partitions)
    for record, part in zip(records, partitions):
        part.createOrReplaceTempView("lineitem_part")
        expected = spark.sql(TPCH["Q5"].replace("lineitem", "lineitem_part")).collect()
        assert sorted(record.result) == sorted(tuple(row) for row in expected)
