"""The JOB benchmark times what a user would plan with instead, in the same run: DuckDB's and Spark's
planners plan each query from scratch, in full (every join planned, none folded away), and the
summary sets reopt's re-optimization beside them per size class."""

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

SCRIPT = ROOT / "experiments" / "bench_job.py"
QUERIES = {"1a": 5, "7a": 8}  # name: relations


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_job")
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", ",".join(QUERIES), "--repeat", "1",
                           "--optimizers", "default,duckdb,spark_cbo", "--out", str(folder)],
                          cwd=folder, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "bench_job.json").read_text()), done.stdout


@pytest.mark.parametrize("planner", ["duckdb", "spark_cbo"])
def test_an_external_planner_plans_every_join_of_every_query(run, planner):
    results, _ = run
    planned = {r["query"]: r for r in results if r["optimizer"] == planner}
    assert set(planned) == set(QUERIES)
    for name, relations in QUERIES.items():
        assert planned[name]["status"] == "ok"
        assert planned[name]["joins"] == relations - 1
        assert 0 < planned[name]["optimize_s"] < 60


@pytest.mark.parametrize("planner", ["duckdb", "spark_cbo"])
def test_the_summary_sets_reoptimization_beside_each_external_planner(run, planner):
    _, printed = run
    lines = [line for line in printed.splitlines() if f"{planner} plans from scratch" in line]
    assert [line.split(" relations")[0] for line in lines] == ["4-6", "7-9"]
    assert all("re-opt after a join's change" in line and "x as fast" in line for line in lines)
