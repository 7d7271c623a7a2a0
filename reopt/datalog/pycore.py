"""The Python backend: the reference evaluator, written for clarity; the native core mirrors it.

Maintenance methods, chosen per stratum by ``Program`` (see docs/dialect.md, "Maintenance"):

* **counting** for non-recursive strata and for recursive ones declared ``.acyclic``: every derived
  row and every aggregate candidate carries its number of derivations from the visible state;
  semi-naive rounds add and subtract derivations exactly, and a row is visible while its count is
  positive. Exact for any change, including recursion through min/max, provided no derivation
  depends on itself.
* **DRed** (delete and re-derive) for other recursive strata, where cycles can make rows support
  themselves: first over-delete everything with a derivation through a deleted row, then restore the
  rows that still have a derivation (their counts say so), then propagate insertions.
"""

from __future__ import annotations

import heapq
from itertools import chain, repeat
from typing import Any, Callable

from .errors import DatalogError, EvaluationError
from .planner import NEW
from .program import COUNTING, Program, Stratum
from .stats import Stats
from .storage import AggregateState, Journal, OverlayView, Relation, Row, set_count

_MISSING = object()
# How far (relative) a release key summed with a heuristic may fall below the last one released
# before it counts as a fall along a derivation: sums of floats round (see _Held.check_candidate)
ROUNDING = 1e-12


class _Change:
    """Rows that became visible (plus) or invisible (minus) in one step."""

    __slots__ = ("plus", "minus")

    def __init__(self, plus: set | None = None, minus: set | None = None):
        self.plus = plus if plus is not None else set()
        self.minus = minus if minus is not None else set()

    def __bool__(self) -> bool:
        return bool(self.plus or self.minus)

    def __iter__(self):
        return iter((self.plus, self.minus))


class _FailingJournal(list):
    """A journal that fails once a number of state changes were made, as a bug would: the test hook
    behind ``Engine.inject_failure``."""

    def __init__(self, changes: int):
        super().__init__()
        self.left = changes

    def append(self, step) -> None:
        super().append(step)
        if self.left == 0:
            raise RuntimeError("failure injected after the requested number of state changes")
        self.left -= 1


class _RuleFailure(Exception):
    def __init__(self, rule, cause: BaseException):
        super().__init__(str(cause))
        self.rule, self.cause = rule, cause


