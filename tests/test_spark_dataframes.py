"""reopt.spark.optimize: a user's own DataFrame in, the same rows out, joined as reopt planned.

TPC-H at scale 0.01 as files read by Spark (conftest's ``tables``); the queries come through ``spark.sql`` over temporary
views and through the DataFrame API."""

import logging

import pytest
from pyspark.sql import functions as F

import reopt
from reopt.optimizer.workloads import TPCH
from reopt.spark import NotPlannable, optimize, plan_frame
from reopt.spark.metrics import describe, plan_shape


def rows(frame):
    return sorted(tuple(row) for row in frame.collect())


@pytest.mark.parametrize("name", ["Q3", "Q5", "Q10"])
def test_a_spark_sql_query_gives_the_same_rows_and_columns_when_reopt_plans_its_joins(spark, tables, name):
    df = spark.sql(TPCH[name])
    planned = plan_frame(df)
    assert planned.plan is not None, planned.reason
    assert planned.frame.columns == df.columns
    assert rows(planned.frame) == rows(df)


def test_spark_runs_the_joins_in_reopt_s_order_with_reopt_s_strategies(spark, tables):
    planned = plan_frame(spark.sql(TPCH["Q5"]))
    planned.frame.collect()
    assert describe(planned.executed()) == plan_shape(planned.plan)


def test_the_inputs_are_named_after_their_files_and_a_table_read_twice_gets_two_names(spark, tables):
    nation, supplier = tables["nation"], tables["supplier"]
    df = (supplier.join(nation.alias("n1"), supplier.s_nationkey == F.col("n1.n_nationkey"))
          .join(nation.alias("n2"), F.col("n1.n_regionkey") == F.col("n2.n_regionkey"))
          .select("s_name", F.col("n2.n_name")))
    planned = plan_frame(df)
    assert sorted(planned.plan.query.aliases) == ["nation", "nation_2", "supplier"]
    assert rows(planned.frame) == rows(df)


def test_a_dataframe_api_query_with_filters_keeps_each_filter_with_its_input(spark, tables):
    orders, customer, lineitem = tables["orders"], tables["customer"], tables["lineitem"]
    df = (lineitem.where(F.col("l_quantity") > 45)
          .join(orders.where(F.col("o_orderpriority") == "1-URGENT"), F.col("l_orderkey") == F.col("o_orderkey"))
          .join(customer, F.col("o_custkey") == F.col("c_custkey"))
          .groupBy("c_mktsegment").agg(F.count(F.lit(1)).alias("n")))
    planned = plan_frame(df, statistics="exact")
    assert planned.plan is not None
    catalog = planned.optimizer.catalog
    assert catalog.table("lineitem").rows == lineitem.where(F.col("l_quantity") > 45).count()
    assert rows(planned.frame) == rows(df)


def test_an_outer_join_above_the_inner_joins_stays_as_spark_planned_it_and_the_log_says_why(spark, tables, caplog):
    df = spark.sql("""SELECT c.c_name, o.o_orderkey FROM customer c LEFT JOIN
                      (SELECT o_orderkey, o_custkey FROM orders JOIN lineitem ON o_orderkey = l_orderkey) o
                      ON c.c_custkey = o.o_custkey""")
    with caplog.at_level(logging.INFO, logger="reopt.spark.dataframes"):
        planned = plan_frame(df)
    assert planned.frame is df and planned.plan is None
    assert "LeftOuter join above the inner joins" in caplog.text


def test_a_join_on_an_inequality_stays_as_spark_planned_it(spark, tables):
    df = spark.sql("SELECT * FROM nation JOIN region ON n_regionkey < r_regionkey")
    planned = plan_frame(df)
    assert planned.plan is None and "is not an equality of two inputs' columns" in planned.reason
    assert optimize(df) is df
    with pytest.raises(NotPlannable, match="did not plan"):
        planned.reoptimize(reopt.DeltaStats.table("nation", rows=10))


def test_a_query_over_the_plan_space_limit_stays_as_spark_planned_it_and_says_why(spark, tables):
    df = spark.sql(TPCH["Q5"])
    planned = plan_frame(df, config=reopt.OptimizerConfig(max_join_pairs=5))
    assert planned.frame is df and planned.plan is None
    assert "more than 5 connected pairs" in planned.reason
    with pytest.warns(UserWarning, match="approximate"):
        approximated = plan_frame(df, config=reopt.OptimizerConfig(max_join_pairs=5, beyond_limit="greedy"))
    assert approximated.optimizer.approximate
    assert rows(approximated.frame) == rows(df)


def test_reoptimizing_a_planned_frame_follows_the_new_statistics(spark, tables):
    planned = plan_frame(spark.sql(TPCH["Q5"]))
    before = rows(planned.frame)
    frame = planned.reoptimize(reopt.DeltaStats.table("region", rows=1e9))
    fresh = reopt.Optimizer(planned.plan.query, planned.optimizer.catalog).optimize()
    assert planned.plan.key() == fresh.key() and frame is planned.frame
    assert rows(planned.frame) == before


def test_planning_a_frame_leaves_the_session_s_settings_and_catalog_as_they_were(spark, tables):
    def state():
        return ({row.key: row.value for row in spark.sql("SET").collect()},
                sorted(t.name for t in spark.catalog.listTables()))

    before = state()
    plan_frame(spark.sql(TPCH["Q10"])).frame.collect()
    assert state() == before


