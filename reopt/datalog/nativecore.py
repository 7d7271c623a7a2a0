"""The native backend: the Rust core (``reopt.datalog._native``) behind the core interface.

The front end hands the core a compiled program (relations, strata, plans as plain tuples, see
``planner``); the core keeps all state and evaluates in Rust, calling back into Python only for
``.function`` predicates. Errors come back as ``EvaluationError`` with the state rolled back, also
when the core itself fails (a Rust panic is caught there, never reaching the process).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, Callable, Iterator, NamedTuple

from .errors import DatalogError, EvaluationError
from .program import Program
from .stats import RelationStats, Stats

try:
    from . import _native
except ImportError as exc:  # built by setuptools-rust; absent where no Rust toolchain was found
    _native = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # the integers the native backend holds (every backend holds these)


def available() -> bool:
    return _native is not None


def compiled_program(program: Program) -> tuple:
    """The program as the native core reads it: relations, strata and their plans, as tuples."""
    names = list(program.relations)
    ids = {name: i for i, name in enumerate(names)}
    patterns = program.index_patterns()
    relations = tuple(
        (
            name,
            info.arity,
            info.aggregate or "",
            -1 if info.aggregate_position is None else info.aggregate_position,
            ids[info.memo_of] if info.memo_of is not None else -1,
            info.memo_keys,
            tuple(sorted(patterns.get(name, ()))),
        )
        for name, info in program.relations.items()
    )
    functions = list(program.functions)
    rules = []
    strata = []
    for stratum in program.strata:
        compiled_rules = []
        for compiled in stratum.rules:
            rule_id = len(rules)
            rules.append(compiled.rule)
            plans = tuple(_plan(plan, ids, functions) for plan in compiled.delta_plans)
            seed = _plan(compiled.seed_plan, ids, functions) if compiled.seed_plan else None
            deferral = compiled.deferral
            if deferral is not None:
                deferral = (ids[deferral.aggregate], deferral.group_positions, deferral.value_position,
                            _plan(deferral.resume, ids, functions))
            compiled_rules.append((rule_id, ids[compiled.rule.head.name], plans, seed, deferral))
        strata.append((
            tuple(sorted(ids[r] for r in stratum.relations)),
            stratum.method,
            tuple(sorted(ids[r] for r in stratum.inputs)),
            tuple(compiled_rules),
            tuple(sorted(ids[r] for r in stratum.ordered)),
            tuple(sorted((ids[r], ids[g]) for r, g in stratum.goals.items())),
            tuple(sorted((ids[r], ids[h]) for r, h in stratum.offsets.items())),
        ))
    return tuple(names), relations, tuple(functions), tuple(strata), rules


class _Compiled(NamedTuple):
    names: tuple[str, ...]
    ids: dict[str, int]  # read only
    functions: tuple[str, ...]
    rules: list  # the rules by id, for error messages
    core_program: Any  # _native.Program, shared by every core that runs the program


# A program is compiled for the core once, however many engines run it (an optimizer makes one per
# query); the entry goes with the program.
_COMPILED: "weakref.WeakKeyDictionary[Program, _Compiled]" = weakref.WeakKeyDictionary()


def _compiled(program: Program) -> _Compiled:
    compiled = _COMPILED.get(program)
    if compiled is None:
        names, relations, functions, strata, rules = compiled_program(program)
        compiled = _COMPILED[program] = _Compiled(
            names, {name: i for i, name in enumerate(names)}, functions, rules, _native.Program(relations, strata))
    return compiled


def _plan(plan, ids: dict[str, int], functions: list[str]) -> tuple:
    views = tuple((ids[rel], mode == "old") for rel, mode, _how, _pos in plan.views)
    fns = tuple(functions.index(name) for name in plan.functions)
    delta = ids[plan.delta_relation] if plan.delta_relation is not None else -1
    group, aggregate = plan.head
    steps = tuple(_until_ids(step, ids) if step[0] == "until" else step for step in plan.steps)
    bounded = None if plan.bounded_position is None else (plan.bounded_position, plan.until_bound)
    return delta, views, fns, steps, group, aggregate, len(plan.slots), bounded


def _until_ids(step: tuple, ids: dict[str, int]) -> tuple:
    """An ``until`` step with the relations it checks for entering rows named by id."""
    kind, group, bound, key, (delta_before, entering) = step
    return kind, group, bound, key, (delta_before, tuple((ids[rel], args) for rel, args in entering))


class NativeCore:
    """State and evaluation of one engine on the native backend (see ``Engine`` for the contract)."""

    name = "native"

    def __init__(self, program: Program, functions: dict[str, Callable[..., Any]], max_rounds: int, max_passes: int):
        if _native is None:
            raise DatalogError(
                "the native backend is not built in this installation "
                f"({_IMPORT_ERROR}); reinstall with a Rust toolchain present, or use backend='python'"
            )
        self.program = program
        compiled = _compiled(program)
        self._rules = compiled.rules
        self._names = compiled.names
        self._ids = compiled.ids
        callables = tuple(functions[name] for name in compiled.functions)
        outputs = tuple(len(program.functions[name].outputs) for name in compiled.functions)
        self._core = _native.Core(compiled.core_program, compiled.functions, callables, outputs, max_rounds, max_passes)

    @staticmethod
    def unsupported(value: Any) -> str | None:
        """Why this backend cannot hold ``value``: it holds 64-bit ints, floats, strings and bools."""
        if isinstance(value, (bool, float, str)):
            return None
        if isinstance(value, int):
            if INT_MIN <= value <= INT_MAX:
                return None
            return f"the integer {value} does not fit in 64 bits (the native backend's integers); use backend='python'"
        return (f"the native backend holds ints, floats, strings and bools, not {type(value).__name__}; "
                "use backend='python'")

    @property
    def stats(self) -> Stats:
        stats = Stats(self._names)
        last, total = self._core.stats()
        for name, counters in zip(self._names, last):
            stats.last[name] = RelationStats(*counters)
        for name, counters in zip(self._names, total):
            stats.total[name] = RelationStats(*counters)
        return stats

    def rows(self, relation: str) -> set:
        return self._core.rows(self._ids[relation])

    def touched_rows(self, relation: str) -> set:
        return self._core.touched_rows(self._ids[relation])

    def _holdable(self, values: tuple) -> bool:
        """Whether this backend can hold every value, checked inline for the common kinds: a plan's
        extraction looks up a row per node."""
        for value in values:
            kind = type(value)
            if kind is str or kind is float or kind is bool or (kind is int and INT_MIN <= value <= INT_MAX):
                continue
            if self.unsupported(value):
                return False
        return True

    def lookup(self, relation: str, positions: tuple[int, ...], key: tuple) -> set:
        if not self._holdable(key):
            return set()
        return self._core.lookup(self._ids[relation], positions, key)

    def count(self, relation: str, row: tuple) -> int:
        return self._core.count(self._ids[relation], row)

    def counts(self, relation: str) -> dict:
        return self._core.counts(self._ids[relation])

    def inject_failure(self, after_changes: int | None) -> None:
        self._core.fail_after(after_changes)

    def state_size(self) -> int:
        return self._core.state_size()

    def candidates(self, relation: str, group: tuple) -> dict:
        if not self._holdable(group):
            return {}
        return self._core.candidates(self._ids[relation], group)

    def run(self, pending: dict[str, dict[tuple, int]], seeding: bool,
            keep_changes: bool = True) -> Mapping[str, tuple[set, set]]:
        try:
            changed, generation = self._core.run(pending, seeding, keep_changes)
        except _native.RuleError as exc:
            rule_id, kind, message, cause = exc.args
            rule = self._rules[rule_id]
            if cause is None:
                raise EvaluationError(f"{rule.location}: evaluating '{rule}' failed: {kind}: {message}") from None
            if not isinstance(cause, Exception):
                raise cause  # KeyboardInterrupt and the like pass through, the state already rolled back
            raise EvaluationError(
                f"{rule.location}: evaluating '{rule}' failed: {type(cause).__name__}: {cause}") from cause
        except _native.CoreError as exc:
            raise EvaluationError(str(exc.args[0])) from None
        except _native.PanicException as exc:
            raise EvaluationError(f"internal error in the native core (state rolled back): {exc}") from None
        return _NativeChanges(self._core, self._names, changed, generation)


class _NativeChanges(Mapping):
    """The last run's net changes, held by the core and converted to Python rows when read."""

    __slots__ = ("_core", "_names", "_changed", "_generation", "_ids_made")  # one is made per run

    def __init__(self, core, names: tuple[str, ...], changed: list[int], generation: int):
        self._core, self._names, self._changed, self._generation = core, names, changed, generation
        self._ids_made: dict[str, int] | None = None

    @property
    def _ids(self) -> dict[str, int]:
        """Relation name to id, made at the first read: a caller that ignores the deltas pays nothing."""
        if self._ids_made is None:
            self._ids_made = {self._names[i]: i for i in self._changed}
        return self._ids_made

    def __getitem__(self, name: str) -> tuple[set, set]:
        if self._core.generation() != self._generation:
            raise DatalogError("these deltas belong to an earlier run(); read them before the next one")
        return self._core.changes(self._ids[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._changed)
