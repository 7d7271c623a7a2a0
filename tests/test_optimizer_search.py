"""The declarative optimizer finds the cheapest plan tree, and re-optimization equals optimization
from scratch with the new statistics."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reopt
from reopt.optimizer.workloads import SHAPES, TPCH, generated

from .optimizer_oracle import all_plans

pytestmark = pytest.mark.usefixtures("backend")


def check_against_exhaustive(query, catalog):
    plans = all_plans(query, catalog)
    plan = reopt.Optimizer(query, catalog).optimize()
    assert plan.cost == min(cost for cost, _ in plans)
    assert plan.key() in {key for cost, key in plans if cost == plan.cost}


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("shape", SHAPES)
def test_best_cost_equals_exhaustive_enumeration(shape, n):
    check_against_exhaustive(*generated(shape, n, seed=n))


@given(st.sampled_from(SHAPES), st.integers(min_value=2, max_value=4), st.integers(min_value=0, max_value=10**6))
def test_best_cost_equals_exhaustive_enumeration_for_random_statistics(shape, n, seed):
    check_against_exhaustive(*generated(shape, n, seed))


def test_tpch_q3_equals_exhaustive_enumeration():
    catalog = reopt.Catalog.tpch(1)
    query = reopt.Optimizer.from_sql(TPCH["Q3"], catalog).query
    check_against_exhaustive(query, catalog)


OPERATORS = ["scan", "exchange", "sort", "broadcast_hash_join", "shuffled_hash_join", "sort_merge_join"]
FACTORS = st.sampled_from([0.125, 0.25, 0.5, 2.0, 4.0, 8.0])


@st.composite
def delta_for(draw, query, optimizer):
    kind = draw(st.sampled_from(["table", "selectivity", "cardinality", "cost_factor", "batch"]))
    if kind == "table":
        alias, table = draw(st.sampled_from(query.relations))
        # the optimizer is shared across examples, so factors compound: keep the table below the
        # 1e18 rows a catalog accepts
        rows = optimizer.catalog.table(table).rows * draw(FACTORS)
        return reopt.DeltaStats.table(table, rows=min(max(1.0, round(rows)), 1e15))
    if kind == "selectivity":
        predicate = draw(st.sampled_from(sorted(query.predicate_texts())))
        return reopt.DeltaStats.selectivity(predicate, draw(st.floats(min_value=1e-6, max_value=1.0)))
    if kind == "cardinality":
        mask = draw(st.sampled_from(list(query.connected_subsets())))
        names = query.names(mask)
        return reopt.DeltaStats.cardinality(names, draw(st.floats(min_value=0, max_value=1e8)))
    if kind == "cost_factor":
        return reopt.DeltaStats.cost_factor(draw(st.sampled_from(OPERATORS)), draw(FACTORS))
    return reopt.DeltaStats.batch(draw(st.lists(delta_for(query, optimizer), min_size=2, max_size=3)))


def assert_equals_full(optimizer, plan):
    full = reopt.Optimizer(optimizer.query, optimizer.catalog, reopt.OptimizerConfig.setting("none")).optimize()
    assert plan.cost == full.cost
    assert plan.key() == full.key()


@given(st.sampled_from(SHAPES), st.integers(min_value=2, max_value=5), st.integers(min_value=0, max_value=10**6),
       st.data())
def test_reoptimize_equals_full_reoptimization_after_every_delta(shape, n, seed, data):
    query, catalog = generated(shape, n, seed)
    optimizer = reopt.Optimizer(query, catalog)
    optimizer.optimize()
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        plan = optimizer.reoptimize(data.draw(delta_for(query, optimizer)))
        assert_equals_full(optimizer, plan)


def best_plans_from_the_root(optimizer) -> set:
    """Every plan at its entry's best cost reachable from the root through such plans (all tied
    ones), read from the engine's best costs and plan costs."""
    engine, found, todo = optimizer.engine, set(), [(optimizer.query.full, "any")]
    while todo:
        expr, prop = todo.pop()
        (best,) = engine.lookup("BestCost", (0, 1), (expr, prop))
        for row in engine.lookup("PlanCost", (0, 1, 8), best) - found:
            found.add(row)
            kind, left, right = row[2], row[4:6], row[6:8]
            todo += {"scan": [], "unary": [left], "join": [left, right]}[kind]
    return found