@pytest.fixture
def analyzed_tables(spark, tables, tmp_path):
    """nation and region as catalog tables with metastore statistics, read with cost-based
    estimation on (it carries the statistics through filters)."""
    for name in ("nation", "region"):
        tables[name].write.parquet(str(tmp_path / name))
        spark.sql(f"CREATE TABLE analyzed_{name} USING parquet LOCATION '{tmp_path / name}'")
    spark.sql("ANALYZE TABLE analyzed_nation COMPUTE STATISTICS FOR COLUMNS n_regionkey")
    spark.sql("ANALYZE TABLE analyzed_region COMPUTE STATISTICS FOR COLUMNS r_regionkey")
    spark.conf.set("spark.sql.cbo.enabled", "true")
    yield
    spark.conf.unset("spark.sql.cbo.enabled")
    for name in ("nation", "region"):
        spark.sql(f"DROP TABLE analyzed_{name}")


@pytest.mark.usefixtures("analyzed_tables")
def test_metastore_statistics_are_read_and_no_job_measures_the_inputs(spark):
    df = spark.sql("SELECT n_name FROM analyzed_nation JOIN analyzed_region ON n_regionkey = r_regionkey")
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("reopt-statistics", "measuring inputs")
    try:
        planned = plan_frame(df)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert tracker.getJobIdsForGroup("reopt-statistics") == []
    catalog = planned.optimizer.catalog
    assert (catalog.table("analyzed_nation").rows, catalog.table("analyzed_region").rows) == (25, 5)
    assert catalog.column("analyzed_nation", "n_regionkey").ndv == 5


def test_an_attached_planned_frame_learns_each_join_s_rows_from_its_executions(spark, tables):
    planned = plan_frame(spark.sql(TPCH["Q5"]))
    hook = planned.attach(stage_times=False)
    try:
        planned.frame.collect()
        assert hook.wait_for(1)
    finally:
        hook.detach()
    assert (hook.updates, hook.errors) == (1, 0)
    assert len(planned.optimizer.catalog.observed) == 5  # Q5 joins six relations
    fresh = reopt.Optimizer(planned.plan.query, planned.optimizer.catalog).optimize()
    assert planned.plan.key() == hook.plan.key() == fresh.key()


def test_spark_s_own_plan_is_kept_when_reopt_s_is_not_predicted_cheaper_by_more_than_the_model_error(spark, tables):
    df = spark.sql(TPCH["Q5"])
    planned = plan_frame(df, model_error=0.99)
    assert planned.spark_plan and planned.frame is df
    assert planned.reason.startswith("Spark's own plan kept: reopt's predicted")
    joined = [set(planned.plan.query.names(node.expr)) for node in planned.plan.joins()]
    order = ["customer", "orders", "lineitem", "supplier", "nation", "region"]  # as written: Catalyst keeps it
    assert joined == [set(order[:n]) for n in range(2, 7)]


def test_reopt_s_plan_replaces_spark_s_where_predicted_clearly_cheaper_and_the_reason_says_by_how_much(spark, tables):
    planned = plan_frame(spark.sql(TPCH["Q5"]), model_error=0.0)
    assert not planned.spark_plan
    assert planned.reason.startswith("reopt's plan predicted") and "cheaper than Spark's own" in planned.reason


def test_statistics_come_from_parquet_footers_and_a_sample_without_reading_the_inputs_in_full(spark, tables):
    from reopt.spark import statistics

    statistics._LEARNT.clear()
    df = tables["lineitem"].where(F.col("l_quantity") > 45).join(
        tables["orders"], F.col("l_orderkey") == F.col("o_orderkey"))
    planned = plan_frame(df)
    assert "Parquet footers and a sample (lineitem, orders)" in planned.reason
    estimated = planned.optimizer.catalog.table("lineitem").rows
    exact = tables["lineitem"].where(F.col("l_quantity") > 45).count()
    assert 0.8 * exact <= estimated <= 1.25 * exact
    assert planned.optimizer.catalog.table("orders").rows == tables["orders"].count()  # the footers' count


def test_a_second_query_over_the_same_inputs_plans_from_what_the_session_learnt_without_a_job(spark, tables):
    plan_frame(spark.sql(TPCH["Q3"]))
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("reopt-remembered", "planning from memory")
    try:
        planned = plan_frame(spark.sql(TPCH["Q3"]))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert "remembered (customer, orders, lineitem)" in planned.reason
    assert tracker.getJobIdsForGroup("reopt-remembered") == []


def test_statistics_is_estimated_or_exact(spark, tables):
    with pytest.raises(reopt.OptimizerError, match="statistics is one of estimated, exact, got 'guessed'"):
        plan_frame(spark.sql(TPCH["Q3"]), statistics="guessed")


def test_an_attached_frame_on_spark_s_own_plan_learns_from_its_runs_and_keeps_the_same_rows(spark, tables):
    df = spark.sql(TPCH["Q10"])
    planned = plan_frame(df, model_error=0.99)
    assert planned.spark_plan
    hook = planned.attach(stage_times=False)
    try:
        assert rows(planned.frame) == rows(df)
        assert hook.wait_for(1)
    finally:
        hook.detach()
    assert (hook.updates, hook.errors) == (1, 0)
    assert len(planned.optimizer.catalog.observed) == 3  # Q10 joins four relations
    assert rows(planned.frame) == rows(df)


def test_an_input_that_is_a_query_of_its_own_is_left_to_spark_unless_exact_statistics_are_asked_for(spark, tables):
    df = spark.sql("""select c_name, o_orderkey, sum(l_quantity) from customer, orders, lineitem
                      where o_orderkey in (select l_orderkey from lineitem group by l_orderkey
                                           having sum(l_quantity) > 300)
                        and c_custkey = o_custkey and o_orderkey = l_orderkey
                      group by c_name, o_orderkey""")
    planned = plan_frame(df)
    assert planned.plan is None and planned.frame is df
    assert "is a query of its own" in planned.reason and "statistics='exact'" in planned.reason
    counted = plan_frame(df, statistics="exact")
    assert counted.plan is not None and rows(counted.frame) == rows(df)
