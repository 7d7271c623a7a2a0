"""Join sizes measured on a sample of a batch: with the whole batch in the sample they are Spark's
own counts; with part of it, shares of the rows read; what cannot be sampled is left out."""

import pytest

import reopt
from reopt.optimizer.errors import QueryError
from reopt.optimizer.workloads import TPCH
from reopt.spark import catalog_from_spark
from reopt.spark.sampling import JoinSampler


def count_sql(query, names) -> str:
    mask = query.mask(names)
    tables = ", ".join(f"{query.table_of(alias)} {alias}" for alias in names)
    terms = [p.text for p in query.joins_within(mask)] + [f.text for a in names for f in query.filters_on(a)]
    return f"select count(*) from {tables}" + (f" where {' and '.join(terms)}" if terms else "")


@pytest.fixture(scope="module")
def q5(spark, tables):
    return reopt.Optimizer.from_sql(TPCH["Q5"], catalog_from_spark(spark, tables, sql=TPCH["Q5"])).query


@pytest.fixture(scope="module")
def static(tables):
    return {name: frame for name, frame in tables.items() if name != "lineitem"}


def test_a_sample_of_the_whole_batch_gives_sparks_exact_join_sizes(spark, tables, q5, static):
    lineitem = tables["lineitem"]
    rows = lineitem.count()
    sampler = JoinSampler(q5, static, "lineitem", rows=rows + 1, work_limit=10_000, min_rows=1)
    sizes = sampler.measure(lineitem)
    assert sizes.sampled == rows
    assert len(sampler.expressions) > 10
    for mask in sampler.expressions:
        names = frozenset(q5.names(mask))
        exact = spark.sql(count_sql(q5, sorted(names))).first()[0]
        assert sizes.shares.get(names, 0) * rows == pytest.approx(exact), sorted(names)


def test_a_sample_reads_only_the_first_rows(tables, q5, static):
    sizes = JoinSampler(q5, static, "lineitem", rows=500, min_rows=1).measure(tables["lineitem"])
    assert sizes.sampled == 500
    assert sizes.shares[frozenset({"lineitem"})] == 1.0  # lineitem has no filter of its own in Q5


def test_joins_too_few_sampled_rows_survive_are_left_out(tables, q5, static):
    sampler = JoinSampler(q5, static, "lineitem", rows=1000, min_rows=1)
    every = sampler.measure(tables["lineitem"]).shares
    sampler.min_rows = 30
    kept = sampler.measure(tables["lineitem"]).shares
    assert kept == {names: share for names, share in every.items() if share * 1000 >= 30}
    assert len(kept) < len(every)  # Q5's region and year together keep a few rows of a thousand


def test_every_sampled_expression_holds_the_stream(tables, q5, static):
    sampler = JoinSampler(q5, static, "lineitem", rows=100)
    for mask in sampler.expressions:
        assert "lineitem" in q5.names(mask) and q5.is_connected(mask)
    assert set(sampler.expressions) == {m for m in q5.connected_subsets() if "lineitem" in q5.names(m)}


def test_joins_that_outgrow_the_work_limit_are_left_out(tables, q5, static):
    sizes = JoinSampler(q5, static, "lineitem", rows=200, work_limit=1).measure(tables["lineitem"])
    through_the_nation = frozenset({"lineitem", "supplier", "customer"})  # customer x supplier on the nation key: thousands per row
    assert through_the_nation not in sizes.shares
    assert frozenset({"lineitem", "orders"}) in sizes.shares


def test_relations_that_change_with_the_batch_are_not_sampled(tables, q5, static):
    without_orders = {name: frame for name, frame in static.items() if name != "orders"}
    sampler = JoinSampler(q5, without_orders, "lineitem", rows=100)
    assert all("orders" not in q5.names(mask) for mask in sampler.expressions)


def test_delta_scales_shares_to_the_batch(tables, q5, static):
    sizes = JoinSampler(q5, static, "lineitem", rows=300).measure(tables["lineitem"])
    delta = sizes.delta(3_000_000)
    rows = {frozenset(change["cardinality"]): change["rows"] for change in delta.to_dict()}
    assert rows[frozenset({"lineitem"})] == 3_000_000
    assert rows.keys() == sizes.shares.keys()


@pytest.mark.parametrize("rows", [0, -5, 2.5, True])
def test_a_sample_needs_a_positive_row_count(tables, q5, static, rows):
    with pytest.raises(QueryError, match="at least one row"):
        JoinSampler(q5, static, "lineitem", rows=rows)


@pytest.mark.parametrize("min_rows", [0, 1.5, None])
def test_min_rows_is_a_positive_count(tables, q5, static, min_rows):
    with pytest.raises(QueryError, match="min_rows is a number of joined rows"):
        JoinSampler(q5, static, "lineitem", min_rows=min_rows)


def test_the_stream_must_be_a_table_of_the_query(tables, q5, static):
    with pytest.raises(QueryError, match="'events' is not a table of the query"):
        JoinSampler(q5, static, "events")
