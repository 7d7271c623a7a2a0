"""The procedural optimizers agree with the declarative one: same best cost, same plan key."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reopt
from reopt.baselines import (
    BottomUpOptimizer,
    IncrementalBottomUpOptimizer,
    IncrementalTopDownOptimizer,
    TopDownOptimizer,
)
from reopt.optimizer.workloads import SHAPES, TPCH, generated

from .test_optimizer_search import delta_for

PROCEDURAL = (TopDownOptimizer, BottomUpOptimizer, IncrementalTopDownOptimizer, IncrementalBottomUpOptimizer)
INCREMENTAL = (IncrementalTopDownOptimizer, IncrementalBottomUpOptimizer)


def assert_all_agree(query, catalog):
    declarative = reopt.Optimizer(query, catalog).optimize()
    for optimizer in PROCEDURAL:
        plan = optimizer(query, catalog).optimize()
        assert (plan.cost, plan.key()) == (declarative.cost, declarative.key()), optimizer.__name__


@given(st.sampled_from(SHAPES), st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=10**6))
def test_procedural_optimizers_agree_with_the_declarative_one(shape, n, seed):
    assert_all_agree(*generated(shape, n, seed))


def test_procedural_optimizers_agree_on_the_tpch_queries():
    catalog = reopt.Catalog.tpch(1)
    for sql in TPCH.values():
        assert_all_agree(reopt.Optimizer.from_sql(sql, catalog).query, catalog)


@pytest.mark.parametrize("kind", INCREMENTAL, ids=lambda kind: kind.__name__)
@given(st.sampled_from(SHAPES), st.integers(min_value=2, max_value=5), st.integers(min_value=0, max_value=10**6),
       st.data())
def test_procedural_incremental_equals_full_reoptimization_after_every_delta(kind, shape, n, seed, data):
    query, catalog = generated(shape, n, seed)
    declarative = reopt.Optimizer(query, catalog)
    incremental = kind(query, catalog)
    declarative.optimize()
    incremental.optimize()
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        delta = data.draw(delta_for(query, declarative))
        expected = declarative.reoptimize(delta)
        plan = incremental.reoptimize(delta)
        assert (plan.cost, plan.key()) == (expected.cost, expected.key())
        full = TopDownOptimizer(query, declarative.catalog).optimize()
        assert (plan.cost, plan.key()) == (full.cost, full.key())
        from_scratch = kind(query, declarative.catalog)
        from_scratch.optimize()
        assert incremental.best_costs == from_scratch.best_costs  # every group's, not only the root's


def test_incremental_bottom_up_recomputes_only_the_groups_a_delta_reaches():
    catalog = reopt.Catalog.tpch(1)
    optimizer = IncrementalBottomUpOptimizer.from_sql(TPCH["Q5"], catalog)
    optimizer.optimize()
    optimizer.reoptimize(reopt.DeltaStats.table("region", rows=6))
    assert 0 < optimizer.last_recomputed < optimizer.alternative_count
    assert 0 < optimizer.last_updated < optimizer.entry_count


def test_procedural_incremental_recosts_only_what_a_delta_reaches():
    catalog = reopt.Catalog.tpch(1)
    optimizer = IncrementalTopDownOptimizer.from_sql(TPCH["Q5"], catalog)
    optimizer.optimize()
    alternatives = optimizer.alternative_count
    optimizer.reoptimize(reopt.DeltaStats.table("region", rows=6))
    assert 0 < optimizer.last_recosted < alternatives


def test_procedural_incremental_leaves_costs_that_only_grew_until_they_could_win():
    catalog = reopt.Catalog.tpch(1)
    optimizer = IncrementalTopDownOptimizer.from_sql(TPCH["Q5"], catalog)
    optimizer.optimize()
    rows = catalog.table("supplier").rows
    grown = optimizer.reoptimize(reopt.DeltaStats.table("supplier", rows=rows * 8))
    costed_after_growth = optimizer.last_recosted
    full = TopDownOptimizer(optimizer.query, optimizer.catalog).optimize()
    assert (grown.cost, grown.key()) == (full.cost, full.key())
    optimizer.reoptimize(reopt.DeltaStats.table("supplier", rows=rows))  # falls: everything reached is costed
    assert 0 < costed_after_growth < optimizer.last_recosted


@pytest.mark.parametrize("factor", [8, 1 / 8])
def test_procedural_incremental_costs_each_alternative_at_most_once_per_reoptimization(factor):
    catalog = reopt.Catalog.tpch(1)
    optimizer = IncrementalTopDownOptimizer.from_sql(TPCH["Q5"], catalog)
    optimizer.optimize()
    rows = catalog.table("supplier").rows  # supplier is in most of Q5's expressions
    plan = optimizer.reoptimize(reopt.DeltaStats.table("supplier", rows=rows * factor))
    assert 0 < optimizer.last_recosted <= optimizer.alternative_count
    full = TopDownOptimizer(optimizer.query, optimizer.catalog).optimize()
    assert (plan.cost, plan.key()) == (full.cost, full.key())


def test_procedural_incremental_reuses_local_costs_whose_statistics_did_not_change():
    catalog = reopt.Catalog.tpch(1)
    computed = []

    class Counting(IncrementalTopDownOptimizer):
        def local_cost(self, expr, alt):
            computed.append((expr, alt))
            return super().local_cost(expr, alt)

    optimizer = Counting.from_sql(TPCH["Q5"], catalog)
    optimizer.optimize()
    assert len(computed) < optimizer.alternative_count  # alternatives differing only in input properties share one
    computed.clear()
    plan = optimizer.reoptimize(reopt.DeltaStats.table("region", rows=6))
    region = optimizer.query.mask(["region"])
    assert computed and all(expr & region for expr, _alt in computed)  # only what read region's statistics
    assert len(computed) < optimizer.last_recosted  # the others reached added up their inputs' new costs
    full = TopDownOptimizer(optimizer.query, optimizer.catalog).optimize()
    assert (plan.cost, plan.key()) == (full.cost, full.key())


def test_the_incremental_memo_holds_every_alternative_and_the_best_cost_of_every_group():
    catalog = reopt.Catalog.tpch(1)
    optimizer = IncrementalTopDownOptimizer.from_sql(TPCH["Q5"], catalog)
    plan = optimizer.optimize()
    assert sum(len(alts) for alts in optimizer.memo.values()) == optimizer.alternative_count
    assert optimizer.best_costs[(optimizer.query.full, "any")] == plan.cost
    for group, cost in optimizer.best_costs.items():
        assert cost == min(c for c in optimizer.memo[group].values() if c is not None)


def test_top_down_branch_and_bound_visits_only_part_of_the_space():
    catalog = reopt.Catalog.tpch(1)
    full = IncrementalTopDownOptimizer.from_sql(TPCH["Q8Join"], catalog)
    full.optimize()
    top_down = TopDownOptimizer(full.query, catalog)
    top_down.optimize()
    assert (full.query.full, "any") in top_down.visited_groups
    assert top_down.visited_groups < set(full.memo)
