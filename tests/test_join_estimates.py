"""Join estimates over key equivalence classes: k columns made equal by any number of predicates
count k-1 selectivities, so redundant, transitive and repeated predicates change no estimate."""

import pytest

import reopt
from reopt.optimizer.estimate import Estimator

CATALOG = reopt.Catalog.from_dict({"tables": {
    "t": {"rows": 1000, "columns": {"id": {"ndv": 1000}}},
    "a": {"rows": 5000, "columns": {"tid": {"ndv": 500}}},
    "b": {"rows": 8000, "columns": {"tid": {"ndv": 800}}},
}})


def star(*extra):
    builder = reopt.Query.builder().table("t").table("a").table("b").join("t.id", "a.tid").join("t.id", "b.tid")
    for left, right in extra:
        builder.join(left, right)
    return builder.build()


def all_rows(query):
    estimator = Estimator(query, CATALOG)
    return {tuple(query.names(m)): estimator.rows(m) for m in query.connected_subsets()}


def test_a_transitive_predicate_changes_no_estimate_of_the_expressions_it_does_not_connect():
    plain, closed = all_rows(star()), all_rows(star(("a.tid", "b.tid")))
    assert {names: rows for names, rows in closed.items() if names in plain} == plain


def test_three_equal_columns_count_all_ndvs_but_the_smallest():
    query = star(("a.tid", "b.tid"))
    rows = Estimator(query, CATALOG).rows(query.full)
    assert rows == pytest.approx(1000 * 5000 * 8000 / (1000 * 800))


def test_the_new_pair_a_transitive_predicate_connects_gets_the_class_estimate():
    query = star(("a.tid", "b.tid"))
    rows = Estimator(query, CATALOG).rows(query.mask(["a", "b"]))
    assert rows == pytest.approx(5000 * 8000 / 800)


def test_a_predicate_written_twice_counts_once():
    once = reopt.Query.builder().table("t").table("a").join("t.id", "a.tid").build()
    twice = reopt.Query.builder().table("t").table("a").join("t.id", "a.tid").join("a.tid", "t.id").build()
    assert len(twice.joins) == 1
    assert Estimator(twice, CATALOG).rows(twice.full) == Estimator(once, CATALOG).rows(once.full)


def test_the_order_predicates_are_written_in_does_not_change_an_estimate():
    forward = star(("a.tid", "b.tid"))
    backward = (reopt.Query.builder().table("t").table("a").table("b")
                .join("a.tid", "b.tid").join("t.id", "b.tid").join("t.id", "a.tid").build())
    assert Estimator(forward, CATALOG).rows(forward.full) == Estimator(backward, CATALOG).rows(backward.full)


def test_a_learnt_selectivity_of_a_redundant_predicate_is_used():
    query = star(("a.tid", "b.tid"))
    catalog = reopt.DeltaStats.selectivity("a.tid = b.tid", 1e-6).apply(CATALOG, query)
    rows = Estimator(query, catalog).rows(query.full)
    # the learnt edge joins a and b; t joins them with the less selective of its two estimates
    assert rows == pytest.approx(1000 * 5000 * 8000 * 1e-6 / 1000)
