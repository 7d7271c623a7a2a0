"""Differential property: the native and the Python backends agree exactly.

Random programs (joins, self-joins, comparisons, arithmetic, stratified negation, recursion under
counting and DRed, min/max/count/sum aggregates, functions, aliases) take random delta sequences on both
backends; after every run the derived deltas, every relation's rows and every derivation count
must be identical, and so must the statistics and the touched rows the optimizer's metrics are
made of.
"""

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from reopt import Optimizer, OptimizerConfig
from reopt.datalog import Engine, Program, ProgramError
from reopt.datalog.errors import EvaluationError
from reopt.optimizer.optimizer import PRUNING_SETTINGS
from reopt.optimizer.workloads import generated

from .conftest import examples, needs_backend
from .test_optimizer_search import delta_for
from .test_ordered_goal import PATHS

INPUTS = {"a": 2, "b": 2, "w": 3}
VARS = ["x", "y", "z"]
VALUE = st.integers(min_value=0, max_value=4)
WEIGHT = st.sampled_from([1, 2, 3, 0.5, 2.5])


def functions():
    return {"twice": lambda v: [(v * 2,)], "split": lambda v: [(v, 0), (v - 1, 1)] if v > 0 else []}


FUNCTION_DECLS = ".function twice(v) -> (d).\n.function split(v) -> (l, r).\n"


@st.composite
def atom(draw, relations: dict[str, int]):
    name = draw(st.sampled_from(sorted(relations)))
    args = [draw(st.sampled_from(VARS + ["_", "1"])) for _ in range(relations[name])]
    return f"{name}({', '.join(args)})"


@st.composite
def rule_for(draw, head: str, readable: dict[str, int], negatable: list[str], aggregate: str | None):
    body = [draw(atom(readable)) for _ in range(draw(st.integers(1, 3)))]
    bound = {v for literal in body for v in VARS if f"({v}," in literal or f" {v}," in literal
             or f" {v})" in literal or f"({v})" in literal}
    assume(bound)
    names = sorted(bound)
    if draw(st.booleans()):
        left, right = draw(st.sampled_from(names)), draw(st.sampled_from(names + ["2"]))
        body.append(f"{left} {draw(st.sampled_from(['<', '<=', '!=', '=']))} {right}")
    if negatable and draw(st.booleans()):
        target = draw(st.sampled_from(negatable))
        body.append(f"!{target}({', '.join(draw(st.sampled_from(names)) for _ in range(2))})")
    if draw(st.booleans()):
        body.append(f"t = {draw(st.sampled_from(names))} * 2 + 1")
        names.append("t")
    if draw(st.integers(0, 4)) == 0:
        body.append(f"twice({draw(st.sampled_from(names))}, d)")
        names.append("d")
    first, second = draw(st.sampled_from(names)), draw(st.sampled_from(names))
    if aggregate:
        return f"{head}({first}, {aggregate}<{second}>) :- {', '.join(body)}."
    return f"{head}({first}, {second}) :- {', '.join(body)}."


@st.composite
def programs(draw):
    """Two to four derived binary relations, each reading inputs and earlier relations (and, for
    some, itself: recursion, declared .acyclic or left to DRed when it may be cyclic)."""
    lines = [".input a(x, y).", ".input b(x, y).", ".input w(x, y, c).", FUNCTION_DECLS]
    readable = dict(INPUTS)
    derived: list[str] = []
    for i in range(draw(st.integers(2, 4))):
        head = f"p{i}"
        aggregate = draw(st.sampled_from([None, None, "min", "max", "count", "sum"]))
        recursive = aggregate in (None, "min") and draw(st.integers(0, 2)) == 0
        scope = dict(readable, **({head: 2} if recursive else {}))
        for _ in range(draw(st.integers(1, 2))):
            lines.append(draw(rule_for(head, scope, [d for d in derived if d in readable], aggregate)))
        readable[head] = 2
        derived.append(head)
        if draw(st.integers(0, 2)) == 0:  # a plain copy, read by later rules: an alias
            lines.append(f"c{i}(x, y) :- {head}(x, y).")
            readable[f"c{i}"] = 2
            derived.append(f"c{i}")
    text = "\n".join(lines)
    try:
        return Program.parse(text, "random.dl")
    except ProgramError:
        assume(False)


ROW = {"a": st.tuples(VALUE, VALUE), "b": st.tuples(VALUE, VALUE), "w": st.tuples(VALUE, VALUE, WEIGHT)}
BATCH = st.lists(st.tuples(st.sampled_from(["insert", "delete"]), st.sampled_from(sorted(INPUTS)), st.data()),
                 min_size=1, max_size=6)


