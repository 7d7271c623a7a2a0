"""Join sizes of a batch measured on a sample of it, before the batch is planned.

Feedback from execution describes the batch just run, and only the joins its plan ran: the first
batch after the data drifts runs the plan learnt before the drift, and a join the plan stopped
running keeps the size it had when it last ran. ``JoinSampler`` measures every join of the stream's
rows with the tables that stay, on the batch about to run, so the plan is chosen for that batch.

The tables that stay are read once, when the sampler is built: per relation, its rows after its
filters, projected on its join columns and counted (a key-frequency table, held on the driver).
For each batch, Spark reads the batch's first ``rows`` rows (``limit``: it stops reading there),
and the driver joins them with the frequency tables, expression by expression, keeping per partial
result only the columns later joins need, with their multiplicities. Each expression's size is its
share of the sampled rows times the stream's rows: a selectivity relative to the batch, true
whatever the batch's size.

An expression fewer than ``min_rows`` sampled rows survive is left out: a share counted from a
handful of rows is mostly noise (a TPC-H Q5 over a thousand lineitem rows keeps about one), and the
optimizer does better with its estimate, corrected by the measured expressions inside it.

Limits: the sample is the batch's first rows, not a random sample, so a stream ordered by a column
the joins depend on skews it; an expression with two of the stream's relations, or with a relation
that changes from batch to batch other than the stream, is not sampled; an expression whose
partial result grows past ``work_limit`` times the sample (a join on a key with few values, which
no good plan runs) keeps the estimate execution feedback gives it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import QueryError
from ..optimizer.query import ColumnRef, Query
from .execute import column_name, filter_condition, renamed_columns

DEFAULT_SAMPLE_ROWS = 1000
DEFAULT_WORK_LIMIT = 50
DEFAULT_MIN_ROWS = 20
_KEPT = "reopt__kept"


@dataclass(frozen=True)
class _Partial:
    """The join of an expression's relations over the sample: per combination of the columns that
    joins with relations outside it still need, how many joined rows carry it."""

    columns: tuple[ColumnRef, ...]
    counts: dict

    def rows(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class SampledSizes:
    """What one sample measured: each sampled expression's share of the stream's rows (relation
    names -> joined rows per stream row), and how many of the batch's rows the sample read."""

    shares: dict[frozenset[str], float]
    sampled: int

    def delta(self, stream_rows: float) -> DeltaStats:
        """The shares as observed cardinalities of a batch of ``stream_rows`` rows."""
        return DeltaStats.batch(DeltaStats.cardinality(sorted(names), max(1.0, share * stream_rows))
                                for names, share in self.shares.items())


