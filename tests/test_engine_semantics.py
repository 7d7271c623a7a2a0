"""What the engine computes and reports, one behaviour per test."""

import gc
import weakref

import pytest

from reopt.datalog import DeltaError, Engine, EvaluationError, Program

from .conftest import EXAMPLES, needs_backend

pytestmark = pytest.mark.usefixtures("backend")


def engine_for(text: str, functions=None) -> Engine:
    return Engine(Program.parse(text, "t.dl"), functions)


def test_facts_and_bodyless_rules_fire_once_at_the_first_run():
    engine = engine_for(".input e(x).\norigin(0).\nboth(x) :- origin(x).\n")
    engine.run()
    assert engine.rows("both") == {(0,)}
    engine.insert("e", [(1,)])
    engine.run()
    assert engine.counts("origin") == {(0,): 1}


def test_input_relations_are_counted_multisets():
    engine = engine_for(".input e(x).\np(x) :- e(x).")
    engine.insert("e", [(1,), (1,)])
    engine.run()
    engine.delete("e", [(1,)])
    assert engine.run() == {}
    assert engine.rows("p") == {(1,)}
    engine.delete("e", [(1,)])
    assert engine.run()["p"].deleted == {(1,)}


def test_min_aggregate_change_is_reported_as_an_update():
    engine = engine_for(".input e(g, v).\nm(g, min<v>) :- e(g, v).")
    engine.insert("e", [("a", 3), ("a", 5)])
    engine.run()
    engine.delete("e", [("a", 3)])
    delta = engine.run()["m"]
    assert delta.updated == [(("a", 3), ("a", 5))]
    assert not delta.inserted and not delta.deleted


def test_min_aggregate_keeps_every_candidate_with_its_count():
    engine = engine_for(".input e(g, k, v).\nm(g, min<v>) :- e(g, k, v).")
    engine.insert("e", [("a", 1, 3), ("a", 2, 3), ("a", 3, 7)])
    engine.run()
    assert engine.candidates("m", ("a",)) == {3: 2, 7: 1}


def test_max_aggregate_falls_back_to_the_next_best():
    engine = engine_for(".input e(g, v).\nm(g, max<v>) :- e(g, v).")
    engine.insert("e", [("a", 3), ("a", 5), ("a", 4)])
    engine.run()
    engine.delete("e", [("a", 5)])
    engine.run()
    assert engine.rows("m") == {("a", 4)}


def test_count_counts_body_matches_and_sum_adds_once_per_match():
    engine = engine_for(".input e(x, y, w).\nn(x, count<y>) :- e(x, y, _).\ns(x, sum<w>) :- e(x, _, w).")
    engine.insert("e", [(1, "a", 2), (1, "b", 2), (2, "a", 5)])
    engine.run()
    assert engine.rows("n") == {(1, 2), (2, 1)}
    assert engine.rows("s") == {(1, 4), (2, 5)}
    engine.delete("e", [(1, "a", 2)])
    engine.run()
    assert engine.rows("n") == {(1, 1), (2, 1)}
    assert engine.rows("s") == {(1, 2), (2, 5)}


def test_aggregate_group_disappears_with_its_last_candidate():
    engine = engine_for(".input e(g, v).\nm(g, min<v>) :- e(g, v).")
    engine.insert("e", [("a", 1)])
    engine.run()
    engine.delete("e", [("a", 1)])
    assert engine.run()["m"].deleted == {("a", 1)}
    assert engine.rows("m") == set()


def test_a_function_sees_ints_floats_and_bools_that_compare_equal_as_the_values_they_are():
    def kind(x):
        return [(type(x).__name__,)]

    engine = engine_for(".input e(k, x).\n.function kind(x) -> (t).\np(k, t) :- e(k, x), kind(x, t).",
                        {"kind": kind})
    engine.insert("e", [("a", 1), ("b", 1.0), ("c", True)])  # equal values, three calls in one run
    engine.run()
    assert engine.rows("p") == {("a", "int"), ("b", "float"), ("c", "bool")}


def _doubling_engine(calls: list) -> Engine:
    def double(x):
        calls.append(x)
        return [(2 * x,)]

    program = Program.parse(".input e(k, x).\n.function double(x) -> (y).\np(k, y) :- e(k, x), double(x, y).", "t.dl")
    engine = Engine(program, {"double": double}, backend="native")
    engine.insert("e", [("a", 3), ("b", 3), ("c", 4)])
    engine.run()
    return engine


