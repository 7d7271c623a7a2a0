"""The adaptive runners on real local Spark: plans follow drift, stay put without it, and the
stream runner runs one plan per micro-batch with the same results as a static run."""

import pytest

import reopt
from reopt.optimizer.workloads import TPCH
from reopt.spark import catalog_from_spark, execute
from reopt.spark.demo import PHASES, compare, rotation
from reopt.spark.drift import DriftConfig, query_sql, write_workload
from reopt.spark.metrics import plan_shape
from reopt.spark.runner import AdaptiveRunner, run_partitions
from reopt.spark.stages import StageListener

SMALL = DriftConfig(batches=9, rows_per_batch=60_000, dimension_keys=20_000, phases=3, seed=3)


@pytest.fixture(scope="module")
def workload(spark, tmp_path_factory):
    paths = write_workload(spark, SMALL, tmp_path_factory.mktemp("drift"))
    static = {n: spark.read.parquet(str(p)) for n, p in paths.items() if n != "events"}
    batches = [spark.read.parquet(str(paths["events"] / f"batch={b:04d}")) for b in range(SMALL.batches)]
    catalog = catalog_from_spark(spark, {**static, "events": batches[0]})
    return static, batches, catalog


def first_partner(plan) -> str:
    """The dimension the plan joins the events with first."""
    def walk(shape):
        if isinstance(shape, str):
            return None
        _op, left, right = shape
        if "events" in (left, right):
            return right if left == "events" else left
        return walk(left) or walk(right)
    return walk(plan_shape(plan))


def test_adaptive_runner_follows_the_drift_to_the_selective_dimension(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                            trust_model=True)
    records = run_partitions(runner, batches)
    assert sum(r.changed for r in records) >= 1
    # In the last phase d2 keeps 2% of the events: the plan learnt by then joins it first.
    assert first_partner(runner.plan) == "d2"


def test_runner_reoptimizes_after_every_nth_batch_only(spark, workload):
    static, batches, catalog = workload
    optimizer = reopt.Optimizer.from_sql(query_sql(SMALL), catalog)
    runner = AdaptiveRunner(optimizer, spark, static, "events", reoptimize_every=3, spark_plan=False)
    records = run_partitions(runner, batches[:6])
    assert [r.reopt_s > 0 for r in records] == [False, False, True, False, False, True]
    assert all(not r.changed for r in records[:3]) and len({r.key for r in records[3:6]}) == 1


@pytest.mark.parametrize("every", [0, -2, 1.5, True])
def test_runner_refuses_a_reoptimization_interval_that_is_not_a_positive_count(spark, workload, every):
    static, _batches, catalog = workload
    with pytest.raises(reopt.OptimizerError, match="reoptimize_every"):
        AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                       reoptimize_every=every)


