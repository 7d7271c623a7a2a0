"""Loading a program: every syntax and semantic error is typed and names file, line and column."""

import pytest

from reopt.datalog import Engine, ParseError, Program, ProgramError

pytestmark = pytest.mark.usefixtures("backend")


def load_error(text: str, kind=ProgramError) -> ProgramError:
    with pytest.raises(kind) as info:
        Program.parse(text, "rules.dl")
    return info.value


def test_missing_final_dot_is_a_parse_error_at_end_of_input():
    error = load_error(".input e(x).\np(x) :- e(x)", ParseError)
    assert error.location.file == "rules.dl"
    assert error.location.line == 2
    assert "end of input" in str(error)


def test_unexpected_character_names_line_and_column():
    error = load_error(".input e(x).\np(x) :- e(x), x ^ 2.", ParseError)
    assert (error.location.line, error.location.column) == (2, 17)
    assert "'^'" in str(error)


def test_unknown_aggregate_is_rejected():
    error = load_error(".input e(x).\np(avg<x>) :- e(x).", ParseError)
    assert "avg" in str(error) and error.location.line == 2


def test_unknown_relation_in_body():
    error = load_error(".input e(x).\np(x) :- e(x), f(x).")
    assert "unknown relation or function 'f'" in str(error)
    assert (error.location.line, error.location.column) == (2, 15)


def test_arity_mismatch_names_both_arities():
    error = load_error(".input e(x, y).\np(x) :- e(x).")
    assert "'e' has arity 2" in str(error) and "with 1 arguments" in str(error)


def test_head_variable_not_bound_by_body():
    error = load_error(".input e(x).\np(x, y) :- e(x).")
    assert "head variable 'y'" in str(error)
    assert error.location.line == 2


def test_variable_used_in_comparison_before_any_binding():
    error = load_error(".input e(x).\np(x) :- e(x), z > 1.")
    assert "variable 'z'" in str(error)


def test_input_relation_cannot_be_derived():
    error = load_error(".input e(x).\ne(x) :- e(x).")
    assert ".input" in str(error)


def test_expression_inside_relation_atom_is_rejected_with_a_fix():
    error = load_error(".input e(x).\np(x) :- e(x + 1).")
    assert "bind it with" in str(error)


def test_function_called_with_wrong_number_of_arguments():
    error = load_error(".input e(x).\n.function f(a) -> (b).\np(y) :- e(x), f(x, y, z).")
    assert "function 'f' takes 1 inputs and 1 outputs" in str(error)


def test_count_inside_recursion_is_rejected():
    error = load_error(".input e(x, y).\nc(x, count<y>) :- e(x, y).\nc(x, count<y>) :- c(x, y).")
    assert "count" in str(error) and "recursion" in str(error)


def test_plain_relation_over_aggregate_in_cyclic_recursion_needs_acyclic():
    text = """.input e(x, y, w).
d(x, min<w>) :- e(x, _, w).
d(y, min<v>) :- r(x, v), e(x, y, _).
r(x, v) :- d(x, v).
"""
    error = load_error(text)
    assert ".acyclic" in str(error)
    Program.parse(text + ".acyclic d, r.\n")


def test_acyclic_must_name_the_whole_recursive_component():
    error = load_error(".input e(x).\na(x) :- e(x).\na(x) :- b(x).\nb(x) :- a(x).\n.acyclic a.")
    assert "missing: b" in str(error)


def test_same_relation_with_different_aggregates_is_rejected():
    error = load_error(".input e(x, y).\nm(x, min<y>) :- e(x, y).\nm(x, max<y>) :- e(x, y).")
    assert "same aggregate" in str(error)


def test_unreadable_file_is_a_program_error(tmp_path):
    with pytest.raises(ProgramError, match="cannot read rule file"):
        Program.load(tmp_path / "missing.dl")


def test_engine_requires_every_declared_function():
    program = Program.parse(".input e(x).\n.function f(a) -> (b).\np(y) :- e(x), f(x, y).", "fn.dl")
    with pytest.raises(ProgramError, match="'f' is declared but no callable"):
        Engine(program)
    with pytest.raises(ProgramError, match="not declared with .function: g"):
        Engine(program, {"f": lambda a: [(a,)], "g": print})