def state(engine: Engine) -> dict:
    return {name: (engine.rows(name), engine.counts(name)) for name in engine.program.relations}


def outcome(engine: Engine, deltas: bool = True):
    try:
        changes = engine.run(deltas=deltas)
    except EvaluationError as exc:
        return ("failed", type(exc.__cause__).__name__ if exc.__cause__ else None)
    return {name: (d.inserted, d.deleted, sorted(d.updated)) for name, d in changes.items()}


@settings(max_examples=examples(300))
@given(program=programs(), steps=st.lists(BATCH, min_size=1, max_size=4))
def test_native_and_python_backends_agree_after_every_run(program, steps):
    needs_backend("native")
    event(f"maintenance: {'+'.join(sorted({s.method for s in program.strata}))}")
    event(f"aggregates: {'+'.join(sorted({i.aggregate for i in program.relations.values() if i.aggregate}))}")
    event(f"aliases: {len(program.aliases)}")
    # A random recursion through arithmetic may never reach a fixpoint (t = 2x + 1 forever): the native
    # core fails at its first 64-bit overflow, the Python one at max_rounds, with integers that double
    # in size every round; a low bound keeps that failure quick (a terminating program here reaches its
    # fixpoint in far fewer rounds).
    # The third engine runs without keeping deltas, as the optimizer does: the native core then builds
    # only the changes a later stratum, a memo or a goal reads, and must reach the same state.
    engines = [Engine(program, functions(), backend=b, max_rounds=5_000) for b in ("python", "native", "native")]
    present: dict[str, list] = {name: [] for name in INPUTS}
    for batch in steps:
        for kind, name, data in batch:
            if kind == "delete" and present[name]:
                row = data.draw(st.sampled_from(present[name]))
                present[name].remove(row)
                for engine in engines:
                    engine.delete(name, [row])
            else:
                row = data.draw(ROW[name])
                present[name].append(row)
                for engine in engines:
                    engine.insert(name, [row])
        python, native, quiet = outcome(engines[0]), outcome(engines[1]), outcome(engines[2], deltas=False)
        assert python == native
        if isinstance(python, tuple):
            assert quiet == python
            for engine in engines:
                engine.discard_pending()
            return
        assert quiet == {}
        for other in engines[1:]:
            assert state(engines[0]) == state(other)
            for name, info in program.relations.items():
                assert engines[0].stats.last[name] == other.stats.last[name], name
                if not info.is_input:
                    assert engines[0].touched_rows(name) == other.touched_rows(name), name


NODE = st.integers(0, 5)
EDGE = st.tuples(NODE, NODE, st.sampled_from([0, 1, 2, 3, 0.5, -1])).filter(lambda e: e[0] < e[1])


def exact_paths(edges: list) -> set:
    """Every node's best cost, from scratch and with no goal to stop at."""
    engine = Engine(Program.parse(PATHS, "paths.dl"), backend="python")
    engine.insert("src", [(0,)])
    engine.insert("e", edges)
    engine.run()
    return engine.rows("best")


# the same program, its candidates waiting while their node holds a cheaper one (``until``)
WAITING_PATHS = PATHS.replace("e(x, y, w), c = b + w.", "e(x, y, w), until best(y) >= b + w, c = b + w.")
assert "until" in WAITING_PATHS


# the release in order of value plus a heuristic (``plus``), one the test sets at random per node:
# sometimes inconsistent (about 1 run in 35 fails), so failures must match as successes do
HEURISTIC_PATHS = PATHS.replace(".input target(t).", ".input target(t).\n.input togo(x, h).").replace(
    ".ordered best up to target.", ".ordered best up to target plus togo.")
assert "plus togo" in HEURISTIC_PATHS
PATH_STEP = st.tuples(st.sampled_from(["insert", "insert", "delete", "goal", "togo"]), st.data())


@settings(max_examples=examples(200))
@given(target=NODE, steps=st.lists(st.lists(PATH_STEP, min_size=1, max_size=5), min_size=1, max_size=5),
       text=st.sampled_from([PATHS, WAITING_PATHS, HEURISTIC_PATHS]))