class PythonCore:
    """State and evaluation of one engine on the Python backend (see ``Engine`` for the contract)."""

    name = "python"

    def __init__(self, program: Program, functions: dict[str, Callable[..., Any]], max_rounds: int, max_passes: int):
        self.program = program
        self.max_rounds = max_rounds
        self.max_passes = max_passes
        self._functions = {name: _checked_function(name, fn, len(program.functions[name].outputs))
                           for name, fn in functions.items()}
        patterns = program.index_patterns()
        self._relations: dict[str, Relation] = {}
        self._counts: dict[str, dict[Row, int]] = {}
        self._aggregates: dict[str, AggregateState] = {}
        for name, info in program.relations.items():
            relation = Relation(name, info.arity, patterns.get(name, ()))
            self._relations[name] = relation
            if info.aggregate:
                self._aggregates[name] = AggregateState(relation, info.aggregate, info.aggregate_position)
            else:
                self._counts[name] = {}
        self._touched: dict[str, set[Row]] = {}
        self._last_touched: dict[str, set[Row]] = {}
        self._helds: dict[frozenset[str], _Held] = {}  # per stratum with .ordered aggregates
        # per rule with ``until`` (by id of its CompiledRule): group -> {key: bound} of the
        # derivations that wait, each named by the values of the variables before ``until``
        self._waiting: dict[int, dict[tuple, dict[tuple, Any]]] = {}
        self.stats = Stats(program.relations)
        self.fail_after: int | None = None  # test hook: the next run fails after this many state changes

    def _held(self, stratum: Stratum) -> "_Held":
        held = self._helds.get(stratum.relations)
        if held is None:
            held = self._helds[stratum.relations] = _Held(self, stratum)
        return held

    def inject_failure(self, after_changes: int | None) -> None:
        self.fail_after = after_changes

    @staticmethod
    def unsupported(value: Any) -> str | None:
        """Why this backend cannot hold ``value`` (it holds any hashable value)."""
        return None

    # -- reading ---------------------------------------------------------------------------------

    def rows(self, relation: str) -> set[Row]:
        return set(self._relations[relation].rows)

    def touched_rows(self, relation: str) -> set[Row]:
        return set(self._last_touched.get(relation, ()))

    def lookup(self, relation: str, positions: tuple[int, ...], key: tuple) -> set[Row]:
        return set(self._relations[relation].ensure_index(positions).get(key, ()))

    def count(self, relation: str, row: Row) -> int:
        return self._counts[relation].get(row, 0)

    def counts(self, relation: str) -> dict[Row, int]:
        if relation in self._aggregates:
            agg = self._aggregates[relation]
            return {agg.row(g, v): agg.count_of(g, v) for g, v in agg.current.items()}
        return dict(self._counts[relation])

    def state_size(self) -> int:
        size = sum(len(r.rows) * max(1, r.arity) for r in self._relations.values())
        size += sum(2 * len(counts) for counts in self._counts.values())
        size += sum(2 * len(values) for agg in self._aggregates.values() for values in agg.candidates.values())
        size += sum(len(group) + sum(len(key) + 1 for key in keys)  # a waiting derivation's group, key and bound
                    for waiting in self._waiting.values() for group, keys in waiting.items())
        return size

    def candidates(self, relation: str, group: tuple) -> dict[Any, int]:
        return dict(self._aggregates[relation].candidates.get(group, {}))

    # -- evaluation ------------------------------------------------------------------------------

    def run(self, pending: dict[str, dict[Row, int]], seeding: bool, keep_changes: bool = True) -> dict[str, _Change]:
        """Propagate ``pending`` count changes of base relations; the net visibility change of every
        relation (computed anyway: this backend derives them on the way). On failure the state is
        exactly as before and ``EvaluationError`` says why."""
        journal: Journal = _FailingJournal(self.fail_after) if self.fail_after is not None else []
        self.fail_after = None
        self.stats.begin()
        self._touched = {}
        try:
            changes = self._passes(pending, seeding, journal)
        except BaseException as exc:
            for undo, arg in reversed(journal):
                undo(arg)
            self.stats.abort()
            if isinstance(exc, _RuleFailure):
                cause = exc.cause
                raise EvaluationError(
                    f"{exc.rule.location}: evaluating '{exc.rule}' failed: {type(cause).__name__}: {cause}"
                ) from cause
            if isinstance(exc, DatalogError):
                raise
            if isinstance(exc, (KeyboardInterrupt, MemoryError, RecursionError)):
                raise
            raise EvaluationError(f"evaluation failed: {type(exc).__name__}: {exc}") from exc
        self._last_touched = self._touched
        self.stats.commit()
        return changes

    def _passes(self, pending: dict[str, dict[Row, int]], seeding: bool, journal: Journal) -> dict[str, _Change]:
        """Evaluate the queued deltas, then refresh memos from the fixpoint and evaluate again, until
        every visible row of a memo's source equals its memo row."""
        changes = self._evaluate(pending, journal, seeding=seeding)
        latest = changes
        passes = 1
        while True:
            memo_deltas = self._memo_deltas(latest)
            if not memo_deltas:
                return changes
            passes += 1
            if passes > self.max_passes:
                names = ", ".join(sorted(memo_deltas))
                raise EvaluationError(
                    f"memos {names} still changed after {self.max_passes} passes; the pruning they drive does not "
                    "converge"
                )
            latest = self._evaluate(memo_deltas, journal, seeding=False)
            _compose(changes, latest)

    def _memo_deltas(self, changes: dict[str, _Change]) -> dict[str, dict[Row, int]]:
        """Count changes that make each memo hold the rows its source showed in the last pass."""
        deltas: dict[str, dict[Row, int]] = {}
        for info in self.program.memos:
            change = changes.get(info.memo_of)
            if not change or not change.plus:
                continue
            memo = self._relations[info.name]
            by_key = memo.ensure_index(tuple(range(info.memo_keys)))
            pending: dict[Row, int] = {}
            seen: dict[tuple, Row] = {}
            for row in change.plus:
                key = row[: info.memo_keys]
                if key in seen:
                    raise EvaluationError(
                        f"memo '{info.name}' keeps one row per key, but '{info.memo_of}' shows both {seen[key]!r} "
                        f"and {row!r} for key {key!r}"
                    )
                seen[key] = row
                stored = by_key.get(key, ())
                if row in stored:
                    continue
                for old in stored:
                    pending[old] = pending.get(old, 0) - 1
                pending[row] = pending.get(row, 0) + 1
            if pending:
                deltas[info.name] = pending
        return deltas

    def _evaluate(self, pending_deltas: dict[str, dict[Row, int]], journal: Journal, seeding: bool) -> dict[str, _Change]:
        changes: dict[str, _Change] = {}
        for name, pending in pending_deltas.items():
            counts, relation = self._counts[name], self._relations[name]
            change = _Change()
            for row, delta in pending.items():
                if not delta:
                    continue
                old = counts.get(row, 0)
                set_count(counts, row, old + delta, journal)
                if old <= 0 < old + delta:
                    relation.add(row, journal)
                    change.plus.add(row)
                elif old + delta <= 0 < old:
                    relation.discard(row, journal)
                    change.minus.add(row)
            self.stats.record_change(name, len(change.plus), len(change.minus))
            if change:
                changes[name] = change
        for stratum in self.program.strata:
            incoming = {r: changes[r] for r in stratum.inputs if r in changes}
            seed = seeding and any(c.seed_plan for c in stratum.rules)
            goal_moved = any(goal in changes for goal in stratum.goals.values())  # may release what was held
            if not incoming and not seed and not goal_moved:
                continue
            run = _StratumRun(self, stratum, journal)
            if stratum.method == COUNTING:
                run.counting(incoming, seed)
            else:
                run.dred(incoming, seed)
            changes.update(run.net_changes())
        return changes


