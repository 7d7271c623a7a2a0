"""Queries and statistics going in: SQL, the builder, catalogs, and every bad-input error."""

import gc
import json
import math
import weakref

import pytest

import reopt
from reopt.optimizer.workloads import TPCH

pytestmark = pytest.mark.usefixtures("backend")

CATALOG = reopt.Catalog.tpch(1)


def test_tpch_catalog_follows_the_specification_sizes():
    catalog = reopt.Catalog.tpch(10)
    assert catalog.table("lineitem").rows == 60_000_000
    assert catalog.table("orders").rows == 15_000_000
    assert catalog.table("nation").rows == 25
    assert catalog.column("customer", "c_custkey").ndv == 1_500_000


def test_q5_is_parsed_into_its_join_graph_and_filters():
    query = reopt.Optimizer.from_sql(TPCH["Q5"], CATALOG).query
    assert query.aliases == ["customer", "orders", "lineitem", "supplier", "nation", "region"]
    assert len(query.joins) == 6
    assert sorted(f.alias for f in query.filters) == ["orders", "orders", "region"]
    assert "customer.c_custkey = orders.o_custkey" in query.predicate_texts()


def test_q8join_from_the_paper_has_eight_relations():
    query = reopt.Optimizer.from_sql(TPCH["Q8Join"], CATALOG).query
    assert len(query.aliases) == 8 and len(query.joins) == 7


def test_explicit_join_syntax_and_aliases_are_understood():
    sql = "select * from customer c join orders o on c.c_custkey = o.o_custkey where o.o_totalprice > 1000"
    query = reopt.Optimizer.from_sql(sql, CATALOG).query
    assert query.relations == [("c", "customer"), ("o", "orders")]
    assert [j.text for j in query.joins] == ["c.c_custkey = o.o_custkey"]


def test_builder_makes_the_same_query_as_sql():
    built = (reopt.Query.builder().table("customer").table("orders")
             .join("customer.c_custkey", "orders.o_custkey")
             .filter("orders", "o_orderdate < DATE '1995-03-15'").build())
    plan = reopt.Optimizer(built, CATALOG).optimize()
    sql = "select * from customer, orders where c_custkey = o_custkey and o_orderdate < date '1995-03-15'"
    assert plan.cost == reopt.Optimizer.from_sql(sql, CATALOG).optimize().cost


def test_date_range_filter_uses_the_column_range():
    from reopt.optimizer.estimate import Estimator

    sql = ("select * from orders, customer where c_custkey = o_custkey and o_orderdate >= date '1994-01-01' "
           "and o_orderdate < date '1994-01-01' + interval '1' year")
    query = reopt.Optimizer.from_sql(sql, CATALOG).query
    rows = Estimator(query, CATALOG).rows(query.mask(["orders"]))
    assert rows == pytest.approx(1_500_000 * 365 / 2405, rel=0.01)


@pytest.mark.parametrize("sql, construct", [
    ("select * from customer where c_custkey in (select o_custkey from orders)", "subquery"),
    ("select * from customer left join orders on c_custkey = o_custkey", "LEFT JOIN"),
    ("select * from customer, orders where c_custkey < o_custkey", "equi-joins"),
    ("select * from customer union select * from customer", "SELECT"),
    ("select * from customer, orders", "disconnected"),
    ("select * from customer where c_nope = 1", "c_nope"),
    ("select * from customer c, orders o where c.c_custkey = o.o_custkey and x.y = 1", "unknown relation 'x'"),
    ("select * from (select * from customer) t", "subquery"),
    ("select from where", "cannot parse"),
    ("select * from customer where c_name = 'unclosed", "cannot read the SQL"),
    ("select * from customer, orders where c_custkey = o_custkey and o_totalprice > > 5", "bitwise operator"),
    ("select nope from customer, orders where c_custkey = o_custkey", "no relation of the query has a column 'nope'"),
    ("select * from customer, orders where c_custkey = o_custkey order by nope", "'nope'"),
    ("select * from customer where " + "(" * 3000 + "c_custkey > 1" + ")" * 3000, "nested too deeply"),
])
def test_unsupported_sql_names_the_construct(sql, construct):
    with pytest.raises(reopt.QueryError, match=construct):
        reopt.Optimizer.from_sql(sql, CATALOG)


