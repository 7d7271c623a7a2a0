"""The declarative optimizer: rules/optimizer.dl evaluated by the incremental engine.

``optimize()`` loads the query and its statistics as facts and reads the best plan out of
``BestPlan``; ``reoptimize(delta)`` turns a ``DeltaStats`` into updates of the ``Stats`` and
``CostFactor`` facts that actually changed (and of the ``StatsVersion`` of every expression above
them, which retires the pruning memos those changes make stale), lets the engine propagate only
those, and reads the plan again. The result equals ``Optimizer(query, new_catalog).optimize()``:
same cost, same plan key, under every pruning setting.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from sqlglot import exp

from ..datalog import Engine, Program
from ..datalog.engine import BACKENDS
from .catalog import Catalog
from .cost import CostModel, CostWeights
from .deltas import DeltaStats
from .errors import OptimizerError, QueryTooLargeError, StatisticsError
from .estimate import Estimator, ExprStats
from .fact_deltas import LoadedFacts, fact_delta, resolve, stats_row
from .greedy import greedy_join_tree
from .plan import Plan, PlanNode
from .plan_change import PlanChange
from . import state_file
from .plan_space import ANY, OPERATORS, PlanSpace
from .query import Query
from .sql import parse_sql

@functools.lru_cache(maxsize=2)
def optimizer_program(memo: bool = False) -> Program:
    """The optimizer's rules, read from the installed package: rules/optimizer.dl with the
    module for memo-based pruning (``memo``) or the one that costs every alternative directly."""
    rules = resources.files("reopt.rules")
    module = "optimizer_memo.dl" if memo else "optimizer_direct.dl"
    with resources.as_file(rules / "optimizer.dl") as core, resources.as_file(rules / module) as extra:
        return Program.load(core, extra)


BYTES_PER_VALUE = 8  # state_bytes counts every held value as one 8-byte word


@dataclass(frozen=True)
class OptimizerMetrics:
    """What the optimizer holds and what its calls did, in the reference paper's terms: plan-table
    entries are (expression, property) pairs (OR nodes), plan alternatives are AND nodes.

    "Alive" is what the plan table holds after the call: entries wanted by a live parent plan and
    alternatives costed. The rest of the space (``*_in_space``, what no pruning would hold) is pruned.
    """

    entries_in_space: int
    alternatives_in_space: int
    entries_alive: int
    alternatives_alive: int  # enumerated and not pruned
    alternatives_costed: int  # alive with a cost (an alternative the cost model rejects has none)
    entries_derived_last: int  # entries made visible by the last call
    alternatives_derived_last: int  # alternatives costed (made visible in PlanCost) by the last call
    entries_derived_total: int  # the same, over all calls
    alternatives_derived_total: int
    entries_touched_last: int  # distinct entries inserted, deleted or given a new best cost by the last call
    alternatives_touched_last: int  # distinct alternatives added, removed or re-costed by the last call
    alternatives_remembered: int  # alternatives with a cost memo (pruned ones included)
    state_values: int  # Engine.state_size(): values held, a repeatable measure of state

    @property
    def entries_pruned(self) -> int:
        return self.entries_in_space - self.entries_alive

    @property
    def alternatives_pruned(self) -> int:
        return self.alternatives_in_space - self.alternatives_alive

    @property
    def entries_pruned_ratio(self) -> float:
        return self.entries_pruned / max(1, self.entries_in_space)

    @property
    def alternatives_pruned_ratio(self) -> float:
        return self.alternatives_pruned / max(1, self.alternatives_in_space)

    @property
    def entries_touched_ratio(self) -> float:
        return self.entries_touched_last / max(1, self.entries_in_space)

    @property
    def alternatives_touched_ratio(self) -> float:
        return self.alternatives_touched_last / max(1, self.alternatives_in_space)

    @property
    def state_bytes(self) -> int:
        return self.state_values * BYTES_PER_VALUE


# How much a query may hold. Measured (goal bound, native, `bench_job.py --only 28a,29a
# --optimizers default --timeout 300`): optimizing takes about 7 KB a connected pair (JOB 29a,
# 222,882 pairs, 1.5 GB), re-optimizing after a join's change about 13 KB, and after a change that
# reaches nearly everything (the largest table x8) up to 21 KB: 28a (29,228 pairs) peaks at 539 MB,
# 29a at 4,656 MB. So at this limit a query optimizes in under 2 GB, but re-optimizing the largest
# ones can take over 4 GB; a caller short of memory sets a lower limit. The memo-based pruning holds
# about ten times as much a pair (28a optimized with all of it: 2,057 MB, against 227 MB with the goal
# bound), so its settings get a tenth of the limit.
DEFAULT_MAX_JOIN_PAIRS = 250_000
# Expressions are bitmasks of the query's relations, and the native core's integers are signed 64-bit.
NATIVE_MAX_RELATIONS = 63
MEMO_MAX_JOIN_PAIRS = 25_000

PRUNING_SETTINGS = {  # (goal, aggregate selection, reference counting, recursive bounding)
    "none": (False, False, False, False),
    "goal": (True, False, False, False),
    "aggsel": (False, True, False, False),
    "aggsel+refcount": (False, True, True, False),
    "aggsel+bounding": (False, True, False, True),
    "all": (False, True, True, True),  # the reference paper's four mechanisms, over memoized costs
}


@dataclass(frozen=True)
class OptimizerConfig:
    """Everything that shapes the optimizer besides statistics: cost weights and pruning switches.

    Pruning never changes the chosen plan, only how much of the plan space is held and re-derived.
    ``goal_bound`` (the default) has the engine release best costs cheapest first and stop at the
    root's: an entry costlier than the best plan stays held and no plan over it is costed, until a
    change lifts the root's cost to it. The reference paper's mechanisms over memoized costs, which
    need ``goal_bound=False``: ``aggregate_selection`` drops alternatives costlier than a known plan
    of the same entry (and does not cost them: tuple-source suppression); ``reference_counting`` lets
    an entry go when no live plan uses it; ``recursive_bounding`` drops alternatives over the budget
    their parents leave them. Reference counting prunes only what the other two prune first, so on
    its own it changes nothing. With the goal bound, ``plans_wait`` (the default) also leaves a plan
    uncosted while its inputs alone cost more than its entry's best plan, until that best rises to
    them; ``plans_wait=False`` costs every plan over released inputs, for comparison. And
    ``completion_floor`` (the default) orders the release by best cost plus a floor on what
    completing the entry into a whole plan costs (A*), so an entry whose sum exceeds the best plan's
    cost stays held too; ``completion_floor=False`` releases by best cost alone. docs/pruning.md
    has both designs.

    ``beyond_limit`` says what happens to a query with more connected splits than ``max_join_pairs``:
    ``"refuse"`` (the default) raises ``QueryTooLargeError``; ``"greedy"`` optimizes it over one
    greedy join order (``greedy.py``), an approximate plan, with a ``UserWarning`` saying so.
    """

    weights: CostWeights = field(default_factory=CostWeights)
    aggregate_selection: bool = False
    reference_counting: bool = False
    recursive_bounding: bool = False
    backend: str | None = None  # the engine's evaluation backend: "native", "python", or the default
    # The largest plan space accepted, in connected splits (pairs of sub-expressions joined): a query
    # with more raises QueryTooLargeError before anything is built. None: no limit. "auto": the
    # pruning design's own, DEFAULT_MAX_JOIN_PAIRS or, for the memo-based pruning, MEMO_MAX_JOIN_PAIRS.
    max_join_pairs: int | None | Literal["auto"] = "auto"
    goal_bound: bool = True
    plans_wait: bool = True  # under the goal bound only (docs/pruning.md, "Plans that wait")
    # under the goal bound only: release in order of best cost plus a floor on completing the plan
    # (A*, docs/pruning.md, "A floor on the rest of the plan"); False releases by best cost alone
    completion_floor: bool = True
    beyond_limit: Literal["refuse", "greedy"] = "refuse"

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in BACKENDS:
            raise OptimizerError(f"unknown backend {self.backend!r}; use one of {', '.join(BACKENDS)}")
        if self.max_join_pairs == "auto":
            limit = MEMO_MAX_JOIN_PAIRS if self.remembers_costs else DEFAULT_MAX_JOIN_PAIRS
            object.__setattr__(self, "max_join_pairs", limit)
        if self.max_join_pairs is not None and (
                isinstance(self.max_join_pairs, bool) or not isinstance(self.max_join_pairs, int)
                or self.max_join_pairs < 1):
            raise OptimizerError(f"max_join_pairs must be a positive int, None or 'auto', got {self.max_join_pairs!r}")
        if self.beyond_limit not in ("refuse", "greedy"):
            raise OptimizerError(f"beyond_limit must be 'refuse' or 'greedy', got {self.beyond_limit!r}")
        if self.goal_bound and self.remembers_costs:
            # The memo-based mechanisms cost an input at its remembered best, which is exact only when
            # every entry's best is derived; under the goal bound, entries costlier than the root are not.
            raise OptimizerError(
                "goal_bound cannot be combined with aggregate_selection or recursive_bounding (the memo-based "
                "pruning); pass goal_bound=False with them, or use OptimizerConfig.setting(name)")

    @classmethod
    def setting(cls, name: str, weights: CostWeights | None = None, backend: str | None = None) -> "OptimizerConfig":
        """A named pruning setting: none, goal, aggsel, aggsel+refcount, aggsel+bounding or all."""
        if name not in PRUNING_SETTINGS:
            raise OptimizerError(f"unknown pruning setting {name!r}; use one of {', '.join(PRUNING_SETTINGS)}")
        goal, aggsel, refcount, bounding = PRUNING_SETTINGS[name]
        return cls(weights or CostWeights(), aggsel, refcount, bounding, backend, goal_bound=goal)

    @property
    def remembers_costs(self) -> bool:
        return self.aggregate_selection or self.recursive_bounding

    def setting_facts(self) -> list[tuple[str, bool]]:
        return [
            ("goal", self.goal_bound),
            ("wait", self.goal_bound and self.plans_wait),
            ("aggsel", self.aggregate_selection),
            ("refcount", self.reference_counting),
            ("bounding", self.recursive_bounding),
        ]


def _join_cost(costs: CostModel, op: str, lrows: float, lwidth: float, rrows: float, rwidth: float, rows: float,
               right: int, factor: float) -> list[tuple[float]]:
    """``Fn_joincost``: the rules pass the right input as its expression, a set of relations."""
    return costs.join(op, lrows, lwidth, rrows, rwidth, rows, factor, right_relations=right.bit_count())


class Optimizer:
    def __init__(self, query: Query, catalog: Catalog, config: OptimizerConfig | None = None):
        self.query = query
        self.config = config or OptimizerConfig()
        self._check_catalog(catalog)
        self._catalog = catalog.copy()
        tree = None  # every connected split; a greedy join order's only where the query is over the limit
        try:
            query.connected_pairs(self.config.max_join_pairs)
        except QueryTooLargeError:
            if self.config.beyond_limit != "greedy":
                raise
            tree = greedy_join_tree(query, Estimator(query, self._catalog))
            warnings.warn(
                f"the query joins {len(query.aliases)} relations into more than {self.config.max_join_pairs:,} "
                "connected pairs of sub-expressions (OptimizerConfig.max_join_pairs): its plans are optimized over "
                "one greedy join order and are approximate, as OptimizerConfig(beyond_limit='greedy') asks",
                UserWarning, stacklevel=2)
        self._build(tree)

    def _build(self, tree: list[tuple[int, int]] | None) -> None:
        """An engine, not yet loaded, over the plan space of every connected split, or of ``tree``'s."""
        query = self.query
        self._tree = tree
        # The engine holds every split it asked for (SearchSpace). Only the memo settings ask again,
        # as pruning retracts and re-derives Want, and count parents over the whole space.
        self.space = PlanSpace(query, self.config.max_join_pairs if tree is None else None,
                               memoize=self.config.remembers_costs, pairs=tree)
        self.costs = CostModel(self.config.weights)
        functions = {
            "Fn_split": self.space.split,
            "Fn_scancost": self.costs.scan,
            "Fn_unarycost": self.costs.unary,
            # not a bound method: the engine holds its functions, and one bound to the optimizer
            # would make the pair a reference cycle, freed only when the cycle collector runs
            "Fn_joincost": functools.partial(_join_cost, self.costs),
        }
        if self.config.remembers_costs:
            functions["Fn_parentcount"] = self.space.parent_count
        self.engine = Engine(optimizer_program(self.config.remembers_costs), functions, backend=self.config.backend)
        if self.engine.backend == "native" and len(query.aliases) > NATIVE_MAX_RELATIONS:
            raise QueryTooLargeError(
                f"the query joins {len(query.aliases)} relations; the native backend holds an expression as a "
                f"64-bit integer, so at most {NATIVE_MAX_RELATIONS} relations: use OptimizerConfig(backend='python')")
        self._subsets = list(query.connected_subsets()) if tree is None else sorted(
            {query.bit(alias) for alias in query.aliases} | {a | b for a, b in tree})
        self._facts = LoadedFacts({}, {}, {}, {})
        self._estimator: Estimator | None = None
        self._floors_completion = self.config.goal_bound and self.config.completion_floor
        self._loaded = False
        self._plan: Plan | None = None  # the plan the last call returned
        self.last_change: PlanChange | None = None  # why the last reoptimize() chose its plan

    @property
    def approximate(self) -> bool:
        """Whether plans are optimized over one greedy join order (``beyond_limit='greedy'`` and a
        query over the limit), not over every join order."""
        return self._tree is not None

    @classmethod
    def from_sql(cls, sql: str | exp.Expression, catalog: Catalog, config: OptimizerConfig | None = None,
                 dialect: str | None = None) -> "Optimizer":
        """An optimizer for one SELECT statement (see ``parse_sql``; ``dialect="spark"`` for Spark SQL)."""
        return cls(parse_sql(sql, catalog, dialect), catalog, config)

    @property
    def catalog(self) -> Catalog:
        """The statistics with every delta applied so far (a copy)."""
        return self._catalog.copy()

    def optimize(self) -> Plan:
        if not self._loaded:
            self._load()
        self._plan = self._extract()
        return self._plan

    def reoptimize(self, delta: DeltaStats) -> Plan:
        """Apply runtime statistics and return the new best plan, re-deriving only what they affect.

        Invalid statistics raise ``StatisticsError`` and leave the optimizer exactly as it was.
        """
        if not isinstance(delta, DeltaStats):
            raise StatisticsError(f"reoptimize takes a DeltaStats, got {type(delta).__name__}")
        previous = self.optimize() if self._plan is None else self._plan
        resolved = resolve(delta, self.query, self._catalog)
        estimator = Estimator(self.query, resolved.catalog, self._estimator, resolved.leaves)
        if self._tree is not None:
            tree = greedy_join_tree(self.query, estimator)
            if tree != self._tree:
                before = LoadedFacts(dict(self._facts.stats), dict(self._facts.factors), {}, {})
                plan = self._rebuilt(resolved.catalog, tree)
                return self._changed(delta, previous, plan, before)
        facts = fact_delta(self._facts, resolved, estimator, self._subsets, self.config.remembers_costs,
                           self._completions if self._floors_completion else None)
        try:
            for relation, pairs in facts.replacements(self._facts):
                self._replace(relation, pairs)
            self.engine.run(deltas=False)
        except BaseException:
            self.engine.discard_pending()
            raise
        before = LoadedFacts({mask: self._facts.stats[mask] for mask in facts.stats}, self._facts.factors, {}, {})
        self._catalog, self._estimator = resolved.catalog, estimator
        self._facts.advance(facts)
        return self._changed(delta, previous, self._extract(), before)

    def _changed(self, delta: DeltaStats, previous: Plan, plan: Plan, before: LoadedFacts) -> Plan:
        """Record why ``plan`` follows ``previous`` (``last_change``; ``before`` holds the statistics
        and cost factors the delta replaced) and make it the current plan."""
        moves = [(mask, old.rows, new) for mask, old in before.stats.items()
                 if old.rows != (new := self._stats_of(mask).rows)]
        factors = tuple((op, before.factors[op], self._facts.factors[op]) for op in OPERATORS
                        if op in before.factors and before.factors[op] != self._facts.factors[op])
        previous_now = self.costed(previous) if plan.key() != previous.key() else plan
        self.last_change = PlanChange(delta, moves, factors, previous, previous_now, plan)
        self._plan = plan
        return plan

    def _replace(self, relation: str, pairs: list[tuple[tuple, tuple]]) -> None:
        """Queue each (old, new) row replacement, in two batches: a re-optimization replaces
        hundreds of statistics, and the engine checks a batch's rows in one pass."""
        if pairs:
            self.engine.delete(relation, [old for old, _ in pairs])
            self.engine.insert(relation, [new for _, new in pairs])

    def _rebuilt(self, catalog: Catalog, tree: list[tuple[int, int]]) -> Plan:
        """The best plan over another greedy join order, optimized afresh: a new order is a new plan
        space. On failure the optimizer is as it was."""
        before = dict(vars(self))
        try:
            self._catalog = catalog
            self._build(tree)
            self._load()
            return self._extract()
        except BaseException:
            vars(self).clear()
            vars(self).update(before)
            raise

    def save(self, path: str | Path) -> Path:
        """Write the optimizer's state (the query, the catalog with every delta applied, the
        configuration) to ``path``, replacing the file only once the new one is whole
        (``state_file``). ``Optimizer.load`` reads it back."""
        return state_file.write(path, state_file.optimizer_state(self))

    @classmethod
    def load(cls, path: str | Path, backend: str | None = None) -> "Optimizer":
        """The optimizer saved at ``path``, on ``backend`` (default: the one it was saved with). It
        gives the plan the saved optimizer had and re-optimizes incrementally from there. A file that
        cannot be used raises ``StateFileError`` naming it."""
        return state_file.optimizer_from_state(state_file.read(path), path, backend)

    def costed(self, plan: Plan, within_limits: bool = True) -> Plan | None:
        """``plan`` (a plan of this optimizer's query) with its rows and costs estimated under the
        current statistics, added up as the rules add them; None if it is infeasible now (a
        broadcast over the threshold). What a plan chosen earlier costs now. With
        ``within_limits=False`` the memory limits are not checked: the price of a plan known to run,
        such as the one Spark chose itself, where reopt's estimates say it would not fit."""
        if plan.query is not self.query:
            raise OptimizerError("costed() takes a plan of this optimizer's query")
        if not self._loaded:
            self._load()
        costs = self.costs if within_limits else CostModel(dataclasses.replace(
            self.costs.w, broadcast_threshold=math.inf, hash_build_memory=math.inf))

        def walk(node: PlanNode) -> PlanNode | None:
            children = [walk(child) for child in node.children]
            if None in children:
                return None
            stats = self._stats_of(node.expr)
            local = costs.local(node.op, stats, *(self._stats_of(c.expr) for c in children),
                                factor=self._facts.factors[node.op])
            if local is None:
                return None
            total = local
            for child in children:
                total = total + child.cost
            return PlanNode(node.op, node.expr, node.prop, total, local, stats.rows, children)

        root = walk(plan.root)
        return None if root is None else Plan(root, self.query)

    def _stats_of(self, mask: int) -> ExprStats:
        """An expression's estimate: held for every expression of the plan space, worked out for
        another (a join order a greedy optimizer does not consider)."""
        stats = self._facts.stats.get(mask)
        return stats if stats is not None else self._estimator.stats(mask)

    def metrics(self) -> OptimizerMetrics:
        stats = self.engine.stats
        size = self.space.size()
        return OptimizerMetrics(
            entries_in_space=size.entries,
            alternatives_in_space=size.alternatives,
            entries_alive=len(self.engine.rows("Want")),
            alternatives_alive=len(self.engine.rows("Alive")),
            alternatives_costed=len(self.engine.rows("PlanCost")),
            entries_derived_last=stats.last["Want"].inserted,
            alternatives_derived_last=stats.last["PlanCost"].inserted,
            entries_derived_total=stats.total["Want"].inserted,
            alternatives_derived_total=stats.total["PlanCost"].inserted,
            entries_touched_last=len({row[:2] for row in self.engine.touched_rows("BestCost")}),
            alternatives_touched_last=len({row[:-1] for row in self.engine.touched_rows("PlanCost")}),
            alternatives_remembered=len(self.engine.rows("CostMemo")) if self.config.remembers_costs else 0,
            state_values=self.engine.state_size(),
        )

    # -- internals -------------------------------------------------------------------------------

    def _check_catalog(self, catalog: Catalog) -> None:
        for alias, table in self.query.relations:
            catalog.table(table)
        for predicate in self.query.joins:
            for ref in (predicate.left, predicate.right):
                catalog.column(self.query.table_of(ref.alias), ref.column)

    def _completions(self, stats: dict[int, ExprStats], factors: dict[str, float],
                     masks: Iterable[int]) -> dict[int, float]:
        """``Completion`` of each of ``masks`` (``CostModel.completion_floors``)."""
        leaves = [self.query.bit(alias) for alias in self.query.aliases]
        return self.costs.completion_floors(stats, factors, leaves, self.query.full, masks)

    def _load(self) -> None:
        estimator = Estimator(self.query, self._catalog)
        stats = {mask: estimator.stats(mask) for mask in self._subsets}
        factors = {op: self._catalog.cost_factors.get(op, 1.0) for op in OPERATORS}
        self.engine.insert("Query", [(self.query.full,)])
        self.engine.insert("Stats", [stats_row(m, s) for m, s in stats.items()])
        self.engine.insert("CostFactor", list(factors.items()))
        self.engine.insert("Setting", self.config.setting_facts())
        completions = self._completions(stats, factors, self._subsets) if self._floors_completion else {}
        if completions:
            self.engine.insert("Completion", list(completions.items()))
        versions = {mask: 0 for mask in self._subsets} if self.config.remembers_costs else {}
        if versions:
            self.engine.insert("StatsVersion", list(versions.items()))
        try:
            self.engine.run(deltas=False)
        except BaseException:
            self.engine.discard_pending()
            raise
        self._facts = LoadedFacts(stats, factors, versions, completions)
        self._estimator, self._loaded = estimator, True

    def _extract(self) -> Plan:
        # BestPlan holds only the best plans' entries (OnBest), so one read of it costs less than a
        # lookup per node; of tied plans, the least by kind, operator and inputs, as in every backend
        chosen: dict[tuple[int, str], tuple] = {}
        for row in self.engine.rows("BestPlan"):
            entry = row[:2]
            if entry not in chosen or row[2:8] < chosen[entry][2:8]:
                chosen[entry] = row
        return Plan(self._node(self.query.full, ANY, chosen), self.query)

    def _node(self, expr: int, prop: str, chosen: dict[tuple[int, str], tuple]) -> PlanNode:
        row = chosen.get((expr, prop))
        if row is None:
            raise OptimizerError(f"no feasible plan for {self.query.label(expr)} with property {prop}")
        _e, _p, kind, op, left, lprop, right, rprop, cost = row
        children = []
        if kind != "scan":
            children.append(self._node(left, lprop, chosen))
        if kind == "join":
            children.append(self._node(right, rprop, chosen))
        stats = self._facts.stats[expr]
        factor = self._facts.factors[op]
        local = self.costs.local(op, stats, *(self._facts.stats[c.expr] for c in children), factor=factor)
        return PlanNode(op, expr, prop, cost, local, stats.rows, children)