def test_the_native_core_calls_a_function_once_per_distinct_arguments_in_a_run():
    needs_backend("native")
    calls = []
    _doubling_engine(calls)
    assert sorted(calls) == [3, 4]


def _calls_in_a_second_run(change) -> tuple[list, Engine]:
    """The calls the native core makes in the run after a first one, for ``change`` of the facts."""
    needs_backend("native")
    calls = []
    engine = _doubling_engine(calls)
    calls.clear()
    change(engine)
    engine.run()
    return calls, engine


def test_the_native_core_retracts_with_the_results_of_earlier_runs():
    calls, engine = _calls_in_a_second_run(lambda engine: engine.delete("e", [("a", 3)]))
    assert calls == []
    assert engine.rows("p") == {("b", 6), ("c", 8)}


def test_the_native_core_calls_again_to_derive_in_a_later_run():
    calls, engine = _calls_in_a_second_run(lambda engine: engine.insert("e", [("d", 3)]))
    assert calls == [3]
    assert ("d", 6) in engine.rows("p")


def test_function_predicates_receive_bound_inputs_and_yield_rows():
    calls = []

    def divisors(n):
        calls.append(n)
        return [(d,) for d in range(1, n + 1) if n % d == 0]

    engine = engine_for(".input num(n).\n.function divisors(n) -> (d).\ndiv(n, d) :- num(n), divisors(n, d).",
                        {"divisors": divisors})
    engine.insert("num", [(6,)])
    engine.run()
    assert engine.rows("div") == {(6, 1), (6, 2), (6, 3), (6, 6)}
    engine.delete("num", [(6,)])
    engine.run()
    assert engine.rows("div") == set()
    assert calls == [6, 6]


def test_an_engine_in_a_reference_cycle_through_its_functions_is_collected():
    # An owner whose bound methods are the engine's functions (as the optimizer's are) forms a cycle
    # owner -> engine -> function -> owner, which only the cycle collector frees: the engine's
    # state must be visible to it, or every such owner leaks with all it holds.
    class Owner:
        def __init__(self):
            program = Program.parse(".input num(n).\n.function half(n) -> (h).\nh(n, x) :- num(n), half(n, x).", "t.dl")
            self.engine = Engine(program, {"half": self.half})

        def half(self, n):
            return [(n / 2,)]

    owner = Owner()
    owner.engine.insert("num", [(4,)])
    owner.engine.run()
    assert owner.engine.rows("h") == {(4, 2.0)}
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None


def test_engines_of_one_program_share_no_state():
    # The native core compiles a program once for every engine that runs it; each engine must
    # still have its own rows, counts, aggregates and strings.
    program = Program.parse('.input e(g, s).\nm(g, min<s>) :- e(g, s).\ntagged(g) :- e(g, "x").', "t.dl")
    first, second = Engine(program), Engine(program)
    first.insert("e", [(1, "x"), (1, "b")])
    second.insert("e", [(1, "y"), (2, "x")])
    first.run()
    second.run()
    assert first.rows("m") == {(1, "b")} and first.rows("tagged") == {(1,)}
    assert second.rows("m") == {(1, "y"), (2, "x")} and second.rows("tagged") == {(2,)}
    first.delete("e", [(1, "x")])
    first.run()
    assert first.rows("tagged") == set() and second.rows("tagged") == {(2,)}
    assert Engine(program).rows("e") == set()


def test_function_with_no_outputs_may_return_a_bool():
    engine = engine_for(".input num(n).\n.function even(n) -> ().\nev(n) :- num(n), even(n).",
                        {"even": lambda n: n % 2 == 0})
    engine.insert("num", [(1,), (2,), (4,)])
    engine.run()
    assert engine.rows("ev") == {(2,), (4,)}


def test_arithmetic_and_comparisons_in_rules():
    engine = engine_for(".input e(x, y).\nr(x, s) :- e(x, y), s = x * 10 + y, s != 12, y >= 1.")
    engine.insert("e", [(1, 2), (1, 3), (2, 0)])
    engine.run()
    assert engine.rows("r") == {(1, 13)}


