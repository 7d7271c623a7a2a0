"""The optimizer's state as a file: the query, the catalog with everything runtime feedback taught,
and the configuration, so that an optimizer survives the process that ran it.

The file is JSON: an envelope naming the format and its version, a SHA-256 of the state, and the
state itself. Statistics are plain numbers, and Python writes and reads floats exactly, so a loaded
optimizer holds the very statistics the saved one did and, re-optimization being exact, chooses the
same plan; ``load`` checks that it does before handing the optimizer over. A file that is missing,
cut short, altered, of another version or of another shape raises ``StateFileError`` naming it,
never a wrong plan. ``write`` writes a file beside the target and renames it over the target, so a
save that fails part way leaves the previous file as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .catalog import Catalog
from .cost import CostWeights
from .errors import OptimizerError
from .files import check_envelope, read_json, write_atomically
from .plan import Plan, PlanNode
from .query import Query

if TYPE_CHECKING:
    from .optimizer import Optimizer, OptimizerConfig

FORMAT = "reopt-optimizer-state"
VERSION = 1


class StateFileError(OptimizerError):
    """A saved optimizer's file cannot be used: missing, unreadable, cut short, altered, written by
    another version of the format, or holding something other than what it should. The message
    names the file."""


def _digest(state: dict) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write(path: str | Path, state: dict) -> Path:
    """Write ``state`` in the envelope to ``path``, atomically (``files.write_atomically``)."""
    path = Path(path)
    text = json.dumps({"format": FORMAT, "version": VERSION, "sha256": _digest(state), "state": state}, indent=1)
    try:
        write_atomically(path, text)
    except OSError as exc:
        raise StateFileError(f"cannot save the optimizer's state to {path}: {exc.strerror or exc}") from None
    return path


def read(path: str | Path) -> dict:
    """The state in the file at ``path``, its envelope checked."""
    path = Path(path)
    envelope = read_json(path, StateFileError, "an optimizer state", f"no saved optimizer state at {path}")
    check_envelope(envelope, path, StateFileError, FORMAT, VERSION, "optimizer state")
    state = envelope.get("state")
    if not isinstance(state, dict) or envelope.get("sha256") != _digest(state):
        raise StateFileError(f"{path} was altered or damaged after it was saved (its checksum does not match)")
    return state


def optimizer_state(optimizer: Optimizer) -> dict:
    """What ``optimizer_from_state`` needs: the query, the catalog, the configuration and the plan."""
    config = dataclasses.asdict(optimizer.config)
    return {"query": optimizer.query.to_dict(), "catalog": optimizer.catalog.to_dict(), "config": config,
            "plan": optimizer.optimize().key()}


def optimizer_from_state(state: dict, path: str | Path, backend: str | None = None,
                         config: OptimizerConfig | None = None) -> Optimizer:
    """The optimizer ``state`` describes, on ``backend`` (default: the saved one), checked to choose
    the plan it was saved with. With ``config``, the saved statistics under another configuration
    (whose plan may differ, so it is not checked)."""
    from .optimizer import Optimizer

    try:
        query = Query.from_dict(state["query"])
        catalog = Catalog.from_dict(state["catalog"])
        saved = _config(state["config"], backend)
        optimizer = Optimizer(query, catalog, config or saved)
        plan = optimizer.optimize()
    except KeyError as exc:
        raise StateFileError(f"{path} has no {exc.args[0]!r} in its state") from None
    except OptimizerError as exc:
        raise StateFileError(f"{path} holds an unusable optimizer state: {exc}") from None
    if (config is None or _same_search(config, saved)) and plan.key() != state.get("plan"):
        raise StateFileError(f"{path} was saved with the plan {state.get('plan')!r}, but its statistics give "
                             f"{plan.key()!r}; the state is inconsistent and is not used")
    return optimizer


def _same_search(one: OptimizerConfig, other: OptimizerConfig) -> bool:
    """Whether two configurations choose the same plans: they may differ in backend only."""
    return dataclasses.replace(one, backend=None) == dataclasses.replace(other, backend=None)


def _config(data: Any, backend: str | None) -> OptimizerConfig:
    from .optimizer import OptimizerConfig

    if not isinstance(data, dict) or not isinstance(data.get("weights"), dict):
        raise StateFileError('an optimizer state\'s "config" is an object with "weights"')
    try:
        weights = CostWeights(**data["weights"])
        settings = {name: value for name, value in data.items() if name != "weights"}
        if backend is not None:
            settings["backend"] = backend
        return OptimizerConfig(weights=weights, **settings)
    except TypeError as exc:
        raise StateFileError(f'an optimizer state\'s "config" does not fit this reopt: {exc}') from None


def plan_from_dict(data: Any, query: Query) -> Plan:
    """The operator tree of ``Plan.to_dict``'s output, as a plan of ``query`` (costs as written; the
    optimizer's ``costed`` re-costs it under its statistics)."""

    def node(entry: Any) -> PlanNode:
        if not isinstance(entry, dict):
            raise StateFileError(f"a plan node is an object, got {type(entry).__name__}")
        try:
            children = [node(child) for child in entry["children"]]
            return PlanNode(entry["operator"], query.mask(entry["relations"]), entry["property"],
                            float(entry["cost"]), float(entry["own_cost"]), float(entry["rows"]), children)
        except (KeyError, TypeError, ValueError, OptimizerError) as exc:
            raise StateFileError(f"a plan node is malformed ({type(exc).__name__}: {exc})") from None

    if not isinstance(data, dict):
        raise StateFileError(f"a plan is an object, got {type(data).__name__}")
    return Plan(node(data.get("root")), query)
