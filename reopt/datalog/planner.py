"""Join planning for delta rules: the compiled form both evaluation backends execute.

For a rule ``H :- B1, ..., Bn`` and a change to the relation of atom ``Bi``, the change of ``H`` is
``B1..B(i-1) dBi B(i+1)'..Bn'``: atoms before ``i`` read the relation's old contents, atoms after it
the new ones, which counts every derivation exactly once. When several atoms' relations change in
one round (a first load: all of them), the plan of the first changed atom makes the derivations
they share, so a rule lists first the atom whose changes are largest: it is iterated, and the
others are looked up (the optimizer's rules start from the search space). The other way round,
the first load of JOB 26a indexed all its alternatives by operator to meet 6 cost factors.

Each (rule, i) becomes one ``Plan``: a greedy join order that starts from the delta tuple (filters
first, then bound lookups, those with the largest share of their columns bound first, then
functions, scans last), written as a list of steps over numbered variable slots.

Plans are plain tuples so that they cross to the native core unchanged; this module is the one
place that decides how a rule is evaluated, and ``pycompile`` and the Rust crate only execute it.

Expressions::

    ("var", slot) | ("const", value) | ("bin", op, left, right) | ("neg", operand)

Row patterns (one entry per column of a row an atom or function produces)::

    ("bind", slot)   the column's value becomes the slot's value
    ("test", expr)   the column must equal the expression (a constant or a bound variable)
    ("skip",)        a wildcard, or a column already matched by an index lookup

Steps, executed in order, each nesting the rest::

    ("delta", negated, pattern)                 every (row, sign) of the delta; negated flips sign
    ("test", op, left, right)                   a comparison of two expressions
    ("assign", slot, expr)
    ("has", view, args, negated)                a fully bound atom: present (absent if negated)
    ("lookup", view, positions, key, pattern)   rows whose ``positions`` equal ``key``
    ("scan", view, pattern)                     every row of the view
    ("call", function, inputs, pattern)         every output row of a function
    ("until", group, bound, key, entering)      a rule's ``until``: go on unless the derivation waits

``until`` comes once the literals written before it are evaluated (they are planned first). ``key`` is
the values of their variables (in order of first appearance), which name the derivation while it
waits; ``entering`` lists ``(delta, atoms)``: whether the delta atom is among those literals, and the
``(relation, args)`` of those read in their new contents, so a backend can tell a derivation made by
rows entering this round from one that existed before it. The ``resume`` plan of such a rule starts
from a waiting derivation's key (as a one-row delta) and evaluates the rest of the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from .errors import ProgramError
from .pycompile import compile_plan
from .syntax import Aggregate, Atom, BinOp, Comparison, Const, FunctionDecl, Neg, Rule, Var, Wildcard, variables

NEW = "new"
OLD = "old"

Expr = tuple
Step = tuple


@dataclass
class Plan:
    """One compiled delta rule.

    ``views`` lists, for each relation atom the plan reads, the relation, whether it reads the old or
    the new contents, and how (``lookup`` on bound positions, ``has`` for a fully bound atom,
    ``scan``); steps refer to views and ``functions`` by their index in these lists. ``head`` is the
    tuple of group expressions and the aggregate's expression (``None`` for a plain relation).
    """

    rule: Rule
    delta_position: int | None
    delta_relation: str | None
    views: list[tuple[str, str, str, tuple[int, ...]]] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    head: tuple[tuple[Expr, ...], Expr | None] = ((), None)
    slots: list[str] = field(default_factory=list)  # variable name of each slot
    # a rule with ``until``: its bound, and the head column it bounds from below (set by the program)
    until_bound: Expr | None = None
    bounded_position: int | None = None

    @cached_property
    def python_function(self) -> Callable[..., int]:
        """The plan compiled to Python, for the Python backend (made on first use)."""
        return compile_plan(self)

    @property
    def lookups(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(rel, pos) for rel, _mode, how, pos in self.views if how == "lookup"]

    @cached_property
    def matched_views(self) -> tuple[int, ...]:
        """The views a derivation must find a row in (every atom but the delta and negated ones): the
        plan derives nothing while one of them is empty, so a backend may skip it then."""
        return tuple(step[1] for step in self.steps
                     if step[0] in ("lookup", "scan") or (step[0] == "has" and not step[3]))


class _Builder:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.slot_of: dict[str, int] = {}

    @property
    def bound(self) -> set[str]:
        return set(self.slot_of)

    def bind(self, name: str) -> int:
        slot = self.slot_of[name] = len(self.plan.slots)
        self.plan.slots.append(name)
        return slot

    def expr(self, term) -> Expr:
        if isinstance(term, Var):
            return ("var", self.slot_of[term.name])
        if isinstance(term, Const):
            return ("const", term.value)
        if isinstance(term, BinOp):
            return ("bin", term.op, self.expr(term.left), self.expr(term.right))
        if isinstance(term, Neg):
            return ("neg", self.expr(term.operand))
        raise AssertionError(f"not an expression: {term!r}")

    def pattern(self, terms, matched: set[int] = frozenset()) -> tuple:
        """Bind fresh variables; test constants and bound variables (a variable repeated in one row
        is bound by its first column and tested at the others)."""
        entries = []
        for p, term in enumerate(terms):
            if p in matched or isinstance(term, Wildcard):
                entries.append(("skip",))
            elif isinstance(term, Var) and term.name not in self.slot_of:
                entries.append(("bind", self.bind(term.name)))
            else:
                entries.append(("test", self.expr(term)))
        return tuple(entries)

    def view(self, name: str, mode: str, how: str, positions: tuple[int, ...]) -> int:
        self.plan.views.append((name, mode, how, positions))
        return len(self.plan.views) - 1


def plan_rule(
    rule: Rule, delta_position: int | None, functions: dict[str, FunctionDecl], aggregate_position: int | None
) -> Plan:
    """Order the body for a delta at ``delta_position`` (``None``: a body with no relation atom)."""
    delta_relation = rule.body[delta_position].name if delta_position is not None else None
    plan = Plan(rule, delta_position, delta_relation)
    b = _Builder(plan)
    if delta_position is not None:
        delta_atom = rule.body[delta_position]
        plan.steps.append(("delta", delta_atom.negated, b.pattern(delta_atom.args)))
    remaining = [(i, lit) for i, lit in enumerate(rule.body) if i != delta_position]
    _add_literals(b, rule, remaining, delta_position, functions)
    return _finish(b, rule, aggregate_position)


def resume_plan(rule: Rule, functions: dict[str, FunctionDecl], aggregate_position: int | None) -> Plan:
    """The plan of a rule with ``until`` that makes one waiting derivation: its delta rows are keys
    (the values of the variables the literals before ``until`` bind), and the literals after it are
    read in their current contents."""
    plan = Plan(rule, None, None)
    b = _Builder(plan)
    plan.steps.append(("delta", False, tuple(("bind", b.bind(name)) for name in _prefix_variables(rule))))
    remaining = [(i, lit) for i, lit in enumerate(rule.body) if i >= rule.prefix]
    _add_literals(b, rule, remaining, -1, functions)
    return _finish(b, rule, aggregate_position)


def _prefix_variables(rule: Rule) -> list[str]:
    """The variables the literals before a rule's ``until`` bind, in order of first appearance."""
    names: list[str] = []
    for literal in rule.body[:rule.prefix]:
        terms = literal.args if isinstance(literal, Atom) else (literal.left, literal.right)
        for term in terms:
            for name in sorted(variables(term)):
                if name not in names:
                    names.append(name)
    return names


