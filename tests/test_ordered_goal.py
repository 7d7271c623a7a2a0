"""`.ordered m up to g`: cheapest-first release that stops at the goal groups' value, on both backends."""

import pytest

from reopt.datalog import Engine, EvaluationError, Program, ProgramError

from .helpers import InjectedFailure

pytestmark = pytest.mark.usefixtures("backend")

PATHS = """
.input e(x, y, w).
.input src(s).
.input target(t).
.acyclic best, cand.
cand(s, 0) :- src(s).
cand(y, c) :- best(x, b), e(x, y, w), c = b + w.
best(x, min<c>) :- cand(x, c).
.ordered best up to target.
"""
EDGES = [(0, 1, 1), (1, 2, 1), (0, 2, 5), (2, 3, 1), (0, 4, 3), (4, 5, 1)]


def paths(edges=EDGES, target=2, functions=None, text=PATHS) -> Engine:
    engine = Engine(Program.parse(text, "paths.dl"), functions)
    engine.insert("src", [(0,)])
    engine.insert("target", [(target,)])
    engine.insert("e", edges)
    engine.run()
    return engine


def within(engine: Engine, bound) -> set:
    return {row for row in engine.rows("best") if row[1] <= bound}


def test_groups_costlier_than_the_goal_are_never_released():
    engine = paths()
    assert engine.rows("best") == {(0, 0), (1, 1), (2, 2)}
    # 3 and 4 (cost 3) are held, so nothing is derived from them: node 5 gets no candidate at all
    assert engine.rows("cand") == {(0, 0), (1, 1), (2, 2), (2, 5), (3, 3), (4, 3)}


def test_without_a_goal_row_every_group_is_released():
    engine = Engine(Program.parse(PATHS, "paths.dl"))
    engine.insert("src", [(0,)])
    engine.insert("e", EDGES)
    engine.run()
    assert engine.rows("best") == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4)}


def test_a_goal_that_grows_releases_what_was_held_up_to_its_new_value():
    engine = paths()
    engine.delete("e", [(1, 2, 1)])
    engine.run()
    assert engine.rows("best") == {(0, 0), (1, 1), (2, 5), (4, 3), (5, 4)}


def test_a_goal_that_falls_keeps_every_group_up_to_it_exact():
    engine = paths()
    engine.delete("e", [(1, 2, 1)])
    engine.run()
    engine.insert("e", [(1, 2, 1)])
    engine.run()
    assert within(engine, 2) == {(0, 0), (1, 1), (2, 2)}
    assert within(engine, 2) == within(paths(), 2)


def test_a_goal_costlier_than_everything_releases_everything():
    engine = paths(target=5)
    assert engine.rows("best") == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4)}


def test_moving_the_goal_equals_starting_with_it_there():
    engine = paths()
    engine.update("target", old=(2,), new=(3,))
    engine.run()
    assert within(engine, 3) == within(paths(target=3), 3) == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 3)}


def test_a_run_that_deletes_and_inserts_derives_from_a_changed_group_only_at_its_final_value():
    """Both edges of the path 0-1-2 get dearer in one run. Its deletions are evaluated first, so node
    1 is hidden before the dearer edge 1-2 meets it: node 2 gets no passing candidate 1 + 2 from node
    1's old cost, only 2 + 2 once node 1 is released at its new one (8 derivations without that)."""
    engine = paths(target=3)
    engine.update("e", old=(0, 1, 1), new=(0, 1, 2))
    engine.update("e", old=(1, 2, 1), new=(1, 2, 2))
    engine.run()
    fresh = paths([(0, 1, 2), (1, 2, 2), (0, 2, 5), (2, 3, 1), (0, 4, 3), (4, 5, 1)], target=3)
    assert engine.rows("best") == fresh.rows("best") == {(0, 0), (1, 2), (2, 4), (3, 5), (4, 3), (5, 4)}
    assert engine.stats.last["cand"].fired == 6


def test_values_that_fall_along_a_derivation_fail_the_run_and_change_nothing():
    engine = paths()
    before = engine.rows("best"), engine.counts("cand")
    engine.insert("e", [(1, 6, 1), (6, 7, -5)])
    with pytest.raises(EvaluationError, match="never fall along derivations"):
        engine.run()
    assert (engine.rows("best"), engine.counts("cand")) == before


def test_a_failed_run_restores_what_was_held():
    check = InjectedFailure()
    engine = paths(functions={"Fn_ok": check}, text=InjectedFailure.checked(PATHS))
    check.armed = True
    engine.delete("e", [(1, 2, 1)])
    with pytest.raises(EvaluationError, match="injected"):
        engine.run()
    engine.discard_pending()
    check.armed = False
    engine.delete("e", [(1, 2, 1)])
    engine.run()
    assert engine.rows("best") == {(0, 0), (1, 1), (2, 5), (4, 3), (5, 4)}


@pytest.mark.parametrize("decl, message", [
    (".ordered best up to nowhere.", "no such relation"),
    (".ordered best up to e.", "must be groups of best, with 1 columns, but e has 3"),
    (".ordered best up to near.", "must be computed before best's recursion"),
    (".ordered best, cand up to target.", "names one aggregate"),
])
def test_a_goal_must_name_groups_known_before_the_release(decl, message):
    text = PATHS.replace(".ordered best up to target.", decl) + "near(x) :- best(x, c), c < 3.\n"
    with pytest.raises(ProgramError, match=message):
        Program.parse(text, "paths.dl")
