"""Pruning (the goal bound; aggregate selection, tuple-source suppression, reference counting,
recursive bounding) never changes the plan, stays exact under any sequence of statistics changes,
and keeps the invariants of the plan table: under the goal bound, every entry no costlier than the
best plan shown at its exact best cost; live plans within their bounds, the optimal
tree never pruned, and reference counts equal to the live parent plans."""

from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import reopt
from reopt.optimizer.optimizer import PRUNING_SETTINGS
from reopt.optimizer.workloads import TPCH, generated

from .conftest import DEEP, examples, native_only
from .test_optimizer_search import delta_for

NONE = reopt.OptimizerConfig.setting("none")
SLACK = 1e-9  # the bound's allowance for rounding, as in rules/optimizer.dl


def unpruned(query, catalog):
    optimizer = reopt.Optimizer(query, catalog, NONE)
    return optimizer, optimizer.optimize()


def optimal_tree(optimizer, plan):
    """The (expr, prop, kind, op, l, lp, r, rp) alternatives the plan uses, from the engine's BestPlan."""
    chosen = []

    def walk(node):
        rows = optimizer.engine.lookup("BestPlan", (0, 1), (node.expr, node.prop))
        alternative = min(rows, key=lambda r: r[2:8])[:8]
        chosen.append(alternative)
        for child in node.children:
            walk(child)

    walk(plan.root)
    return chosen


# Shapes up to 8 relations. The default profile keeps each query's whole space under about 4,000
# alternatives (chains and cycles of 8, stars of 7, random graphs of 6, cliques of 5); the deep
# profile goes to 8 relations for every shape but the clique (6: 15,000 alternatives).
LIMITS = {"chain": 8, "cycle": 8, "star": 8 if DEEP else 7, "random": 8 if DEEP else 6, "clique": 6 if DEEP else 5}
QUERY = st.sampled_from(sorted(LIMITS)).flatmap(
    lambda shape: st.tuples(st.just(shape), st.integers(2, LIMITS[shape]), st.integers(0, 10**6)))


class PruningMachine(RuleBasedStateMachine):
    """One optimizer per pruning setting, fed the same deltas, checked against an unpruned full
    optimization after every step."""

    backend = "python"

    @initialize(spec=QUERY)
    def build(self, spec):
        self.query, catalog = generated(*spec)
        self.optimizers = {
            name: reopt.Optimizer(self.query, catalog, reopt.OptimizerConfig.setting(name, backend=self.backend))
            for name in PRUNING_SETTINGS
        }
        # the goal bound's release by best cost alone, without the floor on the rest of the plan
        self.optimizers["goal by cost"] = reopt.Optimizer(
            self.query, catalog, reopt.OptimizerConfig(backend=self.backend, completion_floor=False))
        self.plans = {name: optimizer.optimize() for name, optimizer in self.optimizers.items()}
        self.reference = unpruned(self.query, catalog)

    @rule(data=st.data())
    def apply_delta(self, data):
        delta = data.draw(delta_for(self.query, self.optimizers["none"]))
        self.plans = {name: optimizer.reoptimize(delta) for name, optimizer in self.optimizers.items()}
        self.reference = unpruned(self.query, self.optimizers["none"].catalog)

    @invariant()
    def every_setting_returns_the_unpruned_full_optimum(self):
        _, full = self.reference
        for name, plan in self.plans.items():
            assert (plan.cost, plan.key()) == (full.cost, full.key()), name

    @invariant()
    def the_goal_bound_shows_every_entry_no_costlier_than_the_best_plan_exactly(self):
        """Released by best cost alone, every entry whose best cost is at most the best plan's is
        shown, at its best; under the A* release (the default), "costlier" counts the entry's floor
        on completing it (Remaining)."""
        reference, plan = self.reference
        exact = {(e, p): c for e, p, c in reference.engine.rows("BestCost")}
        for name in ("goal", "goal by cost"):
            engine = self.optimizers[name].engine
            floor = {(e, p): h for e, p, h in engine.rows("Remaining")}
            shown = {(e, p): c for e, p, c in engine.rows("BestCost")}
            assert {entry: c for entry, c in shown.items() if c + floor.get(entry, 0) <= plan.cost} == {
                entry: c for entry, c in exact.items() if c + floor.get(entry, 0) <= plan.cost}, name
            # shown earlier, when the best plan cost more: the cost of a real plan, maybe not the best one
            assert all(c >= exact[entry] for entry, c in shown.items()), name

    @invariant()
    def live_plans_lie_within_their_bounds(self):
        engine = self.optimizers["all"].engine
        bounds = {(e, p): b for e, p, b in engine.rows("Bound")}
        for row in engine.rows("PlanCost"):
            bound = bounds.get(row[:2])
            assert bound is not None, row
            assert row[8] <= bound + SLACK * row[8], row

    @invariant()
    def the_optimal_tree_is_never_pruned(self):
        reference, plan = self.reference
        for name, optimizer in self.optimizers.items():
            alive = optimizer.engine.rows("Alive")
            for alternative in optimal_tree(reference, plan):
                assert alternative in alive, (name, alternative)

    @invariant()
    def reference_counts_equal_live_parent_plans(self):
        for name in ("aggsel+refcount", "all"):
            engine = self.optimizers[name].engine
            parents = Counter({(self.query.full, "any"): 1})
            for _e, _p, kind, _op, left, lprop, right, rprop, _c in engine.rows("PlanCost"):
                if kind != "scan":
                    parents[(left, lprop)] += 1
                if kind == "join":
                    parents[(right, rprop)] += 1
            assert engine.counts("Want") == dict(parents), name


