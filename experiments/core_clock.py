"""The clock ``core_share.py`` and ``reopt_share.py`` read: seconds spent inside the native core's
runs and inside the Python functions the rules call from them (the plan space's splits and the cost
model), so that a run's own time is the one less the other."""

from __future__ import annotations

import time

from reopt.datalog import nativecore
from reopt.optimizer import cost, plan_space


class Clock:
    """Seconds spent in the native core's runs and in the Python functions they call. ``install``
    wraps them for the rest of the process: the wrappers' own cost falls on the Python side."""

    def __init__(self) -> None:
        self.core = 0.0
        self.functions = 0.0

    def reset(self) -> None:
        self.core = self.functions = 0.0

    @property
    def core_own(self) -> float:
        """The core's runs less the Python functions they called."""
        return self.core - self.functions

    def wrap(self, fn, field: str):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - start)
        return timed

    def install(self) -> None:
        for owner, name in ((cost.CostModel, "scan"), (cost.CostModel, "unary"), (cost.CostModel, "join"),
                            (plan_space.PlanSpace, "split")):
            setattr(owner, name, self.wrap(getattr(owner, name), "functions"))
        nativecore.NativeCore.run = self.wrap(nativecore.NativeCore.run, "core")
