"""How the planner orders a delta rule's body."""

from reopt.datalog import Program


def delta_plan(text: str, head: str, delta: str):
    program = Program.parse(text, "t.dl")
    return next(plan for stratum in program.strata for rule in stratum.rules for plan in rule.delta_plans
                if plan.rule.head.name == head and plan.delta_relation == delta)


def test_a_delta_joins_first_the_atom_with_the_largest_share_of_its_columns_bound():
    # wide is bound on two of six columns (a constant and x), narrow on one of two: narrow is the
    # lookup that finds fewest rows, as an optimizer's best costs (expression, property, cost) are
    # against its alternatives (expression, property, kind, operator, inputs)
    plan = delta_plan(".input wide(k, x, a, b, c, y).\n.input narrow(x, y).\n.input d(x).\n"
                      'out(x, y) :- wide("c", x, a, b, c, y), narrow(x, y), d(x).', "out", "d")
    assert [view[0] for view in plan.views] == ["narrow", "wide"]
