"""The built-in functions the optimizer's rules call: the split of the plan space and the costs."""


import pytest

import reopt
from reopt.optimizer.cost import CostModel, CostWeights
from reopt.optimizer.plan_space import PlanSpace


def chain3():
    catalog = reopt.Catalog.from_dict({"tables": {
        "a": {"rows": 100, "columns": {"x": {"ndv": 10}}},
        "b": {"rows": 100, "columns": {"x": {"ndv": 10}, "y": {"ndv": 10}}},
        "c": {"rows": 100, "columns": {"y": {"ndv": 10}}},
    }})
    query = reopt.Query.builder().table("a").table("b").table("c").join("a.x", "b.x").join("b.y", "c.y").build()
    return query, catalog


def test_a_leaf_with_no_requirement_is_scanned():
    query, _ = chain3()
    assert PlanSpace(query).split(query.bit("a"), "any") == [("scan", "scan", 0, "", 0, "")]


def test_requirements_on_a_leaf_are_met_by_enforcers():
    query, _ = chain3()
    space, a = PlanSpace(query), query.bit("a")
    assert space.split(a, "hash[a.x]") == [("unary", "exchange", a, "any", 0, "")]
    assert space.split(a, "sorted[a.x]") == [("unary", "sort", a, "hash[a.x]", 0, "")]


def test_no_split_makes_a_cross_product():
    query, _ = chain3()
    halves = {(left, right) for left, right, _ in PlanSpace(query).halves(query.full)}
    a, b, c = query.bit("a"), query.bit("b"), query.bit("c")
    assert halves == {(a, b | c), (b | c, a), (c, a | b), (a | b, c)}


def test_hash_joins_come_in_both_orders_and_sort_merge_in_one():
    query, _ = chain3()
    space = PlanSpace(query)
    a, b = query.bit("a"), query.bit("b")
    ab = space.split(a | b, "any")
    assert ("join", "broadcast_hash_join", a, "any", b, "any") in ab
    assert ("join", "broadcast_hash_join", b, "any", a, "any") in ab
    assert ("join", "shuffled_hash_join", a, "hash[a.x]", b, "hash[a.x]") in ab
    assert ("join", "shuffled_hash_join", b, "hash[a.x]", a, "hash[a.x]") in ab
    assert [alt for alt in ab if alt[1] == "sort_merge_join"] == [
        ("join", "sort_merge_join", a, "sorted[a.x]", b, "sorted[a.x]")]


def test_a_split_is_the_same_with_or_without_the_memo_and_on_every_call():
    # the engine re-derives a retracted split by calling again, so the rows must be identical
    query, _ = chain3()
    memoized, unmemoized = PlanSpace(query), PlanSpace(query, memoize=False)
    groups = [(query.full, "any"), (query.bit("a") | query.bit("b"), "hash[a.x]"), (query.bit("c"), "sorted[c.y]")]
    for group in groups:
        assert unmemoized.split(*group) == unmemoized.split(*group) == memoized.split(*group)


def test_a_broadcast_join_passes_the_required_property_to_its_streamed_side():
    query, _ = chain3()
    space = PlanSpace(query)
    a, b = query.bit("a"), query.bit("b")
    assert ("join", "broadcast_hash_join", b, "hash[b.y]", a, "any") in space.split(a | b, "hash[b.y]")


def test_a_broadcast_join_asks_no_partitioning_of_a_side_without_the_key_column():
    # a has no column of the class b.y = c.y: it cannot be partitioned on it, so a broadcast join
    # streaming a cannot deliver a | b partitioned on it
    query, _ = chain3()
    space = PlanSpace(query)
    a, b = query.bit("a"), query.bit("b")
    streamed = {alt[2] for alt in space.split(a | b, "hash[b.y]") if alt[1] == "broadcast_hash_join"}
    assert streamed == {b}


def test_an_expression_without_a_column_of_the_key_class_has_no_plan_on_it():
    query, _ = chain3()
    space = PlanSpace(query)
    a = query.bit("a")
    assert space.split(a, "hash[b.y]") == []
    assert space.split(a, "sorted[b.y]") == []


def test_a_sort_merge_join_delivers_its_key_order_to_its_parent():
    query, _ = chain3()
    space = PlanSpace(query)
    a, b = query.bit("a"), query.bit("b")
    assert ("join", "sort_merge_join", a, "sorted[a.x]", b, "sorted[a.x]") in space.split(a | b, "sorted[a.x]")
    assert all(alt[1] != "sort_merge_join" for alt in space.split(a | b, "sorted[b.y]"))


