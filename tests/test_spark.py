"""reopt plans on a real local Spark: forced order and strategies, results, metrics, statistics.

One session for the whole test run (UI off, small configs; see conftest.py) over TPC-H data at scale
0.01.
"""

import pytest

import reopt
from reopt.optimizer.workloads import TPCH
from reopt.spark import catalog_from_spark, execute, executed_tree, observed_cardinalities, plan_frame, session_weights
from reopt.spark.metrics import describe, plan_shape

BROADCAST_OFF = reopt.OptimizerConfig(weights=reopt.CostWeights(broadcast_threshold=0))
MERGE_ONLY = reopt.OptimizerConfig(weights=reopt.CostWeights(broadcast_threshold=0, build_row=1.0))


@pytest.fixture(scope="module")
def catalog():
    return reopt.Catalog.tpch(0.01)


@pytest.fixture
def join_reordering(spark):
    """Spark's cost-based join reordering switched on for one test, as a user's session may have it."""
    keys = ("spark.sql.cbo.enabled", "spark.sql.cbo.joinReorder.enabled")
    before = {key: spark.conf.get(key) for key in keys}
    for key in keys:
        spark.conf.set(key, "true")
    yield
    for key, value in before.items():
        spark.conf.set(key, value)


@pytest.mark.usefixtures("join_reordering")
@pytest.mark.parametrize("config, strategy", [
    (None, "broadcast_hash_join"), (BROADCAST_OFF, "shuffled_hash_join"), (MERGE_ONLY, "sort_merge_join")])
def test_executed_plan_has_the_chosen_join_order_and_strategies(tables, catalog, config, strategy):
    plan = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, config).optimize()
    frame = execute(plan, tables)
    frame.collect()
    executed = executed_tree(frame, plan.query)
    assert describe(executed) == plan_shape(plan)
    assert strategy in plan.key()


def test_executing_a_plan_leaves_the_session_s_settings_and_catalog_as_they_were(spark, tables, catalog):
    def settings():
        return {row.key: row.value for row in spark.sql("SET").collect()}, dict(spark.sparkContext.getConf().getAll())

    before, views = settings(), sorted(t.name for t in spark.catalog.listTables())
    plan = reopt.Optimizer.from_sql(TPCH["Q10"], catalog).optimize()  # Q10 has a final step (GROUP BY)
    assert execute(plan, tables).collect()
    assert settings() == before
    assert sorted(t.name for t in spark.catalog.listTables()) == views


def test_build_side_of_hash_joins_is_the_plan_s_right_input(tables, catalog):
    plan = reopt.Optimizer.from_sql(TPCH["Q3"], catalog, BROADCAST_OFF).optimize()
    frame = execute(plan, tables)
    frame.collect()
    hash_joins = [j for j in executed_tree(frame, plan.query).joins() if j.build_right is not None]
    assert hash_joins and all(j.build_right for j in hash_joins)


@pytest.mark.parametrize("name", ["Q3", "Q5", "Q8", "Q9", "Q10"])
def test_result_equals_running_the_sql_in_spark(spark, tables, catalog, name):
    plan = reopt.Optimizer.from_sql(TPCH[name], catalog, BROADCAST_OFF).optimize()
    ours = [tuple(r) for r in execute(plan, tables).collect()]
    theirs = [tuple(r) for r in spark.sql(TPCH[name]).collect()]
    assert ours and sorted(ours) == sorted(theirs)


def test_observed_join_rows_are_the_true_join_cardinalities(spark, tables, catalog):
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], catalog)
    plan = optimizer.optimize()
    frame = execute(plan, tables)
    frame.collect()
    executed = executed_tree(frame, plan.query)
    query = plan.query
    for join in executed.joins():
        mask = query.mask(join.relations)
        conditions = [p.text for p in query.joins_within(mask)]
        conditions += [f.expression.sql(dialect="spark") for a in join.relations for f in query.filters_on(a)]
        sql = f"select count(*) from {', '.join(sorted(join.relations))} where {' and '.join(conditions)}"
        assert join.rows == spark.sql(sql).collect()[0][0], sorted(join.relations)


def test_scans_report_the_bytes_of_the_files_they_read(tables, catalog):
    plan = reopt.Optimizer.from_sql(TPCH["Q3"], catalog).optimize()
    frame = execute(plan, tables)
    frame.collect()
    scans = executed_tree(frame, plan.query).scans()
    assert len(scans) == 3
    assert all(node.bytes and node.bytes > 0 for node in scans)


def test_observed_cardinalities_feed_reoptimize(tables, catalog):
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], catalog)
    plan = optimizer.optimize()
    frame = execute(plan, tables)
    frame.collect()
    delta = observed_cardinalities(executed_tree(frame, plan.query), plan.query)
    assert len(delta) == len(plan.joins())
    new_plan = optimizer.reoptimize(delta)
    full = reopt.Optimizer(optimizer.query, optimizer.catalog).optimize()
    assert (new_plan.cost, new_plan.key()) == (full.cost, full.key())


