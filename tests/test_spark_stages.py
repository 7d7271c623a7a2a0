"""Stage times: a SparkListenerInterface implemented in Python records each stage of an execution
with its run time, bytes and operators, and measured against estimated time they become cost factors."""

import logging

import pytest

import reopt
from reopt.optimizer.workloads import TPCH
from reopt.spark import execute
from reopt.spark.stages import StageListener, StageRecord, cost_factor_feedback, stage_operators

MERGE_ONLY = reopt.OptimizerConfig(weights=reopt.CostWeights(broadcast_threshold=0, build_row=1.0))


@pytest.fixture(scope="module")
def q3_plan():
    return reopt.Optimizer.from_sql(TPCH["Q3"], reopt.Catalog.tpch(0.01), MERGE_ONLY).optimize()


def test_stages_of_an_execution_carry_run_time_bytes_and_operators(spark, tables, q3_plan):
    listener = StageListener(spark).attach()
    try:
        frame = execute(q3_plan, tables)
        spark.range(1000).selectExpr("id % 3 as k").groupBy("k").count().collect()  # untagged: not ours
        with listener.tagged("q3"):
            frame.collect()
        stages = listener.stages("q3")
    finally:
        listener.detach()
    assert stages
    assert sum(s.run_time_s for s in stages) > 0
    assert sum(s.input_bytes for s in stages) > 0  # the parquet scans
    assert sum(s.shuffle_write_bytes for s in stages) > 0  # sort-merge joins shuffle both inputs
    operators = stage_operators(frame._jdf.queryExecution().executedPlan())
    ran = {t for s in stages for scope in s.scopes for t in operators.get(scope, ())}
    assert {"scan", "exchange", "sort", "sort_merge_join"} <= ran


def test_stage_listener_accepts_every_other_callback_and_survives_bad_events(spark, caplog):
    listener = StageListener(spark)
    assert listener.onExecutorAdded(object()) is None
    assert listener.onApplicationEnd(object()) is None
    with caplog.at_level(logging.ERROR, logger="reopt.spark.stages"):
        listener.onStageCompleted(object())
        listener.onJobStart(object())
    assert len(caplog.records) == 1  # logged once, never raised


def synthetic(plan, seconds_of):
    """One stage per operator type of the plan, with the given run time per type."""
    kinds = sorted({node.op for node in plan.nodes()})
    stages = [StageRecord(i, seconds_of(kind), 0, 0, 0, (f"stage-{kind}",)) for i, kind in enumerate(kinds)]
    return stages, {f"stage-{kind}": [kind] for kind in kinds}


def estimated(plan):
    out = {}
    for node in plan.nodes():
        out[node.op] = out.get(node.op, 0.0) + node.local_cost
    return out


def test_times_proportional_to_the_estimates_change_no_factor(q3_plan):
    estimates = estimated(q3_plan)
    stages, operators = synthetic(q3_plan, lambda kind: 3.0 * estimates[kind])
    assert len(cost_factor_feedback(q3_plan, stages, operators, {})) == 0


def test_an_operator_slower_than_estimated_gets_a_larger_factor_and_the_others_smaller(q3_plan):
    estimates = estimated(q3_plan)
    stages, operators = synthetic(q3_plan, lambda kind: estimates[kind] * (4.0 if kind == "sort" else 1.0))
    changes = {c.target: c.values[0] for c in cost_factor_feedback(q3_plan, stages, operators, {}).changes}
    assert changes["sort"] > 1.0
    assert all(factor < 1.0 for kind, factor in changes.items() if kind != "sort")


def test_factors_are_damped_and_clamped(q3_plan):
    estimates = estimated(q3_plan)
    stages, operators = synthetic(q3_plan, lambda kind: estimates[kind] * (1e6 if kind == "sort" else 1.0))
    changes = {c.target: c.values[0] for c in cost_factor_feedback(q3_plan, stages, operators, {"sort": 7.0}).changes}
    assert changes["sort"] == 8.0  # 7 times the damped ratio, clamped
    assert all(factor == 1 / 8 for kind, factor in changes.items() if kind != "sort")
