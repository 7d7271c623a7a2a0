"""Parses the rule dialect (see docs/dialect.md) into the syntax tree of ``syntax.py`` with lark."""

from __future__ import annotations

import re

import lark
from lark import Lark, Transformer, v_args

from .errors import Location, ParseError, shown
from .syntax import (
    AcyclicDecl,
    Aggregate,
    Atom,
    BinOp,
    Comparison,
    Const,
    FunctionDecl,
    Head,
    MemoDecl,
    Neg,
    OrderedDecl,
    RelationDecl,
    Rule,
    Statement,
    Until,
    Var,
    Wildcard,
)

GRAMMAR = r"""
start: statement*

?statement: input_decl | rel_decl | function_decl | acyclic_decl | ordered_decl | memo_decl | rule

input_decl: ".input" NAME "(" [names] ")" "."
rel_decl: ".decl" NAME "(" [names] ")" "."
function_decl: ".function" NAME "(" [names] ")" "->" "(" [names] ")" "."
acyclic_decl: ".acyclic" names "."
ordered_decl: ".ordered" names [UP_TO NAME [PLUS NAME]] "."
memo_decl: ".memo" NAME "(" names "|" names ")" "from" NAME "."
names: NAME ("," NAME)*

rule: head [":-" body] "."
head: NAME "(" [head_arg ("," head_arg)*] ")"
?head_arg: aggregate | expr
aggregate: NAME "<" expr ">"

body: literal ("," literal)*
?literal: atom | negated | comparison | until
negated: "!" atom
until: UNTIL atom ">=" expr
atom: NAME "(" [arg ("," arg)*] ")"
?arg: expr | WILDCARD
comparison: expr COMPARE expr

?expr: sum
?sum: product | sum ADDOP product -> binop
?product: unary | product MULOP unary -> binop
?unary: "-" unary -> neg | primary
?primary: NUMBER -> number
        | STRING -> string
        | "true" -> true
        | "false" -> false
        | NAME -> var
        | "(" expr ")"

UP_TO: /up\s+to\b/
PLUS: /plus\b/
UNTIL.2: /until\b/
WILDCARD: "_"
COMPARE: "<=" | ">=" | "!=" | "<" | ">" | "="
ADDOP: "+" | "-"
MULOP: "*" | "/" | "%"
NAME: /[A-Za-z_][A-Za-z0-9_]*/
NUMBER: /\d+(\.\d+)?([eE][+-]?\d+)?/
STRING: /"([^"\\]|\\.)*"/
COMMENT: /%[^\n]*/ | /\/\/[^\n]*/

%import common.WS
%ignore WS
%ignore COMMENT
"""

AGGREGATES = ("min", "max", "count", "sum")

_PARSER = Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=True)


