"""Join planning and code generation for delta rules.

For a rule ``H :- B1, ..., Bn`` and a change to the relation of atom ``Bi``, the change of ``H`` is
``B1'..B(i-1)' dBi B(i+1)..Bn``: atoms before ``i`` read the relation's new contents, atoms after it
the old ones, which counts every derivation exactly once. Each (rule, i) becomes one plan: a greedy
join order that starts from the delta tuple, compiled to a Python function of nested loops, so that
evaluation pays no interpretation cost per tuple.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import ProgramError
from .syntax import Aggregate, Atom, BinOp, Comparison, Const, FunctionDecl, Neg, Rule, Var, Wildcard, variables

NEW = "new"
OLD = "old"

_PYTHON_OPS = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass
class Plan:
    """One compiled delta rule.

    ``views`` lists, for each relation atom the plan reads, the relation, whether it reads the
    old or the new contents, and how (``lookup`` on bound positions, ``has`` for a fully bound
    atom, ``scan``); the engine passes matching view objects in that order.
    """

    rule: Rule
    delta_position: int | None
    delta_relation: str | None
    views: list[tuple[str, str, str, tuple[int, ...]]] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    source: str = ""
    run: Callable[..., int] | None = None

    @property
    def lookups(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(rel, pos) for rel, _mode, how, pos in self.views if how == "lookup"]


def plan_rule(
    rule: Rule, delta_position: int | None, functions: dict[str, FunctionDecl], aggregate_position: int | None
) -> Plan:
    """Order the body for a delta at ``delta_position`` (``None``: a body with no relation atom)."""
    delta_relation = rule.body[delta_position].name if delta_position is not None else None
    plan = Plan(rule, delta_position, delta_relation)
    gen = _CodeGen()
    bound: set[str] = set()
    gen.line("def _plan(_delta, _views, _fns, _out):")
    gen.indent += 1
    gen.line("_n = 0")
    header_at = len(gen.lines)
    if delta_position is not None:
        delta_atom = rule.body[delta_position]
        gen.open("for _t, _s in _delta:")
        if delta_atom.negated:
            gen.line("_s = -_s")  # a row entering a negated relation removes the derivations it blocks
        _bind_atom(gen, delta_atom, "_t", bound, set())
    else:
        gen.line("_s = 1")
    remaining = [(i, lit) for i, lit in enumerate(rule.body) if i != delta_position]
    hoisted: list[str] = []
    while remaining:
        choice = _pick(remaining, bound, functions)
        if choice is None:
            _raise_unbound(remaining, bound, functions)
        index, literal, kind = choice
        remaining.remove((index, literal))
        if kind == "test":
            gen.open(f"if {_expr(literal.left)} {_PYTHON_OPS[literal.op]} {_expr(literal.right)}:")
        elif kind == "assign":
            target, source = (literal.left, literal.right) if _assign_target(literal.left, bound) else (
                literal.right, literal.left)
            gen.line(f"{_name(target.name)} = {_expr(source)}")
            bound.add(target.name)
        elif kind == "negated":
            mode = NEW if delta_position is not None and index < delta_position else OLD
            slot = len(plan.views)
            plan.views.append((literal.name, mode, "has", tuple(range(len(literal.args)))))
            hoisted.append(f"_H{slot} = _views[{slot}].has")
            gen.open(f"if not _H{slot}({_tuple([_expr(a) for a in literal.args])}):")
        elif kind == "function":
            decl = functions[literal.name]
            slot = len(plan.functions)
            plan.functions.append(literal.name)
            hoisted.append(f"_F{slot} = _fns[{slot}]")
            inputs = ", ".join(_expr(a) for a in literal.args[: len(decl.inputs)])
            gen.open(f"for _o{slot} in _F{slot}({inputs}):")
            outputs = literal.args[len(decl.inputs):]
            _bind_terms(gen, outputs, f"_o{slot}", bound, range(len(outputs)))
        else:
            mode = NEW if delta_position is not None and index < delta_position else OLD
            slot = len(plan.views)
            positions = tuple(p for p, a in enumerate(literal.args) if _is_bound(a, bound))
            if len(positions) == len(literal.args):
                plan.views.append((literal.name, mode, "has", positions))
                hoisted.append(f"_H{slot} = _views[{slot}].has")
                gen.open(f"if _H{slot}({_tuple([_expr(a) for a in literal.args])}):")
            elif positions:
                plan.views.append((literal.name, mode, "lookup", positions))
                hoisted.append(f"_L{slot} = _views[{slot}].index({positions!r}).get")
                key = _tuple([_expr(literal.args[p]) for p in positions])
                gen.open(f"for _r{slot} in _L{slot}({key}, ()):")
                _bind_atom(gen, literal, f"_r{slot}", bound, set(positions))
            else:
                plan.views.append((literal.name, mode, "scan", ()))
                hoisted.append(f"_S{slot} = _views[{slot}].scan()")
                gen.open(f"for _r{slot} in _S{slot}:")
                _bind_atom(gen, literal, f"_r{slot}", bound, set())
    head_vars = set().union(*(variables(a) for a in rule.head.args)) if rule.head.args else set()
    unbound = sorted(head_vars - bound)
    if unbound:
        raise ProgramError(
            f"head variable '{unbound[0]}' of '{rule.head.name}' is not bound by the body "
            "(bind it with an atom, a function output or an assignment)",
            rule.head.location,
        )
    gen.line(f"_k = {_head_key(rule, aggregate_position)}")
    gen.line("_out[_k] = _out.get(_k, 0) + _s")
    gen.line("_n += 1")
    gen.lines[header_at:header_at] = ["    " + h for h in hoisted]
    gen.indent = 1
    gen.line("return _n")
    plan.source = "\n".join(gen.lines)
    namespace: dict[str, Any] = {}
    exec(compile(plan.source, f"<plan {rule.location}>", "exec"), namespace)  # noqa: S102 - generated code
    plan.run = namespace["_plan"]
    return plan


class _CodeGen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def open(self, text: str) -> None:
        self.line(text)
        self.indent += 1


def _name(var: str) -> str:
    return f"v_{var}"


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _expr(term) -> str:
    if isinstance(term, Var):
        return _name(term.name)
    if isinstance(term, Const):
        return repr(term.value)
    if isinstance(term, BinOp):
        return f"({_expr(term.left)} {term.op} {_expr(term.right)})"
    if isinstance(term, Neg):
        return f"(-{_expr(term.operand)})"
    raise AssertionError(f"not an expression: {term!r}")


def _is_bound(term, bound: set[str]) -> bool:
    if isinstance(term, Wildcard):
        return False
    return variables(term) <= bound


def _assign_target(term, bound: set[str]) -> bool:
    return isinstance(term, Var) and term.name not in bound


def _bind_atom(gen: _CodeGen, atom: Atom, row: str, bound: set[str], matched: set[int]) -> None:
    _bind_terms(gen, atom.args, row, bound, [p for p in range(len(atom.args)) if p not in matched])


def _bind_terms(gen: _CodeGen, terms, row: str, bound: set[str], positions) -> None:
    """Bind fresh variables from ``row`` and test constants and already bound variables."""
    tests = []
    for p in positions:
        term = terms[p]
        if isinstance(term, Wildcard):
            continue
        if isinstance(term, Var) and term.name not in bound:
            gen.line(f"{_name(term.name)} = {row}[{p}]")
            bound.add(term.name)
        else:
            tests.append(f"{row}[{p}] == {_expr(term)}")
    if tests:
        gen.open(f"if {' and '.join(tests)}:")


def _pick(remaining, bound: set[str], functions: dict[str, FunctionDecl]):
    """The next literal to evaluate: filters first, then bound lookups, functions, and scans last."""
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
                score = (3, -n_bound)
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


def _head_key(rule: Rule, aggregate_position: int | None) -> str:
    args = rule.head.args
    if aggregate_position is None:
        return _tuple([_expr(a) for a in args]) if args else "()"
    group = [_expr(a) for i, a in enumerate(args) if i != aggregate_position]
    aggregate = args[aggregate_position]
    assert isinstance(aggregate, Aggregate)
    return f"({_tuple(group) if group else '()'}, {_expr(aggregate.expr)})"
