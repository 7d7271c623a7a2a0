"""The abstract syntax of rule programs, as produced by the parser and checked by ``Program``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from .errors import Location


@dataclass(frozen=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Const:
    value: Any

    def __str__(self) -> str:
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        if isinstance(self.value, str):
            return '"' + self.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(self.value)


@dataclass(frozen=True)
class Wildcard:
    def __str__(self) -> str:
        return "_"


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Expr"
    right: "Expr"

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class Neg:
    operand: "Expr"

    def __str__(self) -> str:
        return f"-{self.operand}"


Expr = Union[Var, Const, BinOp, Neg]
Term = Union[Var, Const, Wildcard, BinOp, Neg]


@dataclass(frozen=True)
class Aggregate:
    func: str  # min, max, count, sum
    expr: Expr

    def __str__(self) -> str:
        return f"{self.func}<{self.expr}>"


@dataclass(frozen=True)
class Atom:
    """``name(args)`` in a body: a relation or a function predicate, told apart by the program."""

    name: str
    args: tuple[Term, ...]
    location: Location
    negated: bool = False  # ``!name(args)``: true while no such row is visible

    def __str__(self) -> str:
        return f"{'!' if self.negated else ''}{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Comparison:
    """``left op right``; ``x = expr`` with ``x`` unbound assigns."""

    op: str
    left: Expr
    right: Expr
    location: Location

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Until:
    """``until A(g) >= bound`` in a body: the derivation waits while group ``g`` of the min aggregate
    ``A`` holds a value below ``bound`` (see docs/dialect.md). Kept beside the body, not in it: the
    literals before it (``Rule.prefix`` of them) decide whether a derivation waits."""

    aggregate: Atom
    bound: Expr
    location: Location

    def __str__(self) -> str:
        return f"until {self.aggregate} >= {self.bound}"


Literal = Union[Atom, Comparison]


@dataclass(frozen=True)
class Head:
    name: str
    args: tuple[Union[Expr, Aggregate], ...]
    location: Location

    @property
    def aggregate_position(self) -> int | None:
        for i, arg in enumerate(self.args):
            if isinstance(arg, Aggregate):
                return i
        return None

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Rule:
    head: Head
    body: tuple[Literal, ...]
    location: Location
    until: Until | None = None
    prefix: int = 0  # with ``until``: how many body literals come before it

    def __str__(self) -> str:
        written: list = list(self.body)
        if self.until is not None:
            written.insert(self.prefix, self.until)
        if not written:
            return f"{self.head}."
        return f"{self.head} :- {', '.join(map(str, written))}."


@dataclass(frozen=True)
class RelationDecl:
    """``.input name(cols)`` (an input relation) or ``.decl name(cols)`` (a derived one)."""

    name: str
    columns: tuple[str, ...]
    is_input: bool
    location: Location


@dataclass(frozen=True)
class FunctionDecl:
    """``.function name(inputs) -> (outputs)``: a Python callable bound when the engine is built."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    location: Location


@dataclass(frozen=True)
class AcyclicDecl:
    """``.acyclic a, b``: derivations of these recursive relations never depend on themselves."""

    names: tuple[str, ...]
    location: Location


@dataclass(frozen=True)
class OrderedDecl:
    """``.ordered a, b``: min aggregates whose group changes the engine releases in value order.

    In a recursion maintained by counting, a group's new minimum is held back until nothing else is
    in flight and then released cheapest first, so where values only grow along derivations
    (costs of plans over their inputs' best costs) each group is propagated once, at its final
    value (Knuth's generalization of Dijkstra's algorithm). Any order reaches the same fixpoint;
    this one avoids re-deriving what depends on a value that is not final yet.

    ``.ordered a up to g``: the release stops at the goal, the groups of ``a`` that relation ``g``
    lists. Groups whose minimum exceeds every goal's value stay held (absent) until a goal rises to
    them, so work beyond the goal is never done; the goals, and every group no costlier, stay exact.

    ``.ordered a up to g plus h``: groups are released in order of their minimum plus ``h``'s value
    for the group (A* with ``h`` as its heuristic; 0 for a group ``h`` has no row for), and only
    while that sum is at most the goals' sums. ``h`` must never overestimate what lies between a
    group and the goals, and never fall along a derivation by more than the derivation adds (a
    consistent heuristic); then the goals, and every group whose sum is no greater, stay exact.
    """

    names: tuple[str, ...]
    location: Location
    goal: str | None = None
    plus: str | None = None


@dataclass(frozen=True)
class MemoDecl:
    """``.memo name(keys | values) from source``: the last converged value of each row of ``source``.

    Rules read a memo like an input relation, so a program can consult what an earlier fixpoint
    derived without depending on it recursively (see docs/dialect.md, "Memo relations").
    """

    name: str
    keys: tuple[str, ...]
    values: tuple[str, ...]
    source: str
    location: Location


Statement = Union[Rule, RelationDecl, FunctionDecl, AcyclicDecl, OrderedDecl, MemoDecl]


def variables(term: Any) -> set[str]:
    """The variable names a term, expression or aggregate mentions."""
    if isinstance(term, Var):
        return {term.name}
    if isinstance(term, BinOp):
        return variables(term.left) | variables(term.right)
    if isinstance(term, Neg):
        return variables(term.operand)
    if isinstance(term, Aggregate):
        return variables(term.expr)
    return set()
