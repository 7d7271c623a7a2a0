"""The incremental evaluator: delta tuples in, derived deltas out, state kept at the fixpoint.

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

from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, Callable, Iterable, Mapping

from .errors import DatalogError, DeltaError, EvaluationError, ProgramError
from .planner import NEW
from .program import COUNTING, Program, Stratum
from .stats import Stats
from .storage import AggregateState, Journal, OverlayView, Relation, Row, set_count

_MISSING = object()


@dataclass
class RelationDelta:
    """The net change of one relation in one ``run()``; aggregate changes of a group are updates."""

    inserted: set[Row] = field(default_factory=set)
    deleted: set[Row] = field(default_factory=set)
    updated: list[tuple[Row, Row]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inserted or self.deleted or self.updated)


class _Change:
    """Rows that became visible (plus) or invisible (minus) in one step."""

    __slots__ = ("plus", "minus")

    def __init__(self, plus: set | None = None, minus: set | None = None):
        self.plus = plus if plus is not None else set()
        self.minus = minus if minus is not None else set()

    def __bool__(self) -> bool:
        return bool(self.plus or self.minus)


class _RuleFailure(Exception):
    def __init__(self, rule, cause: BaseException):
        super().__init__(str(cause))
        self.rule, self.cause = rule, cause


class Engine:
    """Evaluates a ``Program`` incrementally.

    ``functions`` binds every ``.function`` the program declares to a Python callable that takes the
    input arguments and returns an iterable of output rows (tuples); a function with no outputs may
    return a bool. Functions must be pure: the engine calls them again to retract what they produced.
    """

    def __init__(
        self,
        program: Program,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        *,
        max_rounds: int = 1_000_000,
        max_passes: int = 1_000,
    ):
        self.program = program
        self.max_rounds = max_rounds
        self.max_passes = max_passes
        self._functions = self._bind_functions(dict(functions or {}))
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
        self._pending: dict[str, dict[Row, int]] = {}
        self._touched: dict[str, set[Row]] = {}
        self._last_touched: dict[str, set[Row]] = {}
        self._seeded = False
        self.stats = Stats(program.relations)

    # -- deltas --------------------------------------------------------------------------------

    def insert(self, relation: str, rows: Iterable[Iterable[Any]]) -> None:
        """Queue insertions of rows into an input relation (a row inserted twice counts twice)."""
        checked = self._check_rows(relation, rows)
        pending = self._pending.setdefault(relation, {})
        for row in checked:
            pending[row] = pending.get(row, 0) + 1

    def delete(self, relation: str, rows: Iterable[Iterable[Any]]) -> None:
        """Queue deletions; each row must be present (counting queued changes), else nothing is queued."""
        checked = self._check_rows(relation, rows)
        counts = self._counts[relation]
        pending = self._pending.get(relation, {})
        wanted: dict[Row, int] = {}
        for row in checked:
            wanted[row] = wanted.get(row, 0) + 1
            if counts.get(row, 0) + pending.get(row, 0) < wanted[row]:
                raise DeltaError(f"cannot delete {row!r} from '{relation}': it is not present")
        pending = self._pending.setdefault(relation, {})
        for row, n in wanted.items():
            pending[row] = pending.get(row, 0) - n

    def update(self, relation: str, old: Iterable[Any], new: Iterable[Any]) -> None:
        """Queue the replacement of one present row by another (a deletion and an insertion)."""
        (old_row,) = self._check_rows(relation, [old])
        self._check_rows(relation, [new])
        self.delete(relation, [old_row])
        self.insert(relation, [new])

    def discard_pending(self) -> None:
        """Drop the deltas queued since the last successful ``run()``."""
        self._pending.clear()

    @property
    def has_pending(self) -> bool:
        return any(any(v for v in rows.values()) for rows in self._pending.values())

    def _check_rows(self, relation: str, rows: Iterable[Iterable[Any]]) -> list[Row]:
        info = self.program.relations.get(relation)
        if info is None:
            raise DeltaError(f"unknown relation '{relation}'")
        if info.memo_of is not None:
            raise DeltaError(f"'{relation}' is the memo of '{info.memo_of}'; the engine maintains it")
        if not info.is_input:
            raise DeltaError(f"'{relation}' is derived by rules; only .input relations take deltas")
        if isinstance(rows, (str, bytes)):
            raise DeltaError(f"rows for '{relation}' must be an iterable of rows, not a string")
        checked = []
        for row in rows:
            try:
                row = tuple(row)
            except TypeError:
                raise DeltaError(f"row {row!r} for '{relation}' is not a sequence") from None
            if len(row) != info.arity:
                raise DeltaError(f"row {row!r} for '{relation}' has {len(row)} values; '{relation}' has arity {info.arity}")
            try:
                hash(row)
            except TypeError:
                raise DeltaError(f"row {row!r} for '{relation}' holds an unhashable value") from None
            checked.append(row)
        return checked

    # -- reading ---------------------------------------------------------------------------------

    def rows(self, relation: str) -> set[Row]:
        """The relation's visible rows."""
        return set(self._relation(relation).rows)

    def touched_rows(self, relation: str) -> set[Row]:
        """Rows of a derived relation whose visibility changed at some point during the last run."""
        self._relation(relation)
        return set(self._last_touched.get(relation, ()))

    def lookup(self, relation: str, positions: tuple[int, ...], key: tuple) -> set[Row]:
        """Visible rows whose values at ``positions`` equal ``key`` (an index is kept from then on)."""
        return set(self._relation(relation).ensure_index(tuple(positions)).get(tuple(key), ()))

    def counts(self, relation: str) -> dict[Row, int]:
        """Insertion counts of an input relation, or derivation counts of a derived one."""
        self._relation(relation)
        if relation in self._aggregates:
            agg = self._aggregates[relation]
            return {agg.row(g, v): agg.count_of(g, v) for g, v in agg.current.items()}
        return dict(self._counts[relation])

    def state_size(self) -> int:
        """Values the engine holds: every stored row's values, every derivation count (key and count),
        and every aggregate candidate (value and count). A repeatable measure of state, unlike bytes."""
        size = sum(len(r.rows) * max(1, r.arity) for r in self._relations.values())
        size += sum(2 * len(counts) for counts in self._counts.values())
        size += sum(2 * len(values) for agg in self._aggregates.values() for values in agg.candidates.values())
        return size

    def candidates(self, relation: str, group: tuple) -> dict[Any, int]:
        """Every candidate value of an aggregate group, with its derivation count."""
        if relation not in self._aggregates:
            raise DatalogError(f"'{relation}' is not an aggregate relation")
        return dict(self._aggregates[relation].candidates.get(tuple(group), {}))

    def _relation(self, name: str) -> Relation:
        try:
            return self._relations[name]
        except KeyError:
            raise DatalogError(f"unknown relation '{name}'") from None

    # -- evaluation ------------------------------------------------------------------------------

    def run(self) -> dict[str, RelationDelta]:
        """Propagate the queued deltas to the fixpoint; returns the net change of each derived relation.

        On failure the engine is exactly as before the call (queued deltas included) and an
        ``EvaluationError`` says which rule failed and why.
        """
        journal: Journal = []
        self.stats.begin()
        self._touched = {}
        try:
            changes = self._passes(journal)
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
        self._pending.clear()
        self._seeded = True
        self._last_touched = self._touched
        self.stats.commit()
        return self._result(changes)

    def _passes(self, journal: Journal) -> dict[str, _Change]:
        """Evaluate the queued deltas, then refresh memos from the fixpoint and evaluate again, until
        every visible row of a memo's source equals its memo row."""
        changes = self._evaluate(self._pending, journal, seeding=not self._seeded)
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
            if not incoming and not seed:
                continue
            run = _StratumRun(self, stratum, journal)
            if stratum.method == COUNTING:
                run.counting(incoming, seed)
            else:
                run.dred(incoming, seed)
            changes.update(run.net_changes())
        return changes

    def _result(self, changes: dict[str, _Change]) -> dict[str, RelationDelta]:
        result = {}
        for name, change in changes.items():
            if self.program.relations[name].is_base:
                continue
            delta = RelationDelta(set(change.plus), set(change.minus))
            agg = self._aggregates.get(name)
            if agg is not None:
                inserted = {agg.split(r)[0]: r for r in change.plus}
                for row in change.minus:
                    group = agg.split(row)[0]
                    if group in inserted:
                        delta.updated.append((row, inserted[group]))
                        delta.inserted.discard(inserted[group])
                        delta.deleted.discard(row)
            if delta:
                result[name] = delta
        return result

    def _bind_functions(self, functions: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        declared = self.program.functions
        unknown = sorted(set(functions) - set(declared))
        if unknown:
            raise ProgramError(f"functions given but not declared with .function: {', '.join(unknown)}")
        bound = {}
        for name, decl in declared.items():
            if name not in functions:
                raise ProgramError(f"function '{name}' is declared but no callable was given for it", decl.location)
            fn = functions[name]
            if not callable(fn):
                raise ProgramError(f"the value given for function '{name}' is not callable", decl.location)
            bound[name] = _checked_function(name, fn, len(decl.outputs))
        return bound


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


def _checked_function(name: str, fn: Callable[..., Any], n_outputs: int) -> Callable[..., list]:
    """Wrap a user function so that a wrong result names the function instead of failing obscurely."""

    def call(*args):
        result = fn(*args)
        if n_outputs == 0 and isinstance(result, bool):
            return [()] if result else []
        if result is None:
            raise EvaluationError(f"function '{name}{args!r}' returned None; return an iterable of rows")
        rows = result if isinstance(result, (list, tuple)) else list(result)
        if all(type(row) is tuple and len(row) == n_outputs for row in rows):
            return rows  # the common case: already a sequence of right-sized tuples
        checked = []
        for row in rows:
            row = tuple(row) if isinstance(row, (tuple, list)) else row
            if not isinstance(row, tuple) or len(row) != n_outputs:
                raise EvaluationError(
                    f"function '{name}{args!r}' produced {row!r}; each row must be a tuple of {n_outputs} values"
                )
            checked.append(row)
        return checked

    return call


class _StratumRun:
    """The evaluation of one stratum for one batch of incoming changes."""

    def __init__(self, engine: Engine, stratum: Stratum, journal: Journal):
        self.engine = engine
        self.stratum = stratum
        self.journal = journal
        self.original: dict[str, dict[Row, bool]] = {name: {} for name in stratum.relations}

    # -- methods -------------------------------------------------------------------------------

    def counting(self, incoming: dict[str, _Change], seeding: bool, monotone: bool = False) -> None:
        changes = dict(incoming)
        extra = self._seed_outputs() if seeding else None
        rounds = 0
        while changes or extra:
            outputs = self._round(changes, {})
            if extra:
                for name, out in extra.items():
                    target = outputs[name]
                    for key, count in out.items():
                        target[key] = target.get(key, 0) + count
                extra = None
            changes = self._settle(outputs, monotone)
            self._show(changes)
            rounds += 1
            if rounds > self.engine.max_rounds:
                raise EvaluationError(
                    f"no fixpoint after {rounds} rounds for {', '.join(sorted(self.stratum.relations))}; "
                    "is the recursion well-founded?"
                )

    def dred(self, incoming: dict[str, _Change], seeding: bool) -> None:
        deletions = {r: _Change(minus=c.minus) for r, c in incoming.items() if c.minus}
        insertions = {r: _Change(plus=c.plus) for r, c in incoming.items() if c.plus}
        if deletions:
            hidden = {r: c.plus for r, c in insertions.items()}
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
        engine = self.engine
        outputs: dict[str, dict] = {name: {} for name in self.stratum.relations}
        views: dict[tuple[str, str], Any] = {}

        def view(name: str, mode: str):
            cached = views.get((name, mode))
            if cached is None:
                relation = engine._relations[name]
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
                if not change:
                    continue
                delta = chain(zip(change.plus, repeat(1)), zip(change.minus, repeat(-1)))
                plan_views = [view(name, mode) for name, mode, _how, _pos in plan.views]
                fns = [engine._functions[name] for name in plan.functions]
                try:
                    fired = plan.run(delta, plan_views, fns, out)
                except Exception as exc:
                    raise _RuleFailure(compiled.rule, exc) from exc
                engine.stats.record_fired(head, fired)
        return outputs

    def _seed_outputs(self) -> dict[str, dict]:
        outputs: dict[str, dict] = {name: {} for name in self.stratum.relations}
        for compiled in self.stratum.rules:
            if compiled.seed_plan is None:
                continue
            fns = [self.engine._functions[name] for name in compiled.seed_plan.functions]
            head = compiled.rule.head.name
            try:
                fired = compiled.seed_plan.run(None, [], fns, outputs[head])
            except Exception as exc:
                raise _RuleFailure(compiled.rule, exc) from exc
            self.engine.stats.record_fired(head, fired)
        return outputs

    def _settle(self, outputs: dict[str, dict], monotone: bool) -> dict[str, _Change]:
        """Apply derivation-count changes; return the visibility changes they imply."""
        engine, journal = self.engine, self.journal
        changes: dict[str, _Change] = {}
        for name, out in outputs.items():
            if not out:
                continue
            change = _Change()
            agg = engine._aggregates.get(name)
            if agg is None:
                counts, rows = engine._counts[name], engine._relations[name].rows
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
                for (group, value), delta in out.items():
                    if delta:
                        agg.add_candidate(group, value, delta, journal)
                        touched.add(group)
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
                engine.stats.record_updates(name, updates)
            if change:
                changes[name] = change
        return changes

    def _overdelete(self, outputs: dict[str, dict], overdeleted: dict[str, set]) -> dict[str, _Change]:
        """Apply lost derivations; every row that lost one is deleted for now (DRed's first phase)."""
        engine, journal = self.engine, self.journal
        changes: dict[str, _Change] = {}
        for name, out in outputs.items():
            if not out:
                continue
            minus = set()
            agg = engine._aggregates.get(name)
            gone = overdeleted[name]
            if agg is None:
                counts, rows = engine._counts[name], engine._relations[name].rows
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
        engine = self.engine
        rederived: dict[str, _Change] = {}
        for name, gone in overdeleted.items():
            agg = engine._aggregates.get(name)
            if agg is None:
                counts = engine._counts[name]
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
        engine, journal = self.engine, self.journal
        for name, change in changes.items():
            original = self.original[name]
            relation = engine._relations[name]
            agg = engine._aggregates.get(name)
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
            engine.stats.record_change(name, len(change.plus), len(change.minus))

    def net_changes(self) -> dict[str, _Change]:
        changes = {}
        for name, original in self.original.items():
            agg = self.engine._aggregates.get(name)
            touched = len({agg.split(r)[0] for r in original}) if agg is not None else len(original)
            self.engine.stats.record_touched(name, touched)
            self.engine._touched.setdefault(name, set()).update(original)
            rows = self.engine._relations[name].rows
            change = _Change(
                {r for r, was in original.items() if not was and r in rows},
                {r for r, was in original.items() if was and r not in rows},
            )
            if change:
                changes[name] = change
        return changes