def test_broadcast_is_impossible_above_the_threshold():
    costs = CostModel(CostWeights(broadcast_threshold=1000))
    assert costs.join("broadcast_hash_join", 10, 8, 101, 10, 10, 1.0, right_relations=1) == []
    assert len(costs.join("broadcast_hash_join", 10, 8, 100, 10, 10, 1.0, right_relations=1)) == 1


def test_a_shuffled_hash_join_is_impossible_when_one_task_s_share_of_its_build_side_exceeds_its_memory():
    costs = CostModel(CostWeights(shuffle_partitions=4, hash_build_memory=1000))
    assert costs.join("shuffled_hash_join", 10, 8, 401, 10, 10, 1.0, right_relations=1) == []
    assert len(costs.join("shuffled_hash_join", 10, 8, 400, 10, 10, 1.0, right_relations=1)) == 1


def test_costs_scale_with_their_cost_factor():
    costs = CostModel()
    base = costs.join("shuffled_hash_join", 1000, 8, 50, 8, 10, 1.0, right_relations=1)[0][0]
    assert costs.join("shuffled_hash_join", 1000, 8, 50, 8, 10, 4.0, right_relations=1)[0][0] == pytest.approx(4 * base)


def test_sort_costs_n_log_n_and_exchange_costs_rows_and_bytes():
    w = CostWeights()
    costs = CostModel(w)
    assert costs.unary("sort", 1024, 10, 1.0)[0][0] == pytest.approx(1024 * 10 * w.sort_row)
    assert costs.unary("exchange", 1000, 50, 1.0)[0][0] == pytest.approx(1000 * w.shuffle_row + 50_000 * w.shuffle_byte)
    assert costs.scan(10, 8, 4096, 1.0)[0][0] == pytest.approx(4096 * w.scan_byte + 10 * w.row_out)


def test_a_broadcast_row_costs_more_than_a_row_built_locally():
    costs = CostModel()
    broadcast = costs.join("broadcast_hash_join", 1e6, 8, 1e3, 8, 1e6, 1.0, right_relations=1)[0][0]
    shuffled = costs.join("shuffled_hash_join", 1e6, 8, 1e3, 8, 1e6, 1.0, right_relations=1)[0][0]
    assert broadcast - shuffled == pytest.approx(1e3 * (costs.w.broadcast_row + 8 * costs.w.broadcast_byte))


def test_building_the_smaller_side_is_cheaper():
    costs = CostModel()
    small_built = costs.join("shuffled_hash_join", 1e6, 8, 1e3, 8, 1e6, 1.0, right_relations=1)[0][0]
    large_built = costs.join("shuffled_hash_join", 1e3, 8, 1e6, 8, 1e6, 1.0, right_relations=1)[0][0]
    assert small_built < large_built


def test_estimates_are_never_below_one_row():
    query, catalog = chain3()
    from reopt.optimizer.estimate import Estimator

    catalog.table("a").rows = 0.0
    estimator = Estimator(query, catalog)
    assert estimator.rows(query.bit("a")) == 1.0
    assert estimator.rows(query.full) == 1.0


def test_widths_count_only_the_columns_a_relation_contributes():
    from reopt.optimizer.estimate import Estimator
    from reopt.optimizer.workloads import TPCH

    catalog = reopt.Catalog.tpch(1)
    query = reopt.Optimizer.from_sql(TPCH["Q3"], catalog).query
    customer = catalog.table("customer")
    stats = Estimator(query, catalog).stats(query.mask(["customer"]))
    assert query.needed_columns("customer") == {"c_custkey"}
    assert stats.width == customer.column_width("c_custkey")
    assert stats.scanned == customer.rows * (customer.column_width("c_custkey") + customer.column_width("c_mktsegment"))


def test_broadcasting_a_join_result_waits_for_its_job_and_a_scan_does_not():
    costs = CostModel()
    scanned = costs.join("broadcast_hash_join", 1e6, 8, 1e3, 8, 1e6, 1.0, right_relations=1)[0][0]
    joined = costs.join("broadcast_hash_join", 1e6, 8, 1e3, 8, 1e6, 1.0, right_relations=2)[0][0]
    assert joined - scanned == pytest.approx(costs.w.broadcast_job)
    shuffled = [costs.join("shuffled_hash_join", 1e6, 8, 1e3, 8, 1e6, 1.0, right_relations=n)[0][0] for n in (1, 2)]
    assert shuffled[0] == shuffled[1]