@pytest.mark.parametrize("setting", ["goal", "none", "all"])
@given(st.sampled_from(SHAPES), st.integers(min_value=2, max_value=5), st.integers(min_value=0, max_value=10**6),
       st.data())
def test_best_plan_holds_the_best_plans_from_the_root_and_no_other_entry(setting, shape, n, seed, data):
    query, catalog = generated(shape, n, seed)
    optimizer = reopt.Optimizer(query, catalog, reopt.OptimizerConfig.setting(setting))
    optimizer.optimize()
    assert optimizer.engine.rows("BestPlan") == best_plans_from_the_root(optimizer)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        optimizer.reoptimize(data.draw(delta_for(query, optimizer)))
        assert optimizer.engine.rows("BestPlan") == best_plans_from_the_root(optimizer)


@pytest.fixture
def q5_optimizer(backend):
    """One optimizer per backend, re-optimized across all examples of the property below."""
    key = ("q5", backend)
    if key not in _SHARED:
        _SHARED[key] = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1), reopt.OptimizerConfig(backend=backend))
    return _SHARED[key]


_SHARED: dict = {}


@given(st.data())
def test_reoptimize_tracks_full_reoptimization_on_tpch_q5(q5_optimizer, data):
    plan = q5_optimizer.reoptimize(data.draw(delta_for(q5_optimizer.query, q5_optimizer)))
    assert_equals_full(q5_optimizer, plan)


def test_observed_cardinality_changes_the_join_order_of_q5():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1))
    before = optimizer.optimize()
    assert "(lineitem BHJ orders)" in before.join_order()
    after = optimizer.reoptimize(reopt.DeltaStats.cardinality(["lineitem", "orders"], 1e8))
    assert "(lineitem BHJ orders)" not in after.join_order()
    assert_equals_full(optimizer, after)


def test_observed_cardinality_is_exact_for_its_expression_and_corrects_supersets():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q3"], reopt.Catalog.tpch(1))
    optimizer.optimize()
    from reopt.optimizer.estimate import Estimator

    query = optimizer.query
    before = Estimator(query, optimizer.catalog)
    optimizer.reoptimize(reopt.DeltaStats.cardinality(["orders", "customer"], 12345))
    after = Estimator(query, optimizer.catalog)
    pair, everything = query.mask(["orders", "customer"]), query.full
    assert after.rows(pair) == 12345
    assert after.rows(everything) == pytest.approx(before.rows(everything) * 12345 / before.rows(pair))
    assert after.rows(query.mask(["lineitem"])) == before.rows(query.mask(["lineitem"]))


def test_cost_factor_of_broadcast_moves_plans_away_from_broadcast_joins():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1))
    before = optimizer.optimize()
    assert "broadcast_hash_join" in before.key()
    after = optimizer.reoptimize(reopt.DeltaStats.cost_factor("broadcast_hash_join", 1e6))
    assert "broadcast_hash_join" not in after.key()
    assert_equals_full(optimizer, after)


def test_metrics_count_entries_and_alternatives_alive_and_touched():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q3"], reopt.Catalog.tpch(1), reopt.OptimizerConfig.setting("none"))
    optimizer.optimize()
    first = optimizer.metrics()
    assert first.entries_alive == len(optimizer.engine.rows("BestCost")) == first.entries_in_space
    assert first.alternatives_alive == len(optimizer.engine.rows("SearchSpace")) == first.alternatives_in_space
    assert first.alternatives_costed == len(optimizer.engine.rows("PlanCost"))
    assert first.entries_derived_total == first.entries_alive
    assert first.entries_touched_last == first.entries_alive
    optimizer.reoptimize(reopt.DeltaStats.table("customer", rows=15_000))
    after = optimizer.metrics()
    assert 0 < after.entries_touched_last < after.entries_alive
    assert 0 < after.alternatives_touched_last < after.alternatives_costed
    assert after.state_values == first.state_values  # the same plan space, other costs
