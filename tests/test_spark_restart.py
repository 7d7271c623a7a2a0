"""A streaming query's driver dies mid-stream and restarts from Spark's checkpoint and reopt's state
folder: it goes on with the plan it had learnt and returns what an uninterrupted run returns. Also
what the runner and the hook keep in their folder."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import reopt
from reopt.spark.drift import query_sql, write_workload
from reopt.spark.execute import execute
from reopt.spark.hook import attach
from reopt.spark.runner import AdaptiveRunner
from reopt.spark.state_folder import STATE_FILE

from . import stream_driver
from .stream_driver import DRIFT

DRIVER = Path(stream_driver.__file__)
KILLED_AFTER = 2


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("drift")
    write_workload(spark, DRIFT, directory)
    return directory


@pytest.fixture(scope="module")
def uninterrupted(spark, data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    records = stream_driver.stream(spark, data, folder / "checkpoint", None).records
    return [json.loads(stream_driver.as_line(record)) for record in records]


def drive(data: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(DRIVER), str(data), str(folder / "checkpoint"), str(folder / "state"),
               str(folder / "records.jsonl"), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def restarted(data, tmp_path_factory):
    """The stream's driver killed after a batch, then started again on both folders."""
    folder = tmp_path_factory.mktemp("restarted")
    killed = drive(data, folder, "--kill-after", str(KILLED_AFTER))
    before = folder.joinpath("records.jsonl").read_text().splitlines()
    again = drive(data, folder)
    assert again.returncode == 0, again.stderr[-2000:]
    after = folder.joinpath("records.jsonl").read_text().splitlines()[len(before):]
    return killed, [json.loads(line) for line in before], [json.loads(line) for line in after], again


def test_the_driver_was_killed_in_the_middle_of_the_stream(restarted):
    killed, before, _after, _again = restarted
    assert killed.returncode == -signal.SIGKILL
    assert [r["batch"] for r in before] == list(range(KILLED_AFTER + 1))


def test_the_restarted_driver_runs_again_the_batch_spark_had_not_committed(restarted):
    _killed, _before, after, again = restarted
    assert json.loads(again.stdout.strip().splitlines()[-1]) == {"resumed_after": KILLED_AFTER}
    assert [r["batch"] for r in after] == list(range(KILLED_AFTER, DRIFT.batches))


def test_the_first_batch_after_the_restart_runs_the_plan_learnt_before_it(restarted, uninterrupted):
    _killed, _before, after, _again = restarted
    learnt = uninterrupted[KILLED_AFTER + 1]["key"]
    assert learnt != uninterrupted[0]["key"], "the stream should change plan before the restart for this test"
    assert after[0]["key"] == learnt
    assert after[0]["changed"] is True


def test_every_batch_returns_what_it_returns_in_an_uninterrupted_run(restarted, uninterrupted):
    _killed, before, after, _again = restarted
    by_batch = {r["batch"]: r["result"] for r in before + after}
    assert by_batch == {r["batch"]: r["result"] for r in uninterrupted}
    assert after[0]["result"] == before[-1]["result"]


def test_a_runner_refuses_a_state_folder_of_another_query(spark, data, tmp_path):
    saving = stream_driver.runner(spark, data, tmp_path)
    saving.state.save(saving.optimizer)
    other = reopt.Optimizer.from_sql(query_sql(DRIFT).replace("d0.grp < 50", "d0.grp < 40"), saving.optimizer.catalog)
    with pytest.raises(reopt.StateFileError, match=f"{STATE_FILE} holds the state of another query"):
        AdaptiveRunner(other, spark, {}, "events", state_dir=tmp_path)


def test_a_windowed_runner_refuses_a_state_folder(spark, data, tmp_path):
    optimizer = stream_driver.runner(spark, data, None).optimizer
    with pytest.raises(reopt.OptimizerError, match="a windowed runner cannot keep its state in a folder"):
        AdaptiveRunner(optimizer, spark, {}, "events", window=("d0", 2), state_dir=tmp_path)


def test_a_hook_saves_what_it_learns_and_a_new_hook_starts_from_it(spark, data, tmp_path):
    learning = stream_driver.runner(spark, data, None)
    tables = {**learning.static_tables, "events": spark.read.parquet(str(data / "events" / "batch=0004"))}
    hook = attach(spark, learning.optimizer, stage_times=False, state_dir=tmp_path)
    try:
        execute(hook.plan, tables).collect()
        assert hook.wait_for(1) and hook.errors == 0
    finally:
        hook.detach()
    fresh = stream_driver.runner(spark, data, None).optimizer
    resumed = attach(spark, fresh, stage_times=False, state_dir=tmp_path)
    resumed.detach()
    assert resumed.plan == hook.plan
    assert resumed.optimizer.catalog == hook.optimizer.catalog
    assert resumed.plan.key() != fresh.optimize().key()
