"""Re-estimating only what a change touches: an estimator that reuses a previous one for the
relations a change did not touch estimates exactly as one built from scratch, and the expressions a
change touches include every one whose estimate it changes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reopt
from reopt.optimizer.estimate import Estimator
from reopt.optimizer.fact_deltas import resolve
from reopt.optimizer.workloads import TPCH

from .conftest import examples

CATALOG = reopt.Catalog.tpch(1)
QUERY = reopt.Optimizer.from_sql(TPCH["Q5"], CATALOG).query
TABLES = sorted({table for _, table in QUERY.relations})
PREDICATES = sorted([f.text for f in QUERY.filters] + [p.text for p in QUERY.joins])
factor = st.sampled_from([1 / 8, 1 / 2, 2.0, 8.0])


CONNECTED = [sorted(QUERY.names(m)) for m in QUERY.connected_subsets() if m.bit_count() > 1]


@st.composite
def deltas(draw):
    kind = draw(st.sampled_from(["table", "selectivity", "cardinality"]))
    if kind == "table":
        table = draw(st.sampled_from(TABLES))
        return reopt.DeltaStats.table(table, rows=CATALOG.table(table).rows * draw(factor))
    if kind == "cardinality":
        return reopt.DeltaStats.cardinality(draw(st.sampled_from(CONNECTED)), draw(st.floats(1.0, 1e9)))
    return reopt.DeltaStats.selectivity(draw(st.sampled_from(PREDICATES)), draw(st.floats(1e-6, 1.0)))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(deltas(), min_size=1, max_size=4))
def test_reusing_untouched_relations_estimates_as_from_scratch(changes):
    catalog, estimator = CATALOG, Estimator(QUERY, CATALOG)
    for delta in changes:
        resolved = resolve(delta, QUERY, catalog)
        catalog = resolved.catalog
        estimator = Estimator(QUERY, catalog, estimator, resolved.leaves)
        fresh = Estimator(QUERY, catalog)
        assert {m: estimator.stats(m) for m in QUERY.connected_subsets()} == {
            m: fresh.stats(m) for m in QUERY.connected_subsets()}


def test_an_estimator_of_another_query_cannot_be_reused():
    other = reopt.Optimizer.from_sql(TPCH["Q3"], CATALOG).query
    with pytest.raises(ValueError, match="same query"):
        Estimator(QUERY, CATALOG, Estimator(other, CATALOG), 0)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(deltas(), min_size=1, max_size=4))
def test_every_expression_whose_estimate_changes_is_among_those_a_change_touches(changes):
    catalog = CATALOG
    for delta in changes:
        resolved = resolve(delta, QUERY, catalog)
        touched = set(resolved.expressions(QUERY.connected_subsets()))
        before, catalog = Estimator(QUERY, catalog), resolved.catalog
        after = Estimator(QUERY, catalog)
        assert {m for m in QUERY.connected_subsets() if before.stats(m) != after.stats(m)} <= touched


def test_a_join_selectivity_touches_only_the_expressions_holding_both_ends():
    predicate = next(p for p in QUERY.joins)
    both = QUERY.bit(predicate.left.alias) | QUERY.bit(predicate.right.alias)
    touched = resolve(reopt.DeltaStats.selectivity(predicate.text, 0.5), QUERY, CATALOG).expressions(
        QUERY.connected_subsets())
    assert touched == [m for m in QUERY.connected_subsets() if m & both == both]


def test_a_join_selectivity_or_an_observed_cardinality_touches_no_leaf():
    predicate = next(p for p in QUERY.joins)
    assert resolve(reopt.DeltaStats.selectivity(predicate.text, 0.5), QUERY, CATALOG).leaves == 0
    assert resolve(reopt.DeltaStats.cardinality(CONNECTED[0], 1e6), QUERY, CATALOG).leaves == 0


def test_a_filter_selectivity_touches_its_relation_only():
    local = QUERY.filters[0]
    assert resolve(reopt.DeltaStats.selectivity(local.text, 0.5), QUERY, CATALOG).leaves == QUERY.bit(local.alias)


def test_a_table_change_touches_every_alias_of_the_table_and_no_other_relation():
    sql = ("SELECT * FROM nation n1, nation n2, region r "
           "WHERE n1.n_regionkey = r.r_regionkey AND n2.n_regionkey = r.r_regionkey")
    query = reopt.Optimizer.from_sql(sql, CATALOG).query
    touched = resolve(reopt.DeltaStats.table("nation", rows=10.0), query, CATALOG).leaves
    assert touched == query.mask(["n1", "n2"])
