"""The engine's public face: deltas in, derived deltas out, on one of two evaluation backends.

The front end (parser, checks, strata, planner) is shared; evaluation runs on a backend core:

* ``"native"``: the Rust crate (``reopt.datalog._native``), the default wherever it was built;
* ``"python"``: the pure-Python reference evaluator (``pycore``), which runs anywhere.

Both execute the same compiled plans with the same semantics (docs/dialect.md), and every engine
test runs on both. This class checks deltas, queues them, and turns a core's net changes into
``RelationDelta``s; the core keeps the state and rolls it back when a run fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

from . import nativecore
from .errors import DatalogError, DeltaError, EvaluationError, ProgramError
from .nativecore import INT_MAX, INT_MIN
from .program import Program
from .pycore import PythonCore
from .stats import Stats
from .storage import Row

BACKENDS = ("native", "python")


def default_backend() -> str:
    """``native`` where the Rust core was built, else ``python``."""
    return "native" if nativecore.available() else "python"


@dataclass
class RelationDelta:
    """The net change of one relation in one ``run()``; aggregate changes of a group are updates."""

    inserted: set[Row] = field(default_factory=set)
    deleted: set[Row] = field(default_factory=set)
    updated: list[tuple[Row, Row]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inserted or self.deleted or self.updated)


def _sequence(value: Any, what: str) -> tuple:
    """``value`` as a tuple, where it is a sequence of values (a string is one value, not many)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise DatalogError(f"{what} must be a tuple of values, got {_short(value)}")
    return tuple(value)


