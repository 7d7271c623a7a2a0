"""A folder where a runner or a hook keeps its optimizer between processes.

A streaming query restarts from its checkpoint after a driver failure or an upgrade; kept beside that
checkpoint, this folder lets reopt restart with everything it had learnt (the catalog with every
observation, the running plan) instead of from its first statistics. It holds one file,
``optimizer.json`` (``reopt.optimizer.state_file``), replaced whole after every re-optimization.

A micro-batch that Spark had not committed when the driver stopped runs again after the restart; its
feedback was saved already, and feeding it again sets the same observations to the same values.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..optimizer import state_file
from ..optimizer.optimizer import Optimizer
from ..optimizer.plan import Plan
from ..optimizer.state_file import StateFileError

log = logging.getLogger(__name__)

STATE_FILE = "optimizer.json"


class StateFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.file = self.path / STATE_FILE

    def resume(self, optimizer: Optimizer) -> tuple[Optimizer, dict[str, Any]]:
        """``optimizer`` as the folder last saved it (its query's statistics, under ``optimizer``'s
        configuration) and what the runner saved beside it; ``optimizer`` itself and nothing where
        the folder holds no state yet. A state of another query raises ``StateFileError``."""
        if not self.file.exists():
            return optimizer, {}
        state = state_file.read(self.file)
        if state.get("query") != optimizer.query.to_dict():
            raise StateFileError(f"{self.file} holds the state of another query; give this query a folder of its own")
        resumed = state_file.optimizer_from_state(state, self.file, config=optimizer.config)
        log.info("resumed the optimizer from %s", self.file)
        extra = state.get("runner", {})
        return resumed, extra if isinstance(extra, dict) else {}

    def save(self, optimizer: Optimizer, extra: dict[str, Any] | None = None) -> None:
        state = state_file.optimizer_state(optimizer)
        if extra:
            state["runner"] = extra
        state_file.write(self.file, state)

    @staticmethod
    def plan(data: Any, optimizer: Optimizer) -> Plan | None:
        """A plan the runner saved, costed under ``optimizer``'s statistics; None if it cannot run now."""
        if data is None:
            return None
        return optimizer.costed(state_file.plan_from_dict(data, optimizer.query))
