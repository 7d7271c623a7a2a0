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


def join_changes(query: reopt.Query, catalog: reopt.Catalog) -> list[tuple[reopt.DeltaStats, reopt.DeltaStats]]:
    """The (change, revert) pairs of every join predicate's selectivity scaled by each of
    ``FACTORS``, all from ``catalog``'s statistics (each change is reverted before the next)."""
    return [selectivity_change(query, catalog, predicate.text, factor)
            for predicate in query.joins for factor in FACTORS]