def test_repeated_variable_in_an_atom_means_equality():
    engine = engine_for(".input e(x, y).\nloop(x) :- e(x, x).")
    engine.insert("e", [(1, 1), (1, 2)])
    engine.run()
    assert engine.rows("loop") == {(1,)}


def test_self_join_counts_each_derivation_once():
    engine = engine_for(".input e(x, y).\ntwo(x, z) :- e(x, y), e(y, z).")
    engine.insert("e", [(1, 1)])
    engine.run()
    assert engine.counts("two") == {(1, 1): 1}
    engine.delete("e", [(1, 1)])
    engine.run()
    assert engine.rows("two") == set()


def test_acyclic_recursion_through_min_is_maintained_by_counting():
    program = Program.parse(
        ".input e(x, y, w).\n.input src(s).\n.acyclic d.\n"
        "d(s, min<c>) :- src(s), c = 0.\n"
        "d(y, min<c>) :- d(x, dx), e(x, y, w), c = 100 - dx - w.\n", "dag.dl")
    assert program.strata[0].method == "counting"
    engine = Engine(program)
    engine.insert("src", [(0,)])
    engine.insert("e", [(0, 1, 5), (1, 2, 1), (0, 2, 50)])
    engine.run()
    assert engine.rows("d") == {(0, 0), (1, 95), (2, 4)}
    engine.update("e", (0, 1, 5), (0, 1, 99))
    engine.run()
    assert engine.rows("d") == {(0, 0), (1, 1), (2, 50)}


def test_stats_count_work_for_the_last_run_and_in_total():
    engine = Engine(Program.load(EXAMPLES / "transitive_closure.dl"))
    engine.insert("edge", [(1, 2), (2, 3)])
    engine.run()
    assert engine.stats.last["path"].inserted == 3
    assert engine.stats.last["path"].fired == 3
    engine.delete("edge", [(2, 3)])
    engine.run()
    assert engine.stats.last["path"].deleted == 2
    assert engine.stats.last["path"].inserted == 0
    assert engine.stats.total["path"].inserted == 3
    assert engine.stats.total["path"].deleted == 2


def copy_holding(*rows) -> Engine:
    """An engine whose rule copies the input ``e`` into ``p``, after a run with these rows."""
    engine = engine_for(".input e(x, w).\np(x, w) :- e(x, w).")
    engine.insert("e", list(rows))
    engine.run()
    return engine


def test_updating_a_row_queued_for_insertion_replaces_it():
    engine = copy_holding()
    engine.insert("e", [(3, 1.0)])
    engine.update("e", old=(3, 1.0), new=(3, 2.0))
    engine.run()
    assert engine.rows("p") == {(3, 2.0)}


def test_updates_chained_in_one_batch_apply_in_order():
    engine = copy_holding((1, 3.0))
    engine.update("e", old=(1, 3.0), new=(1, 4.0))
    engine.update("e", old=(1, 4.0), new=(1, 5.0))
    with pytest.raises(DeltaError, match="it is not present"):
        engine.update("e", old=(1, 4.0), new=(1, 6.0))  # already replaced in this batch
    assert engine.run()["p"].inserted == {(1, 5.0)}
    assert engine.rows("p") == {(1, 5.0)}


def test_updating_a_row_to_itself_changes_nothing():
    engine = copy_holding((1, 3.0))
    engine.update("e", old=(1, 3.0), new=(1, 3.0))
    assert engine.run() == {}
    assert engine.counts("e") == {(1, 3.0): 1}


def test_update_reports_weight_change_in_shortest_paths():
    engine = Engine(Program.load(EXAMPLES / "shortest_paths.dl"))
    engine.insert("source", [(1,)])
    engine.insert("edge", [(1, 2, 3.0), (2, 3, 1.0)])
    engine.run()
    engine.update("edge", old=(1, 2, 3.0), new=(1, 2, 5.0))
    delta = engine.run()["dist"]
    assert sorted(delta.updated) == [((2, 3.0), (2, 5.0)), ((3, 4.0), (3, 6.0))]
    assert engine.rows("dist") == {(1, 0), (2, 5.0), (3, 6.0)}