class NativePruningMachine(PruningMachine):
    backend = "native"


MACHINE_SETTINGS = settings(max_examples=100 if DEEP else 12, stateful_step_count=8 if DEEP else 5, deadline=None)
TestPruningMachinePython = PruningMachine.TestCase
TestPruningMachinePython.settings = MACHINE_SETTINGS
TestPruningMachineNative = native_only(NativePruningMachine.TestCase)
TestPruningMachineNative.settings = MACHINE_SETTINGS


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", ["Q5", "Q10", "Q8Join"])
def test_all_pruning_keeps_only_optimal_plans_and_the_entries_they_use(name):
    optimizer = reopt.Optimizer.from_sql(TPCH[name], reopt.Catalog.tpch(1), reopt.OptimizerConfig.setting("all"))
    optimizer.optimize()
    engine = optimizer.engine
    best = {(e, p): c for e, p, c in engine.rows("BestCost")}
    used = {(optimizer.query.full, "any")}
    for e, p, kind, _op, left, lprop, right, rprop, cost in engine.rows("PlanCost"):
        assert cost == best[(e, p)]  # every costed plan left is an optimal one (ties are kept)
        used |= {(left, lprop)} if kind == "unary" else {(left, lprop), (right, rprop)} if kind == "join" else set()
    assert engine.rows("Want") == used
    metrics = optimizer.metrics()
    assert metrics.entries_pruned_ratio > 0.5
    assert metrics.alternatives_pruned_ratio > 0.5


@pytest.mark.usefixtures("backend")
def test_the_goal_bound_costs_no_plan_over_an_entry_costlier_than_the_best_plan():
    catalog = reopt.Catalog.tpch(1)
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, reopt.OptimizerConfig.setting("goal"))
    plan = optimizer.optimize()
    best = {(e, p): c for e, p, c in optimizer.engine.rows("BestCost")}
    for _e, _p, kind, _op, left, lprop, right, rprop, _c in optimizer.engine.rows("PlanCost"):
        inputs = [] if kind == "scan" else [(left, lprop)] if kind == "unary" else [(left, lprop), (right, rprop)]
        assert all(best[entry] <= plan.cost for entry in inputs)
    everything = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, NONE)
    everything.optimize()
    assert optimizer.metrics().alternatives_costed < everything.metrics().alternatives_costed / 1.5


def test_the_goal_bound_refuses_the_memo_based_pruning_beside_it():
    with pytest.raises(reopt.OptimizerError, match="goal_bound cannot be combined with aggregate_selection"):
        reopt.OptimizerConfig(aggregate_selection=True, goal_bound=True)


@pytest.mark.usefixtures("backend")
def test_without_pruning_the_whole_space_is_held():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1), NONE)
    optimizer.optimize()
    metrics = optimizer.metrics()
    assert (metrics.entries_pruned, metrics.alternatives_pruned) == (0, 0)
    assert metrics.alternatives_remembered == 0


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("setting", ["none", "goal"])
def test_settings_without_memos_store_no_copy_of_the_alternatives_or_best_costs(setting):
    """Their module defines Alive and InputCost as plain copies, which the engine reads as aliases."""
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1), reopt.OptimizerConfig.setting(setting))
    optimizer.optimize()
    assert optimizer.engine.program.aliases == {"Alive": "SearchSpace", "InputCost": "BestCost"}
    assert optimizer.engine.rows("Alive") == optimizer.engine.rows("SearchSpace")