@pytest.mark.parametrize("sql, where, what", [
    ("SELEC * FROM t", "line 1, column 9", "something is missing before or at 'FROM'"),
    ("select *\nfrm customer", "line 2, column 5", "unexpected 'customer'"),
    ("select * from customer where c_custkey = (1", "line 1, column 43", "expected )"),
])
def test_a_syntax_error_names_its_line_and_column_in_reopts_words(sql, where, what):
    with pytest.raises(reopt.UnsupportedSQLError) as raised:
        reopt.Optimizer.from_sql(sql, CATALOG)
    message = str(raised.value)
    assert where in message and what in message
    assert "sqlglot" not in message and "<class" not in message and "Token" not in message


def test_an_unknown_table_is_both_a_query_and_a_statistics_error():
    with pytest.raises(reopt.QueryError, match="unknown table 'nope'") as raised:
        reopt.Optimizer.from_sql("select * from nope", CATALOG)
    assert isinstance(raised.value, reopt.StatisticsError)


def test_catalog_from_dict_accepts_the_minimal_format():
    catalog = reopt.Catalog.from_dict({"tables": {"a": {"rows": 10, "columns": {"x": {"ndv": 5}}},
                                                  "b": {"rows": 20, "columns": {"x": {"ndv": 20}}}}})
    query = reopt.Query.builder().table("a").table("b").join("a.x", "b.x").build()
    assert reopt.Optimizer(query, catalog).optimize().root.rows == 10


def test_catalog_round_trips_through_json(tmp_path):
    catalog = reopt.Catalog.tpch(0.1)
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(catalog.to_dict()))
    assert reopt.Catalog.load(path) == catalog


@pytest.mark.parametrize("data, message", [
    ({"tables": {"a": {"rows": -1}}}, "rows of table 'a'"),
    ({"tables": {"a": {"rows": math.nan}}}, "rows of table 'a'"),
    ({"tables": {"a": {"rows": math.inf}}}, "rows of table 'a'"),
    ({"tables": {"a": {"rows": "ten"}}}, "must be a number"),
    ({"tables": {"a": {"rows": 1, "columns": {"x": {"ndv": 0}}}}}, "ndv of column 'a.x'"),
    ({"tables": {"a": {"rows": 1, "columns": {"x": {}}}}}, "needs \"ndv\""),
    ({"tables": {"a": {}}}, "needs \"rows\""),
    ({"tables": {"a": {"rows": 1}}, "selectivities": {"p": 1.5}}, r"\(0, 1\]"),
    ({"nope": 1}, "\"tables\""),
])
def test_bad_statistics_raise_statistics_error(data, message):
    with pytest.raises(reopt.StatisticsError, match=message):
        reopt.Catalog.from_dict(data)


def test_invalid_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "stats.json"
    path.write_text('{"tables": {\n  "a": }')
    with pytest.raises(reopt.StatisticsError, match=r"stats.json:2:8"):
        reopt.Catalog.load(path)


@pytest.fixture
def q3():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q3"], CATALOG)
    optimizer.optimize()
    return optimizer


