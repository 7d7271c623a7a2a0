"""Fuzzing every public input: SQL, DeltaStats, catalogs, rule programs and command-line arguments.

Whatever the input, a call either succeeds or raises one of reopt's typed errors (``OptimizerError``,
``DatalogError``, or the CLI's exit code 2 with a one-line message), within a time limit, and a
rejected call changes nothing. ``REOPT_PROFILE=deep`` runs ten times the examples.
"""

import json
import math
import signal
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reopt
from reopt.cli import main
from reopt.datalog import DatalogError, Engine, Program
from reopt.optimizer.workloads import TPCH

CATALOG = reopt.Catalog.tpch(1)
TYPED = (reopt.OptimizerError, DatalogError)
SECONDS = 20  # no single call may take longer (a hang fails the test)


@contextmanager
def time_limit(seconds=SECONDS):
    def expired(*_):
        raise AssertionError(f"the call did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def typed_or_fine(call):
    with time_limit():
        try:
            return call()
        except TYPED as exc:
            assert len(str(exc)) < 2000, "an error message must cut long values"
            return exc


# -- SQL -----------------------------------------------------------------------------------------

TOKENS = ["select", "*", "from", "where", "and", "or", "not", "=", "<", ">", "<=", "(", ")", ",", "'",
          "customer", "orders", "lineitem", "c_custkey", "o_custkey", "o_orderdate", "c_name", "1", "1e400",
          "date", "'1995-01-01'", "interval", "'1'", "year", "+", "-", "join", "on", "c", "o", "as", "group by",
          "order by", "limit", "in", "like", "'%x%'", "between", "is", "null", "`", "/*+", "*/", "\x00", "é"]


@given(st.lists(st.sampled_from(TOKENS), max_size=30))
def test_any_token_soup_is_parsed_or_refused_with_a_query_error(tokens):
    typed_or_fine(lambda: reopt.Optimizer.from_sql(" ".join(tokens), CATALOG).optimize())


@given(st.text(max_size=200))
def test_any_text_is_parsed_or_refused_with_a_query_error(text):
    typed_or_fine(lambda: reopt.Optimizer.from_sql(text, CATALOG))


@given(st.sampled_from(sorted(TPCH)), st.integers(0, 200), st.text(max_size=10))
def test_a_damaged_tpch_query_is_parsed_or_refused(name, position, insert):
    sql = TPCH[name]
    position = min(position, len(sql))
    typed_or_fine(lambda: reopt.Optimizer.from_sql(sql[:position] + insert + sql[position:], CATALOG).optimize())


# -- DeltaStats ----------------------------------------------------------------------------------

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400),
                    st.none(), st.text(max_size=5), st.booleans(), st.just(1e18), st.just(10**19))
NAMES = st.one_of(st.sampled_from(["customer", "orders", "lineitem", "nation", "nope", ""]), st.none(),
                  st.integers(), st.text(max_size=8))
DELTAS = st.one_of(
    st.builds(lambda t, r, w: lambda: reopt.DeltaStats.table(t, rows=r, width=w), NAMES, NUMBERS, NUMBERS),
    st.builds(lambda p, s: lambda: reopt.DeltaStats.selectivity(p, s),
              st.one_of(st.sampled_from(["c_custkey = o_custkey", "o_orderkey = l_orderkey", "c_mktsegment = 'x'"]),
                        NAMES), NUMBERS),
    st.builds(lambda r, n: lambda: reopt.DeltaStats.cardinality(r, n),
              st.one_of(st.lists(NAMES, max_size=3), NAMES), NUMBERS),
    st.builds(lambda o, f: lambda: reopt.DeltaStats.cost_factor(o, f),
              st.one_of(st.sampled_from(["scan", "sort", "broadcast_hash_join"]), NAMES), NUMBERS),
)


@pytest.fixture(scope="module")
def q3():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q3"], CATALOG)
    optimizer.optimize()
    return optimizer


@given(st.lists(DELTAS, min_size=1, max_size=3))
def test_any_delta_is_applied_exactly_or_refused_without_a_trace(q3, makers):
    before_catalog, before_plan = q3.catalog, q3.optimize()

    def apply():
        return q3.reoptimize(reopt.DeltaStats.batch(make() for make in makers))

    result = typed_or_fine(apply)
    if isinstance(result, Exception):
        assert q3.catalog == before_catalog
        assert q3.optimize() == before_plan
    else:
        assert math.isfinite(result.cost)
        assert result == reopt.Optimizer(q3.query, q3.catalog).optimize()


