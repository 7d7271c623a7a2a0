"""The package as a user installs it: a wheel built from the checkout, installed into a fresh virtual
environment, runs the README's commands from a directory outside the checkout."""

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from .conftest import needs_backend

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The bin directory of a fresh venv holding reopt's wheel (and its PyPI dependencies only)."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work), str(ROOT)],
                   check=True, capture_output=True, text=True)
    wheel = next(work.glob("reopt-*.whl"))
    venv.create(work / "venv", with_pip=True)
    bin_dir = work / "venv" / "bin"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                   check=True, capture_output=True, text=True)
    return bin_dir


def run(command, cwd):
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_wheel_explains_a_query_outside_the_checkout(installed, tmp_path):
    query = tmp_path / "q5.sql"
    query.write_text((ROOT / "reopt" / "queries" / "q5.sql").read_text())
    done = run([str(installed / "reopt"), "explain", str(query), "--tpch", "1"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "broadcast_hash_join" in done.stdout and "scan lineitem" in done.stdout


def test_the_wheel_carries_the_native_core_and_the_example_rules(installed, tmp_path):
    needs_backend("native")  # the wheel has the core wherever the checkout's install built it
    done = run([str(installed / "python"), "-m", "reopt", "engine-demo", "--edges", "300", "--updates", "2"], tmp_path)
    assert done.returncode == 0, done.stderr
    backend = run([str(installed / "python"), "-c", "import reopt.datalog as d; print(d.default_backend())"], tmp_path)
    assert backend.stdout.strip() == "native"


def test_the_wheel_reports_the_version_of_its_metadata(installed, tmp_path):
    import configparser

    metadata = configparser.ConfigParser()
    metadata.read(ROOT / "setup.cfg")
    done = run([str(installed / "reopt"), "--version"], tmp_path)
    assert done.stdout.strip() == f"reopt {metadata['metadata']['version']}"


def test_without_spark_the_demo_says_what_to_install(installed, tmp_path):
    done = run([str(installed / "reopt"), "demo", "--batches", "1"], tmp_path)
    assert done.returncode == 2
    assert "pip install 'reopt[spark]'" in done.stderr