@pytest.mark.parametrize("delta, message", [
    (lambda: reopt.DeltaStats.table("nope", rows=1), "unknown table 'nope'"),
    (lambda: reopt.DeltaStats.table("orders", rows=-5), "rows of table 'orders'"),
    (lambda: reopt.DeltaStats.table("orders", rows=math.nan), "rows of table 'orders'"),
    (lambda: reopt.DeltaStats.selectivity("c_custkey = o_custkey", 0.0), r"\(0, 1\]"),
    (lambda: reopt.DeltaStats.selectivity("c_custkey = o_custkey", 2), r"\(0, 1\]"),
    (lambda: reopt.DeltaStats.selectivity("c_name = 'x'", 0.5), "not a predicate of the query"),
    (lambda: reopt.DeltaStats.cardinality(["customer", "part"], 10), "part is not a relation"),
    (lambda: reopt.DeltaStats.cardinality(["customer", "lineitem"], 10), "not a connected expression"),
    (lambda: reopt.DeltaStats.cardinality(["customer"], math.inf), "observed rows"),
    (lambda: reopt.DeltaStats.cost_factor("nested_loop", 2), "unknown operator"),
    (lambda: reopt.DeltaStats.cost_factor("scan", 0), "cost factor"),
    (lambda: reopt.DeltaStats.table("orders", rows=10) + reopt.DeltaStats.table("orders", rows=-1), "rows"),
    (lambda: reopt.DeltaStats.table("lineitem", rows=1e300), "at most 1e\\+18"),
    (lambda: reopt.DeltaStats.table("lineitem", rows=10**400), r"\(401 characters\)"),
    (lambda: reopt.DeltaStats.table("lineitem", width=1e308), "width of table 'lineitem'"),
    (lambda: reopt.DeltaStats.selectivity("c_custkey = o_custkey", 10**400), r"\(0, 1\]"),
])
def test_bad_delta_raises_and_leaves_the_optimizer_unchanged(q3, delta, message):
    before_catalog, before_plan = q3.catalog, q3.optimize()
    with pytest.raises(reopt.StatisticsError, match=message):
        q3.reoptimize(delta())
    assert q3.catalog == before_catalog
    after = q3.optimize()
    assert (after.cost, after.key()) == (before_plan.cost, before_plan.key())


def test_applying_a_delta_leaves_the_catalog_it_applies_to_as_it_was(q3):
    # the new catalog shares the tables no change touches; a changed table must be a new object
    catalog = reopt.Catalog.tpch(1)
    before = catalog.copy()
    delta = (reopt.DeltaStats.table("orders", rows=10, width=7) + reopt.DeltaStats.cost_factor("scan", 2)
             + reopt.DeltaStats.selectivity("c_custkey = o_custkey", 0.5))
    after = delta.apply(catalog, q3.query)
    assert catalog == before
    assert (after.table("orders").rows, after.table("orders").width) == (10, 7)
    assert after.cost_factors["scan"] == 2 and "scan" not in catalog.cost_factors
    assert after.selectivities == {"customer.c_custkey = orders.o_custkey": 0.5} and not catalog.selectivities


def test_statistics_at_their_largest_keep_every_cost_finite_and_exact(q3):
    delta = (reopt.DeltaStats.table("lineitem", rows=1e18, width=1e18)
             + reopt.DeltaStats.table("orders", rows=1e18, width=1e18) + reopt.DeltaStats.cost_factor("scan", 1e18))
    plan = q3.reoptimize(delta)
    full = reopt.Optimizer(q3.query, q3.catalog).optimize()
    assert math.isfinite(plan.cost)
    assert plan == full


def test_selectivity_delta_accepts_unqualified_or_reversed_predicates(q3):
    q3.reoptimize(reopt.DeltaStats.selectivity("o_custkey = c_custkey", 0.5))
    assert q3.catalog.selectivities["customer.c_custkey = orders.o_custkey"] == 0.5


def test_a_predicate_resolves_alike_however_often_and_however_spelled(q3):
    # more spellings than a query remembers: those past the limit are parsed each time, alike
    spellings = ["o_custkey" + " " * n + "= c_custkey" for n in range(1, 1100)]
    for _ in range(2):
        assert {q3.query.resolve_predicate(s) for s in spellings} == {"customer.c_custkey = orders.o_custkey"}


def test_explain_shows_operator_strategy_property_rows_and_cost(q3):
    text = q3.optimize().explain()
    assert "scan lineitem" in text
    assert "rows=" in text and "cost=" in text and "[any]" in text
    assert "build:" in text


