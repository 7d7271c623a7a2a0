"""From ``DeltaStats`` to the fact deltas a re-optimization hands the engine.

Two steps, each done once per re-optimization:

* ``resolve`` reads a delta against one query and catalog in a single pass: it validates every
  change, builds the catalog after it, and works out which relations' leaf estimates and which
  expressions' estimates it may move;
* ``fact_delta`` turns that into the changed rows of the four fact families the rules read:
  ``Stats`` (an expression's rows, width and bytes scanned), ``CostFactor``, ``StatsVersion`` (the
  memo-based pruning's invalidation stamp) and ``Completion`` (the A* floor), as replacements of
  the rows ``LoadedFacts`` holds.

Nothing here touches the engine: the optimizer queues ``FactDelta.replacements`` and, once the run
succeeded, ``LoadedFacts.advance`` makes the new rows the loaded ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from .catalog import Catalog, check_count, check_selectivity
from .errors import QueryError, StatisticsError
from .estimate import Estimator, ExprStats
from .plan_space import OPERATORS
from .query import Query

Floors = Callable[[dict[int, ExprStats], dict[str, float], Iterable[int]], dict[int, float]]


@dataclass(frozen=True)
class ResolvedDelta:
    """A delta read against one query and catalog."""

    catalog: Catalog  # the statistics with every change applied
    leaves: int  # mask of the relations whose leaf estimates (rows, width, bytes scanned) may change
    needs: tuple[int, ...]  # an expression's estimate may change only if it holds one of these; 0: any

    def expressions(self, masks: Iterable[int]) -> list[int]:
        """Those of ``masks`` whose estimates the delta may change."""
        masks = list(masks)
        if 0 in self.needs:
            return masks
        return [mask for mask in masks if any(needed & mask == needed for needed in self.needs)]


def resolve(delta, query: Query, catalog: Catalog) -> ResolvedDelta:
    """Validate and read every change of ``delta`` (a ``DeltaStats``) once; any invalid change raises
    ``StatisticsError`` before anything is built. ``catalog`` is never modified.

    What an estimate depends on (``estimate.py``): a table's change moves its aliases' leaves and
    every expression holding one; a filter's selectivity its relation's leaf; a join predicate's
    selectivity only expressions holding both ends (a join predicate counts only there); an observed
    cardinality can move corrections between join predicates anywhere in the query, so every
    expression; so does any change while the catalog holds observations, whose residuals it moves.
    A cost factor moves no estimate.

    Tables no change touches are shared with ``catalog``, not copied: the optimizers treat a catalog
    as a value (a changed table is replaced here, never changed in place), and copying every table
    and column took a third of a small query's re-optimization bookkeeping.
    """
    result = Catalog(dict(catalog.tables), catalog.selectivities, catalog.observed, catalog.cost_factors)
    leaves = 0
    needs: list[int] = []
    for change in delta.changes:
        if change.kind == "table":
            aliases = [alias for alias, table in query.relations if table == change.target]
            leaves |= query.mask(aliases)
            needs += [query.bit(alias) for alias in aliases]
            stats = result.tables[change.target] = replace(result.table(change.target))
            rows, size, width = change.values
            if rows is not None:
                stats.rows = check_count(rows, f"rows of table '{change.target}'")
            if width is not None:
                stats.width = check_count(width, f"width of table '{change.target}'", allow_zero=False)
            if size is not None:
                size = check_count(size, f"bytes of table '{change.target}'")
                if stats.rows:
                    stats.width = max(size / stats.rows, 1e-9)
        elif change.kind == "selectivity":
            value = check_selectivity(change.values[0], f"selectivity of {change.target!r}")
            try:
                canonical = query.resolve_predicate(change.target)
            except QueryError as exc:
                raise StatisticsError(str(exc)) from None
            result.selectivities[canonical] = value
            predicate = query.predicate(change.target)
            if hasattr(predicate, "alias"):  # a filter
                leaves |= query.bit(predicate.alias)
                needs.append(query.bit(predicate.alias))
            else:
                needs.append(query.mask([predicate.left.alias, predicate.right.alias]))
        elif change.kind == "cardinality":
            names = change.target
            unknown = sorted(names - set(query.aliases))
            if unknown or not names:
                raise StatisticsError(
                    f"{', '.join(unknown) or 'an empty set'} is not a relation of the query "
                    f"({', '.join(query.aliases)})")
            if not query.is_connected(query.mask(names)):
                raise StatisticsError(
                    f"{{{', '.join(sorted(names))}}} is not a connected expression of the query, "
                    "so no plan computes it")
            result.observed[names] = check_count(change.values[0], f"observed rows of {{{', '.join(sorted(names))}}}")
            needs.append(0)
        elif change.kind == "cost_factor":
            if change.target not in OPERATORS:
                raise StatisticsError(f"unknown operator {change.target!r}; operators: {', '.join(OPERATORS)}")
            result.cost_factors[change.target] = check_count(
                change.values[0], f"cost factor of {change.target!r}", allow_zero=False)
    if catalog.observed and any(change.kind != "cost_factor" for change in delta.changes):
        needs = [0]
    return ResolvedDelta(result, leaves, tuple(needs))


def stats_row(mask: int, stats: ExprStats) -> tuple:
    """An expression's ``Stats`` fact."""
    return (mask, stats.rows, stats.width, stats.scanned)


