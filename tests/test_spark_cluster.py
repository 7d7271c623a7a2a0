"""reopt on a real standalone Spark cluster: a master and a worker, each its own JVM started from the
pyspark install, on 127.0.0.1. The demo and ``optimize(df)`` run against ``spark://127.0.0.1:PORT``,
each from a driver process of its own."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from reopt.spark import generate_tpch

from . import cluster_driver

SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(log: Path, *arguments: str) -> subprocess.Popen:
    """A Spark daemon class in the foreground, as its own JVM process."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *arguments], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as response:
            state = json.load(response)
    except OSError:
        return 0
    return sum(worker.get("state") == "ALIVE" for worker in state.get("workers", []))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("cluster-logs")
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    master = start(logs / "master.log", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(port), "--webui-port", str(ui_port))
    url = f"spark://127.0.0.1:{port}"
    worker = start(logs / "worker.log", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                   "--cores", "1", "--memory", "1500m", "--webui-port", str(worker_ui),
                   "--work-dir", str(tmp_path_factory.mktemp("worker")))
    try:
        deadline = time.monotonic() + 120
        while alive_workers(ui_port) < 1:
            if time.monotonic() > deadline or master.poll() is not None or worker.poll() is not None:
                pytest.fail("the standalone cluster did not start:\n" + "\n".join(
                    f"{name}: {(logs / name).read_text()[-1500:]}" for name in ("master.log", "worker.log")))
            time.sleep(0.5)
        yield {"url": url, "master": master, "worker": worker, "ui_port": ui_port}
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_the_cluster_is_a_master_and_a_worker_in_processes_of_their_own(cluster):
    master, worker = cluster["master"], cluster["worker"]
    assert master.poll() is None and worker.poll() is None
    assert master.pid != worker.pid != os.getpid()
    assert alive_workers(cluster["ui_port"]) == 1


def test_optimize_plans_a_dataframe_on_the_cluster_with_sparks_rows(cluster, tmp_path):
    data = tmp_path / "tpch"
    generate_tpch(0.01, data)
    done = subprocess.run([sys.executable, cluster_driver.__file__, cluster["url"], str(data)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"master": cluster["url"], "executors": 1, "same_rows": True}


def test_the_demo_runs_on_the_cluster_with_results_identical_batch_by_batch(cluster, tmp_path):
    done = subprocess.run([sys.executable, "-m", "reopt", "demo", "--master", cluster["url"], "--batches", "3",
                           "--rows", "20000", "--keys", "5000", "--plot", str(tmp_path / "demo.png")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"Spark master {cluster['url']}" in done.stdout
    assert "results identical batch by batch: yes" in done.stdout
    assert (tmp_path / "demo.png").stat().st_size > 10_000
