"""Statistics changes shared by the benchmark scripts: a join's selectivity scaled by a factor."""

from __future__ import annotations

import reopt
from reopt.optimizer.estimate import Estimator

FACTORS = (0.125, 0.25, 0.5, 2.0, 4.0, 8.0)


def selectivity_change(query: reopt.Query, catalog: reopt.Catalog, predicate: str,
                       factor: float) -> tuple[reopt.DeltaStats, reopt.DeltaStats]:
    """The delta that scales the join ``predicate``'s current selectivity by ``factor`` (capped at 1),
    and the delta that restores it."""
    estimator = Estimator(query, catalog)
    left, right = [side.strip().split(".")[0] for side in predicate.split("=")]
    base = estimator.rows(query.mask([left, right])) / (
        estimator.rows(query.mask([left])) * estimator.rows(query.mask([right])))
    return (reopt.DeltaStats.selectivity(predicate, min(1.0, base * factor)),
            reopt.DeltaStats.selectivity(predicate, min(1.0, base)))
