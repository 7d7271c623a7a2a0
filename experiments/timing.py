"""Timing helpers shared by the benchmark scripts (run as ``python experiments/<script>.py``)."""

from __future__ import annotations

import statistics
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """The result of ``fn()`` and the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """The median seconds of ``repeat`` calls of ``fn`` after one warm-up call."""
    fn()
    return statistics.median(timed(fn)[1] for _ in range(repeat))
