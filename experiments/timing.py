"""Timing helpers shared by the benchmark scripts (run as ``python experiments/<script>.py``)."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Mapping, Sequence, TypeVar

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


def rotated(names: Sequence[str], turn: int) -> list[str]:
    """``names`` starting at ``turn`` (modulo their number): compared variants take turns at going
    first, since the first to run a batch reads its files cold."""
    shift = turn % len(names)
    return list(names[shift:]) + list(names[:shift])


def interleaved_samples(fns: Mapping[str, Callable[[], object]], repeat: int,
                        warm_each: bool = False) -> dict[str, list[float]]:
    """The seconds of ``repeat`` calls of each function, timed in turns: one call of each per round,
    after one warm-up call of each. A shared machine's load drifts over seconds; timed in turns,
    every function meets the same drift, so the ratios between them hold even when the times do not.
    ``warm_each`` calls each function once more, untimed, right before each timed call: a function
    timed right after a much larger one (a Python-backend optimization) otherwise starts with the
    caches the other left, and pays for them (top-down on Q5: 1.49 to 1.65 ms)."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            if warm_each:
                fn()
            samples[name].append(timed(fn)[1])
    return samples
