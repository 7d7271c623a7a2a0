"""Typed errors of the datalog engine.

Every error a user can cause carries enough context to fix it: rule-file errors name the file, line
and column; delta errors name the relation and the offending row; evaluation errors name the rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A position in a rule file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


MAX_MESSAGE = 600  # characters: a message quoting a huge input keeps its start and end


def shown(value: object) -> str:
    """A value as an error message quotes it: its repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"


def cut(message: str) -> str:
    """``message`` cut to a readable length, saying how much was left out."""
    if len(message) <= MAX_MESSAGE:
        return message
    return f"{message[:MAX_MESSAGE - 100]} ...[{len(message) - MAX_MESSAGE + 20:,} characters cut]... {message[-80:]}"


class DatalogError(Exception):
    """Base class of every error the engine raises on purpose; its message is cut to a readable
    length."""

    def __init__(self, *args: object):
        super().__init__(*(cut(a) if isinstance(a, str) else a for a in args))


class ProgramError(DatalogError):
    """A rule program is malformed (syntax) or meaningless (semantics); raised when it is loaded."""

    def __init__(self, message: str, location: Location | None = None):
        self.location = location
        self.reason = message
        super().__init__(f"{location}: {message}" if location else message)


class ParseError(ProgramError):
    """The rule text does not follow the grammar of the dialect."""


class DeltaError(DatalogError):
    """A delta names an unknown relation, has the wrong arity, or deletes a row that is absent.

    Raised before anything is queued, so the engine is unchanged.
    """


class EvaluationError(DatalogError):
    """Evaluation failed (a function raised, a type error in a comparison, a non-monotone
    recursive aggregate). The engine's state is rolled back to what it was before ``run()``."""