def _add_literals(b: "_Builder", rule: Rule, remaining: list, delta_position: int | None,
                  functions: dict[str, FunctionDecl]) -> None:
    """Append the steps of ``remaining`` body literals in a greedy join order; with ``until``, the
    literals before it come first, then its step."""
    plan = b.plan
    waiting = rule.until is not None and plan.delta_position is not None
    while remaining or waiting:
        if waiting and not any(i < rule.prefix for i, _ in remaining):
            plan.steps.append(_until_step(b, rule, delta_position))
            waiting = False
            continue
        candidates = [(i, lit) for i, lit in remaining if i < rule.prefix] if waiting else remaining
        choice = _pick(candidates, b.bound, functions)
        if choice is None:
            _raise_unbound(candidates, b.bound, functions)
        index, literal, kind = choice
        remaining.remove((index, literal))
        mode = NEW if delta_position is not None and index > delta_position else OLD
        if kind == "test":
            plan.steps.append(("test", literal.op, b.expr(literal.left), b.expr(literal.right)))
        elif kind == "assign":
            target, source = (literal.left, literal.right) if _assign_target(literal.left, b.bound) else (
                literal.right, literal.left)
            value = b.expr(source)
            plan.steps.append(("assign", b.bind(target.name), value))
        elif kind == "negated":
            view = b.view(literal.name, mode, "has", tuple(range(len(literal.args))))
            plan.steps.append(("has", view, tuple(b.expr(a) for a in literal.args), True))
        elif kind == "function":
            decl = functions[literal.name]
            plan.functions.append(literal.name)
            inputs = tuple(b.expr(a) for a in literal.args[: len(decl.inputs)])
            plan.steps.append(("call", len(plan.functions) - 1, inputs, b.pattern(literal.args[len(decl.inputs):])))
        else:
            positions = tuple(p for p, a in enumerate(literal.args) if _is_bound(a, b.bound))
            if len(positions) == len(literal.args):
                view = b.view(literal.name, mode, "has", positions)
                plan.steps.append(("has", view, tuple(b.expr(a) for a in literal.args), False))
            elif positions:
                view = b.view(literal.name, mode, "lookup", positions)
                key = tuple(b.expr(literal.args[p]) for p in positions)
                plan.steps.append(("lookup", view, positions, key, b.pattern(literal.args, set(positions))))
            else:
                view = b.view(literal.name, mode, "scan", ())
                plan.steps.append(("scan", view, b.pattern(literal.args)))


