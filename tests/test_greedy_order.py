"""Queries over the plan-space limit: refused by default, or optimized over one greedy join order
when ``OptimizerConfig(beyond_limit="greedy")`` asks for an approximate plan."""

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reopt
from reopt.baselines import TopDownOptimizer
from reopt.optimizer.estimate import Estimator
from reopt.optimizer.greedy import greedy_join_tree
from reopt.optimizer.plan_space import PlanSpace
from reopt.optimizer.workloads import SHAPES, generated

from .test_optimizer_search import delta_for

pytestmark = pytest.mark.usefixtures("backend")

GREEDY = reopt.OptimizerConfig(max_join_pairs=10, beyond_limit="greedy")


def approximate(query, catalog, config=GREEDY):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return reopt.Optimizer(query, catalog, config)


def joins_of(node):
    """The expressions the plan joins, each a set of relations."""
    if node.op in ("scan", "exchange", "sort"):
        return set().union(*(joins_of(child) for child in node.children)) if node.children else set()
    return {node.expr} | set().union(*(joins_of(child) for child in node.children))


def test_a_query_over_the_limit_is_refused_by_default_and_the_error_names_the_greedy_option():
    query, catalog = generated("clique", 6, seed=1)
    with pytest.raises(reopt.QueryTooLargeError, match=r"beyond_limit='greedy'"):
        reopt.Optimizer(query, catalog, reopt.OptimizerConfig(max_join_pairs=10))


def test_asked_for_it_the_optimizer_warns_that_its_plans_are_approximate():
    query, catalog = generated("clique", 6, seed=1)
    with pytest.warns(UserWarning, match=r"6 relations into more than 10 connected pairs .* approximate"):
        optimizer = reopt.Optimizer(query, catalog, GREEDY)
    assert optimizer.approximate
    assert not reopt.Optimizer(query, catalog).approximate


def test_within_the_limit_the_greedy_option_changes_nothing():
    query, catalog = generated("random", 6, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either
        plan = reopt.Optimizer(query, catalog, reopt.OptimizerConfig(beyond_limit="greedy")).optimize()
    exact = reopt.Optimizer(query, catalog).optimize()
    assert (plan.cost, plan.key()) == (exact.cost, exact.key())


def chain_of_three():
    catalog = reopt.Catalog.from_dict({"tables": {
        "a": {"rows": 1000, "columns": {"x": {"ndv": 1000}}},
        "b": {"rows": 1000, "columns": {"x": {"ndv": 1000}, "y": {"ndv": 10}}},
        "c": {"rows": 10, "columns": {"y": {"ndv": 10}}}}})
    return reopt.Query.builder().table("a").table("b").table("c").join("a.x", "b.x").join("b.y", "c.y").build(), catalog


def test_the_greedy_order_joins_the_smallest_result_first():
    query, catalog = chain_of_three()
    # a join b and b join c both 1,000 rows: the smaller masks first, a (1) with b (2)
    assert greedy_join_tree(query, Estimator(query, catalog)) == [(1, 2), (3, 4)]
    c_grown = reopt.DeltaStats.table("c", rows=100).apply(catalog, query)  # b join c: 10,000 rows
    assert greedy_join_tree(query, Estimator(query, c_grown)) == [(1, 2), (3, 4)]
    a_grown = reopt.DeltaStats.table("a", rows=5000).apply(catalog, query)  # a join b: 5,000 rows
    assert greedy_join_tree(query, Estimator(query, a_grown)) == [(2, 4), (1, 6)]


@pytest.mark.parametrize("shape", ["clique", "cycle", "star", "random"])
def test_the_approximate_plan_is_the_best_plan_over_its_greedy_join_order(shape):
    query, catalog = generated(shape, 7, seed=11)
    optimizer = approximate(query, catalog)
    plan = optimizer.optimize()
    tree = greedy_join_tree(query, Estimator(query, catalog))
    assert joins_of(plan.root) == {a | b for a, b in tree}
    # top-down's branch and bound over the same join tree, an independent search of the same space
    oracle = TopDownOptimizer(query, catalog)
    oracle.space = PlanSpace(query, pairs=tree)
    expected = oracle.optimize()
    assert (plan.cost, plan.key()) == (expected.cost, expected.key())
    assert plan.cost >= reopt.Optimizer(query, catalog, reopt.OptimizerConfig(max_join_pairs=None)).optimize().cost


@given(st.sampled_from(SHAPES), st.integers(min_value=4, max_value=6), st.integers(min_value=0, max_value=10**6),
       st.data())
def test_reoptimizing_an_approximate_plan_equals_approximating_afresh(shape, n, seed, data):
    query, catalog = generated(shape, n, seed)
    optimizer = approximate(query, catalog)
    optimizer.optimize()
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        plan = optimizer.reoptimize(data.draw(delta_for(query, optimizer)))
        fresh = approximate(query, optimizer.catalog)
        expected = fresh.optimize()
        assert (plan.cost, plan.key()) == (expected.cost, expected.key())
        assert optimizer.approximate == fresh.approximate


def test_an_approximate_optimizer_costs_a_plan_over_another_join_order_as_exact_optimization_does():
    query, catalog = generated("clique", 7, seed=2)
    optimizer = approximate(query, catalog)
    optimizer.optimize()
    exact = reopt.Optimizer(query, catalog, reopt.OptimizerConfig(max_join_pairs=None)).optimize()
    assert joins_of(exact.root) != joins_of(optimizer.optimize().root)
    assert optimizer.costed(exact) == exact


def test_a_refused_delta_leaves_an_approximate_optimizer_as_it_was():
    query, catalog = generated("clique", 6, seed=2)
    optimizer = approximate(query, catalog)
    before = optimizer.optimize()
    with pytest.raises(reopt.StatisticsError):
        optimizer.reoptimize(reopt.DeltaStats.table("t0", rows=-1))
    assert optimizer.optimize() == before


def test_a_new_greedy_order_that_fails_to_build_leaves_the_optimizer_as_it_was(monkeypatch):
    from reopt.optimizer import optimizer as module

    query, catalog = chain_of_three()
    optimizer = approximate(query, catalog, reopt.OptimizerConfig(max_join_pairs=1, beyond_limit="greedy"))
    before = optimizer.optimize()

    def failing(*args):
        raise RuntimeError("cost model down")

    monkeypatch.setattr(module, "_join_cost", failing)
    with pytest.raises(reopt.datalog.EvaluationError, match="cost model down"):
        optimizer.reoptimize(reopt.DeltaStats.table("a", rows=5000))  # a new order: a new engine
    assert optimizer.optimize() == before
    assert optimizer.catalog.table("a").rows == 1000
    monkeypatch.undo()
    after = optimizer.reoptimize(reopt.DeltaStats.table("a", rows=5000))
    assert joins_of(after.root) == {6, 7}


def test_beyond_limit_takes_refuse_or_greedy():
    with pytest.raises(reopt.OptimizerError, match="beyond_limit must be 'refuse' or 'greedy'"):
        reopt.OptimizerConfig(beyond_limit="dp")