class Engine:
    """Evaluates a ``Program`` incrementally.

    ``functions`` binds every ``.function`` the program declares to a Python callable that takes the
    input arguments and returns an iterable of output rows (tuples); a function with no outputs may
    return a bool. Functions must be pure: the engine calls them again to retract what they produced.
    ``backend`` is ``"native"`` or ``"python"``; by default native where it was built
    (``engine.backend`` says which one runs).
    """

    def __init__(
        self,
        program: Program,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        *,
        backend: str | None = None,
        max_rounds: int = 1_000_000,
        max_passes: int = 1_000,
    ):
        self.program = program
        backend = default_backend() if backend is None else backend
        if backend not in BACKENDS:
            raise DatalogError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        bound = self._bind_functions(dict(functions or {}))
        if backend == "native":
            self._core: Any = nativecore.NativeCore(program, bound, max_rounds, max_passes)
        else:
            self._core = PythonCore(program, bound, max_rounds, max_passes)
        self.backend = backend
        self._pending: dict[str, dict[Row, int]] = {}
        self._seeded = False

    @property
    def stats(self) -> Stats:
        """Per-relation work counters: ``stats.last`` (last successful run) and ``stats.total``. An
        alias (``Program.aliases``) counts its source's visibility changes; no rule fires for it."""
        stats = self._core.stats
        for name, source in self.program.aliases.items():
            stats.last[name] = replace(stats.last[source], fired=0)
            stats.total[name] = replace(stats.total[source], fired=0)
        return stats

    # -- deltas --------------------------------------------------------------------------------

    def insert(self, relation: str, rows: Iterable[Iterable[Any]]) -> None:
        """Queue insertions of rows into an input relation (a row inserted twice counts twice)."""
        self._queue_insertions(relation, self._check_rows(relation, rows))

    def delete(self, relation: str, rows: Iterable[Iterable[Any]]) -> None:
        """Queue deletions; each row must be present (counting queued changes), else nothing is queued."""
        self._queue_deletions(relation, self._check_rows(relation, rows))

    def update(self, relation: str, old: Iterable[Any], new: Iterable[Any]) -> None:
        """Queue the replacement of one present row by another (a deletion and an insertion)."""
        old_row, new_row = self._check_rows(relation, (old, new))
        # one row each way, queued without the lists and tallies of the bulk paths: a stream of
        # single updates (an edge's weight, a statistic) pays this per change
        pending = self._pending.get(relation) or {}
        self._require_present(relation, old_row, pending, 1)
        self._pending[relation] = pending
        pending[old_row] = pending.get(old_row, 0) - 1
        pending[new_row] = pending.get(new_row, 0) + 1

    def _queue_insertions(self, relation: str, rows: list[Row]) -> None:
        pending = self._pending.setdefault(relation, {})
        for row in rows:
            pending[row] = pending.get(row, 0) + 1

    def _queue_deletions(self, relation: str, rows: list[Row]) -> None:
        pending = self._pending.get(relation, {})
        wanted: dict[Row, int] = {}
        for row in rows:
            wanted[row] = wanted.get(row, 0) + 1
            self._require_present(relation, row, pending, wanted[row])
        pending = self._pending.setdefault(relation, pending)
        for row, n in wanted.items():
            pending[row] = pending.get(row, 0) - n

    def _require_present(self, relation: str, row: Row, pending: dict[Row, int], copies: int) -> None:
        """Deleting ``copies`` of ``row`` needs that many, counting the changes already queued."""
        if self._core.count(relation, row) + pending.get(row, 0) < copies:
            raise DeltaError(f"cannot delete {_short(row)} from '{relation}': it is not present")

    def discard_pending(self) -> None:
        """Drop the deltas queued since the last successful ``run()``."""
        self._pending.clear()

    @property
    def has_pending(self) -> bool:
        return any(any(v for v in rows.values()) for rows in self._pending.values())

    def _check_rows(self, relation: str, rows: Iterable[Iterable[Any]]) -> list[Row]:
        info = self.program.relations.get(relation)
        if info is None:
            raise DeltaError(f"unknown relation '{_short(relation)}'")
        if info.memo_of is not None:
            raise DeltaError(f"'{relation}' is the memo of '{info.memo_of}'; the engine maintains it")
        if not info.is_input:
            raise DeltaError(f"'{relation}' is derived by rules; only .input relations take deltas")
        if isinstance(rows, (str, bytes)):
            raise DeltaError(f"rows for '{relation}' must be an iterable of rows, not a string")
        if not isinstance(rows, Iterable):
            raise DeltaError(f"rows for '{relation}' must be an iterable of rows, got {_short(rows)}")
        checked: list[Row] = []
        # held in locals: a from-scratch load checks tens of thousands of rows here
        append, arity, low, high = checked.append, info.arity, INT_MIN, INT_MAX
        for row in rows:
            try:
                row = tuple(row)
            except TypeError:
                raise DeltaError(f"row {_short(row)} for '{relation}' is not a sequence") from None
            if len(row) != arity:
                raise DeltaError(
                    f"row {_short(row)} for '{relation}' has {len(row)} values; '{relation}' has arity {arity}")
            for value in row:  # every backend holds these common values; the rest are checked in full
                kind = type(value)
                if kind is int:
                    if low <= value <= high:
                        continue
                elif kind is float:
                    if value == value:
                        continue
                elif kind is str or kind is bool:
                    continue
                self._check_value(relation, row, value)
            append(row)
        return checked

    def _check_value(self, relation: str, row: Row, value: Any) -> None:
        try:
            hash(value)
        except TypeError:
            raise DeltaError(f"row {_short(row)} for '{relation}' holds an unhashable value") from None
        if isinstance(value, float) and value != value:
            raise DeltaError(f"row {_short(row)} for '{relation}' holds NaN, which no relation may hold")
        problem = self._core.unsupported(value)
        if problem:
            raise DeltaError(f"row {_short(row)} for '{relation}': {problem}")

    # -- reading ---------------------------------------------------------------------------------

    def rows(self, relation: str) -> set[Row]:
        """The relation's visible rows."""
        return self._core.rows(self._stored(relation))

    def touched_rows(self, relation: str) -> set[Row]:
        """Rows of a derived relation whose visibility changed at some point during the last run."""
        return self._core.touched_rows(self._stored(relation))

    def lookup(self, relation: str, positions: tuple[int, ...], key: tuple) -> set[Row]:
        """Visible rows whose values at ``positions`` equal ``key`` (an index is kept from then on)."""
        info = self._known(relation)
        positions, key = _sequence(positions, "lookup positions"), _sequence(key, "a lookup key")
        if (len(positions) != len(key)
                or any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < info.arity for p in positions)):
            raise DatalogError(f"lookup on '{relation}' (arity {info.arity}) needs one key value per position "
                               f"in range; got positions {positions!r} and key {_short(key)}")
        return self._core.lookup(info.alias_of or relation, positions, key)

    def counts(self, relation: str) -> dict[Row, int]:
        """Insertion counts of an input relation, or derivation counts of a derived one (an alias's
        one rule derives each of its rows once)."""
        info = self._known(relation)
        if info.alias_of is not None:
            return dict.fromkeys(self._core.rows(info.alias_of), 1)
        return self._core.counts(relation)

    def state_size(self) -> int:
        """Values the engine holds: every stored row's values, every derivation count (key and count),
        every aggregate candidate (value and count) and every derivation that waits (its group, key
        and bound). A repeatable measure of state, unlike bytes."""
        return self._core.state_size()

    def candidates(self, relation: str, group: tuple) -> dict[Any, int]:
        """Every candidate value of an aggregate group, with its derivation count."""
        info = self._known(relation)
        if not info.aggregate:
            raise DatalogError(f"'{relation}' is not an aggregate relation")
        return self._core.candidates(relation, _sequence(group, "an aggregate group"))

    def _known(self, name: str):
        info = self.program.relations.get(name)
        if info is None:
            raise DatalogError(f"unknown relation '{_short(name)}'")
        return info

    def _stored(self, name: str) -> str:
        """The relation holding ``name``'s rows: its source if it is an alias, else itself."""
        return self._known(name).alias_of or name

    # -- evaluation ------------------------------------------------------------------------------

    def run(self, *, deltas: bool = True) -> Mapping[str, RelationDelta]:
        """Propagate the queued deltas to the fixpoint; returns the net change of each derived relation
        (``deltas=False`` returns none, so the native core need not keep them: a caller that reads
        the state afterwards, as the optimizer does, saves their memory).

        On failure the engine is exactly as before the call (queued deltas included) and an
        ``EvaluationError`` says which rule failed and why.
        """
        if not isinstance(deltas, bool):
            raise DatalogError(f"run(deltas=...) takes True or False, got {_short(deltas)}")
        changes = self._core.run(self._pending, not self._seeded, deltas)
        self._pending = {}
        self._seeded = True
        return _Deltas(self.program, changes) if deltas else {}

    def inject_failure(self, after_changes: int | None) -> None:
        """Test hook: the next ``run()`` fails after this many state changes, as a bug in the engine
        would (a panic inside the native core, an exception in the Python one). It must raise
        ``EvaluationError`` and leave the engine exactly as before; ``None`` cancels."""
        if after_changes is not None and (isinstance(after_changes, bool) or not isinstance(after_changes, int)
                                          or after_changes < 0):
            raise DatalogError(f"inject_failure takes a count of at least 0 or None, got {_short(after_changes)}")
        self._core.inject_failure(after_changes)

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
            bound[name] = fn
        return bound


