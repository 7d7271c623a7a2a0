"""The Linear Road-style stream: drifting position reports, and SegTollS (a windowed self-join) run
adaptively micro-batch by micro-batch with the same results as a static run and as Spark SQL."""

import functools

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import reopt
from reopt.spark import catalog_from_spark
from reopt.spark.linear_road import LinearRoadConfig, phase_shares, segtolls_sql, write_linear_road
from reopt.spark.runner import AdaptiveRunner, run_stream

SMALL = LinearRoadConfig(batches=6, reports_per_batch=3000, cars=2000, segments=50, window=2)


@pytest.fixture(scope="module")
def road(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("linear-road")
    paths = write_linear_road(spark, SMALL, directory)
    static = {name: spark.read.parquet(str(path)) for name, path in paths.items() if name != "reports"}
    batches = [spark.read.parquet(str(paths["reports"] / f"batch={b:04d}")) for b in range(SMALL.batches)]
    catalog = catalog_from_spark(spark, {**static, "reports": batches[0], "recent": batches[0]})
    return paths, static, batches, catalog, directory


def shares(batch: DataFrame, static) -> tuple[float, float]:
    joined = batch.join(static["segments"], "sid").join(static["cars"], "car")
    row = joined.agg(F.avg((F.col("toll") > 0).cast("double")).alias("tolled"),
                     F.avg((F.col("kind") == "commercial").cast("double")).alias("commercial")).first()
    return row["tolled"], row["commercial"]


def test_reports_drift_from_commercial_traffic_to_congested_toll_zones(road):
    _paths, static, batches, _catalog, _directory = road
    assert static["segments"].where("toll > 0").count() == SMALL.sids // 10
    for b in (0, SMALL.batches - 1):
        tolled, commercial = shares(batches[b], static)
        expected_tolled, expected_commercial = phase_shares(SMALL, b)
        assert tolled == pytest.approx(expected_tolled, abs=0.05)
        assert commercial == pytest.approx(expected_commercial, abs=0.05)


def run(spark, road, adaptive, checkpoint):
    paths, static, _batches, catalog, _directory = road
    optimizer = reopt.Optimizer.from_sql(segtolls_sql(), catalog)
    runner = AdaptiveRunner(optimizer, spark, static, "reports", adaptive=adaptive, window=("recent", SMALL.window),
                            trust_model=True)
    schema = spark.read.parquet(str(paths["reports"])).schema
    source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(paths["reports"]))
    return run_stream(runner, source, str(checkpoint / f"checkpoint-{adaptive}"))


@pytest.fixture(scope="module")
def runs(spark, road, tmp_path_factory):
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    return run(spark, road, False, checkpoints), run(spark, road, True, checkpoints)


def test_segtolls_runs_adaptively_with_the_static_results_and_changes_plan(runs):
    static_run, adaptive_run = runs
    assert [r.batch for r in adaptive_run] == list(range(SMALL.batches))
    assert [r.result for r in adaptive_run] == [r.result for r in static_run]
    assert len({r.plan for r in static_run}) == 1
    assert any(r.changed for r in adaptive_run)


def test_each_batch_joins_the_window_of_the_previous_batches(spark, road, runs):
    _paths, static, batches, _catalog, _directory = road
    _static_run, adaptive_run = runs
    b = SMALL.batches - 1
    recent = functools.reduce(DataFrame.unionByName, batches[b - SMALL.window:b])
    for name, frame in {**static, "reports": batches[b], "recent": recent}.items():
        frame.createOrReplaceTempView(name)
    expected = [tuple(row) for row in spark.sql(segtolls_sql()).collect()]
    assert adaptive_run[b].result == expected
    assert expected[0][0] > 0


def test_a_window_over_a_table_the_query_lacks_is_refused(spark, road):
    _paths, static, _batches, catalog, _directory = road
    optimizer = reopt.Optimizer.from_sql(segtolls_sql(), catalog)
    with pytest.raises(reopt.QueryError, match="'history' is not a table of the query"):
        AdaptiveRunner(optimizer, spark, static, "reports", window=("history", 2))
