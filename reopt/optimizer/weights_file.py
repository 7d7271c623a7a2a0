"""Cost weights as a file: what ``reopt calibrate`` measured on one Spark, for every later session.

The file is JSON: the format's name and version, the per-row and per-job weights of ``CostWeights``
(the session limits, broadcast threshold, shuffle partitions and task memory, are the session's and
are read from it, not saved), and the fit that produced them, for a person to read. A file that is
missing, not JSON, of another format or version, or whose weights are missing, unknown or not
positive numbers raises ``WeightsFileError`` naming it. A save replaces the file only once the new
one is whole.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from .cost import CostWeights
from .errors import OptimizerError
from .files import check_envelope, read_json, write_atomically

FORMAT = "reopt-cost-weights"
VERSION = 1
SESSION_LIMITS = ("broadcast_threshold", "shuffle_partitions", "hash_build_memory")
MEASURED = tuple(f.name for f in dataclasses.fields(CostWeights) if f.name not in SESSION_LIMITS)


class WeightsFileError(OptimizerError):
    """A cost weights file cannot be used; the message names the file and what is wrong with it."""


def save_weights(path: str | Path, weights: CostWeights, fit: list[dict[str, Any]] | None = None,
                 about: dict[str, Any] | None = None) -> Path:
    """Write the measured weights of ``weights`` to ``path``, with the fit and a description of where
    they were measured (``about``) for a person to read."""
    path = Path(path)
    data = {"format": FORMAT, "version": VERSION,
            "weights": {name: getattr(weights, name) for name in MEASURED},
            "fit": fit or [], "about": about or {}}
    try:
        write_atomically(path, json.dumps(data, indent=1))
    except OSError as exc:
        raise WeightsFileError(f"cannot save cost weights to {path}: {exc.strerror or exc}") from None
    return path


def load_weights(path: str | Path, base: CostWeights | None = None) -> CostWeights:
    """``base`` (default ``CostWeights()``) with the measured weights of the file at ``path``."""
    path = Path(path)
    data = read_json(path, WeightsFileError, "a cost weights file",
                     f"no cost weights file at {path} (make one with: reopt calibrate --out {path})")
    check_envelope(data, path, WeightsFileError, FORMAT, VERSION, "cost weights file")
    weights = data.get("weights")
    if not isinstance(weights, dict):
        raise WeightsFileError(f"{path} has no \"weights\" object")
    unknown = sorted(set(weights) - set(MEASURED))
    missing = sorted(set(MEASURED) - set(weights))
    if unknown or missing:
        raise WeightsFileError(f"{path}: " + "; ".join(
            ([f"unknown weights {', '.join(unknown)}"] if unknown else [])
            + ([f"missing weights {', '.join(missing)}"] if missing else [])))
    for name, value in weights.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise WeightsFileError(f"{path}: weight {name} must be a positive number, got {json.dumps(value)[:40]}")
    return dataclasses.replace(base or CostWeights(), **{name: float(value) for name, value in weights.items()})