def test_ordered_release_up_to_a_goal_agrees_on_both_backends_and_is_exact_up_to_the_goal(target, steps, text):
    """Random edge insertions and deletions on a DAG (a negative weight may make a value fall, which
    must fail alike) and moves of the goal, with and without waiting candidates, and with a random
    heuristic that changes: after every run both backends hold the same rows, counts and statistics,
    and, without the heuristic (which may overestimate), every node no costlier than the goal has its
    from-scratch best cost."""
    needs_backend("native")
    engines = [Engine(Program.parse(text, "paths.dl"), backend=b) for b in ("python", "native")]
    for engine in engines:
        engine.insert("src", [(0,)])
        engine.insert("target", [(target,)])
    edges: list = []
    togo: dict = {}
    for batch in steps:
        for kind, data in batch:
            if kind == "delete" and edges:
                edge = data.draw(st.sampled_from(edges))
                edges.remove(edge)
                for engine in engines:
                    engine.delete("e", [edge])
            elif kind == "goal":
                new = data.draw(NODE)
                for engine in engines:
                    engine.update("target", old=(target,), new=(new,))
                target = new
            elif kind == "togo":
                if text is not HEURISTIC_PATHS:
                    continue
                node, h = data.draw(NODE), data.draw(st.sampled_from([0, 0.5, 1, 2, 4]))
                for engine in engines:
                    if node in togo:
                        engine.delete("togo", [(node, togo[node])])
                    engine.insert("togo", [(node, h)])
                togo[node] = h
            else:
                edge = data.draw(EDGE)
                edges.append(edge)
                for engine in engines:
                    engine.insert("e", [edge])
        python, native = (outcome(engine) for engine in engines)
        assert python == native
        if text is HEURISTIC_PATHS:
            event(f"a run with a random heuristic: {'failed' if isinstance(python, tuple) else 'succeeded'}")
        if isinstance(python, tuple):
            return
        assert state(engines[0]) == state(engines[1])
        for name in engines[0].program.relations:
            assert engines[0].stats.last[name] == engines[1].stats.last[name], name
        if any(w < 0 for _, _, w in edges) or text is HEURISTIC_PATHS:
            continue  # no exact answer to compare with: a from-scratch run may fail too, a heuristic overestimate
        exact = exact_paths(edges)
        bound = next((c for node, c in exact if node == target), float("inf"))
        shown = engines[0].rows("best")
        assert {r for r in shown if r[1] <= bound} == {r for r in exact if r[1] <= bound}


SELF_JOIN = """
.input e(x, c).
.input pair(a, b).
best(x, min<c>) :- e(x, c).
s(a, b, t) :- pair(a, b), best(a, ca), best(b, cb), t = ca + cb.
"""


@pytest.mark.usefixtures("backend")
def test_a_self_join_over_two_changed_groups_counts_each_derivation_once():
    """One round changes both inputs of a derivation: the atom before the delta reads the new
    contents, the one after it the old ones (a native bug once let both read the round's leavers)."""
    engine = Engine(Program.parse(SELF_JOIN, "self_join.dl"))
    engine.insert("pair", [(1, 2)])
    engine.insert("e", [(1, 10.0), (2, 20.0)])
    engine.run()
    engine.update("e", old=(1, 10.0), new=(1, 5.0))
    engine.update("e", old=(2, 20.0), new=(2, 7.0))
    engine.run()
    assert engine.counts("s") == {(1, 2, 12.0): 1}


@settings(max_examples=examples(15))
@given(shape=st.sampled_from(["chain", "star", "cycle", "random"]), size=st.integers(2, 5),
       seed=st.integers(0, 10**6), setting=st.sampled_from(sorted(PRUNING_SETTINGS)), data=st.data())
def test_the_optimizer_program_holds_the_same_state_on_both_backends(shape, size, seed, setting, data):
    """The optimizer's rules use every engine feature at once (functions, negation, memos and passes,
    .ordered); after each re-optimization both backends hold the same rows in every relation."""
    needs_backend("native")
    query, catalog = generated(shape, size, seed=seed)
    optimizers = [Optimizer(query, catalog, OptimizerConfig.setting(setting, backend=b)) for b in ("python", "native")]
    plans = [o.optimize() for o in optimizers]
    for step in range(data.draw(st.integers(1, 3)) + 1):
        if step:
            delta = data.draw(delta_for(query, optimizers[0]))
            plans = [o.reoptimize(delta) for o in optimizers]
        assert (plans[0].cost, plans[0].key()) == (plans[1].cost, plans[1].key())
        for name in optimizers[0].engine.program.relations:
            assert optimizers[0].engine.rows(name) == optimizers[1].engine.rows(name), name
