"""A failed run leaves the engine exactly as before, whatever step it fails at.

``Engine.inject_failure(n)`` makes the next run fail after n state changes, as a bug would: a panic
inside the native core (caught there, never reaching the process), an exception in the Python
backend. For every n up to the run's length the run raises ``EvaluationError``, every relation's
rows and counts are as before, and the same deltas then run to the same state as an engine that
never failed.
"""

import pytest

from reopt import Catalog, DeltaStats, Optimizer, OptimizerConfig
from reopt.datalog import Engine, EvaluationError, Program

from .conftest import EXAMPLES

pytestmark = pytest.mark.usefixtures("backend")


def snapshot(engine: Engine) -> dict:
    return {name: (engine.rows(name), engine.counts(name)) for name in engine.program.relations}


def fails_everywhere_and_recovers(engine: Engine, queue, reference: Engine) -> int:
    """Fail the queued run at step 0, 1, 2, ... until it succeeds; the number of steps it took."""
    before = snapshot(engine)
    step = 0
    while True:
        queue(engine)
        engine.inject_failure(step)
        try:
            engine.run()
        except EvaluationError:
            assert snapshot(engine) == before, f"state changed by the run that failed at step {step}"
            engine.discard_pending()
            step += 1
            continue
        break
    queue(reference)
    reference.run()
    assert snapshot(engine) == snapshot(reference)
    return step


def test_a_failure_at_any_step_of_an_update_is_rolled_back():
    program = Program.load(EXAMPLES / "shortest_paths.dl")
    engine, reference = Engine(program), Engine(program)
    edges = [(0, 1, 4.0), (0, 2, 1.0), (2, 1, 1.0), (1, 3, 1.0), (3, 2, 5.0)]
    for e in (engine, reference):
        e.insert("source", [(0,)])
        e.insert("edge", edges)
        e.run()

    def queue(e):
        e.update("edge", old=(0, 2, 1.0), new=(0, 2, 9.0))
        e.delete("edge", [(1, 3, 1.0)])

    assert fails_everywhere_and_recovers(engine, queue, reference) > 10


def test_a_failure_at_any_step_of_a_first_run_leaves_the_engine_empty():
    program = Program.load(EXAMPLES / "transitive_closure.dl")
    engine, reference = Engine(program), Engine(program)

    def queue(e):
        e.insert("edge", [(1, 2), (2, 3), (3, 1)])

    assert fails_everywhere_and_recovers(engine, queue, reference) > 10


def reoptimization_fails_everywhere_and_recovers(optimizer: Optimizer, delta: DeltaStats) -> int:
    """Fail the re-optimization at step 0, 1, 2, ... until it succeeds, which must give a full
    optimization's plan; the number of steps it took."""
    engine = optimizer.engine
    before = snapshot(engine)
    steps = 0
    while True:
        engine.inject_failure(steps)
        try:
            plan = optimizer.reoptimize(delta)
        except EvaluationError:
            assert snapshot(engine) == before, f"state changed by the run that failed at step {steps}"
            steps += 1
            continue
        break
    full = Optimizer(optimizer.query, optimizer.catalog, OptimizerConfig.setting("none")).optimize()
    assert (plan.cost, plan.key()) == (full.cost, full.key())
    return steps


def test_a_failure_in_the_optimizer_program_with_memos_is_rolled_back():
    """Memo passes, negation and ordered release: a failure deep in a re-costing pass undoes it all."""
    optimizer = Optimizer.from_sql("select * from nation, region where n_regionkey = r_regionkey",
                                   Catalog.tpch(1), OptimizerConfig.setting("all"))
    optimizer.optimize()
    assert reoptimization_fails_everywhere_and_recovers(optimizer, DeltaStats.table("nation", rows=2_000_000)) > 20


def test_a_failure_in_either_half_of_a_goal_bounded_update_is_rolled_back():
    """The goal bound evaluates a statistics update's deletions before its insertions (two loops of
    rounds, then the release): a failure anywhere in them undoes both halves."""
    optimizer = Optimizer.from_sql(
        "select * from nation, region, supplier where n_regionkey = r_regionkey and s_nationkey = n_nationkey",
        Catalog.tpch(1))
    optimizer.optimize()
    assert reoptimization_fails_everywhere_and_recovers(optimizer, DeltaStats.table("nation", rows=2_000_000)) > 20


def test_a_failure_while_queueing_a_reoptimization_leaves_nothing_queued(monkeypatch):
    """The statistics are queued before the completion floors are computed: if computing them
    fails, the queued statistics are dropped, and the next re-optimization equals a fresh one."""
    optimizer = Optimizer.from_sql(
        "select * from nation, region, supplier where n_regionkey = r_regionkey and s_nationkey = n_nationkey",
        Catalog.tpch(1))
    optimizer.optimize()

    def broken(*args, **kwargs):
        raise RuntimeError("completion floors failed")

    with monkeypatch.context() as patch:
        patch.setattr(optimizer, "_completions", broken)
        with pytest.raises(RuntimeError, match="completion floors failed"):
            optimizer.reoptimize(DeltaStats.table("nation", rows=2_000_000))
    assert not optimizer.engine.has_pending
    change = DeltaStats.table("supplier", rows=50)
    plan = optimizer.reoptimize(change)
    fresh = Optimizer(optimizer.query, optimizer.catalog, OptimizerConfig.setting("none")).optimize()
    assert (plan.cost, plan.key()) == (fresh.cost, fresh.key())
