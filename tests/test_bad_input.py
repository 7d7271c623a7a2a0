"""Bad deltas and failed runs raise typed errors and leave the engine exactly as it was."""

import pytest

from reopt.datalog import DatalogError, DeltaError, Engine, EvaluationError, Program

from .conftest import EXAMPLES
from .helpers import derived_rows

pytestmark = pytest.mark.usefixtures("backend")


def snapshot(engine: Engine) -> tuple:
    inputs = {name: engine.counts(name) for name in engine.program.inputs}
    derived = {name: (engine.rows(name), engine.counts(name)) for name in engine.program.derived}
    return inputs, derived, engine.has_pending


@pytest.fixture
def paths() -> Engine:
    engine = Engine(Program.load(EXAMPLES / "shortest_paths.dl"))
    engine.insert("source", [(1,)])
    engine.insert("edge", [(1, 2, 3.0), (2, 3, 1.0), (3, 1, 2.0)])
    engine.run()
    return engine


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e.insert("nope", [(1,)]), "unknown relation 'nope'"),
        (lambda e: e.insert("dist", [(1, 2)]), "only .input relations take deltas"),
        (lambda e: e.insert("edge", [(1, 2)]), "has arity 3"),
        (lambda e: e.insert("edge", [(1, 2, [3])]), "unhashable"),
        (lambda e: e.insert("edge", "abc"), "not a string"),
        (lambda e: e.delete("edge", [(9, 9, 9.0)]), "it is not present"),
        (lambda e: e.delete("edge", [(1, 2, 3.0), (1, 2, 3.0)]), "it is not present"),
        (lambda e: e.update("edge", old=(7, 7, 1.0), new=(7, 8, 1.0)), "it is not present"),
        (lambda e: e.update("edge", old=(1, 2, 3.0), new=(1, 2)), "has arity 3"),
        (lambda e: e.insert("edge", None), "must be an iterable of rows, got None"),
        (lambda e: e.delete("edge", 5), "must be an iterable of rows, got 5"),
    ],
)
def test_bad_delta_raises_and_queues_nothing(paths, call, message):
    before = snapshot(paths)
    with pytest.raises(DeltaError, match=message):
        call(paths)
    assert snapshot(paths) == before


@pytest.mark.parametrize("call, message", [
    (lambda e: e.lookup("dist", "a", (1,)), "lookup positions must be a tuple"),
    (lambda e: e.lookup("dist", (True,), (1,)), "needs one key value per position"),
    (lambda e: e.lookup("dist", (0,), 1), "a lookup key must be a tuple"),
    (lambda e: e.candidates("dist", 5), "an aggregate group must be a tuple"),
    (lambda e: e.run(deltas="no"), "takes True or False"),
    (lambda e: e.inject_failure(-1), "a count of at least 0 or None"),
    (lambda e: e.inject_failure("x"), "a count of at least 0 or None"),
])
def test_a_reading_or_running_call_with_arguments_of_the_wrong_shape_is_a_typed_error(paths, call, message):
    before = snapshot(paths)
    with pytest.raises(DatalogError, match=message):
        call(paths)
    assert snapshot(paths) == before


def test_deleting_a_row_queued_for_insertion_is_allowed(paths):
    paths.insert("edge", [(3, 4, 1.0)])
    paths.delete("edge", [(3, 4, 1.0)])
    assert paths.run() == {}


def test_reading_an_unknown_relation_is_a_typed_error(paths):
    with pytest.raises(DatalogError, match="unknown relation 'nope'"):
        paths.rows("nope")


def test_raising_function_rolls_back_and_names_the_rule():
    def split(n):
        if n == 3:
            raise ValueError("cannot split 3")
        return [(n - 1,)]

    engine = Engine(Program.parse(".input e(x).\n.function f(a) -> (b).\np(y) :- e(x), f(x, y).", "fn.dl"),
                    {"f": split})
    engine.insert("e", [(5,)])
    engine.run()
    before = snapshot(engine)
    engine.insert("e", [(3,), (4,)])
    queued = snapshot(engine)
    with pytest.raises(EvaluationError, match=r"fn\.dl:3:1: .*ValueError: cannot split 3"):
        engine.run()
    assert snapshot(engine) == queued
    engine.discard_pending()
    assert snapshot(engine) == before


