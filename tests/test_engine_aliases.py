"""Aliases: a relation whose one rule copies a derived relation's rows is read from that relation,
holds nothing itself, and still answers every question as the copy would. Program modules: several
rule files read as one program."""

import pytest

from reopt.datalog import Engine, EvaluationError, Program, ProgramError

pytestmark = pytest.mark.usefixtures("backend")

PATHS = """
.input e(x, y).
path(x, y) :- e(x, y).
path(x, z) :- path(x, y), e(y, z).
reach(x, y) :- path(x, y).
from_one(y) :- reach(1, y).
"""


def engine_for(text: str, functions=None) -> Engine:
    return Engine(Program.parse(text, "t.dl"), functions)


def test_a_copy_of_a_derived_relation_is_an_alias_of_it():
    assert Program.parse(PATHS, "t.dl").aliases == {"reach": "path"}


def test_an_alias_holds_its_sources_rows_and_rules_read_them():
    engine = engine_for(PATHS)
    engine.insert("e", [(1, 2), (2, 3)])
    engine.run()
    assert engine.rows("reach") == engine.rows("path") == {(1, 2), (2, 3), (1, 3)}
    assert engine.rows("from_one") == {(2,), (3,)}
    assert engine.lookup("reach", (0,), (2,)) == {(2, 3)}


def test_an_alias_derives_each_row_once():
    engine = engine_for(PATHS)
    engine.insert("e", [(1, 2), (2, 3), (1, 3)])
    engine.run()
    assert engine.counts("path")[(1, 3)] == 2
    assert engine.counts("reach") == {(1, 2): 1, (2, 3): 1, (1, 3): 1}


def test_an_alias_reports_its_sources_changes_as_its_own():
    engine = engine_for(PATHS)
    engine.insert("e", [(1, 2), (2, 3)])
    engine.run()
    engine.delete("e", [(2, 3)])
    deltas = engine.run()
    assert deltas["reach"].deleted == deltas["path"].deleted == {(2, 3), (1, 3)}
    assert deltas["from_one"].deleted == {(3,)}
    assert engine.touched_rows("reach") == engine.touched_rows("path")


def test_an_aliases_counters_are_its_sources_visibility_changes_with_no_rule_fired():
    engine = engine_for(PATHS)
    engine.insert("e", [(1, 2), (2, 3)])
    engine.run()
    reach, path = engine.stats.last["reach"], engine.stats.last["path"]
    assert (reach.inserted, reach.deleted, reach.touched) == (path.inserted, path.deleted, path.touched) == (3, 0, 3)
    assert reach.fired == 0 < path.fired


def test_copies_of_copies_resolve_to_the_relation_holding_the_rows():
    program = Program.parse(PATHS + "again(x, y) :- reach(x, y).\n", "t.dl")
    assert program.aliases == {"reach": "path", "again": "path"}


@pytest.mark.parametrize("rule", [
    "swapped(y, x) :- path(x, y).",  # columns reordered
    "loop(x) :- path(x, x).",  # a repeated variable filters
    "one(y) :- path(1, y).",  # a constant filters
    "bigger(x, y) :- path(x, y), x < y.",  # a second literal filters
    "of_input(x, y) :- e(x, y).",  # an input keeps its own deltas and counts
])
def test_a_rule_that_does_more_than_copy_a_derived_relation_is_evaluated(rule):
    program = Program.parse(PATHS + rule + "\n", "t.dl")
    assert set(program.aliases) == {"reach"}
    engine = Engine(program)
    engine.insert("e", [(1, 2), (2, 1)])
    engine.run()
    name = rule.split("(")[0]
    expected = {
        "swapped": {(2, 1), (1, 2), (1, 1), (2, 2)},
        "loop": {(1,), (2,)},
        "one": {(2,), (1,)},
        "bigger": {(1, 2)},
        "of_input": {(1, 2), (2, 1)},
    }[name]
    assert engine.rows(name) == expected


def test_a_relation_with_a_second_rule_is_not_an_alias():
    program = Program.parse(PATHS + "both(x, y) :- path(x, y).\nboth(x, y) :- e(y, x).\n", "t.dl")
    assert "both" not in program.aliases


def test_a_cycle_of_copies_is_evaluated_as_written():
    program = Program.parse(PATHS + "a(x) :- b(x).\nb(x) :- a(x).\nc(x) :- a(x), from_one(x).\n", "t.dl")
    assert set(program.aliases) == {"reach"}
    engine = Engine(program)
    engine.insert("e", [(1, 2)])
    engine.run()
    assert engine.rows("a") == engine.rows("c") == set()


def test_an_error_quotes_the_rule_as_written_not_as_resolved():
    def fails(x):
        raise ValueError("no")

    engine = engine_for(PATHS + ".function f(x) -> (y).\nbad(y) :- reach(x, _), f(x, y).\n", {"f": fails})
    engine.insert("e", [(1, 2)])
    with pytest.raises(EvaluationError, match=r"bad\(y\) :- reach\(x, _\), f\(x, y\)"):
        engine.run()


def test_a_program_read_from_several_files_is_one_program(tmp_path):
    core, module = tmp_path / "core.dl", tmp_path / "module.dl"
    core.write_text(".input e(x, y).\nout(x) :- staged(x, _).\n")
    module.write_text("staged(x, y) :- e(x, y).\n")
    engine = Engine(Program.load(core, module))
    engine.insert("e", [(1, 2)])
    engine.run()
    assert engine.rows("out") == {(1,)}


def test_an_error_in_one_of_several_files_names_that_file(tmp_path):
    core, module = tmp_path / "core.dl", tmp_path / "module.dl"
    core.write_text(".input e(x, y).\nout(x) :- staged(x, _).\n")
    module.write_text("staged(x, y) :- e(x, y).\nworse(x) :- missing(x).\n")
    with pytest.raises(ProgramError, match=r"module\.dl:2:\d+: unknown relation or function 'missing'"):
        Program.load(core, module)
