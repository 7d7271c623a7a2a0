"""Optimizer.last_change: why a re-optimization chose its plan, read from the optimizer's own state."""

import json
import math

import pytest

import reopt
from reopt.optimizer.workloads import TPCH

pytestmark = pytest.mark.usefixtures("backend")

BLOW_UP = reopt.DeltaStats.cardinality(["customer", "orders"], 5e7)


@pytest.fixture
def optimizer():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1))
    optimizer.optimize()
    return optimizer


def test_no_change_is_recorded_before_the_first_reoptimization(optimizer):
    assert optimizer.last_change is None


def test_a_change_names_the_observation_that_moved_the_estimates(optimizer):
    optimizer.reoptimize(BLOW_UP)
    change = optimizer.last_change
    assert change.delta == "{customer, orders} rows=5e+07"
    observed = [c for c in change.estimates if set(c.relations) == {"customer", "orders"}]
    assert [(c.old_rows < 5e7, c.new_rows) for c in observed] == [(True, 5e7)]
    assert all({"customer", "orders"} <= set(c.relations) for c in change.estimates)


def test_the_estimates_that_moved_most_come_first(optimizer):
    optimizer.reoptimize(BLOW_UP + reopt.DeltaStats.table("supplier", rows=20_000))
    moves = [abs(math.log(c.ratio)) for c in optimizer.last_change.estimates]
    assert len(moves) > 1 and moves == sorted(moves, reverse=True)


def test_the_previous_plan_is_recosted_under_the_new_statistics(optimizer):
    before = optimizer.optimize()
    after = optimizer.reoptimize(BLOW_UP)
    change = optimizer.last_change
    assert change.changed and change.previous == before and change.plan == after
    assert change.previous_now.cost == pytest.approx(optimizer.costed(before).cost)
    assert change.predicted_saving == pytest.approx(change.previous_now.cost - after.cost)
    assert change.predicted_saving > 0


def test_the_changed_entries_are_those_of_the_new_plan_it_did_not_share_with_the_old(optimizer):
    before = optimizer.optimize()
    after = optimizer.reoptimize(BLOW_UP)
    entries = optimizer.last_change.entries
    assert (tuple(after.query.names(after.root.expr)), after.root.prop) in entries
    kept = {(tuple(before.query.names(n.expr)), n.prop) for n in before.nodes() if n.op == "scan"}
    assert not kept & set(entries), "a scan is the same sub-plan in both plans"


def test_a_cost_factor_change_is_reported_with_its_old_and_new_value(optimizer):
    optimizer.reoptimize(reopt.DeltaStats.cost_factor("broadcast_hash_join", 2.0))
    change = optimizer.last_change
    assert change.cost_factors == (("broadcast_hash_join", 1.0, 2.0),)
    assert change.estimates == ()


def test_a_delta_that_keeps_the_plan_says_so(optimizer):
    plan = optimizer.optimize()
    optimizer.reoptimize(reopt.DeltaStats.table("region", rows=1))
    change = optimizer.last_change
    assert not change.changed and change.plan.key() == plan.key()
    assert change.entries == ()
    assert change.reason().startswith("plan kept")
    assert "the best plan is the same" in change.explain()


def test_the_record_serializes_to_json(optimizer):
    optimizer.reoptimize(BLOW_UP)
    data = json.loads(json.dumps(optimizer.last_change.to_dict()))
    assert data["changed"] is True
    assert data["plan"]["cost"] < data["previous"]["cost_now"]


def test_a_refused_delta_leaves_the_last_change_as_it_was(optimizer):
    optimizer.reoptimize(BLOW_UP)
    recorded = optimizer.last_change
    with pytest.raises(reopt.StatisticsError):
        optimizer.reoptimize(reopt.DeltaStats.table("orders", rows=-5))
    assert optimizer.last_change is recorded