def _compose(changes: dict[str, _Change], later: dict[str, _Change]) -> None:
    """Fold a later pass's visibility changes into ``changes``, so that it stays the net change."""
    for name, change in later.items():
        net = changes.setdefault(name, _Change())
        for row in change.plus:
            if row in net.minus:
                net.minus.discard(row)
            else:
                net.plus.add(row)
        for row in change.minus:
            if row in net.plus:
                net.plus.discard(row)
            else:
                net.minus.add(row)
        if not net:
            del changes[name]



class _Held:
    """Group changes of a stratum's ``.ordered`` aggregates, held back while anything else is in flight.

    ``release`` lets go of every held group whose minimum vanished and of every held group whose
    new minimum is the least of all held ones (a heap with stale entries skipped), so where values
    only grow along derivations each group is propagated once, at its final value.

    An aggregate ordered ``up to`` a goal is hidden as soon as its minimum changes, and released
    only while its new minimum is at most the goals' value; what stays above waits here, across
    runs, until a goal rises to it. ``frontier`` is the last value released in this evaluation: a
    new candidate below it means values fell along a derivation, which would make stopping early
    inexact, so it fails the run.
    """

    def __init__(self, core: "PythonCore", stratum: Stratum):
        self.core = core
        self.goals = dict(stratum.goals)
        self.heaps: dict[str, list] = {name: [] for name in stratum.ordered}
        self.pending: dict[str, dict[tuple, Any]] = {name: {} for name in stratum.ordered}  # group -> held minimum
        self.vanished: dict[str, set] = {name: set() for name in stratum.ordered}
        # groups whose best rose while derivations waited on them (``until``), by the least bound
        # that waits: the release order wakes them when it reaches that bound, not at once, so a
        # group that rises and falls back within a run (deletions first) wakes nothing
        self.wakes: dict[str, list] = {name: [] for name in stratum.ordered}
        self.frontier: dict[str, Any] = {}
        self.sequence = 0
        # ``plus h``: each held group's key in the release order (its minimum plus its heuristic),
        # and the least bound waiting on each group, to re-key both when the heuristic changes
        self.offsets = dict(stratum.offsets)
        self.keys: dict[str, dict[tuple, Any]] = {name: {} for name in stratum.ordered}
        self.wake_bounds: dict[str, dict[tuple, Any]] = {name: {} for name in self.offsets}

    def snapshot(self) -> tuple:
        return ({n: list(h) for n, h in self.heaps.items()}, {n: dict(p) for n, p in self.pending.items()},
                {n: set(v) for n, v in self.vanished.items()}, {n: list(w) for n, w in self.wakes.items()},
                self.sequence, {n: dict(k) for n, k in self.keys.items()},
                {n: dict(b) for n, b in self.wake_bounds.items()})

    def restore(self, snapshot: tuple) -> None:
        self.heaps, self.pending, self.vanished, self.wakes, self.sequence, self.keys, self.wake_bounds = snapshot

    def key(self, name: str, group: tuple, value: Any) -> Any:
        """Where ``value`` of ``group`` comes in the release order: the value itself, or with ``plus h``
        the value plus h's least value for the group (0 if it has none)."""
        heuristic = self.offsets.get(name)
        if heuristic is None:
            return value
        relation = self.core._relations[heuristic]
        rows = relation.ensure_index(tuple(range(relation.arity - 1))).get(group, ())
        offset = min((row[-1] for row in rows), default=0)
        try:
            return value + offset
        except TypeError:
            raise EvaluationError(
                f"'.ordered {name} up to {self.goals[name]} plus {heuristic}' adds {heuristic}'s {offset!r} to "
                f"{name}'s {value!r} for group {group!r}: both must be numbers") from None

    def wake_at(self, name: str, group: tuple, bound: Any) -> None:
        heapq.heappush(self.wakes[name], (self.key(name, group, bound), self.sequence, group))
        self.sequence += 1
        bounds = self.wake_bounds.get(name)
        if bounds is not None and not bounds.get(group, bound) < bound:
            bounds[group] = bound

    def check_candidate(self, name: str, group: tuple, value: Any) -> None:
        frontier = self.frontier.get(name, _MISSING)
        if frontier is _MISSING:
            return
        key = self.key(name, group, value)
        if not self.core._aggregates[name].improves(key, frontier):
            return
        # a heuristic's sums round: a fall within rounding is an order off by an ulp, which the
        # release corrects (the group is hidden and released again), not a fall along a derivation
        if name in self.offsets and frontier - key <= ROUNDING * abs(frontier):
            return
        plus = f" plus {self.offsets[name]}" if name in self.offsets else ""
        raise EvaluationError(
            f"'.ordered {name} up to {self.goals[name]}{plus}' needs values that never fall along derivations, "
            f"but group {group!r} received {value!r} (release key {key!r}) after keys up to {frontier!r} were "
            "released")

    def hold(self, name: str, group: tuple) -> None:
        best = self.core._aggregates[name].best(group)
        pending, keys = self.pending[name], self.keys[name]
        if best is None:
            pending.pop(group, None)
            keys.pop(group, None)
            # A group ordered up to a goal was hidden when it changed, so only the others have a
            # vanished minimum left to release.
            if name not in self.goals:
                self.vanished[name].add(group)
            return
        key = self.key(name, group, best)
        if pending.get(group, _MISSING) == best and keys.get(group, _MISSING) == key:
            return
        pending[group] = best
        self._push(name, group, key)

    def reorder(self, changes: dict[str, "_Change"]) -> None:
        """Re-key the held groups, and the wakes waiting on groups, whose heuristic changed."""
        for name, heuristic in self.offsets.items():
            change = changes.get(heuristic)
            if not change:
                continue
            pending, bounds = self.pending[name], self.wake_bounds[name]
            for group in {row[:-1] for row in chain(change.plus, change.minus)}:
                if group in pending:
                    key = self.key(name, group, pending[group])
                    if self.keys[name].get(group, _MISSING) != key:
                        self._push(name, group, key)
                if group in bounds:
                    heapq.heappush(self.wakes[name], (self.key(name, group, bounds[group]), self.sequence, group))
                    self.sequence += 1

    def _push(self, name: str, group: tuple, key: Any) -> None:
        keys, heap = self.keys[name], self.heaps[name]
        keys[group] = key
        heapq.heappush(heap, (key, self.sequence, group))
        self.sequence += 1
        if len(heap) > 2 * len(keys) + 64:  # drop stale entries left by groups that changed again
            heap[:] = [entry for entry in heap if keys.get(entry[2], _MISSING) == entry[0]]
            heapq.heapify(heap)

    def release(self, wake: Callable[[str, tuple, Any], bool] | None = None) -> dict[str, _Change]:
        """The next visible changes: batches are released until one changes something or nothing
        more may be released. ``wake(name, group, value)`` makes the derivations that wait on a group
        for a bound its release value reaches (``until``); a batch that wakes any is not released
        until they are made (the caller evaluates them), since they may lower its value."""
        while True:
            changes, released = self._release_batch(wake)
            if changes or not released:
                return changes

    def bound(self, name: str) -> Any:
        """The goals' largest value, or ``_MISSING`` (no bound) while there is no goal or one of
        them is not shown."""
        goal = self.goals.get(name)
        if goal is None:
            return _MISSING
        agg, values = self.core._aggregates[name], []
        for group in self.core._relations[goal].rows:
            value = agg.current.get(group, _MISSING)
            if value is _MISSING:
                return _MISSING
            values.append(self.key(name, group, value))
        return max(values) if values else _MISSING

    def within(self, name: str, key: Any, bound: Any) -> bool:
        """Whether ``key`` may be released under ``bound`` (``_MISSING``: no bound). With a heuristic,
        within rounding above it too: its sums round, and releasing more is always exact, while
        holding back an entry of the best plan (its key an ulp above the goal's) would not be."""
        if bound is _MISSING or not self.core._aggregates[name].improves(bound, key):
            return True
        return name in self.offsets and key - bound <= ROUNDING * abs(bound)

    def _release_batch(self, wake: Callable[[str, tuple, Any], bool] | None) -> tuple[dict[str, _Change], bool]:
        changes: dict[str, _Change] = {}
        any_released = False
        for name, heap in self.heaps.items():
            agg, pending, keys = self.core._aggregates[name], self.pending[name], self.keys[name]
            while heap and keys.get(heap[0][2], _MISSING) != heap[0][0]:
                heapq.heappop(heap)
            bound = self.bound(name)
            wakes = self.wakes[name]
            while wake is not None and wakes and (not heap or not agg.improves(heap[0][0], wakes[0][0])) \
                    and self.within(name, wakes[0][0], bound):
                least, woke = wakes[0][0], False
                while wakes and wakes[0][0] == least:
                    group = heapq.heappop(wakes)[2]
                    self.wake_bounds.get(name, {}).pop(group, None)
                    woke = wake(name, group, agg.best(group)) or woke
                if woke:  # the woken derivations go first: they may lower what would be released
                    return changes, False
            released = [g for g in self.vanished[name] if g not in pending and agg.best(g) is None]
            self.vanished[name] = set()
            if heap and self.within(name, heap[0][0], bound):
                least = heap[0][0]
                self.frontier[name] = least
                while heap and heap[0][0] == least:
                    _, _, group = heapq.heappop(heap)
                    if keys.get(group, _MISSING) == least:
                        del pending[group], keys[group]
                        released.append(group)
            any_released = any_released or bool(released)
            change, updates = _Change(), 0
            for group in released:
                best, current = agg.best(group), agg.current.get(group, _MISSING)
                if current is not _MISSING and best == current:
                    continue
                if current is not _MISSING:
                    change.minus.add(agg.row(group, current))
                if best is not None:
                    change.plus.add(agg.row(group, best))
                    updates += current is not _MISSING
            self.core.stats.record_updates(name, updates)
            if change:
                changes[name] = change
        return changes, any_released


