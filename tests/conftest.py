"""Shared test configuration: hypothesis profiles and helpers.

``REOPT_PROFILE=deep`` selects the long profile; the default ``ci`` profile keeps CI short.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile(
    "deep", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("REOPT_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rules" / "examples"


@pytest.fixture(scope="session")
def spark():
    """One real local Spark session for every Spark test (started on first use)."""
    from reopt.spark import local_session

    session = local_session("reopt-tests")
    yield session
    session.stop()