# -- catalogs ------------------------------------------------------------------------------------

JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.floats(), st.integers(-10**30, 10**30), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=4)), max_leaves=12)
COLUMN = st.fixed_dictionaries({"ndv": NUMBERS}, optional={"min": JSON, "max": JSON, "histogram": JSON, "width": NUMBERS})
TABLE = st.fixed_dictionaries({"rows": NUMBERS}, optional={"width": NUMBERS, "bytes": NUMBERS,
                                                           "columns": st.dictionaries(st.sampled_from(["x", "y"]),
                                                                                      st.one_of(COLUMN, JSON))})
CATALOGS = st.one_of(JSON, st.fixed_dictionaries({"tables": st.dictionaries(st.sampled_from(["a", "b"]),
                                                                            st.one_of(TABLE, JSON), max_size=2)},
                                                  optional={"selectivities": JSON, "cost_factors": JSON}))


@given(CATALOGS)
def test_any_catalog_is_loaded_or_refused_with_a_statistics_error(data):
    sql = "select * from a, b where a.x = b.x and a.y > 3 and b.y between 1 and 2"

    def load_and_optimize():
        catalog = reopt.Catalog.from_dict(data)
        return reopt.Optimizer.from_sql(sql, catalog).optimize()

    result = typed_or_fine(load_and_optimize)
    if not isinstance(result, Exception):
        assert math.isfinite(result.cost)


# -- rule programs -------------------------------------------------------------------------------

RULE_TOKENS = ["p(x)", "q(x, y)", "e(x, y)", ":-", ",", ".", "!", "x", "y", "_", "1", "2.5", '"s"', '"\\q"',
               "min<x>", "count<1>", "x = y + 1", "x < y", ".input e(a, b).", ".function F(a) -> (b).",
               ".ordered p.", ".memo m(a | b) from p.", "F(x, y)", "(", ")", "%", "\n", "é", "9" * 5000]


@given(st.lists(st.sampled_from(RULE_TOKENS), max_size=25))
def test_any_rule_text_is_parsed_or_refused_with_a_program_error(tokens):
    def build():
        program = Program.parse(" ".join(tokens))
        engine = Engine(program)
        for name in program.inputs:
            engine.insert(name, [tuple(range(program.relations[name].arity))])
        engine.run()

    typed_or_fine(build)


def test_a_rule_with_a_very_long_body_is_refused_or_evaluated():
    body = ", ".join(f"e(x{i}, x{i + 1})" for i in range(150))
    typed_or_fine(lambda: Engine(Program.parse(f".input e(a, b).\np(x0, x150) :- {body}.")).run())


def test_a_very_long_sum_is_refused_or_evaluated():
    total = " + ".join(["x"] * 3000)
    typed_or_fine(lambda: Engine(Program.parse(f".input e(a).\np(y) :- e(x), y = {total}.")).run())


# -- the command line ----------------------------------------------------------------------------

@given(args=st.lists(st.one_of(st.sampled_from(["explain", "eval", "engine-demo", "--tpch", "--stats", "--facts",
                                           "--format", "json", "dot", "--edges", "--updates", "-1", "0", "3",
                                           "nope.sql", "--show"]), st.text(max_size=6)), max_size=6))
def test_any_command_line_ends_with_an_exit_code_not_a_traceback(args, capsys):
    with time_limit():
        try:
            code = main(args)
        except SystemExit as exit_:  # argparse's own usage errors
            code = exit_.code
    capsys.readouterr()
    assert code in (0, 1, 2)


@given(content=st.one_of(JSON, st.binary(max_size=30)))
def test_any_facts_file_is_read_or_refused_in_one_line(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("facts")
    facts = folder / "facts.json"
    if isinstance(content, bytes):
        facts.write_bytes(content)
    else:
        facts.write_text(json.dumps(content))
    rules = folder / "r.dl"
    rules.write_text(".input e(a, b).\np(x) :- e(x, _).\n")
    with time_limit():
        code = main(["eval", str(rules), "--facts", str(facts)])
    assert code in (0, 2)