@pytest.mark.usefixtures("backend")
def test_the_memo_based_settings_filter_what_is_costed():
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1), reopt.OptimizerConfig.setting("aggsel"))
    optimizer.optimize()
    assert optimizer.engine.program.aliases == {}
    assert optimizer.engine.rows("Alive") < optimizer.engine.rows("SearchSpace")


@pytest.mark.usefixtures("backend")
def test_aggregate_selection_alone_prunes_alternatives_but_keeps_every_entry():
    catalog = reopt.Catalog.tpch(1)
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, reopt.OptimizerConfig.setting("aggsel"))
    optimizer.optimize()
    metrics = optimizer.metrics()
    assert metrics.entries_pruned == 0
    assert metrics.alternatives_pruned > 0
    everything = reopt.Optimizer.from_sql(TPCH["Q5"], catalog, NONE)
    everything.optimize()
    # every feasible alternative was costed once and is remembered, pruned or not
    assert metrics.alternatives_remembered == everything.metrics().alternatives_costed > metrics.alternatives_costed


@pytest.mark.usefixtures("backend")
@settings(max_examples=examples(30))
@given(st.data())
def test_the_order_of_deltas_within_a_batch_does_not_matter(data):
    query, catalog = generated(data.draw(st.sampled_from(["chain", "star", "cycle"])), data.draw(st.integers(3, 6)),
                               data.draw(st.integers(0, 10**6)))
    first = reopt.Optimizer(query, catalog)
    first.optimize()
    deltas = data.draw(st.lists(delta_for(query, first), min_size=2, max_size=4))
    targets = [(change.kind, change.target) for delta in deltas for change in delta.changes]
    assume(len(targets) == len(set(targets)))  # two changes of one statistic do depend on their order
    shuffled = data.draw(st.permutations(deltas))
    second = reopt.Optimizer(query, catalog)
    second.optimize()
    plan_a = first.reoptimize(reopt.DeltaStats.batch(deltas))
    plan_b = second.reoptimize(reopt.DeltaStats.batch(shuffled))
    assert (plan_a.cost, plan_a.key()) == (plan_b.cost, plan_b.key())
    for relation in first.engine.program.derived:
        assert first.engine.rows(relation) == second.engine.rows(relation), relation


@pytest.mark.usefixtures("backend")
def test_an_unknown_pruning_setting_is_named_in_the_error():
    with pytest.raises(reopt.OptimizerError, match="unknown pruning setting 'fast'.*aggsel\\+refcount"):
        reopt.OptimizerConfig.setting("fast")


@pytest.mark.usefixtures("backend")
def test_the_goal_bound_shows_entries_whose_plans_waited_once_their_groups_rose():
    """A join selectivity change raises the cost of an entry below the best plan's; plans that waited
    on it (their inputs cost more than its old best) must be costed before the release order stops
    at the goal, even when other entries' waits, due first, wake nothing (found by the state machine:
    the release once stopped after the first such wait)."""
    query, catalog = generated("random", 6, 1104)
    optimizer = reopt.Optimizer(query, catalog)
    optimizer.optimize()
    optimizer.reoptimize(reopt.DeltaStats.table("t0", rows=4) + reopt.DeltaStats.table("t0", rows=14))
    plan = optimizer.reoptimize(reopt.DeltaStats.selectivity("t1.k4 = t4.k1", 0.99999))
    reference, full = unpruned(query, optimizer.catalog)
    assert (plan.cost, plan.key()) == (full.cost, full.key())
    floor = {(e, p): h for e, p, h in optimizer.engine.rows("Remaining")}  # the A* release's keys
    exact = {(e, p): c for e, p, c in reference.engine.rows("BestCost") if c + floor[e, p] <= full.cost}
    shown = {(e, p): c for e, p, c in optimizer.engine.rows("BestCost") if c + floor[e, p] <= full.cost}
    assert shown == exact


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", ["Q5", "Q10", "Q8Join"])
def test_plans_that_wait_change_no_plan_and_cost_fewer_alternatives(name):
    catalog = reopt.Catalog.tpch(1)
    plans, costed = {}, {}
    for wait in (True, False):
        optimizer = reopt.Optimizer.from_sql(TPCH[name], catalog, reopt.OptimizerConfig(plans_wait=wait))
        plan = optimizer.optimize()
        plans[wait], costed[wait] = (plan.cost, plan.key()), optimizer.engine.stats.total["PlanCost"].fired
    assert plans[True] == plans[False]
    assert costed[True] < costed[False]