def _until_step(b: "_Builder", rule: Rule, delta_position: int) -> Step:
    group = tuple(b.expr(a) for a in rule.until.aggregate.args)
    key = tuple(("var", b.slot_of[name]) for name in _prefix_variables(rule))
    entering = tuple((lit.name, tuple(b.expr(a) for a in lit.args)) for i, lit in enumerate(rule.body[:rule.prefix])
                     if isinstance(lit, Atom) and i > delta_position)
    return ("until", group, b.expr(rule.until.bound), key, (delta_position < rule.prefix, entering))


def _finish(b: "_Builder", rule: Rule, aggregate_position: int | None) -> Plan:
    plan = b.plan
    head_vars = set().union(*(variables(a) for a in rule.head.args)) if rule.head.args else set()
    unbound = sorted(head_vars - b.bound)
    if unbound:
        raise ProgramError(
            f"head variable '{unbound[0]}' of '{rule.head.name}' is not bound by the body "
            "(bind it with an atom, a function output or an assignment)",
            rule.head.location,
        )
    args = rule.head.args
    group = tuple(b.expr(a) for i, a in enumerate(args) if i != aggregate_position)
    aggregate: Any = None
    if aggregate_position is not None:
        aggregate_arg = args[aggregate_position]
        assert isinstance(aggregate_arg, Aggregate)
        aggregate = b.expr(aggregate_arg.expr)
    plan.head = (group, aggregate)
    if rule.until is not None:
        plan.until_bound = b.expr(rule.until.bound)
    return plan


def _is_bound(term, bound: set[str]) -> bool:
    if isinstance(term, Wildcard):
        return False
    return variables(term) <= bound


def _assign_target(term, bound: set[str]) -> bool:
    return isinstance(term, Var) and term.name not in bound


def _pick(remaining, bound: set[str], functions: dict[str, FunctionDecl]):
    """The next literal to evaluate: filters first, then bound lookups (the larger the share of the
    atom bound, the sooner), functions, and scans last."""
    best = None
    for index, literal in remaining:
        if isinstance(literal, Comparison):
            if variables(literal.left) | variables(literal.right) <= bound:
                score, kind = (0, 0), "test"
            elif literal.op == "=" and (
                (_assign_target(literal.left, bound) and variables(literal.right) <= bound)
                or (_assign_target(literal.right, bound) and variables(literal.left) <= bound)
            ):
                score, kind = (1, 0), "assign"
            else:
                continue
        elif literal.negated:
            if not all(_is_bound(a, bound) for a in literal.args):
                continue
            score, kind = (0, 1), "negated"
        elif literal.name in functions:
            decl = functions[literal.name]
            if not all(variables(a) <= bound for a in literal.args[: len(decl.inputs)]):
                continue
            score, kind = (3, 0), "function"
        else:
            n_bound = sum(1 for a in literal.args if _is_bound(a, bound))
            if n_bound == len(literal.args):
                score = (2, 0)
            elif n_bound:
                # the share of columns bound, not their number: a constant such as a plan's kind
                # narrows little, and a short atom bound on its key finds few rows
                score = (3, -n_bound / len(literal.args))
            else:
                score = (5, 0)
            kind = "atom"
        if best is None or score < best[0]:
            best = (score, index, literal, kind)
    return None if best is None else best[1:]


def _raise_unbound(remaining, bound: set[str], functions: dict[str, FunctionDecl]):
    index, literal = remaining[0]
    if isinstance(literal, Comparison):
        free = sorted((variables(literal.left) | variables(literal.right)) - bound)
    elif literal.negated:
        free = sorted(set().union(*(variables(a) for a in literal.args)) - bound)
    else:
        decl = functions[literal.name]
        free = sorted(set().union(*(variables(a) for a in literal.args[: len(decl.inputs)])) - bound)
    raise ProgramError(
        f"variable '{free[0]}' in '{literal}' is not bound by any atom, function output or assignment",
        literal.location,
    )