class _Builder(Transformer):
    def __init__(self, source: str):
        super().__init__()
        self.source = source

    def _loc(self, meta) -> Location:
        return Location(self.source, getattr(meta, "line", 0), getattr(meta, "column", 0))

    def _tloc(self, token) -> Location:
        return Location(self.source, token.line, token.column)

    def start(self, items):
        return list(items)

    def names(self, items):
        return tuple(str(t) for t in items)

    @v_args(meta=True)
    def input_decl(self, meta, items):
        name, cols = items
        return RelationDecl(str(name), cols or (), True, self._loc(meta))

    @v_args(meta=True)
    def rel_decl(self, meta, items):
        name, cols = items
        return RelationDecl(str(name), cols or (), False, self._loc(meta))

    @v_args(meta=True)
    def function_decl(self, meta, items):
        name, ins, outs = items
        return FunctionDecl(str(name), ins or (), outs or (), self._loc(meta))

    @v_args(meta=True)
    def acyclic_decl(self, meta, items):
        return AcyclicDecl(items[0], self._loc(meta))

    @v_args(meta=True)
    def ordered_decl(self, meta, items):
        names, _up_to, goal, _plus, plus = items
        return OrderedDecl(names, self._loc(meta), None if goal is None else str(goal),
                           None if plus is None else str(plus))

    @v_args(meta=True)
    def memo_decl(self, meta, items):
        name, keys, values, source = items
        return MemoDecl(str(name), keys, values, str(source), self._loc(meta))

    @v_args(meta=True)
    def rule(self, meta, items):
        head, body = items
        body = list(body or ())
        guards = [i for i, literal in enumerate(body) if isinstance(literal, Until)]
        if len(guards) > 1:
            raise ParseError("a rule has at most one 'until'", body[guards[1]].location)
        if not guards:
            return Rule(head, tuple(body), self._loc(meta))
        until = body.pop(guards[0])
        return Rule(head, tuple(body), self._loc(meta), until, guards[0])

    @v_args(meta=True)
    def head(self, meta, items):
        name, *args = items
        args = [a for a in args if a is not None]
        return Head(str(name), tuple(args), self._tloc(name))

    def aggregate(self, items):
        name, expr = items
        if str(name) not in AGGREGATES:
            raise ParseError(
                f"unknown aggregate '{name}<...>'; use one of {', '.join(AGGREGATES)}",
                self._tloc(name),
            )
        return Aggregate(str(name), expr)

    def body(self, items):
        return list(items)

    def atom(self, items):
        name, *args = items
        args = [a for a in args if a is not None]
        converted = tuple(Wildcard() if isinstance(a, lark.Token) and a.type == "WILDCARD" else a for a in args)
        return Atom(str(name), converted, self._tloc(name))

    @v_args(meta=True)
    def until(self, meta, items):
        _keyword, atom, bound = items
        return Until(atom, bound, self._loc(meta))

    def negated(self, items):
        (atom,) = items
        return Atom(atom.name, atom.args, atom.location, negated=True)

    @v_args(meta=True)
    def comparison(self, meta, items):
        left, op, right = items
        return Comparison(str(op), left, right, self._loc(meta))

    def binop(self, items):
        left, op, right = items
        return BinOp(str(op), left, right)

    def neg(self, items):
        (operand,) = items
        if isinstance(operand, Const) and isinstance(operand.value, (int, float)):
            return Const(-operand.value)
        return Neg(operand)

    def number(self, items):
        text = str(items[0])
        if len(text) > MAX_NUMBER_DIGITS:
            raise ParseError(f"a number of {len(text)} characters; at most {MAX_NUMBER_DIGITS} are read",
                             self._tloc(items[0]))
        return Const(float(text) if any(c in text for c in ".eE") else int(text))

    def string(self, items):
        def one(match: re.Match) -> str:
            code = match.group(1)
            if code in _ESCAPES:
                return _ESCAPES[code]
            if len(code) == 5:
                return chr(int(code[1:], 16))
            raise ParseError(f"unknown escape '\\{code}' in a string; use \\\\, \\\", \\n, \\t, \\r or \\uXXXX",
                             self._tloc(items[0]))

        return Const(re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, str(items[0])[1:-1], flags=re.DOTALL))

    def true(self, _):
        return Const(True)

    def false(self, _):
        return Const(False)

    def var(self, items):
        (token,) = items
        if str(token) == "_":
            return Wildcard()
        return Var(str(token))


# Escapes a string constant may use; any other character stands for itself (UTF-8 text as written).
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
MAX_NUMBER_DIGITS = 4000  # Python refuses to convert longer integers


def parse(text: str, source: str = "<string>") -> list[Statement]:
    """Parse rule text into statements; syntax errors raise ``ParseError`` with file, line, column."""
    try:
        tree = _PARSER.parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        location = Location(source, exc.line, exc.column)
        raise ParseError(_describe(exc), location) from None
    try:
        return _Builder(source).transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, ParseError):
            raise exc.orig_exc from None
        raise
    except RecursionError:
        raise ParseError("an expression is nested too deeply (a sum of thousands of terms?); split it with "
                         "intermediate variables", Location(source, 1, 1)) from None


def _describe(exc: lark.exceptions.UnexpectedInput) -> str:
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        return f"unexpected character {exc.char!r}"
    if isinstance(exc, lark.exceptions.UnexpectedEOF):
        return "unexpected end of input (a rule must end with '.')"
    token = getattr(exc, "token", None)
    if token is not None and token.type == "$END":
        return "unexpected end of input (does the last rule end with '.'?)"
    expected = sorted({_terminal(name) for name in getattr(exc, "expected", ()) or ()})
    listed = ", ".join(expected[:8])
    return f"unexpected {shown(str(token))}" + (f"; expected one of: {listed}" if listed else "")


def _terminal(name: str) -> str:
    """How a user would write a terminal lark names: the literal itself ('":-"'), or a word for a class."""
    try:
        pattern = _PARSER.get_terminal(name).pattern
    except KeyError:
        return name
    if isinstance(pattern, lark.lexer.PatternStr):
        return repr(pattern.value)
    return {"NAME": "a name", "NUMBER": "a number", "STRING": "a string", "VAR": "a variable",
            "UP_TO": "'up to'", "UNTIL": "'until'", "PLUS": "'plus'"}.get(name, name.lower())
