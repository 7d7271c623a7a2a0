"""The Python backend's code generator: a ``Plan`` becomes a Python function of nested loops over
hash-index lookups, so evaluation pays no interpretation cost per tuple.

The generated function is ``run(delta, views, functions, out, until) -> fired``: ``delta`` iterates
``(row, sign)`` pairs, ``views`` and ``functions`` are the plan's views and callables in order, and
every derivation adds its sign to ``out[key]`` (key: the head row, or ``(group, value)`` for an
aggregate head). ``until`` decides, for a rule with ``until``, whether a derivation waits
(``until(group, key, bound, entering, sign, delta_before) -> bool``) and gives the rows entering a
relation this round (``until.entering(relation)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .planner import Plan

_PYTHON_OPS = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def arithmetic_result(value: Any) -> Any:
    """What an arithmetic expression may yield: NaN is refused, so no state ever holds it (both
    backends fail the rule the same way)."""
    if value != value:
        raise ValueError("arithmetic produced NaN")
    return value


# Python refuses more than 20 statically nested loops in one function (and 100 indentation levels),
# so a body with more iterating atoms continues in a nested function every this many loops.
_LOOPS_PER_FUNCTION = 12
_PATTERN_AT = {"delta": 2, "lookup": 4, "scan": 2, "call": 3}  # the looping steps, and where their pattern is


def compile_plan(plan: "Plan") -> Callable[..., int]:
    segments: list[list[tuple]] = [[]]
    for step in plan.steps:
        if step[0] in _PATTERN_AT and sum(s[0] in _PATTERN_AT for s in segments[-1]) == _LOOPS_PER_FUNCTION:
            segments.append([])
        segments[-1].append(step)
    gen = _CodeGen()
    gen.line("def _plan(_delta, _views, _fns, _out, _until=None):")
    gen.indent += 1
    for step in plan.steps:
        if step[0] == "until":
            for number, (relation, _args) in enumerate(step[4][1]):
                gen.line(f"_E{number} = _until.entering({relation!r})")
    for slot, (_rel, _mode, how, positions) in enumerate(plan.views):
        if how == "has":
            gen.line(f"_H{slot} = _views[{slot}].has")
        elif how == "lookup":
            gen.line(f"_L{slot} = _views[{slot}].index({positions!r}).get")
        else:
            gen.line(f"_S{slot} = _views[{slot}].scan()")
    for slot in range(len(plan.functions)):
        gen.line(f"_F{slot} = _fns[{slot}]")
    bound: list[str] = []  # the variables the segments before the current one bind
    continuations = []
    for segment in segments:
        continuations.append(("_s", *bound))
        bound += [name for step in segment for name in _binds(step)]
    for number in range(len(segments) - 1, 0, -1):  # each continuation defined before its caller
        gen.line(f"def _c{number}({', '.join(continuations[number])}):")
        gen.indent += 1
        _segment(gen, plan, segments, number, continuations)
        gen.indent -= 1
    if not plan.steps or plan.steps[0][0] != "delta":
        gen.line("_s = 1")
    _segment(gen, plan, segments, 0, continuations)
    source = "\n".join(gen.lines)
    namespace: dict[str, Any] = {"_num": arithmetic_result}
    exec(compile(source, f"<plan {plan.rule.location}>", "exec"), namespace)  # noqa: S102 - generated code
    return namespace["_plan"]


def _segment(gen: "_CodeGen", plan: "Plan", segments: list[list[tuple]], number: int,
             continuations: list[tuple]) -> None:
    """One function's loops: its steps, then the next segment's call or the head's derivation."""
    base = gen.indent
    gen.line("_n = 0")
    for step in segments[number]:
        _step(gen, step)
    if number + 1 < len(segments):
        gen.line(f"_n += _c{number + 1}({', '.join(continuations[number + 1])})")
    else:
        group, aggregate = plan.head
        key = _tuple([_top(e) for e in group]) if group else "()"
        if aggregate is not None:
            key = f"({key}, {_top(aggregate)})"
        gen.line(f"_k = {key}")
        if plan.bounded_position is not None:
            gen.open(f"if _s > 0 and not _k[{plan.bounded_position}] >= {_top(plan.until_bound)}:")
            gen.line(f"raise ValueError(f'derived {{_k[{plan.bounded_position}]!r}} below its until bound "
                     f"{{{_top(plan.until_bound)}!r}}; the bound must never exceed the value')")
            gen.indent -= 1
        gen.line("_out[_k] = _out.get(_k, 0) + _s")
        gen.line("_n += 1")
    gen.indent = base
    gen.line("return _n")


