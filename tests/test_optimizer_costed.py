"""Optimizer.costed: a plan chosen earlier, re-estimated under the optimizer's current statistics."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reopt
from reopt.optimizer.workloads import TPCH

pytestmark = pytest.mark.usefixtures("backend")

CATALOG = reopt.Catalog.tpch(1)


@pytest.mark.parametrize("name", ["Q3", "Q5", "Q10", "Q8Join"])
def test_the_best_plan_costed_again_is_itself(name):
    optimizer = reopt.Optimizer.from_sql(TPCH[name], CATALOG)
    plan = optimizer.optimize()
    again = optimizer.costed(plan)
    assert (again.cost, again.key()) == (plan.cost, plan.key())
    assert [n.rows for n in again.nodes()] == [n.rows for n in plan.nodes()]


@given(st.sampled_from(["region", "nation", "supplier", "customer", "orders", "lineitem"]),
       st.floats(min_value=1 / 64, max_value=64))
def test_an_earlier_plan_costs_no_less_than_the_new_best(table, factor):
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], CATALOG)
    earlier = optimizer.optimize()
    rows = CATALOG.table(table).rows * factor
    best = optimizer.reoptimize(reopt.DeltaStats.table(table, rows=rows))
    now = optimizer.costed(earlier)
    assert now is None or now.cost >= best.cost
    assert now is None or now.key() == earlier.key()


def test_a_plan_whose_broadcast_no_longer_fits_is_infeasible():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], CATALOG)
    plan = optimizer.optimize()
    assert plan.key().startswith("broadcast_hash_join(") and plan.key().endswith(",scan(region))")  # builds region
    optimizer.reoptimize(reopt.DeltaStats.table("region", rows=1e9))
    assert optimizer.costed(plan) is None


def test_a_plan_of_another_query_is_refused():
    plan = reopt.Optimizer.from_sql(TPCH["Q3"], CATALOG).optimize()
    with pytest.raises(reopt.OptimizerError, match="this optimizer's query"):
        reopt.Optimizer.from_sql(TPCH["Q5"], CATALOG).costed(plan)
