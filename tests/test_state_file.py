"""Optimizer.save and Optimizer.load: a saved optimizer comes back with the plan it had and goes on
re-optimizing as if it had never stopped; a file that cannot be trusted is refused, never used."""

import json
import resource
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reopt
from reopt.optimizer import parse_sql, state_file
from reopt.optimizer.workloads import JOB_NAMES, SHAPES, TPCH, generated, job_catalog, job_sql

from .conftest import examples
from .test_optimizer_search import delta_for

pytestmark = pytest.mark.usefixtures("backend")

BLOW_UP = reopt.DeltaStats.cardinality(["customer", "orders"], 5e7)


@pytest.fixture
def learnt():
    """A Q5 optimizer that has learnt something since its catalog."""
    optimizer = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1))
    optimizer.reoptimize(BLOW_UP + reopt.DeltaStats.cost_factor("sort_merge_join", 2.0))
    return optimizer


@pytest.fixture
def saved(learnt, tmp_path):
    return learnt.save(tmp_path / "q5.json")


@given(st.sampled_from(SHAPES), st.integers(min_value=2, max_value=5), st.integers(min_value=0, max_value=10**6),
       st.data())
@settings(max_examples=examples(30))
def test_a_loaded_optimizer_reoptimizes_as_the_saved_one_would_have(tmp_path_factory, shape, n, seed, data):
    query, catalog = generated(shape, n, seed)
    original = reopt.Optimizer(query, catalog)
    original.optimize()
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        original.reoptimize(data.draw(delta_for(query, original)))
    loaded = reopt.Optimizer.load(original.save(tmp_path_factory.mktemp("state") / "state.json"))
    assert loaded.optimize() == original.optimize()
    assert loaded.catalog == original.catalog
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        delta = data.draw(delta_for(query, original))
        assert loaded.reoptimize(delta) == original.reoptimize(delta)


def test_the_loaded_optimizer_has_the_learnt_plan_not_the_catalogs(learnt, saved):
    fresh = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1)).optimize()
    loaded = reopt.Optimizer.load(saved).optimize()
    assert loaded == learnt.optimize()
    assert loaded.key() != fresh.key()


def test_the_configuration_travels_with_the_state(tmp_path):
    config = reopt.OptimizerConfig.setting("all", reopt.CostWeights(shuffle_partitions=8))
    optimizer = reopt.Optimizer.from_sql(TPCH["Q3"], reopt.Catalog.tpch(1), config)
    loaded = reopt.Optimizer.load(optimizer.save(tmp_path / "q3.json"))
    assert loaded.config == config


@pytest.mark.parametrize("name", JOB_NAMES[::10])
def test_queries_come_back_with_their_predicates_written_the_same(name):
    query = parse_sql(job_sql(name), job_catalog())
    again = reopt.Query.from_dict(json.loads(json.dumps(query.to_dict())))
    assert again.to_dict() == query.to_dict()
    assert sorted(again.predicate_texts()) == sorted(query.predicate_texts())


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(reopt.StateFileError, match="no saved optimizer state at .*absent.json"):
        reopt.Optimizer.load(tmp_path / "absent.json")


def test_a_file_cut_short_is_refused(saved):
    text = saved.read_text()
    saved.write_text(text[: len(text) // 2])
    with pytest.raises(reopt.StateFileError, match="q5.json is cut short or not JSON"):
        reopt.Optimizer.load(saved)


def test_a_file_altered_after_saving_is_refused(saved):
    envelope = json.loads(saved.read_text())
    envelope["state"]["catalog"]["tables"]["orders"]["rows"] *= 10
    saved.write_text(json.dumps(envelope))
    with pytest.raises(reopt.StateFileError, match="altered or damaged"):
        reopt.Optimizer.load(saved)


def test_a_file_of_another_format_version_is_refused(saved):
    envelope = json.loads(saved.read_text())
    envelope["version"] = state_file.VERSION + 1
    saved.write_text(json.dumps(envelope))
    with pytest.raises(reopt.StateFileError, match=f"holds version {state_file.VERSION + 1} .* reads version 1"):
        reopt.Optimizer.load(saved)


def test_a_json_file_of_something_else_is_refused(tmp_path):
    other = tmp_path / "stats.json"
    other.write_text(json.dumps(reopt.Catalog.tpch(1).to_dict()))
    with pytest.raises(reopt.StateFileError, match="stats.json is not a reopt optimizer state"):
        reopt.Optimizer.load(other)


def test_a_consistent_file_whose_plan_its_statistics_do_not_give_is_refused(learnt, tmp_path):
    state = state_file.optimizer_state(learnt)
    state["plan"] = reopt.Optimizer.from_sql(TPCH["Q5"], reopt.Catalog.tpch(1)).optimize().key()
    path = state_file.write(tmp_path / "inconsistent.json", state)
    with pytest.raises(reopt.StateFileError, match="inconsistent.json was saved with the plan"):
        reopt.Optimizer.load(path)


def test_a_save_that_fails_part_way_leaves_the_previous_file_whole(learnt, saved):
    before = saved.read_bytes()
    learnt.reoptimize(reopt.DeltaStats.table("lineitem", rows=1e9))
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, limits[1]))  # writes past 1 KiB now fail
    try:
        with pytest.raises(reopt.StateFileError, match="cannot save the optimizer's state to .*q5.json"):
            learnt.save(saved)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert saved.read_bytes() == before
    assert [p.name for p in saved.parent.iterdir()] == ["q5.json"]
    assert reopt.Optimizer.load(saved).optimize().key() != learnt.optimize().key()