def test_runner_keeps_its_plan_when_nothing_changes(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events")
    records = run_partitions(runner, [batches[0]] * 6)
    assert [r.changed for r in records[-3:]] == [False, False, False]
    assert len({r.plan for r in records[-3:]}) == 1
    assert len({r.key for r in records[-3:]}) == 1 and records[-1].key == runner.plan.key()


def test_stage_times_of_each_batch_feed_back_as_cost_factors(spark, workload):
    static, batches, catalog = workload
    optimizer = reopt.Optimizer.from_sql(query_sql(SMALL), catalog)
    listener = StageListener(spark).attach()
    try:
        runner = AdaptiveRunner(optimizer, spark, static, "events", stage_listener=listener,
                                trust_model=True)
        records = run_partitions(runner, batches[:2])
        assert all(record.stages for record in records)
    finally:
        listener.detach()
    factors = optimizer.catalog.cost_factors
    assert all(1 / 8 <= f <= 8 for f in factors.values())  # whatever the timings said, within the clamp
    full = reopt.Optimizer(optimizer.query, optimizer.catalog).optimize()
    assert (runner.plan.cost, runner.plan.key()) == (full.cost, full.key())


def test_static_runner_never_reoptimizes(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                            adaptive=False)
    records = run_partitions(runner, batches[:3])
    assert len({r.plan for r in records}) == 1 and not any(r.changed for r in records)
    assert all(r.reopt_s == 0.0 for r in records)


def test_the_demo_runs_each_micro_batch_three_ways_in_rotating_order_with_equal_results(spark, tmp_path):
    config = DriftConfig(batches=4, rows_per_batch=30_000, dimension_keys=10_000, phases=2, seed=5)
    seen, phases = [], []
    result = compare(spark, config, tmp_path, on_batch=lambda mode, record: seen.append((mode, record.batch)),
                     on_phase=phases.append)
    assert phases == list(PHASES)
    assert [r.batch for r in result.adaptive] == [r.batch for r in result.aqe] == [0, 1, 2, 3]
    assert [r.input_rows for r in result.adaptive] == [30_000] * 4
    assert result.same_results
    assert seen == [(mode, b) for b in range(4) for mode in rotation(b)]
    assert result.first == ["adaptive", "static", "aqe", "adaptive"]
    summary = result.summary()
    assert summary.startswith("summary: batches=4 plan_changes=")
    assert f"aqe_s={result.aqe_s:.2f} speedup_vs_aqe={result.aqe_s / result.adaptive_s:.2f}" in summary


def test_a_batch_is_marked_changed_when_it_runs_a_new_plan(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events")
    records = run_partitions(runner, batches)
    assert not records[0].changed
    assert [r.changed for r in records[1:]] == [a.key != b.key for a, b in zip(records, records[1:])]


def test_a_batch_whose_plan_fails_in_spark_runs_again_with_sort_merge_joins(spark, workload, caplog):
    """A broadcast Spark refuses (here: over a 1 KB broadcast limit) fails the plan, not the batch."""
    static, batches, catalog = workload
    optimizer = reopt.Optimizer.from_sql(query_sql(SMALL), catalog)
    runner = AdaptiveRunner(optimizer, spark, static, "events", trust_model=True)
    assert "BHJ" in runner.plan.join_order()
    expected = run_partitions(AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static,
                                             "events", adaptive=False), batches[:1])[0].result
    spark.conf.set("spark.sql.maxBroadcastTableSize", "1k")
    try:
        record = runner.run_batch(batches[0], 0)
    finally:
        spark.conf.unset("spark.sql.maxBroadcastTableSize")
    assert record.retried and sorted(record.result) == sorted(expected)
    assert len(optimizer.catalog.observed) == 3  # the retry's join cardinalities fed back
    assert f"batch 0 failed with plan {record.plan}" in caplog.text
    assert "broadcast" in caplog.text.lower()  # the JVM's reason, not py4j's call name


def test_execute_rejects_an_unknown_join_strategy(workload):
    static, batches, catalog = workload
    plan = reopt.Optimizer.from_sql(query_sql(SMALL), catalog).optimize()
    with pytest.raises(reopt.QueryError, match="unknown join strategy 'nested_loop'"):
        execute(plan, {**static, "events": batches[0]}, join_strategy="nested_loop")


def test_the_demo_removes_the_data_it_generated(spark, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = DriftConfig(batches=2, rows_per_batch=10_000, dimension_keys=2_000, phases=1, seed=3)
    assert compare(spark, config).same_results
    assert list(tmp_path.iterdir()) == []


def test_a_wide_switch_margin_keeps_the_running_plan_through_the_drift(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                            switch_margin=0.99, trust_model=True)
    records = run_partitions(runner, batches)
    assert len({r.key for r in records}) == 1 and not any(r.changed for r in records)
    now = runner.optimizer.costed(runner.plan)
    assert runner.plan.cost == now.cost  # the kept plan carries its cost under today's statistics


@pytest.mark.parametrize("margin", [-0.1, 1.0, "5%", True])
def test_switch_margin_is_a_share_below_one(spark, workload, margin):
    static, _batches, catalog = workload
    with pytest.raises(reopt.OptimizerError, match="switch_margin is a share in"):
        AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                       switch_margin=margin)


def test_with_a_sample_the_first_batch_after_a_drift_runs_a_plan_for_the_new_data(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                            sample_rows=1000, trust_model=True)
    partners = []
    for b, batch in enumerate(batches):
        runner.run_batch(batch, b)
        partners.append(first_partner(runner.plan))  # with a sample, the plan this batch ran
    # phases of three batches: d0, then d1, then d2 keeps 2% of the events
    assert partners == ["d0"] * 3 + ["d1"] * 3 + ["d2"] * 3
    assert all(r.sample_s > 0 and r.reopt_s >= r.sample_s for r in runner.records)
    assert runner.setup_s > 0


def test_a_sampled_run_returns_what_the_static_plan_returns(spark, workload):
    static, batches, catalog = workload
    sampled = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                             sample_rows=500)
    kept = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                          adaptive=False)
    for b in (2, 3, 7):
        assert sorted(sampled.run_batch(batches[b], b).result) == sorted(kept.run_batch(batches[b], b).result)


