"""The query model: relations, equi-join predicates, local filters, and the part above the joins.

An *expression* (a set of the query's relations) is an int bitmask: bit ``i`` is relation ``i``. That
makes expressions cheap, hashable datalog values, and subset tests single instructions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable

import sqlglot
from sqlglot import exp

from .errors import QueryError, QueryTooLargeError
from .subgraphs import TooMany, ccp_pairs, connected_sets


@dataclass(frozen=True, order=True)
class ColumnRef:
    alias: str
    column: str

    def __str__(self) -> str:
        return f"{self.alias}.{self.column}"


@dataclass(frozen=True)
class JoinPredicate:
    left: ColumnRef
    right: ColumnRef

    @property
    def text(self) -> str:
        a, b = sorted((self.left, self.right))
        return f"{a} = {b}"


@dataclass(frozen=True)
class Filter:
    """A local predicate on one relation, kept as a sqlglot expression with qualified columns."""

    alias: str
    expression: exp.Expression

    @functools.cached_property
    def text(self) -> str:
        # Rendering SQL costs tens of microseconds; every estimate and delta asks for it.
        return self.expression.sql()


class Query:
    """A select-project-join query whose join graph is connected."""

    def __init__(
        self,
        relations: list[tuple[str, str]],
        joins: list[JoinPredicate],
        filters: list[Filter] = (),
        select: exp.Select | None = None,
    ):
        if not relations:
            raise QueryError("a query needs at least one relation")
        self.relations = [(alias.lower(), table.lower()) for alias, table in relations]
        self.aliases = [alias for alias, _ in self.relations]
        if len(set(self.aliases)) != len(self.aliases):
            raise QueryError(f"relation names must be unique: {', '.join(self.aliases)}")
        self._bit = {alias: 1 << i for i, alias in enumerate(self.aliases)}
        self.joins = _once(joins)
        self.filters = _once(filters)
        self.select = select
        for predicate in self.joins:
            for ref in (predicate.left, predicate.right):
                self.bit(ref.alias)
            if predicate.left.alias == predicate.right.alias:
                raise QueryError(f"join predicate {predicate.text} compares one relation with itself; make it a filter")
        for f in self.filters:
            self.bit(f.alias)
        self.full = (1 << len(self.aliases)) - 1
        self.adjacency = [0] * len(self.aliases)
        for predicate in self.joins:
            i, j = self.index(predicate.left.alias), self.index(predicate.right.alias)
            self.adjacency[i] |= 1 << j
            self.adjacency[j] |= 1 << i
        self._connected: dict[int, bool] = {}
        self._connected_sets: list[int] | None = None
        self._pairs: list[tuple[int, int]] | None = None
        self._over: int = 0  # a limit the pairs were counted past (0: none), so no count is repeated
        self._needed: dict[str, frozenset[str] | None] = {}  # a query never changes: worked out once
        self._read: dict[str, frozenset[str] | None] = {}
        self._texts: dict[str, object] | None = None
        # a predicate as a user wrote it -> its canonical text; a query never changes, and parsing
        # the text was 40% of re-optimizing Q8Join after a selectivity change written another way
        self._resolved: dict[str, str] = {}
        if not self.is_connected(self.full):
            parts = self._components()
            raise QueryError(
                "the join graph is disconnected (a cross product would be needed between "
                + " and ".join("{" + ", ".join(self.names(p)) + "}" for p in parts)
                + "); add the missing join predicates"
            )
        self.key_class = self._key_classes()
        self._edges: list[list[tuple[int, str]]] = [[] for _ in self.aliases]  # (other end's bit, class)
        for p in self.joins:
            a, b = self.bit(p.left.alias), self.bit(p.right.alias)
            self._edges[a.bit_length() - 1].append((b, self.key_class[p.left]))
            self._edges[b.bit_length() - 1].append((a, self.key_class[p.left]))

    # -- relations and expressions -----------------------------------------------------------

    def bit(self, alias: str) -> int:
        try:
            return self._bit[alias.lower()]
        except KeyError:
            raise QueryError(f"'{alias}' is not a relation of the query ({', '.join(self.aliases)})") from None

    def index(self, alias: str) -> int:
        return self.bit(alias).bit_length() - 1

    def table_of(self, alias: str) -> str:
        return self.relations[self.index(alias)][1]

    def mask(self, aliases: Iterable[str]) -> int:
        mask = 0
        for alias in aliases:
            mask |= self.bit(alias)
        return mask

    def names(self, mask: int) -> list[str]:
        return [alias for i, alias in enumerate(self.aliases) if mask >> i & 1]

    def label(self, mask: int) -> str:
        return "{" + ",".join(self.names(mask)) + "}"

    def is_leaf(self, mask: int) -> bool:
        return mask & (mask - 1) == 0

    def is_connected(self, mask: int) -> bool:
        known = self._connected.get(mask)
        if known is not None:
            return known
        start = mask & -mask
        seen, frontier = start, start
        while frontier:
            low = frontier & -frontier
            frontier ^= low
            reach = self.adjacency[low.bit_length() - 1] & mask & ~seen
            seen |= reach
            frontier |= reach
        result = seen == mask
        self._connected[mask] = result
        return result

    def connected_subsets(self) -> list[int]:
        """Every connected sub-expression, in increasing mask order (enumerated in time proportional
        to their number, never by testing every subset)."""
        if self._connected_sets is None:
            self._connected_sets = connected_sets(self.adjacency)
        return list(self._connected_sets)

    def connected_pairs(self, limit: int | None = None) -> list[tuple[int, int]]:
        """Every split of a connected sub-expression into two connected halves, each unordered pair
        once (see ``subgraphs.ccp_pairs``). More than ``limit`` raises ``QueryTooLargeError`` after
        counting at most that many."""
        if self._pairs is None and (limit is None or limit > self._over):
            try:
                self._pairs = ccp_pairs(self.adjacency, limit)
            except TooMany:
                self._over = limit or 0
        if self._pairs is None or (limit is not None and len(self._pairs) > limit):
            raise QueryTooLargeError(
                f"the query joins {len(self.aliases)} relations into more than {limit:,} connected pairs of "
                "sub-expressions, the configured limit (OptimizerConfig.max_join_pairs); exact optimization "
                "holds every pair (with the goal bound about 7 KB each to optimize, up to 21 KB to re-optimize; ten "
                "times that with the memo-based pruning): raise the limit, or pass None, where the memory is there; "
                "or ask for an approximate plan over a greedy join order, OptimizerConfig(beyond_limit='greedy')")
        return list(self._pairs)

    def _components(self) -> list[int]:
        remaining, parts = self.full, []
        while remaining:
            start = remaining & -remaining
            seen, frontier = start, start
            while frontier:
                low = frontier & -frontier
                frontier ^= low
                reach = self.adjacency[low.bit_length() - 1] & ~seen
                seen |= reach
                frontier |= reach
            parts.append(seen)
            remaining &= ~seen
        return parts

    # -- predicates ------------------------------------------------------------------------------

    def joins_within(self, mask: int) -> list[JoinPredicate]:
        return [p for p in self.joins if self.bit(p.left.alias) & mask and self.bit(p.right.alias) & mask]

    def joins_between(self, left: int, right: int) -> list[JoinPredicate]:
        out = []
        for p in self.joins:
            a, b = self.bit(p.left.alias), self.bit(p.right.alias)
            if (a & left and b & right) or (a & right and b & left):
                out.append(p)
        return out

    def filters_on(self, alias: str) -> list[Filter]:
        return [f for f in self.filters if f.alias == alias]

    def needed_columns(self, alias: str) -> set[str] | None:
        """The columns of a relation that leave its scan: join keys and what the final step uses.
        None means all of them (no final step is known, or it selects ``*``)."""
        alias = alias.lower()
        if alias not in self._needed:
            self._needed[alias] = self._find_needed_columns(alias)
        needed = self._needed[alias]
        return None if needed is None else set(needed)

    def _find_needed_columns(self, alias: str) -> frozenset[str] | None:
        if self.select is None or any(isinstance(e, exp.Star) for e in self.select.expressions):
            return None
        needed = {ref.column for p in self.joins for ref in (p.left, p.right) if ref.alias == alias}
        for key in ("expressions", "group", "having", "order"):
            value = self.select.args.get(key)
            for part in value if isinstance(value, list) else [value] if value is not None else []:
                needed |= {c.name.lower() for c in part.find_all(exp.Column) if (c.table or "").lower() == alias}
        return frozenset(needed)

    def read_columns(self, alias: str) -> set[str] | None:
        """The columns a scan of the relation reads: the needed ones and those its filters test."""
        alias = alias.lower()
        if alias not in self._read:
            needed = self.needed_columns(alias)
            self._read[alias] = None if needed is None else frozenset(
                needed | {c.name.lower() for f in self.filters_on(alias) for c in f.expression.find_all(exp.Column)})
        read = self._read[alias]
        return None if read is None else set(read)

    def join_keys(self, left: int, right: int) -> list[str]:
        """The key-equivalence classes joining two expressions, sorted by name."""
        if left.bit_count() > right.bit_count():
            left, right = right, left
        classes = set()
        while left:
            low = left & -left
            left ^= low
            classes.update(key for other, key in self._edges[low.bit_length() - 1] if other & right)
        return sorted(classes)

    def _key_classes(self) -> dict[ColumnRef, str]:
        parent: dict[ColumnRef, ColumnRef] = {}

        def find(c: ColumnRef) -> ColumnRef:
            parent.setdefault(c, c)
            while parent[c] != c:
                parent[c] = parent[parent[c]]
                c = parent[c]
            return c

        for p in self.joins:
            a, b = find(p.left), find(p.right)
            if a != b:
                parent[max(a, b)] = min(a, b)
        return {c: str(find(c)) for c in list(parent)}

    def predicate_texts(self) -> dict[str, object]:
        return dict(self._predicates())

    def predicate(self, text: str) -> object:
        """The join predicate or filter a text names (see ``resolve_predicate``)."""
        return self._predicates()[self.resolve_predicate(text)]

    def _predicates(self) -> dict[str, object]:
        if self._texts is None:
            self._texts = {p.text: p for p in self.joins}
            self._texts.update({f.text: f for f in self.filters})
        return self._texts

    def resolve_predicate(self, text: str) -> str:
        """The canonical text of one of the query's predicates, given as SQL (columns may be unqualified)."""
        known = self._predicates()
        if text in known:
            return text
        canonical = self._resolved.get(text)
        if canonical is None:
            canonical = self._parse_predicate(text, known)
            if len(self._resolved) < _RESOLVED_SPELLINGS:
                self._resolved[text] = canonical
        return canonical

    def _parse_predicate(self, text: str, known: dict[str, object]) -> str:
        try:
            parsed = sqlglot.parse_one(text)
        except sqlglot.errors.ParseError as exc:
            raise QueryError(f"cannot parse predicate {text!r}: {exc}") from None
        wanted = {parsed.sql()}
        if isinstance(parsed, exp.EQ):
            wanted.add(exp.EQ(this=parsed.expression, expression=parsed.this).sql())
        for canonical, predicate in known.items():
            forms = {canonical}
            if isinstance(predicate, JoinPredicate):
                forms |= {f"{predicate.left.column} = {predicate.right.column}",
                          f"{predicate.right.column} = {predicate.left.column}"}
            else:
                unqualified = predicate.expression.copy()
                for column in unqualified.find_all(exp.Column):
                    column.set("table", None)
                forms.add(unqualified.sql())
            if forms & wanted:
                return canonical
        raise QueryError(f"{text!r} is not a predicate of the query; its predicates are: {', '.join(sorted(known))}")

    # -- as data --------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The query as plain data (JSON-ready), predicates as SQL text; ``from_dict`` reads it back."""
        return {
            "relations": [[alias, table] for alias, table in self.relations],
            "joins": [[str(p.left), str(p.right)] for p in self.joins],
            "filters": [[f.alias, f.text] for f in self.filters],
            "select": None if self.select is None else self.select.sql(),
        }

    @classmethod
    def from_dict(cls, data: object) -> "Query":
        """The query ``to_dict`` wrote; anything else raises ``QueryError`` saying what is wrong."""
        if not isinstance(data, dict) or not {"relations", "joins", "filters"} <= set(data):
            raise QueryError('a query as data is an object with "relations", "joins" and "filters"')
        try:
            relations = [(str(alias), str(table)) for alias, table in data["relations"]]
            joins = [JoinPredicate(_column(left), _column(right)) for left, right in data["joins"]]
            filters = [Filter(str(alias).lower(), sqlglot.parse_one(text)) for alias, text in data["filters"]]
            select = data.get("select")
            select = None if select is None else sqlglot.parse_one(select)
        except (TypeError, ValueError, sqlglot.errors.ParseError) as exc:
            raise QueryError(f"a query as data holds a malformed part: {exc}") from None
        if select is not None and not isinstance(select, exp.Select):
            raise QueryError(f'a query\'s "select" is a SELECT statement, got {select.key.upper()}')
        return cls(relations, joins, filters, select)

    # -- building ------------------------------------------------------------------------------

    @staticmethod
    def builder() -> "QueryBuilder":
        return QueryBuilder()