class JoinSampler:
    """Measures, on a sample of each batch of ``stream``, the size of every connected expression
    of ``query`` made of one relation of the stream and relations of ``static_tables``.

    Building it runs one aggregation job per relation of the static tables the query joins with
    the stream (directly or through other static relations), and holds their key frequencies on
    the driver.
    """

    def __init__(self, query: Query, static_tables: Mapping[str, DataFrame], stream: str,
                 rows: int = DEFAULT_SAMPLE_ROWS, work_limit: float = DEFAULT_WORK_LIMIT,
                 min_rows: int = DEFAULT_MIN_ROWS):
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise QueryError(f"a sample holds at least one row, not {rows!r}")
        if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
            raise QueryError(f"min_rows is a number of joined rows, at least 1, got {min_rows!r}")
        if isinstance(work_limit, bool) or not isinstance(work_limit, (int, float)) or work_limit < 1:
            raise QueryError(f"work_limit is a multiple of the sample's rows, at least 1, got {work_limit!r}")
        self.query, self.stream, self.rows, self.work_limit = query, stream.lower(), rows, work_limit
        self.min_rows = min_rows
        streams = [alias for alias, table in query.relations if table == self.stream]
        if not streams:
            raise QueryError(f"'{stream}' is not a table of the query")
        static = {name.lower() for name in static_tables}
        self.static_aliases = frozenset(alias for alias, table in query.relations if table in static)
        self.stream_alias = streams[0] if len(streams) == 1 else None
        self.expressions = self._expressions()
        reached = {alias for mask in self.expressions for alias in query.names(mask)} - {self.stream_alias}
        frames = {name.lower(): frame for name, frame in static_tables.items()}
        self._frequencies = {alias: self._frequency(alias, frames[query.table_of(alias)]) for alias in sorted(reached)}
        self._indexes: dict[tuple, dict] = {}
        self._outside: dict[int, frozenset[ColumnRef]] = {}
        self._counted({})  # builds the indexes on the static relations a sample's joins probe

    def _join_columns(self, alias: str) -> tuple[ColumnRef, ...]:
        refs = {ref for p in self.query.joins for ref in (p.left, p.right) if ref.alias == alias}
        return tuple(sorted(refs))

    def _expressions(self) -> list[int]:
        """The sampled expressions, smaller first: connected, holding the stream's one relation and
        otherwise static relations only."""
        if self.stream_alias is None:
            return []
        query = self.query
        stream_bit = query.bit(self.stream_alias)
        allowed = stream_bit | query.mask(self.static_aliases)
        found = [m for m in query.connected_subsets() if m & stream_bit and m & ~allowed == 0]
        return sorted(found, key=lambda m: (m.bit_count(), m))

    def _frequency(self, alias: str, source: DataFrame) -> Counter:
        """The relation's rows after its filters, counted per combination of its join columns."""
        frame = renamed_columns(source, alias)
        condition = filter_condition(self.query, alias)
        if condition is not None:
            frame = frame.where(condition)
        names = [column_name(ref.alias, ref.column) for ref in self._join_columns(alias)]
        grouped = frame.groupBy(*names).count().collect()
        return Counter({tuple(row[:-1]): row[-1] for row in grouped})

    def measure(self, batch: DataFrame) -> SampledSizes:
        """The shares of every sampled expression over ``batch``'s first rows (one Spark job)."""
        alias = self.stream_alias
        if alias is None:
            return SampledSizes({}, 0)
        frame = renamed_columns(batch, alias)
        condition = filter_condition(self.query, alias)
        columns = [column_name(r.alias, r.column) for r in self._join_columns(alias)]
        kept = (condition if condition is not None else F.lit(True)).alias(_KEPT)
        rows = frame.select(*columns, kept).limit(self.rows).collect()
        if not rows:
            return SampledSizes({}, 0)
        counted = self._counted(Counter(tuple(row[:-1]) for row in rows if row[-1]))
        return SampledSizes({names: joined / len(rows) for names, joined in counted.items() if joined >= self.min_rows},
                            len(rows))

    def _counted(self, stream_rows: dict) -> dict[frozenset[str], int]:
        """Joined rows of every sampled expression, from the stream's kept rows (join column values
        -> rows); an expression past the work limit is left out."""
        if self.stream_alias is None:
            return {}
        stream_bit = self.query.bit(self.stream_alias)
        partials = {stream_bit: self._narrowed(_Partial(self._join_columns(self.stream_alias), stream_rows), stream_bit)}
        counted = {}
        for mask in self.expressions:
            if mask not in partials:
                partials[mask] = self._extended(mask, partials)
            if partials[mask] is not None:
                counted[frozenset(self.query.names(mask))] = partials[mask].rows()
        return counted

    def _extended(self, mask: int, partials: dict[int, _Partial | None]) -> _Partial | None:
        """The partial of ``mask`` from a smaller sampled one joined with one more relation (None:
        none is known, or the join outgrew the work limit)."""
        query = self.query
        for alias in query.names(mask):
            rest = mask & ~query.bit(alias)
            if alias == self.stream_alias or partials.get(rest) is None:
                continue
            if query.joins_between(rest, query.bit(alias)):
                return self._joined(partials[rest], rest, alias)
        return None

    def _joined(self, partial: _Partial, mask: int, alias: str) -> _Partial | None:
        query = self.query
        joined = mask | query.bit(alias)
        predicates = query.joins_between(mask, query.bit(alias))
        outer = [(p.left, p.right) if p.left.alias != alias else (p.right, p.left) for p in predicates]
        probe = [partial.columns.index(mine) for mine, _ in outer]
        needed = self._needed(joined)
        kept = [i for i, ref in enumerate(partial.columns) if ref in needed]
        carried = tuple(ref for ref in self._join_columns(alias) if ref in needed)
        index = self._index(alias, tuple(theirs for _, theirs in outer), carried)
        counts: dict = {}
        budget = self.work_limit * self.rows
        for values, weight in partial.counts.items():
            matches = index.get(tuple([values[i] for i in probe]))  # a null key finds nothing: no null is indexed
            if matches is None:
                continue
            base = tuple([values[i] for i in kept])
            if not carried:  # the relation only filters or multiplies: one count per key
                counts[base] = counts.get(base, 0) + weight * matches
                continue
            budget -= len(matches)
            if budget < 0:
                return None
            for theirs, count in matches.items():
                row = base + theirs
                counts[row] = counts.get(row, 0) + weight * count
        return _Partial(tuple(partial.columns[i] for i in kept) + carried, counts)

    def _index(self, alias: str, keys: tuple[ColumnRef, ...], carried: tuple[ColumnRef, ...]) -> dict:
        """The relation's frequencies by the values of ``keys``: per key, its rows (without
        ``carried`` columns) or its rows per combination of ``carried`` (built once per use)."""
        found = self._indexes.get((alias, keys, carried))
        if found is not None:
            return found
        position = {ref: i for i, ref in enumerate(self._join_columns(alias))}
        key_at, carried_at = [position[k] for k in keys], [position[c] for c in carried]
        found = {}
        for values, count in self._frequencies[alias].items():
            key = tuple([values[i] for i in key_at])
            if None in key:
                continue  # a null never joins
            if not carried_at:
                found[key] = found.get(key, 0) + count
            else:
                rows = found.setdefault(key, {})
                theirs = tuple([values[i] for i in carried_at])
                rows[theirs] = rows.get(theirs, 0) + count
        self._indexes[(alias, keys, carried)] = found
        return found

    def _needed(self, mask: int) -> frozenset[ColumnRef]:
        """The columns of ``mask``'s relations that joins with relations outside it need."""
        found = self._outside.get(mask)
        if found is None:
            bit = self.query.bit
            found = self._outside[mask] = frozenset(
                ref for p in self.query.joins for ref, other in ((p.left, p.right), (p.right, p.left))
                if bit(ref.alias) & mask and not bit(other.alias) & mask)
        return found

    def _narrowed(self, partial: _Partial, mask: int) -> _Partial:
        """The partial with only the columns that joins with relations outside ``mask`` need."""
        needed = self._needed(mask)
        keep = [i for i, ref in enumerate(partial.columns) if ref in needed]
        if len(keep) == len(partial.columns):
            return partial
        counts: dict = {}
        for values, weight in partial.counts.items():
            row = tuple([values[i] for i in keep])
            counts[row] = counts.get(row, 0) + weight
        return _Partial(tuple(partial.columns[i] for i in keep), counts)
