"""The listener hook: metrics reach the optimizer after every action on a plan of its query, other
queries are ignored, a failing callback never fails the job, and detach stops it all."""

import logging

import pytest

import reopt
from reopt.optimizer.workloads import TPCH
from reopt.spark import attach, detach, execute


@pytest.fixture
def optimizer():
    return reopt.Optimizer.from_sql(TPCH["Q3"], reopt.Catalog.tpch(0.01))


def test_attached_hook_feeds_observed_cardinalities_to_the_optimizer(spark, tables, optimizer):
    hook = attach(spark, optimizer)
    try:
        execute(hook.plan, tables).collect()
        assert hook.wait_for(1)
    finally:
        detach(hook)
    assert hook.updates == 1 and hook.errors == 0
    assert optimizer.catalog.observed
    full = reopt.Optimizer(optimizer.query, optimizer.catalog).optimize()
    assert (hook.plan.cost, hook.plan.key()) == (full.cost, full.key())


def test_stage_times_of_the_hook_s_plans_reach_the_optimizer(spark, tables, optimizer):
    hook = attach(spark, optimizer)
    try:
        execute(hook.plan, tables).collect()
        assert hook.wait_for(1, stages=1)
    finally:
        detach(hook)
    assert (hook.stage_updates, hook.errors) == (1, 0)
    assert all(1 / 8 <= f <= 8 for f in optimizer.catalog.cost_factors.values())
    full = reopt.Optimizer(optimizer.query, optimizer.catalog).optimize()
    assert (hook.plan.cost, hook.plan.key()) == (full.cost, full.key())


def test_other_queries_are_ignored(spark, tables, optimizer):
    hook = attach(spark, optimizer)
    try:
        spark.range(100).selectExpr("id % 7 as k").groupBy("k").count().collect()
        execute(hook.plan, tables).collect()
        assert hook.wait_for(1)
    finally:
        detach(hook)
    assert (hook.updates, hook.errors) == (1, 0)


def test_a_raising_callback_neither_fails_the_job_nor_loses_the_plan(spark, tables, optimizer, caplog):
    def broken(plan):
        raise RuntimeError("downstream consumer is broken")

    hook = attach(spark, optimizer, on_plan=broken)
    initial = hook.plan
    try:
        with caplog.at_level(logging.ERROR, logger="reopt.spark.hook"):
            for _ in range(2):
                assert execute(hook.plan, tables).collect()
            assert hook.wait_for(2)
    finally:
        detach(hook)
    assert (hook.updates, hook.errors) == (0, 2)
    assert hook.plan is initial
    assert [r.message for r in caplog.records].count(
        "reopt metrics hook failed (keeping the last good plan): RuntimeError: downstream consumer is broken") == 1


def test_detached_hook_sees_nothing(spark, tables, optimizer):
    hook = attach(spark, optimizer)
    detach(hook)
    execute(hook.plan, tables).collect()
    assert not hook.wait_for(1, timeout=3)
    assert not hook.attached and hook.updates == 0