@dataclass
class LoadedFacts:
    """The fact rows the engine holds, by family: what a fact delta replaces."""

    stats: dict[int, ExprStats]
    factors: dict[str, float]
    versions: dict[int, int]  # empty unless the memo-based pruning is on
    completion: dict[int, float]  # empty unless the A* floor is on

    def advance(self, delta: "FactDelta") -> None:
        """Make ``delta``'s rows the loaded ones, after the engine took them."""
        self.stats.update(delta.stats)
        self.factors = {**self.factors, **delta.factors}
        self.versions.update(delta.versions)
        self.completion.update(delta.completion)


@dataclass(frozen=True)
class FactDelta:
    """The rows of each fact family that change: new values by key."""

    stats: dict[int, ExprStats]
    factors: dict[str, float]
    versions: dict[int, int]
    completion: dict[int, float]

    def replacements(self, loaded: LoadedFacts) -> list[tuple[str, list[tuple[tuple, tuple]]]]:
        """(relation, [(old row, new row), ...]) for each family with a change."""
        families = [
            ("Stats", [(stats_row(m, loaded.stats[m]), stats_row(m, s)) for m, s in self.stats.items()]),
            ("CostFactor", [((op, loaded.factors[op]), (op, f)) for op, f in self.factors.items()]),
            ("StatsVersion", [((m, loaded.versions[m]), (m, v)) for m, v in self.versions.items()]),
            ("Completion", [((m, loaded.completion[m]), (m, h)) for m, h in self.completion.items()]),
        ]
        return [(relation, pairs) for relation, pairs in families if pairs]


def fact_delta(loaded: LoadedFacts, resolved: ResolvedDelta, estimator: Estimator, subsets: list[int],
               versioned: bool, floors: Floors | None) -> FactDelta:
    """What ``resolved`` changes in the loaded facts over the plan space's ``subsets``.

    ``estimator`` estimates under ``resolved.catalog``. With ``versioned`` (the memo-based pruning),
    every expression whose own statistics, a sub-expression's or any cost factor changed gets its
    next version. With ``floors`` (the A* release), the floors that move: an expression's floor reads
    its own rows, and every relation's rows and scan and the cost factors, so a leaf's or a factor's
    change moves them all.
    """
    stats = {}
    for mask in resolved.expressions(subsets):
        new = estimator.stats(mask)
        if new != loaded.stats[mask]:
            stats[mask] = new
    factors = {op: resolved.catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
    changed_factors = {op: f for op, f in factors.items() if f != loaded.factors[op]}
    versions = {}
    if versioned and (stats or changed_factors):
        versions = {mask: loaded.versions[mask] + 1 for mask in subsets
                    if changed_factors or any(sub & mask == sub for sub in stats)}
    completion = {}
    if floors is not None:
        reaches_all = changed_factors or any(mask.bit_count() == 1 for mask in stats)
        moved = floors({**loaded.stats, **stats}, factors, subsets if reaches_all else stats)
        completion = {mask: h for mask, h in moved.items() if h != loaded.completion[mask]}
    return FactDelta(stats, changed_factors, versions, completion)