def test_catalog_from_spark_measures_the_data(spark, tables):
    measured = catalog_from_spark(spark, {"orders": tables["orders"], "nation": tables["nation"]})
    assert measured.table("orders").rows == 15_000
    assert measured.table("nation").rows == 25
    assert measured.column("nation", "n_nationkey").ndv == pytest.approx(25, abs=1)
    assert measured.column("orders", "o_orderdate").min == "1992-01-01"


def test_catalog_from_spark_with_sql_measures_only_the_tables_and_columns_it_uses(spark, tables):
    measured = catalog_from_spark(spark, tables, sql=TPCH["Q3"])
    assert set(measured.tables) == {"customer", "orders", "lineitem"}
    assert set(measured.tables["customer"].columns) == {"c_custkey", "c_mktsegment"}
    assert set(measured.tables["orders"].columns) == {"o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"}
    everything = catalog_from_spark(spark, {"customer": tables["customer"]})
    assert measured.table("customer").rows == everything.table("customer").rows
    assert measured.column("customer", "c_custkey").width == everything.column("customer", "c_custkey").width


def test_catalog_from_spark_with_sql_select_star_measures_every_column(spark, tables):
    measured = catalog_from_spark(spark, tables, sql="SELECT * FROM nation, region WHERE n_regionkey = r_regionkey")
    assert set(measured.tables) == {"nation", "region"}
    assert set(measured.tables["nation"].columns) == {f.name for f in tables["nation"].schema.fields}


def test_missing_table_is_a_query_error(tables, catalog):
    plan = reopt.Optimizer.from_sql(TPCH["Q3"], catalog).optimize()
    with pytest.raises(reopt.QueryError, match="no DataFrame given for table"):
        execute(plan, {"orders": tables["orders"]})


def test_catalog_widths_are_sparks_stored_size(spark, tables):
    """Widths follow Spark's own size estimate (compressed files), which its broadcast threshold uses."""
    orders = tables["orders"]
    measured = catalog_from_spark(spark, {"orders": orders}).table("orders")
    size = orders._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
    assert measured.rows * measured.width == pytest.approx(size)
    assert sum(measured.column_width(c) for c in orders.columns) == pytest.approx(measured.width)
    types = dict(orders.dtypes)
    assert (types["o_comment"], types["o_orderkey"]) == ("string", "bigint")
    assert measured.column_width("o_comment") == pytest.approx(20 / 8 * measured.column_width("o_orderkey"))


def test_catalog_widths_fall_back_to_in_memory_sizes_without_a_spark_estimate(spark):
    frame = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    measured = catalog_from_spark(spark, {"t": frame}).table("t")
    assert (measured.column_width("id"), measured.column_width("name")) == (8.0, 20.0)


def test_tpch_data_of_each_scale_is_cached_apart(tmp_path):
    from reopt.spark import generate_tpch

    small, large = generate_tpch(0.01, tmp_path), generate_tpch(0.02, tmp_path)
    assert small["lineitem"] != large["lineitem"]
    assert large["lineitem"].stat().st_size > 1.5 * small["lineitem"].stat().st_size
    assert generate_tpch(0.01, tmp_path) == small

def test_with_broadcasts_off_in_the_session_no_plan_broadcasts(spark, tables, catalog):

    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        config = reopt.OptimizerConfig(weights=session_weights(spark))
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    plan = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, config).optimize()
    assert "broadcast_hash_join" not in plan.key()
    assert session_weights(spark).broadcast_threshold == 10 * 1024 * 1024


def test_a_plan_that_broadcasts_runs_without_broadcasts_where_the_session_turns_them_off(spark, tables, catalog):
    plan = reopt.Optimizer.from_sql(TPCH["Q5"], catalog).optimize()
    assert "broadcast_hash_join" in plan.key()
    expected = sorted(spark.sql(TPCH["Q5"]).collect())
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        frame = execute(plan, tables)
        rows = sorted(frame.collect())
        executed = frame._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    assert "BroadcastHashJoin" not in executed and "SortMergeJoin" in executed
    assert rows == expected


def test_a_planned_dataframe_runs_without_broadcasts_where_the_session_turns_them_off(spark, tables):
    q5 = spark.sql(TPCH["Q5"])
    planned = plan_frame(q5, config=reopt.OptimizerConfig())
    assert "broadcast_hash_join" in planned.plan.key()
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        frame = plan_frame(q5, config=reopt.OptimizerConfig()).frame
        rows = sorted(frame.collect())
        executed = frame._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    assert "BroadcastHashJoin" not in executed
    assert rows == sorted(q5.collect())


def test_session_weights_take_the_shuffle_partitions_and_a_task_s_share_of_execution_memory(spark):
    weights = session_weights(spark)
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    assert weights.shuffle_partitions == int(spark.conf.get("spark.sql.shuffle.partitions"))
    # local[2]: two task slots share 60% of the heap above Spark's 300 MB reserve
    assert weights.hash_build_memory == pytest.approx((heap - 300 * 1024 * 1024) * 0.6 / 2)