def _binds(step: tuple) -> list[str]:
    """The variables a step binds."""
    if step[0] == "assign":
        return [f"v{step[1]}"]
    at = _PATTERN_AT.get(step[0])
    return [] if at is None else [f"v{entry[1]}" for entry in step[at] if entry[0] == "bind"]


def _step(gen: "_CodeGen", step: tuple) -> None:
    kind = step[0]
    if kind == "delta":
        _, negated, pattern = step
        gen.open("for _t, _s in _delta:")
        if negated:
            gen.line("_s = -_s")  # a row entering a negated relation removes the derivations it blocks
        _pattern(gen, pattern, "_t")
    elif kind == "test":
        _, op, left, right = step
        gen.open(f"if {_top(left)} {_PYTHON_OPS[op]} {_top(right)}:")
    elif kind == "assign":
        _, slot, expr = step
        gen.line(f"v{slot} = {_top(expr)}")
    elif kind == "has":
        _, view, args, negated = step
        gen.open(f"if {'not ' if negated else ''}_H{view}({_tuple([_top(a) for a in args])}):")
    elif kind == "lookup":
        _, view, _positions, key, pattern = step
        gen.open(f"for _r{view} in _L{view}({_tuple([_top(k) for k in key])}, ()):")
        _pattern(gen, pattern, f"_r{view}")
    elif kind == "scan":
        _, view, pattern = step
        gen.open(f"for _r{view} in _S{view}:")
        _pattern(gen, pattern, f"_r{view}")
    elif kind == "until":
        _, group, bound, key, (delta_before, atoms) = step
        entering = ["_s > 0"] if delta_before else []
        entering += [f"{_tuple([_top(a) for a in args])} in _E{number}" for number, (_rel, args) in enumerate(atoms)]
        gen.open(f"if not _until({_tuple([_top(g) for g in group])}, {_tuple([_top(k) for k in key])}, "
                 f"{_top(bound)}, {' or '.join(entering) or 'False'}, _s, {delta_before}):")
    elif kind == "call":
        _, function, inputs, pattern = step
        gen.open(f"for _o{function} in _F{function}({', '.join(_top(i) for i in inputs)}):")
        _pattern(gen, pattern, f"_o{function}")
    else:
        raise AssertionError(f"unknown step {step!r}")


def _pattern(gen: "_CodeGen", pattern: tuple, row: str) -> None:
    tests = []
    for p, entry in enumerate(pattern):
        if entry[0] == "bind":
            gen.line(f"v{entry[1]} = {row}[{p}]")
        elif entry[0] == "test":
            tests.append(f"{row}[{p}] == {_top(entry[1])}")
    if tests:
        gen.open(f"if {' and '.join(tests)}:")


def _top(expr: tuple) -> str:
    """An expression as it is used: arithmetic results pass the NaN check."""
    if expr[0] in ("bin", "neg"):
        return f"_num({_expr(expr)})"
    return _expr(expr)


def _expr(expr: tuple) -> str:
    kind = expr[0]
    if kind == "var":
        return f"v{expr[1]}"
    if kind == "const":
        return repr(expr[1])
    if kind == "bin":
        return f"({_expr(expr[2])} {expr[1]} {_expr(expr[3])})"
    if kind == "neg":
        return f"(-{_expr(expr[1])})"
    raise AssertionError(f"not an expression: {expr!r}")


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


class _CodeGen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def open(self, text: str) -> None:
        self.line(text)
        self.indent += 1