def test_an_engine_error_raised_by_a_function_is_reported_as_the_rule_failing():
    """The error names the rule on both backends, even when the function raised the engine's own
    error type (it might evaluate another engine inside)."""
    def failing(a):
        raise DeltaError("inner engine refused a row")

    engine = Engine(Program.parse(".input e(x).\n.function f(a) -> (b).\np(y) :- e(x), f(x, y).", "fn.dl"),
                    {"f": failing})
    engine.insert("e", [(1,)])
    with pytest.raises(EvaluationError, match=r"fn\.dl:3:1: .*DeltaError: inner engine refused a row"):
        engine.run()
    assert engine.rows("p") == set()


def test_type_error_in_a_comparison_rolls_back(paths):
    before = derived_rows(paths)
    paths.insert("edge", [(3, 5, "heavy")])
    with pytest.raises(EvaluationError, match="TypeError"):
        paths.run()
    assert derived_rows(paths) == before
    paths.discard_pending()
    paths.insert("edge", [(3, 5, 1.0)])
    paths.run()
    assert (5, 5.0) in paths.rows("dist")


def test_function_returning_rows_of_the_wrong_width_is_an_evaluation_error():
    engine = Engine(Program.parse(".input e(x).\n.function f(a) -> (b).\np(y) :- e(x), f(x, y).", "fn.dl"),
                    {"f": lambda a: [(a, a)]})
    engine.insert("e", [(1,)])
    with pytest.raises(EvaluationError, match="each row must be a tuple of 1 values"):
        engine.run()
    assert engine.rows("p") == set()


def test_non_monotone_recursive_min_under_dred_is_refused_and_rolled_back():
    engine = Engine(Program.parse(
        ".input src(s).\n.input e(x, y, w).\n"
        "d(s, min<c>) :- src(s), c = 0.\n"
        "d(y, min<c>) :- d(x, dx), e(x, y, w), c = 10 - dx.\n", "nm.dl"))
    engine.insert("src", [(0,)])
    engine.insert("e", [(0, 1, 1), (0, 2, 1), (2, 1, 1), (1, 3, 1)])
    with pytest.raises(EvaluationError, match="only improve"):
        engine.run()
    assert engine.rows("d") == set()


def test_a_memo_takes_no_deltas():
    engine = Engine(Program.parse(".input v(k, x).\np(k, x) :- v(k, x).\n.memo m(k | x) from p.", "m.dl"))
    with pytest.raises(DeltaError, match="'m' is the memo of 'p'; the engine maintains it"):
        engine.insert("m", [(1, 2)])
    assert not engine.has_pending


def test_memo_passes_that_never_settle_roll_back():
    # Each pass reads the memo and derives a larger value, so the memo never settles.
    text = ".input v(k, x).\np(k, x) :- v(k, x).\np(k, y) :- m(k, x), y = x + 1.\nlast(k, max<x>) :- p(k, x).\n" \
           ".memo m(k | x) from last."
    engine = Engine(Program.parse(text, "grow.dl"), max_passes=20)
    engine.insert("v", [("a", 0)])
    queued = snapshot(engine)
    with pytest.raises(EvaluationError, match="memos m still changed after 20 passes"):
        engine.run()
    assert snapshot(engine) == queued


def test_a_memo_needs_one_source_row_per_key():
    engine = Engine(Program.parse(".input v(k, x).\np(k, x) :- v(k, x).\n.memo m(k | x) from p.", "m.dl"))
    engine.insert("v", [("a", 1), ("a", 2)])
    with pytest.raises(EvaluationError, match="memo 'm' keeps one row per key"):
        engine.run()
    assert engine.rows("m") == set()