def test_negation_inside_its_own_recursion_is_rejected():
    error = load_error(".input e(x).\np(x) :- e(x), !q(x).\nq(x) :- p(x).")
    assert "negates 'q' inside their common recursion" in str(error)
    assert "rules.dl:2:" in str(error)


def test_negated_atom_with_a_wildcard_is_rejected():
    error = load_error(".input e(x).\n.input f(x, y).\np(x) :- e(x), !f(x, _).")
    assert "'_' cannot appear in the negated atom '!f(x, _)'" in str(error)


def test_negated_atom_needs_its_variables_bound_elsewhere():
    error = load_error(".input e(x).\n.input f(x, y).\np(x) :- e(x), !f(x, y).")
    assert "variable 'y'" in str(error) and "not bound" in str(error)


def test_a_function_cannot_be_negated():
    error = load_error(".input e(x).\n.function g(a) -> ().\np(x) :- e(x), !g(x).")
    assert "function 'g' cannot be negated" in str(error)


def test_negation_in_a_dred_recursion_is_rejected_with_the_fix():
    text = ".input e(x, y).\n.input b(x).\nr(x, y) :- e(x, y), !b(y).\nr(x, z) :- r(x, y), e(y, z), !b(z)."
    error = load_error(text)
    assert "needs counting maintenance" in str(error) and ".acyclic r." in str(error)


def test_memo_of_a_relation_no_rule_derives_is_rejected():
    error = load_error(".input e(x, y).\n.memo m(x | y) from e.")
    assert ".memo 'm' keeps rows of 'e', which no rule derives" in str(error)


def test_memo_arity_must_match_its_source():
    error = load_error(".input e(x, y).\np(x, y) :- e(x, y).\n.memo m(x | y, z) from p.")
    assert "has 3 columns but its source 'p' has arity 2" in str(error)


def test_rules_cannot_derive_a_memo():
    error = load_error(".input e(x, y).\np(x, y) :- e(x, y).\n.memo m(x | y) from p.\nm(x, y) :- e(x, y).")
    assert "'m' is the memo of 'p'" in str(error)


def test_count_inside_an_acyclic_recursion_is_allowed():
    text = ".input e(x, y).\nc(x, count<y>) :- e(x, y).\nc(x, count<y>) :- c(y, n), e(x, y).\n.acyclic c."
    assert Program.parse(text, "rules.dl").strata[-1].method == "counting"


@pytest.mark.parametrize("text", [
    ".input e(x, y).\nm(x, min<y>) :- e(x, y).\n.ordered m.",  # not recursive
    ".input e(x, y).\nr(x, y) :- e(x, y).\nr(x, z) :- r(x, y), e(y, z).\n.acyclic r.\n.ordered r.",  # no aggregate
    ".input e(x, y, w).\nd(y, max<c>) :- e(0, y, c).\nd(y, max<c>) :- d(x, b), e(x, y, w), c = b + w.\n.acyclic d.\n"
    ".ordered d.",  # max, not min
])
def test_ordered_names_only_a_min_aggregate_of_a_counting_recursion(text):
    error = load_error(text)
    assert ".ordered names" in str(error) and "min aggregate of a recursion maintained by counting" in str(error)


def test_a_string_constant_keeps_non_ascii_text_as_written():
    engine = Engine(Program.parse('name("José").\ngreets(x) :- name(x).'))
    engine.run()
    assert engine.rows("greets") == {("José",)}


def test_string_escapes_are_read():
    engine = Engine(Program.parse('s("a\\"b\\\\c\\n\\u00e9").\nt(x) :- s(x).'))
    engine.run()
    assert engine.rows("t") == {('a"b\\c\né',)}


def test_an_unknown_escape_is_a_parse_error_with_its_location():
    with pytest.raises(ParseError, match=r"1:3: unknown escape '\\q'"):
        Program.parse('s("\\q").')


def test_an_integer_too_long_to_read_is_a_parse_error():
    with pytest.raises(ParseError, match="a number of 5000 characters"):
        Program.parse(f"s({'9' * 5000}).")