class _Waits:
    """A round's ``until`` for one rule's plans: whether a derivation waits.

    A derivation some row entering this round makes is new: it waits if its group's best candidate
    is below its bound (as the round began). One that existed before the round waits if it was
    recorded waiting. Both answers depend only on the derivation and the state as the round began,
    so the terms of a round that cancel (a row leaving in one plan, another entering in the next)
    agree, and the record changes with the plans whose delta is one of the literals before ``until``.
    """

    def __init__(self, run: "_StratumRun", compiled, changes: dict[str, _Change]):
        self.agg = run.core._aggregates[compiled.deferral.aggregate]
        self.waiting = run.core._waiting.get(id(compiled), {})
        self.changed = run.wait_changes.setdefault(id(compiled), {})
        self.changes = changes

    def entering(self, relation: str) -> set:
        change = self.changes.get(relation)
        return change.plus if change else set()

    def __call__(self, group: tuple, key: tuple, bound: Any, entering: bool, sign: int, delta_before: bool) -> bool:
        if entering:
            best = self.agg.best(group)
            waits = best is not None and best < bound
        else:
            keys = self.waiting.get(group)
            waits = keys is not None and key in keys
        if waits and delta_before:
            entry = self.changed.get((group, key))
            if entry is None:
                self.changed[(group, key)] = [sign, bound]
            else:
                entry[0] += sign
        return waits