# Spellings of predicates a query remembers: a long-running stream may name its predicates in many
# ways (whitespace, order), and each resolution is kept for the query's life.
_RESOLVED_SPELLINGS = 1024


class QueryBuilder:
    """Builds a ``Query`` from Python calls:

    ``Query.builder().table("customer", "c").table("orders", "o").join("c.c_custkey", "o.o_custkey")
    .filter("o", "o.o_orderdate < DATE '1995-03-15'").build()``
    """

    def __init__(self) -> None:
        self._relations: list[tuple[str, str]] = []
        self._joins: list[JoinPredicate] = []
        self._filters: list[Filter] = []

    def table(self, table: str, alias: str | None = None) -> "QueryBuilder":
        self._relations.append(((alias or table).lower(), table.lower()))
        return self

    def join(self, left: str, right: str) -> "QueryBuilder":
        self._joins.append(JoinPredicate(_column(left), _column(right)))
        return self

    def filter(self, alias: str, sql: str) -> "QueryBuilder":
        try:
            expression = sqlglot.parse_one(sql)
        except sqlglot.errors.ParseError as exc:
            raise QueryError(f"cannot parse filter {sql!r}: {exc}") from None
        for column in expression.find_all(exp.Column):
            column.set("table", exp.to_identifier(alias.lower()))
        self._filters.append(Filter(alias.lower(), expression))
        return self

    def build(self) -> Query:
        return Query(self._relations, self._joins, self._filters)


def _once(predicates: Iterable) -> list:
    """The predicates in the order written, each text once: a predicate written twice holds once, and
    must not be counted twice."""
    unique: dict[str, object] = {}
    for predicate in predicates:
        unique.setdefault(predicate.text, predicate)
    return list(unique.values())


def _column(text: str) -> ColumnRef:
    alias, dot, column = text.partition(".")
    if not dot or not alias or not column:
        raise QueryError(f"a join column is written 'relation.column', got {text!r}")
    return ColumnRef(alias.lower(), column.lower())
