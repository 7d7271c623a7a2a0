"""The optimizer's cost rules evaluated from scratch by pyDatalog, an independent engine, give the
same BestCost for every (expression, property) as reopt's engine.

The function predicates are materialised as facts: the plan space is explored from the root with
``PlanSpace.split`` and every alternative's local cost is computed with the cost model. pyDatalog's
``min_`` aggregate does not keep full float precision (about 1e-9 relative was lost in trials), so
costs are compared with a relative tolerance of 1e-6; exact equality of costs is checked against the
brute-force enumerator in test_optimizer_search.py.
"""

import pytest

import reopt
from reopt.optimizer.cost import CostModel
from reopt.optimizer.estimate import Estimator
from reopt.optimizer.plan_space import PlanSpace
from reopt.optimizer.workloads import TPCH, generated

pytestmark = pytest.mark.usefixtures("backend")

RULES = """
plancost(E, P, Op, C) <= scanplan(E, P, Op, C)
plancost(E, P, Op, C) <= unaryplan(E, P, Op, L, LP, X) & bestcost(L, LP, LC) & (C == X + LC)
plancost(E, P, Op, C) <= joinplan(E, P, Op, L, LP, R, RP, X) & bestcost(L, LP, LC) & bestcost(R, RP, RC) & (C == X + LC + RC)
(bestc[E, P] == min_(C, order_by=C)) <= plancost(E, P, Op, C)
bestcost(E, P, C) <= (bestc[E, P] == C)
"""


def materialised_facts(query, catalog):
    space, estimator, costs = PlanSpace(query), Estimator(query, catalog), CostModel()
    factor = lambda op: catalog.cost_factors.get(op, 1.0)  # noqa: E731
    todo, seen, facts = [(query.full, "any")], set(), []
    while todo:
        e, p = todo.pop()
        if (e, p) in seen:
            continue
        seen.add((e, p))
        for kind, op, left, lprop, right, rprop in space.split(e, p):
            if kind == "scan":
                s = estimator.stats(e)
                facts.append(("scanplan", e, p, op, costs.scan(s.rows, s.width, s.scanned, factor(op))[0][0]))
            elif kind == "unary":
                s = estimator.stats(left)
                facts.append(("unaryplan", e, p, op, left, lprop, costs.unary(op, s.rows, s.width, factor(op))[0][0]))
                todo.append((left, lprop))
            else:
                ls, rs, out = estimator.stats(left), estimator.stats(right), estimator.stats(e)
                local = costs.join(op, ls.rows, ls.width, rs.rows, rs.width, out.rows, factor(op),
                                   right_relations=right.bit_count())
                todo += [(left, lprop), (right, rprop)]
                if local:
                    facts.append(("joinplan", e, p, op, left, lprop, right, rprop, local[0][0]))
    return facts


def pydatalog_best_costs(query, catalog, pairs):
    from pyDatalog import pyDatalog

    pyDatalog.clear()
    try:
        for fact in materialised_facts(query, catalog):
            pyDatalog.assert_fact(*fact)
        pyDatalog.load(RULES)
        answers = {}
        for e, p in pairs:
            answer = pyDatalog.ask(f"bestcost({e}, {p!r}, C)")
            answers[(e, p)] = answer.answers[0][0] if answer else None
        return answers
    finally:
        pyDatalog.clear()


def queries():
    catalog = reopt.Catalog.tpch(1)
    for name in ("Q3", "Q10"):
        yield name, reopt.Optimizer.from_sql(TPCH[name], catalog).query, catalog
    for shape in ("chain", "star", "cycle", "clique"):
        query, catalog = generated(shape, 4, seed=11)
        yield f"{shape}-4", query, catalog


CASES = list(queries())


@pytest.mark.parametrize("setting", ["none", "all"])  # the whole space, and the entries pruning keeps
@pytest.mark.parametrize("name, query, catalog", CASES, ids=[name for name, _, _ in CASES])
def test_best_cost_of_every_entry_equals_pydatalog(name, query, catalog, setting):
    optimizer = reopt.Optimizer(query, catalog, reopt.OptimizerConfig.setting(setting))
    optimizer.optimize()
    ours = {(row[0], row[1]): row[2] for row in optimizer.engine.rows("BestCost")}
    theirs = pydatalog_best_costs(query, catalog, ours)
    assert set(theirs) == set(ours)
    for pair, cost in ours.items():
        assert theirs[pair] == pytest.approx(cost, rel=1e-6), (query.label(pair[0]), pair[1])