def test_updated_rows_move_every_derivation_from_their_old_values_to_their_new_ones():
    # the new row may spell the key differently (1.0 for 1), and a row the rule's constant rejects
    # derives nothing, before or after
    calls = []
    engine = engine_for(
        ".input size(k, n, unit).\n.input edge(k, j).\n.function Fn_cost(n) -> (c).\n"
        'cost(k, j, c) :- size(k, n, "rows"), edge(k, j), Fn_cost(n, c).',
        {"Fn_cost": lambda n: calls.append(n) or [(n * 10,)]})
    engine.insert("size", [(1, 2, "rows"), (2, 5, "rows"), (1, 9, "bytes")])
    engine.insert("edge", [(1, "x"), (1, "y"), (2, "x")])
    engine.run()
    engine.update("size", old=(1, 2, "rows"), new=(1.0, 3, "rows"))
    engine.update("size", old=(1, 9, "bytes"), new=(1, 8, "bytes"))
    calls.clear()
    delta = engine.run()["cost"]
    assert engine.counts("cost") == {(1, "x", 30): 1, (1, "y", 30): 1, (2, "x", 50): 1}
    assert (delta.deleted, delta.inserted) == ({(1, "x", 20), (1, "y", 20)}, {(1, "x", 30), (1, "y", 30)})
    assert 8 not in calls and 9 not in calls


def test_python_backend_values_may_be_tuples_and_frozensets(backend):
    if backend != "python":
        pytest.skip("the Python backend holds any hashable value; the native one is tested below")
    engine = engine_for(".input e(x).\n.function parts(x) -> (p).\np(x, q) :- e(x), parts(x, q).",
                        {"parts": lambda s: [(frozenset([v]),) for v in s]})
    engine.insert("e", [(frozenset({1, 2}),)])
    engine.run()
    assert engine.rows("p") == {(frozenset({1, 2}), frozenset({1})), (frozenset({1, 2}), frozenset({2}))}


@pytest.mark.parametrize("value", [frozenset({1}), (1, 2), 2**70, None])
def test_native_backend_refuses_values_it_cannot_hold_and_names_them(value):
    needs_backend("native")
    engine = Engine(Program.parse(".input e(x).\np(x) :- e(x).", "t.dl"), backend="native")
    with pytest.raises(DeltaError, match="native backend"):
        engine.insert("e", [(value,)])
    assert not engine.has_pending


@pytest.mark.parametrize("value", [2**70, 2**63, -(2**63) - 1, 3])
def test_a_lookup_by_a_value_no_row_holds_finds_nothing(value):
    engine = engine_for(".input e(x, y).")
    engine.insert("e", [(1, "a"), (2**63 - 1, "b"), (-(2**63), "c")])
    engine.run()
    assert engine.lookup("e", (0,), (value,)) == set()
    assert engine.lookup("e", (0,), (2**63 - 1,)) == {(2**63 - 1, "b")}


class FloatSubclass(float):
    """A float of another type, as numpy's float64 is."""


@pytest.mark.parametrize("value", [float("nan"), FloatSubclass("nan")])
def test_nan_is_refused_in_a_delta_whatever_its_float_type(value):
    engine = engine_for(".input e(x).\np(x) :- e(x).")
    with pytest.raises(DeltaError, match="NaN"):
        engine.insert("e", [(value,)])
    assert not engine.has_pending


def test_native_backend_refuses_a_function_result_it_cannot_hold():
    needs_backend("native")
    program = Program.parse(".input e(x).\n.function parts(x) -> (p).\np(x, q) :- e(x), parts(x, q).", "f.dl")
    engine = Engine(program, {"parts": lambda x: [((x, x),)]}, backend="native")
    engine.insert("e", [(1,)])
    with pytest.raises(EvaluationError, match="parts.*native backend holds"):
        engine.run()
    assert engine.rows("p") == set() and engine.has_pending


def test_touched_counts_distinct_groups_of_an_aggregate():
    engine = engine_for(".input e(g, v).\nm(g, min<v>) :- e(g, v).")
    engine.insert("e", [("a", 3), ("a", 5), ("b", 1)])
    engine.run()
    engine.delete("e", [("a", 3)])
    engine.insert("e", [("b", 0)])
    engine.run()
    assert engine.stats.last["m"].touched == 2
    assert engine.stats.last["m"].updated == 2


def test_touched_rows_are_those_whose_visibility_changed_in_the_last_run():
    engine = Engine(Program.load(EXAMPLES / "transitive_closure.dl"))
    engine.insert("edge", [(1, 2), (2, 3)])
    engine.run()
    engine.delete("edge", [(2, 3)])
    engine.run()
    assert engine.touched_rows("path") == {(2, 3), (1, 3)}


