"""Typed errors of the optimizer layer; each says what was wrong and with which value."""

from __future__ import annotations

from ..datalog.errors import cut


class OptimizerError(Exception):
    """Base class of the optimizer's deliberate errors; its message is cut to a readable length."""

    def __init__(self, *args: object):
        super().__init__(*(cut(a) if isinstance(a, str) else a for a in args))


class StatisticsError(OptimizerError, ValueError):
    """Statistics are invalid (negative, NaN or infinite counts, a selectivity outside (0, 1]) or
    name a table, column, predicate or expression the catalog or query does not have."""


class QueryError(OptimizerError):
    """A query is malformed for the optimizer: an unknown table or column, a disconnected join graph."""


class UnsupportedSQLError(QueryError):
    """The SQL uses a construct the optimizer does not support; the message names it."""


class QueryTooLargeError(OptimizerError):
    """The query's plan space is larger than the configured limit; it is refused before it is built.
    The message gives the query's size and the limit to raise."""


class UnknownTableError(QueryError, StatisticsError):
    """A table the catalog has no statistics for: a query error when the SQL names it, a statistics
    error when a delta does, so either ``except`` catches it."""