def _forget_wait(args) -> None:
    waiting, group, key = args
    keys = waiting[group]
    del keys[key]
    if not keys:
        del waiting[group]


def _restore_wait(args) -> None:
    waiting, group, key, bound = args
    waiting.setdefault(group, {})[key] = bound


def _checked_function(name: str, fn: Callable[..., Any], n_outputs: int) -> Callable[..., list]:
    """Wrap a user function so that a wrong result names the function instead of failing obscurely."""

    def call(*args):
        result = fn(*args)
        if n_outputs == 0 and isinstance(result, bool):
            return [()] if result else []
        if result is None:
            raise EvaluationError(f"function '{name}{args!r}' returned None; return an iterable of rows")
        rows = result if isinstance(result, (list, tuple)) else list(result)
        if all(type(row) is tuple and len(row) == n_outputs and not _has_nan(row) for row in rows):
            return rows  # the common case: already a sequence of right-sized tuples
        checked = []
        for row in rows:
            row = tuple(row) if isinstance(row, (tuple, list)) else row
            if not isinstance(row, tuple) or len(row) != n_outputs:
                raise EvaluationError(
                    f"function '{name}{args!r}' produced {row!r}; each row must be a tuple of {n_outputs} values"
                )
            if _has_nan(row):
                raise EvaluationError(f"function '{name}{args!r}' produced {row!r}; no relation may hold NaN")
            checked.append(row)
        return checked

    return call


def _has_nan(row: tuple) -> bool:
    return any(v != v for v in row if type(v) is float)


def _split(changes: dict[str, _Change]) -> tuple[dict[str, _Change], dict[str, _Change], dict[str, set]]:
    """A batch's deletions and its insertions, to evaluate one after the other, and the inserted
    rows, hidden while the deletions are evaluated."""
    deletions = {r: _Change(minus=c.minus) for r, c in changes.items() if c.minus}
    insertions = {r: _Change(plus=c.plus) for r, c in changes.items() if c.plus}
    return deletions, insertions, {r: c.plus for r, c in insertions.items()}