def test_negation_tracks_insertions_and_deletions_on_both_sides():
    engine = engine_for(".input a(x).\n.input b(x).\nonly_a(x) :- a(x), !b(x).")
    engine.insert("a", [(1,), (2,), (3,)])
    engine.insert("b", [(2,)])
    engine.run()
    assert engine.rows("only_a") == {(1,), (3,)}
    engine.insert("b", [(3,)])
    engine.delete("b", [(2,)])
    engine.delete("a", [(1,)])
    changes = engine.run()["only_a"]
    assert (changes.inserted, changes.deleted) == ({(2,)}, {(1,), (3,)})


def test_negated_relation_may_be_derived_in_a_lower_stratum():
    engine = engine_for(".input e(x, y).\nhas_out(x) :- e(x, _).\nsink(y) :- e(_, y), !has_out(y).")
    engine.insert("e", [(1, 2), (2, 3)])
    engine.run()
    assert engine.rows("sink") == {(3,)}
    engine.insert("e", [(3, 1)])
    engine.run()
    assert engine.rows("sink") == set()


def test_a_memo_keeps_the_last_converged_row_of_each_key():
    engine = engine_for(".input v(k, x).\nlatest(k, x) :- v(k, x).\n.memo seen(k | x) from latest.")
    engine.insert("v", [("a", 1)])
    engine.run()
    engine.update("v", ("a", 1), ("a", 2))
    engine.run()
    assert engine.rows("seen") == {("a", 2)}
    engine.delete("v", [("a", 2)])
    engine.run()
    assert engine.rows("latest") == set()
    assert engine.rows("seen") == {("a", 2)}


def test_rules_reading_a_memo_are_evaluated_again_until_it_settles():
    # best(k) remembers the smallest value ever seen per key: each pass feeds the memo back.
    text = """.input v(k, x).
    cand(k, x) :- v(k, x).
    cand(k, x) :- best_memo(k, x).
    best(k, min<x>) :- cand(k, x).
    .memo best_memo(k | x) from best."""
    engine = engine_for(text)
    engine.insert("v", [("a", 5)])
    engine.run()
    engine.update("v", ("a", 5), ("a", 3))
    engine.run()
    engine.update("v", ("a", 3), ("a", 9))
    engine.run()
    assert engine.rows("best") == {("a", 3)}
    assert engine.rows("best_memo") == {("a", 3)}


ORDERED_PATHS = """
.input e(x, y, w).
.input src(s).
.acyclic best, cand.
cand(s, 0) :- src(s).
cand(y, c) :- best(x, b), e(x, y, w), c = b + w.
best(x, min<c>) :- cand(x, c).
"""


def test_ordered_release_propagates_each_group_once_at_its_final_value():
    """On a DAG whose cheap path is long, unordered release improves node 3 and then re-derives what
    depends on it; cheapest-first release derives each candidate once."""
    edges = [(0, 1, 9), (0, 2, 1), (2, 1, 1), (1, 3, 1), (3, 4, 1)]
    fired = {}
    for name, text in (("plain", ORDERED_PATHS), ("ordered", ORDERED_PATHS + ".ordered best.\n")):
        engine = Engine(Program.parse(text, f"{name}.dl"))
        engine.insert("src", [(0,)])
        engine.insert("e", edges)
        engine.run()
        assert engine.rows("best") == {(0, 0), (1, 2), (2, 1), (3, 3), (4, 4)}
        fired[name] = engine.stats.last["cand"].fired
    assert fired["ordered"] == len(edges) + 1 < fired["plain"]


def test_a_rule_body_of_150_atoms_is_evaluated():
    # Python allows 20 nested loops per function; the Python backend continues in nested functions.
    body = ", ".join(f"e(x{i}, x{i + 1})" for i in range(150))
    engine = Engine(Program.parse(f".input e(a, b).\npath(x0, x150) :- {body}."))
    engine.insert("e", [(i, i + 1) for i in range(152)])
    engine.run()
    assert engine.rows("path") == {(0, 150), (1, 151), (2, 152)}
    engine.delete("e", [(1, 2)])
    engine.run()
    assert engine.rows("path") == {(2, 152)}