def test_without_a_sample_a_join_the_plan_stopped_running_keeps_its_old_size(spark, workload):
    static, batches, catalog = workload
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                            trust_model=True)
    partners = []
    for b, batch in enumerate(batches):
        partners.append(first_partner(runner.plan))  # without a sample, the plan this batch runs
        runner.run_batch(batch, b)
    # batch 0 saw events x d1 large; in phase 1 d1 is the selective one, but no plan runs it first
    # again, so the optimizer never learns it: d0 stays first through the whole phase
    assert partners[:6] == ["d1"] + ["d0"] * 5
    assert runner.sampler is None


@pytest.mark.parametrize("rows", [-1, 2.5, True, "1000"])
def test_sample_rows_is_a_count_of_rows(spark, workload, rows):
    static, _batches, catalog = workload
    with pytest.raises(reopt.OptimizerError, match="sample_rows is a number of rows"):
        AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events",
                       sample_rows=rows)


def small_runner(spark, workload, **options) -> AdaptiveRunner:
    static, _batches, catalog = workload
    return AdaptiveRunner(reopt.Optimizer.from_sql(query_sql(SMALL), catalog), spark, static, "events", **options)


def test_the_first_batch_runs_spark_s_own_plan_as_the_measured_baseline(spark, workload):
    batches = workload[1]
    doubtful, kept = small_runner(spark, workload, model_error=0.99), small_runner(spark, workload, adaptive=False)
    first = doubtful.run_batch(batches[0], 0)
    assert first.spark_plan and first.plan.startswith("Spark: ")
    assert first.why.startswith("Spark's own plan first, as the measured baseline")
    assert sorted(first.result) == sorted(kept.run_batch(batches[0], 0).result)


def test_every_batch_s_time_is_set_against_the_model_s_prediction_for_its_plan(spark, workload):
    runner = small_runner(spark, workload)
    records = run_partitions(runner, workload[1][:3])
    assert all(r.model_ratio is not None and r.model_ratio > 0 for r in records)
    summary = runner.judge.summary()
    assert summary["runs"] == 3 and summary["seconds_per_core_s"] > 0


def test_joins_among_the_static_tables_are_counted_before_the_first_batch(spark, tables):
    catalog = catalog_from_spark(spark, tables, sql=TPCH["Q5"])
    static = {name: frame for name, frame in tables.items() if name != "lineitem"}
    runner = AdaptiveRunner(reopt.Optimizer.from_sql(TPCH["Q5"], catalog), spark, static, "lineitem")
    observed = runner.optimizer.catalog.observed
    expected = spark.sql("select count(*) from customer, orders where c_custkey = o_custkey "
                         "and o_orderdate >= date '1994-01-01' and o_orderdate < date '1995-01-01'").first()[0]
    assert observed[frozenset(["customer", "orders"])] == expected
    assert observed and not any("lineitem" in names for names in observed)
    assert runner.setup_s > 0