class _Deltas(Mapping):
    """The derived relations' net changes of one run, made into ``RelationDelta``s when read (the
    native core keeps them until the next run, so an optimizer that ignores them pays nothing)."""

    __slots__ = ("_program", "_changes", "_names_made", "_made")  # one is made per run

    def __init__(self, program: Program, changes: Mapping[str, tuple[set, set]]):
        self._program = program
        self._changes = changes
        self._names_made: list[str] | None = None
        self._made: dict[str, RelationDelta] = {}

    @property
    def _names(self) -> list[str]:
        """The derived relations that changed, aliases included; listed at the first read, so a
        caller that ignores the deltas pays nothing for them."""
        if self._names_made is None:
            relations = self._program.relations
            names = [n for n in self._changes if not relations[n].is_base]
            names += [alias for alias, source in self._program.aliases.items() if source in self._changes]
            self._names_made = names
        return self._names_made

    def __getitem__(self, name: str) -> RelationDelta:
        if name not in self._made:
            if name not in self._names:
                raise KeyError(name)
            self._made[name] = self._delta(name)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def _delta(self, name: str) -> RelationDelta:
        info = self._program.relations[name]
        plus, minus = self._changes[info.alias_of or name]
        delta = RelationDelta(set(plus), set(minus))
        if info.aggregate:
            p = info.aggregate_position
            inserted = {r[:p] + r[p + 1:]: r for r in plus}
            for row in minus:
                group = row[:p] + row[p + 1:]
                if group in inserted:
                    delta.updated.append((row, inserted[group]))
                    delta.inserted.discard(inserted[group])
                    delta.deleted.discard(row)
        return delta


def _short(value: Any, limit: int = 200) -> str:
    """A value (a name as it is, anything else as ``repr``) cut to a readable length: an error message
    never repeats a huge input whole."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 15] + f"... ({len(text)} chars)"


__all__ = ["Engine", "RelationDelta", "EvaluationError", "BACKENDS", "default_backend"]
