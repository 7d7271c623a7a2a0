"""Stateful property: after any sequence of delta batches, the incremental state equals a
from-scratch evaluation of the same inputs, for programs covering every maintenance path."""

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reopt.datalog import Engine, Program

from .conftest import EXAMPLES, native_only
from .helpers import derived_rows, from_scratch

SMALL = st.integers(min_value=0, max_value=5)
WEIGHT = st.integers(min_value=1, max_value=9)

AGGREGATES = """
.input e(x, y, w).
.input tag(x, t).
joined(x, t, w) :- e(x, y, w), tag(y, t).
n(x, count<y>) :- e(x, y, _).
total(t, sum<w>) :- joined(_, t, w).
heaviest(x, max<w>) :- e(x, _, w), w > 2.
lightest(t, min<w>) :- joined(_, t, w).
"""

# A DAG (edges only go from smaller to larger nodes): recursion is well-founded, so counting
# maintains even a min over arithmetic that is not monotone.
DAG = """
.input e(x, y, w).
.input src(s).
.acyclic best.
best(s, min<c>) :- src(s), c = 0.
best(y, min<c>) :- best(x, b), e(x, y, w), x < y, c = w * 3 - b.
"""

FUNCTIONS = """
.input e(x, y, w).
.function spread(x, w) -> (k, v).
s(x, k, v) :- e(x, _, w), spread(x, w, k, v).
best(k, min<v>) :- s(_, k, v).
"""


def spread(x, w):
    return [(x % 3, w + i) for i in range(x % 2 + 1)]


def rows_for(name: str, arity: int):
    values = [SMALL, SMALL, WEIGHT][:arity] if arity <= 3 else [SMALL] * arity
    return st.tuples(*values)


def machine(program: Program, functions=None, sources: bool = False, backend: str = "python"):
    """A state machine that queues random deltas on every input relation and checks each run."""

    class Machine(RuleBasedStateMachine):
        @initialize()
        def build(self):
            self.engine = Engine(program, functions, backend=backend)
            self.present: dict[str, list] = {name: [] for name in program.inputs}
            if sources:
                self.engine.insert("src" if "src" in program.relations else "source", [(0,)])
                self.present["src" if "src" in program.relations else "source"].append((0,))

        @rule(data=st.data())
        def insert(self, data):
            name = data.draw(st.sampled_from(program.inputs))
            row = data.draw(rows_for(name, program.relations[name].arity))
            self.engine.insert(name, [row])
            self.present[name].append(row)

        @precondition(lambda self: any(self.present.values()))
        @rule(data=st.data())
        def delete(self, data):
            name = data.draw(st.sampled_from([n for n, rows in self.present.items() if rows]))
            row = data.draw(st.sampled_from(self.present[name]))
            self.engine.delete(name, [row])
            self.present[name].remove(row)

        @precondition(lambda self: any(self.present.values()))
        @rule(data=st.data())
        def update(self, data):
            name = data.draw(st.sampled_from([n for n, rows in self.present.items() if rows]))
            old = data.draw(st.sampled_from(self.present[name]))
            new = data.draw(rows_for(name, program.relations[name].arity))
            self.engine.update(name, old=old, new=new)
            self.present[name].remove(old)
            self.present[name].append(new)

        @rule()
        def run(self):
            self.engine.run()

        @invariant()
        def equals_from_scratch(self):
            if not self.engine.has_pending:
                assert derived_rows(self.engine) == from_scratch(self.engine, functions)

    return Machine


TC = Program.load(EXAMPLES / "transitive_closure.dl")
PATHS = Program.load(EXAMPLES / "shortest_paths.dl")
SAME_GENERATION = Program.load(EXAMPLES / "same_generation.dl")

TestTransitiveClosurePython = machine(TC).TestCase
TestShortestPathsPython = machine(PATHS, sources=True).TestCase
TestSameGenerationPython = machine(SAME_GENERATION).TestCase
TestAggregatesPython = machine(Program.parse(AGGREGATES, "aggregates.dl")).TestCase
TestAcyclicCountingPython = machine(Program.parse(DAG, "dag.dl"), sources=True).TestCase
TestFunctionsPython = machine(Program.parse(FUNCTIONS, "functions.dl"), {"spread": spread}).TestCase

TestTransitiveClosureNative = native_only(machine(TC, backend="native").TestCase)
TestShortestPathsNative = native_only(machine(PATHS, sources=True, backend="native").TestCase)
TestSameGenerationNative = native_only(machine(SAME_GENERATION, backend="native").TestCase)
TestAggregatesNative = native_only(machine(Program.parse(AGGREGATES, "aggregates.dl"), backend="native").TestCase)
TestAcyclicCountingNative = native_only(machine(Program.parse(DAG, "dag.dl"), sources=True, backend="native").TestCase)
TestFunctionsNative = native_only(
    machine(Program.parse(FUNCTIONS, "functions.dl"), {"spread": spread}, backend="native").TestCase)