def test_a_reoptimized_plan_equals_the_full_optimization_it_matches(q3):
    plan = q3.reoptimize(reopt.DeltaStats.table("orders", rows=10))
    assert plan == reopt.Optimizer(q3.query, q3.catalog).optimize()
    assert plan != reopt.Optimizer(q3.query, CATALOG).optimize()


def test_explain_names_both_columns_of_each_join_key_and_the_cost_unit(q3):
    text = q3.optimize().explain()
    assert "lineitem.l_orderkey = orders.o_orderkey" in text
    assert "core-s" in text


def test_a_plan_as_a_dict_has_every_operator_with_its_join_predicates(q3):
    plan = q3.optimize()
    data = plan.to_dict()

    def flatten(node):
        return [child_op for child in node["children"] for child_op in flatten(child)] + [node]

    nodes = flatten(data["root"])
    assert [n["operator"] for n in nodes] == [n.op for n in plan.nodes()]  # children before parents
    assert all(n["predicates"] and all(" = " in p for p in n["predicates"])
               for n in nodes if n["operator"].endswith("join"))
    assert json.loads(json.dumps(data)) == data


def test_a_thousand_conjuncts_are_one_filter_each():
    sql = "select * from customer where " + " and ".join(f"c_custkey > {i}" for i in range(1000))
    assert len(reopt.Optimizer.from_sql(sql, CATALOG).query.filters) == 1000


def test_a_select_list_alias_may_be_ordered_by():
    sql = "select c_name as n from customer, orders where c_custkey = o_custkey order by n"
    assert reopt.Optimizer.from_sql(sql, CATALOG).optimize().cost > 0


def test_spark_sql_with_backticks_parses_in_the_spark_dialect():
    sql = "select * from `customer` c, orders o where c.`c_custkey` = o.o_custkey"
    plain = "select * from customer c, orders o where c.c_custkey = o.o_custkey"
    assert reopt.Optimizer.from_sql(sql, CATALOG, dialect="spark").optimize() == \
        reopt.Optimizer.from_sql(plain, CATALOG).optimize()


def test_a_parsed_sqlglot_statement_is_accepted():
    import sqlglot

    statement = sqlglot.parse_one(TPCH["Q3"])
    assert reopt.Optimizer.from_sql(statement, CATALOG).optimize() == reopt.Optimizer.from_sql(TPCH["Q3"], CATALOG).optimize()


def test_a_join_hint_is_reported_not_silently_dropped():
    sql = "select /*+ BROADCAST(o) */ * from customer c, orders o where c.c_custkey = o.o_custkey"
    with pytest.warns(UserWarning, match="ignores the hint"):
        reopt.Optimizer.from_sql(sql, CATALOG)


def test_an_interval_out_of_range_falls_back_to_the_default_estimate():
    sql = ("select * from customer, orders where c_custkey = o_custkey "
           "and o_orderdate < date '1994-01-01' + interval '99999999999' year")
    assert math.isfinite(reopt.Optimizer.from_sql(sql, CATALOG).optimize().cost)


def test_an_error_about_a_megabyte_of_sql_stays_short():
    with pytest.raises(reopt.QueryError) as raised:
        reopt.Optimizer.from_sql("select * from customer where " + "x" * 1_000_000 + " = 1", CATALOG)
    assert len(str(raised.value)) < 1000
    assert "characters cut" in str(raised.value)


def test_an_optimizer_is_freed_as_soon_as_it_is_dropped():
    # A Spark driver builds one optimizer per query: each must go with its last reference, not
    # wait for the cycle collector with the whole plan space it holds.
    gc.disable()
    try:
        optimizer = reopt.Optimizer.from_sql(TPCH["Q3"], reopt.Catalog.tpch(1))
        optimizer.optimize()
        gone = weakref.ref(optimizer)
        del optimizer
        assert gone() is None
    finally:
        gc.enable()