class _StratumRun:
    """The evaluation of one stratum for one batch of incoming changes."""

    def __init__(self, core: PythonCore, stratum: Stratum, journal: Journal):
        self.core = core
        self.stratum = stratum
        self.journal = journal
        self.original: dict[str, dict[Row, bool]] = {name: {} for name in stratum.relations}
        # rules with ``until``, by the aggregate they wait on; this round's changes to what waits;
        # derivations made because their group rose (for the next round), and their candidates,
        # which are not new (the unpruned evaluation held them all along) and so never fail the
        # release order's check
        self.waiters: dict[str, list] = {}
        for compiled in stratum.rules:
            if compiled.deferral is not None:
                self.waiters.setdefault(compiled.deferral.aggregate, []).append(compiled)
        self.wait_changes: dict[int, dict[tuple, list]] = {}
        self.resumed: dict[str, dict] | None = None
        self.not_new: set[tuple] = set()
        self.hidden: dict[str, set] = {}

    # -- methods -------------------------------------------------------------------------------

    def counting(self, incoming: dict[str, _Change], seeding: bool, monotone: bool = False) -> None:
        changes = dict(incoming)
        extra = self._seed_outputs() if seeding else None
        held = None
        if self.stratum.ordered and not monotone:
            held = self.core._held(self.stratum)
            held.frontier = {}
            self.journal.append((held.restore, held.snapshot()))  # a failed run gets back what was held
            held.reorder(changes)
        rounds = 0
        # Where a goal bounds an ordered aggregate, a batch that both deletes and inserts is evaluated
        # deletions first, its insertions hidden until they settle: a group whose minimum the
        # deletions change is hidden before the insertions reach the rules that read it, so those
        # derivations wait for its release at its final value instead of being made at its old one
        # and retracted (on TPC-H Q5 this halves the plan costs a selectivity change derives).
        insertions, hidden = None, {}
        if held is not None and held.goals and any(c.minus for c in changes.values()) and any(
                c.plus for c in changes.values()):
            changes, insertions, hidden = _split(changes)
        while True:
            if not changes and not extra and insertions is not None:
                changes, insertions, hidden = insertions, None, {}
            if changes or extra:
                outputs = self._round(changes, hidden)
                if extra:
                    for name, out in extra.items():
                        target = outputs[name]
                        for key, count in out.items():
                            target[key] = target.get(key, 0) + count
                    extra = None
                changes = self._settle(outputs, monotone, held)
                extra, self.resumed = self.resumed, None
            elif held is not None:
                changes = held.release(self._wake if self.waiters else None)
                extra, self.resumed = self.resumed, None
                if not changes and not extra:
                    return
            else:
                return
            self._show(changes)
            rounds += 1
            if rounds > self.core.max_rounds:
                raise EvaluationError(
                    f"no fixpoint after {rounds} rounds for {', '.join(sorted(self.stratum.relations))}; "
                    "is the recursion well-founded?"
                )

    def dred(self, incoming: dict[str, _Change], seeding: bool) -> None:
        deletions, insertions, hidden = _split(incoming)
        if deletions:
            overdeleted: dict[str, set] = {name: set() for name in self.stratum.relations}
            changes: dict[str, _Change] = deletions
            while changes:
                changes = self._overdelete(self._round(changes, hidden), overdeleted)
                self._show(changes)
            rederived = self._rederive(overdeleted)
            self._show(rederived)
            insertions.update(rederived)
        self.counting(insertions, seeding, monotone=True)

    # -- rounds ----------------------------------------------------------------------------------

    def _round(self, changes: dict[str, _Change], hidden: dict[str, set]) -> dict[str, dict]:
        """Derivation-count changes of the stratum's heads caused by ``changes`` (already visible).

        ``hidden`` rows are treated as absent in both the old and the new state.
        """
        core = self.core
        outputs: dict[str, dict] = {name: {} for name in self.stratum.relations}
        views: dict[tuple[str, str], Any] = {}
        self.hidden = hidden

        def view(name: str, mode: str):
            cached = views.get((name, mode))
            if cached is None:
                relation = core._relations[name]
                hide = hidden.get(name, set())
                change = changes.get(name)
                show: set = set()
                if mode != NEW and change:
                    hide = hide | change.plus if hide else change.plus
                    show = change.minus
                cached = OverlayView(relation, hide, show) if hide or show else relation
                views[(name, mode)] = cached
            return cached

        for compiled in self.stratum.rules:
            head = compiled.rule.head.name
            out = outputs[head]
            for plan in compiled.delta_plans:
                change = changes.get(plan.delta_relation)
                if not change or any(self._empty(*plan.views[i][:2], changes) for i in plan.matched_views):
                    continue
                delta = chain(zip(change.plus, repeat(1)), zip(change.minus, repeat(-1)))
                plan_views = [view(name, mode) for name, mode, _how, _pos in plan.views]
                fns = [core._functions[name] for name in plan.functions]
                waits = None if compiled.deferral is None else _Waits(self, compiled, changes)
                try:
                    fired = plan.python_function(delta, plan_views, fns, out, waits)
                except Exception as exc:
                    raise _RuleFailure(compiled.rule, exc) from exc
                core.stats.record_fired(head, fired)
        return outputs

    def _empty(self, name: str, mode: str, changes: dict[str, _Change]) -> bool:
        """Whether the view of ``name`` in ``mode`` has no rows (old contents: the rows minus those
        entering this round, plus those leaving it; DRed's hidden rows are not counted out)."""
        rows = len(self.core._relations[name].rows)
        change = changes.get(name)
        if mode != NEW and change:
            return rows == len(change.plus) and not change.minus
        return rows == 0

    def _seed_outputs(self) -> dict[str, dict]:
        outputs: dict[str, dict] = {name: {} for name in self.stratum.relations}
        for compiled in self.stratum.rules:
            if compiled.seed_plan is None:
                continue
            fns = [self.core._functions[name] for name in compiled.seed_plan.functions]
            head = compiled.rule.head.name
            try:
                fired = compiled.seed_plan.python_function(None, [], fns, outputs[head])
            except Exception as exc:
                raise _RuleFailure(compiled.rule, exc) from exc
            self.core.stats.record_fired(head, fired)
        return outputs

    def _settle(self, outputs: dict[str, dict], monotone: bool, held: "_Held | None" = None) -> dict[str, _Change]:
        """Apply derivation-count changes; return the visibility changes they imply (those of
        ``.ordered`` aggregates are held back and released later by ``held``)."""
        core, journal = self.core, self.journal
        changes: dict[str, _Change] = {}
        self._apply_wait_changes()
        before: dict[str, dict[tuple, Any]] = {}  # the best of each group some derivations wait on
        for name, out in outputs.items():
            if not out:
                continue
            change = _Change()
            agg = core._aggregates.get(name)
            if name in self.waiters:
                before[name] = {group: agg.best(group) for group, _value in out}
            if agg is None:
                counts, rows = core._counts[name], core._relations[name].rows
                for row, delta in out.items():
                    if not delta:
                        continue
                    count = counts.get(row, 0) + delta
                    if count < 0:
                        raise EvaluationError(f"internal inconsistency: negative derivation count for {name}{row}")
                    set_count(counts, row, count, journal)
                    visible = row in rows
                    if count and not visible:
                        change.plus.add(row)
                    elif not count and visible:
                        if monotone:
                            raise EvaluationError(f"'{name}{row}' lost its last derivation while insertions were "
                                                  "propagated; the recursion is not monotone")
                        change.minus.add(row)
            else:
                touched = set()
                bounded = held is not None and name in held.goals
                for (group, value), delta in out.items():
                    if delta:
                        if bounded and delta > 0 and (name, group, value) not in self.not_new:
                            held.check_candidate(name, group, value)
                        agg.add_candidate(group, value, delta, journal)
                        touched.add(group)
                if held is not None and name in self.stratum.ordered:
                    for group in touched:
                        current = agg.current.get(group, _MISSING)
                        if bounded and current is not _MISSING:
                            if agg.best(group) == current:
                                continue
                            change.minus.add(agg.row(group, current))  # hidden until released again
                        held.hold(name, group)
                    if change:
                        changes[name] = change
                    continue
                updates = 0
                for group in touched:
                    best = agg.best(group)
                    current = agg.current.get(group, _MISSING)
                    if current is _MISSING:
                        if best is not None:
                            change.plus.add(agg.row(group, best))
                        continue
                    if best == current:
                        continue
                    if monotone and (best is None or not agg.improves(best, current)):
                        raise EvaluationError(
                            f"aggregate '{name}' group {group!r} went from {current!r} to {best!r} while insertions "
                            "were propagated; recursion through min/max needs inputs that only improve it "
                            "(for example positive weights)"
                        )
                    change.minus.add(agg.row(group, current))
                    if best is not None:
                        change.plus.add(agg.row(group, best))
                        updates += 1
                core.stats.record_updates(name, updates)
            if change:
                changes[name] = change
        for name, groups in before.items():
            agg = core._aggregates[name]
            for group, old in groups.items():
                new = agg.best(group)
                if old is None or (new is not None and not new > old):
                    continue
                if held is None or name not in held.wakes:
                    self._wake(name, group, new)
                    continue
                bounds = [bound for compiled in self.waiters[name]
                          for bound in core._waiting.get(id(compiled), {}).get(group, {}).values()]
                if bounds:
                    held.wake_at(name, group, min(bounds))
        return changes

    # -- derivations that wait (``until``) -----------------------------------------------------

    def _apply_wait_changes(self) -> None:
        """Make this round's changes to what waits: a derivation that began to wait is recorded, one
        that waited and lost a row of its body is forgotten (cross terms of a round cancel)."""
        for number, changed in self.wait_changes.items():
            waiting = self.core._waiting.setdefault(number, {})
            for (group, key), (delta, bound) in changed.items():
                keys = waiting.get(group)
                present = keys is not None and key in keys
                count = present + delta
                if count not in (0, 1):
                    raise EvaluationError(f"internal inconsistency: a waiting derivation counted {count} times")
                if count and not present:
                    if keys is None:
                        keys = waiting[group] = {}
                    keys[key] = bound
                    self.journal.append((_forget_wait, (waiting, group, key)))
                elif present and not count:
                    _forget_wait((waiting, group, key))
                    self.journal.append((_restore_wait, (waiting, group, key, bound)))
        self.wait_changes = {}

    def _wake(self, name: str, group: tuple, best: Any) -> bool:
        """Group ``group`` of ``name`` rose to ``best`` (``None``: it has no candidate left): make the
        derivations that waited on it for a bound it now reaches, for the next round. Whether any did."""
        core = self.core
        woke = False
        for compiled in self.waiters.get(name, ()):
            keys = core._waiting.get(id(compiled), {}).get(group)
            if not keys:
                continue
            ready = [(key, bound) for key, bound in keys.items() if best is None or not best < bound]
            if not ready:
                continue
            woke = True
            waiting = core._waiting[id(compiled)]
            for key, bound in ready:
                _forget_wait((waiting, group, key))
                self.journal.append((_restore_wait, (waiting, group, key, bound)))
            plan, deferral = compiled.deferral.resume, compiled.deferral
            head = compiled.rule.head.name
            if self.resumed is None:
                self.resumed = {n: {} for n in self.stratum.relations}
            out = self.resumed[head]
            views = []
            for relation, _mode, _how, _positions in plan.views:
                hide = self.hidden.get(relation)
                views.append(OverlayView(core._relations[relation], hide, set()) if hide else core._relations[relation])
            fns = [core._functions[f] for f in plan.functions]
            made: dict = {}
            try:
                fired = plan.python_function(((key, 1) for key, _bound in ready), views, fns, made, None)
            except Exception as exc:
                raise _RuleFailure(compiled.rule, exc) from exc
            core.stats.record_fired(head, fired)
            for row, count in made.items():
                out[row] = out.get(row, 0) + count
                self.not_new.add((name, tuple(row[p] for p in deferral.group_positions), row[deferral.value_position]))
        return woke

    def _overdelete(self, outputs: dict[str, dict], overdeleted: dict[str, set]) -> dict[str, _Change]:
        """Apply lost derivations; every row that lost one is deleted for now (DRed's first phase)."""
        core, journal = self.core, self.journal
        changes: dict[str, _Change] = {}
        for name, out in outputs.items():
            if not out:
                continue
            minus = set()
            agg = core._aggregates.get(name)
            gone = overdeleted[name]
            if agg is None:
                counts, rows = core._counts[name], core._relations[name].rows
                for row, delta in out.items():
                    if not delta:
                        continue
                    set_count(counts, row, counts.get(row, 0) + delta, journal)
                    if delta < 0 and row in rows and row not in gone:
                        gone.add(row)
                        minus.add(row)
            else:
                for (group, value), delta in out.items():
                    if not delta:
                        continue
                    agg.add_candidate(group, value, delta, journal)
                    if delta < 0 and agg.current.get(group, _MISSING) == value and group not in gone:
                        gone.add(group)
                        minus.add(agg.row(group, value))
            if minus:
                changes[name] = _Change(minus=minus)
        return changes

    def _rederive(self, overdeleted: dict[str, set]) -> dict[str, _Change]:
        """Rows deleted for now that still have a derivation from what remains (DRed's second phase)."""
        core = self.core
        rederived: dict[str, _Change] = {}
        for name, gone in overdeleted.items():
            agg = core._aggregates.get(name)
            if agg is None:
                counts = core._counts[name]
                plus = {row for row in gone if counts.get(row, 0) > 0}
            else:
                plus = set()
                for group in gone:
                    best = agg.best(group)
                    if best is not None:
                        plus.add(agg.row(group, best))
            if plus:
                rederived[name] = _Change(plus=plus)
        return rederived

    def _show(self, changes: dict[str, _Change]) -> None:
        """Make visibility changes of the stratum's relations take effect."""
        core, journal = self.core, self.journal
        for name, change in changes.items():
            original = self.original[name]
            relation = core._relations[name]
            agg = core._aggregates.get(name)
            for row in change.minus:
                original.setdefault(row, True)
                if agg is None:
                    relation.discard(row, journal)
                else:
                    agg.hide(agg.split(row)[0], journal)
            for row in change.plus:
                original.setdefault(row, False)
                if agg is None:
                    relation.add(row, journal)
                else:
                    group, value = agg.split(row)
                    agg.show(group, value, journal)
            core.stats.record_change(name, len(change.plus), len(change.minus))

    def net_changes(self) -> dict[str, _Change]:
        changes = {}
        for name, original in self.original.items():
            agg = self.core._aggregates.get(name)
            touched = len({agg.split(r)[0] for r in original}) if agg is not None else len(original)
            self.core.stats.record_touched(name, touched)
            self.core._touched.setdefault(name, set()).update(original)
            rows = self.core._relations[name].rows
            change = _Change(
                {r for r, was in original.items() if not was and r in rows},
                {r for r, was in original.items() if was and r not in rows},
            )
            if change:
                changes[name] = change
        return changes

