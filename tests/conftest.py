"""Shared test configuration: hypothesis profiles, the evaluation backends, helpers.

``REOPT_PROFILE=deep`` selects the long profile; the default ``ci`` profile keeps CI short.
Engine and optimizer test modules declare ``pytestmark = pytest.mark.usefixtures("backend")`` and
run once per backend. ``REOPT_REQUIRE_NATIVE=1`` (set by .ci/run) stops the session at once if the
native backend was not built, instead of skipping its half of the tests.
"""

import os
import unittest
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from reopt.datalog import engine as engine_module
from reopt.datalog import nativecore
from reopt.datalog.engine import BACKENDS

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=_SUPPRESSED, print_blob=True)
settings.register_profile("deep", max_examples=1000, deadline=None, suppress_health_check=_SUPPRESSED, print_blob=True)
settings.load_profile(os.environ.get("REOPT_PROFILE", "ci"))
DEEP = os.environ.get("REOPT_PROFILE") == "deep"


def examples(n: int) -> int:
    """A test's own example count, ten times as many under the deep profile: a property that sets
    its count (a costly one runs fewer than the profile's) deepens with the profile all the same."""
    return 10 * n if DEEP else n

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rules" / "examples"


def pytest_configure(config):
    if os.environ.get("REOPT_REQUIRE_NATIVE") == "1" and not nativecore.available():
        pytest.exit(f"REOPT_REQUIRE_NATIVE=1 but the native backend did not build: {nativecore._IMPORT_ERROR}",
                    returncode=3)


native_only = unittest.skipUnless(nativecore.available(), "the native backend is not built here")


def needs_backend(name: str) -> None:
    if name == "native" and not nativecore.available():
        pytest.skip("the native backend is not built here (no Rust toolchain at install time)")


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch) -> str:
    """Runs the test once per evaluation backend: engines built without an explicit backend use it."""
    needs_backend(request.param)
    monkeypatch.setattr(engine_module, "default_backend", lambda: request.param)
    return request.param


@pytest.fixture(scope="session")
def spark():
    """One real local Spark session for every Spark test (started on first use)."""
    from reopt.spark import local_session

    session = local_session("reopt-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def tables(spark, tmp_path_factory):
    """TPC-H at scale 0.01 as Parquet files (generated once per run), each table also a temporary
    view of its name for the tests that start from SQL."""
    from reopt.spark import load_tpch

    frames = load_tpch(spark, 0.01, tmp_path_factory.mktemp("tpch"))
    for name, frame in frames.items():
        frame.createOrReplaceTempView(name)
    return frames
