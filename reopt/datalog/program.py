"""A checked rule program: relations, functions, strata and the maintenance method of each stratum.

A program is checked completely when it is built, so an engine never meets an unknown relation, an
arity mismatch or an unbound variable at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import networkx as nx

from .errors import Location, ProgramError
from .parser import parse
from .planner import Plan, plan_rule, resume_plan
from .syntax import (
    AcyclicDecl,
    Aggregate,
    Atom,
    BinOp,
    Comparison,
    FunctionDecl,
    MemoDecl,
    Neg,
    OrderedDecl,
    RelationDecl,
    Rule,
    Until,
    Var,
    Wildcard,
    variables,
)

COUNTING = "counting"
DRED = "dred"


@dataclass
class RelationInfo:
    """What the program says of one relation."""

    name: str
    arity: int
    is_input: bool
    location: Location
    columns: tuple[str, ...] = ()
    aggregate: str | None = None  # min, max, count, sum for an aggregate relation
    aggregate_position: int | None = None
    has_rules: bool = False
    memo_of: str | None = None  # for a memo relation: the relation whose converged rows it keeps
    memo_keys: int = 0  # for a memo relation: how many leading columns identify a row
    ordered: bool = False  # a min aggregate whose group changes are released in value order
    alias_of: str | None = None  # for an alias: the derived relation whose rows it shares (see Program.aliases)

    @property
    def is_base(self) -> bool:
        """Read by rules but not derived by them: an input or a memo."""
        return self.is_input or self.memo_of is not None


@dataclass
class Deferral:
    """What an engine needs to keep a rule's ``until`` exact (docs/dialect.md): the min aggregate
    whose groups its derivations wait on, where a head row holds that group and the value the
    aggregate takes from it, and the plan that makes a waiting derivation once its group rises."""

    aggregate: str
    group_positions: tuple[int, ...]
    value_position: int
    resume: Plan


@dataclass
class CompiledRule:
    rule: Rule
    delta_plans: list[Plan]  # one per relation atom of the body: the plan when that atom carries the delta
    seed_plan: Plan | None  # for rules whose body has no relation atom: fired once, at the first run
    deferral: Deferral | None = None  # for a rule with ``until``


@dataclass
class Stratum:
    """A strongly connected component of the dependency graph, evaluated to fixpoint as one unit."""

    relations: frozenset[str]
    rules: list[CompiledRule]
    recursive: bool
    method: str  # COUNTING or DRED
    inputs: frozenset[str] = field(default_factory=frozenset)  # relations read from lower strata
    ordered: frozenset[str] = field(default_factory=frozenset)  # its .ordered aggregates
    goals: dict[str, str] = field(default_factory=dict)  # .ordered aggregate -> the relation naming its goals
    offsets: dict[str, str] = field(default_factory=dict)  # .ordered aggregate -> its heuristic (``plus``)


class Program:
    """A parsed and checked datalog program. Build it with ``Program.parse`` or ``Program.load``."""

    def __init__(self, statements: list, source: str = "<string>"):
        self.source = source
        self.relations: dict[str, RelationInfo] = {}
        self.functions: dict[str, FunctionDecl] = {}
        self.rules: list[Rule] = []
        acyclic: list[AcyclicDecl] = []
        ordered: list[OrderedDecl] = []
        memos: list[MemoDecl] = []
        for statement in statements:
            if isinstance(statement, RelationDecl):
                self._declare(statement)
            elif isinstance(statement, FunctionDecl):
                self._declare_function(statement)
            elif isinstance(statement, AcyclicDecl):
                acyclic.append(statement)
            elif isinstance(statement, OrderedDecl):
                ordered.append(statement)
            elif isinstance(statement, MemoDecl):
                self._declare_memo(statement)
                memos.append(statement)
            else:
                self.rules.append(statement)
        for rule in self.rules:
            self._register_head(rule)
        for memo in memos:
            self._check_memo(memo)
        for rule in self.rules:
            self._check_body(rule)
        self.aliases = self._find_aliases({name for decl in ordered for name in (decl.goal, decl.plus) if name is not None})
        for name, source in self.aliases.items():
            self.relations[name].alias_of = source
        self.strata = self._stratify(acyclic)
        for decl in ordered:
            self._order(decl)

    @classmethod
    def parse(cls, text: str, source: str = "<string>") -> "Program":
        if not isinstance(text, str):
            raise ProgramError(f"rule text must be a string, got {type(text).__name__}")
        return cls._checked(parse(text, source), source)

    @classmethod
    def load(cls, *paths: str | Path) -> "Program":
        """The program in one rule file, or in several read as one (modules: a relation one file
        declares or derives may be read by rules of another); errors name the file they are in."""
        if not paths:
            raise ProgramError("Program.load needs at least one rule file")
        statements = []
        for path in map(Path, paths):
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ProgramError(f"cannot read rule file {path}: {exc.strerror}") from None
            except UnicodeDecodeError as exc:
                raise ProgramError(f"rule file {path} is not UTF-8 text (byte {exc.start})") from None
            statements.extend(parse(text, str(path)))
        return cls._checked(statements, " + ".join(map(str, paths)))

    @classmethod
    def _checked(cls, statements: list, source: str) -> "Program":
        try:
            return cls(statements, source)
        except RecursionError:
            raise ProgramError(f"{source}: an expression is nested too deeply to check; split it with "
                               "intermediate variables") from None

    @property
    def inputs(self) -> list[str]:
        return [name for name, info in self.relations.items() if info.is_input]

    @property
    def derived(self) -> list[str]:
        return [name for name, info in self.relations.items() if not info.is_base]

    @property
    def memos(self) -> list[RelationInfo]:
        return [info for info in self.relations.values() if info.memo_of is not None]

    # -- declarations ------------------------------------------------------------------------

    def _declare(self, decl: RelationDecl) -> None:
        if decl.name in self.relations or decl.name in self.functions:
            raise ProgramError(f"'{decl.name}' is declared twice", decl.location)
        self.relations[decl.name] = RelationInfo(
            decl.name, len(decl.columns), decl.is_input, decl.location, decl.columns
        )

    def _declare_function(self, decl: FunctionDecl) -> None:
        if decl.name in self.relations or decl.name in self.functions:
            raise ProgramError(f"'{decl.name}' is declared twice", decl.location)
        self.functions[decl.name] = decl

    def _declare_memo(self, decl: MemoDecl) -> None:
        if decl.name in self.relations or decl.name in self.functions:
            raise ProgramError(f"'{decl.name}' is declared twice", decl.location)
        columns = decl.keys + decl.values
        self.relations[decl.name] = RelationInfo(
            decl.name, len(columns), False, decl.location, columns, memo_of=decl.source, memo_keys=len(decl.keys)
        )

    def _check_memo(self, decl: MemoDecl) -> None:
        source = self.relations.get(decl.source)
        if source is None or not source.has_rules:
            raise ProgramError(f".memo '{decl.name}' keeps rows of '{decl.source}', which no rule derives", decl.location)
        if source.arity != self.relations[decl.name].arity:
            raise ProgramError(
                f".memo '{decl.name}' has {self.relations[decl.name].arity} columns but its source '{decl.source}' "
                f"has arity {source.arity}",
                decl.location,
            )

    def _register_head(self, rule: Rule) -> None:
        head = rule.head
        if head.name in self.functions:
            raise ProgramError(f"'{head.name}' is a function and cannot be a rule head", head.location)
        memo_of = self.relations[head.name].memo_of if head.name in self.relations else None
        if memo_of is not None:
            raise ProgramError(
                f"'{head.name}' is the memo of '{memo_of}'; the engine maintains it and rules cannot derive it",
                head.location,
            )
        aggregates = [a for a in head.args if isinstance(a, Aggregate)]
        if len(aggregates) > 1:
            raise ProgramError(f"a head may hold one aggregate, '{head.name}' holds {len(aggregates)}", head.location)
        func = aggregates[0].func if aggregates else None
        position = head.aggregate_position
        info = self.relations.get(head.name)
        if info is None:
            info = RelationInfo(head.name, len(head.args), False, head.location, (), func, position, True)
            self.relations[head.name] = info
        elif info.is_input:
            raise ProgramError(
                f"'{head.name}' is declared .input, so rules cannot derive it; declare it with .decl instead",
                head.location,
            )
        else:
            self._check_arity(head.name, len(head.args), head.location)
            if info.has_rules:
                if (info.aggregate, info.aggregate_position) != (func, position):
                    raise ProgramError(
                        f"every rule for '{head.name}' must use the same aggregate at the same position",
                        head.location,
                    )
            else:
                info.aggregate, info.aggregate_position, info.has_rules = func, position, True
        for arg in head.args:
            expr = arg.expr if isinstance(arg, Aggregate) else arg
            if _has_wildcard(expr):
                raise ProgramError(f"'_' cannot appear in the head of '{head.name}'", head.location)

    def _check_arity(self, name: str, arity: int, location: Location) -> None:
        expected = self.relations[name].arity
        if arity != expected:
            raise ProgramError(f"'{name}' has arity {expected} but is used here with {arity} arguments", location)

    def _check_body(self, rule: Rule) -> None:
        for literal in rule.body:
            if isinstance(literal, Comparison):
                for side in (literal.left, literal.right):
                    if _has_wildcard(side):
                        raise ProgramError("'_' cannot appear in a comparison", literal.location)
                continue
            if literal.negated:
                self._check_negated(literal)
            if literal.name in self.functions:
                decl = self.functions[literal.name]
                expected = len(decl.inputs) + len(decl.outputs)
                if len(literal.args) != expected:
                    raise ProgramError(
                        f"function '{literal.name}' takes {len(decl.inputs)} inputs and {len(decl.outputs)} "
                        f"outputs ({expected} arguments) but is called with {len(literal.args)}",
                        literal.location,
                    )
                for arg in literal.args[: len(decl.inputs)]:
                    if _has_wildcard(arg):
                        raise ProgramError(f"an input of function '{literal.name}' cannot be '_'", literal.location)
                for arg in literal.args[len(decl.inputs):]:
                    if isinstance(arg, (BinOp, Neg)):
                        raise ProgramError(
                            f"an output of function '{literal.name}' must be a variable, a constant or '_'",
                            literal.location,
                        )
                continue
            if literal.name not in self.relations:
                raise ProgramError(f"unknown relation or function '{literal.name}'", literal.location)
            self._check_arity(literal.name, len(literal.args), literal.location)
            for arg in literal.args:
                if isinstance(arg, (BinOp, Neg)):
                    raise ProgramError(
                        f"argument '{arg}' of '{literal.name}' is an expression; bind it with 'v = {arg}' first",
                        literal.location,
                    )

    def _check_negated(self, literal: Atom) -> None:
        if literal.name in self.functions:
            raise ProgramError(f"function '{literal.name}' cannot be negated; negate a relation", literal.location)
        if any(_has_wildcard(arg) for arg in literal.args):
            raise ProgramError(
                f"'_' cannot appear in the negated atom '{literal}'; every argument must be bound by the rest of the body",
                literal.location,
            )

    # -- aliases -------------------------------------------------------------------------------

    def _find_aliases(self, kept: set[str]) -> dict[str, str]:
        """Relations whose only rule copies a derived relation's rows unchanged, as in
        ``R(x, y) :- S(x, y).``, mapped to the relation that holds those rows.

        Rules read S wherever they read R, so R holds nothing and no derivation is computed for it: a
        program can name a stage (``Alive`` below) that one module defines by pruning and another by
        copying, at no cost where it copies. The rows, counts and deltas of R are S's, exactly what
        evaluating the copy would give. Memo sources, goals and heuristics keep their own rows."""
        memo_sources = {info.memo_of for info in self.relations.values() if info.memo_of is not None}
        by_head: dict[str, list[Rule]] = {}
        for rule in self.rules:
            by_head.setdefault(rule.head.name, []).append(rule)
        copies: dict[str, str] = {}
        for name, rules in by_head.items():
            if len(rules) != 1 or name in memo_sources or name in kept or len(rules[0].body) != 1:
                continue
            head, atom = rules[0].head, rules[0].body[0]
            if not isinstance(atom, Atom) or atom.negated or atom.name == name \
                    or atom.name not in self.relations or self.relations[atom.name].is_base:
                continue
            names = [arg.name for arg in head.args if isinstance(arg, Var)]
            if len(names) == len(head.args) == len(set(names)) and tuple(atom.args) == tuple(head.args):
                copies[name] = atom.name
        aliases = {}
        for name in copies:
            source, seen = name, set()
            while source in copies and source not in seen:
                seen.add(source)
                source = copies[source]
            if source not in copies:  # a cycle of copies holds nothing; it is evaluated as written
                aliases[name] = source
        return aliases

    def _resolved(self, rule: Rule) -> Rule:
        """``rule`` reading each alias's source in its place."""
        if not any(isinstance(lit, Atom) and lit.name in self.aliases for lit in rule.body):
            return rule
        body = tuple(replace(lit, name=self.aliases[lit.name])
                     if isinstance(lit, Atom) and lit.name in self.aliases else lit for lit in rule.body)
        return replace(rule, body=body)

    # -- strata --------------------------------------------------------------------------------

    def _stratify(self, acyclic: list[AcyclicDecl]) -> list[Stratum]:
        declared_acyclic: dict[str, Location] = {}
        for decl in acyclic:
            for name in decl.names:
                if name not in self.relations or self.relations[name].is_base:
                    raise ProgramError(f".acyclic names '{name}', which no rule derives", decl.location)
                declared_acyclic[name] = decl.location
        # A program is accepted or refused as written; aliases change only how it is evaluated.
        for members, numbers, recursive in self._components(self.rules):
            rules = [self.rules[n] for n in numbers]
            self._check_negation(members, rules, self._method(members, rules, recursive, declared_acyclic))
        written = [rule for rule in self.rules if rule.head.name not in self.aliases]
        resolved = [self._resolved(rule) for rule in written]
        strata = []
        for members, numbers, recursive in self._components(resolved):
            rules = [resolved[n] for n in numbers]
            method = self._method(members, rules, recursive, declared_acyclic)
            compiled = [self._compile(resolved[n], written[n], members, method, rules) for n in numbers]
            body = {lit.name for r in rules for lit in r.body if isinstance(lit, Atom) and lit.name in self.relations}
            strata.append(Stratum(members, compiled, recursive, method, frozenset(body - members)))
        return strata

    def _components(self, rules: list[Rule]) -> list[tuple[frozenset[str], list[int], bool]]:
        """The strongly connected components of the dependency graph of ``rules``, in evaluation order,
        each with the positions of its rules in ``rules`` (in order) and whether it is recursive."""
        graph = nx.DiGraph()
        graph.add_nodes_from(rule.head.name for rule in rules)
        for rule in rules:
            for literal in rule.body:
                if isinstance(literal, Atom) and literal.name in self.relations:
                    graph.add_edge(literal.name, rule.head.name)
        by_head: dict[str, list[int]] = {}  # numbers of the rules for each head, in program order
        for number, rule in enumerate(rules):
            by_head.setdefault(rule.head.name, []).append(number)
        condensed = nx.condensation(graph)
        components = []
        for component in nx.topological_sort(condensed):
            members = frozenset(condensed.nodes[component]["members"])
            if all(self.relations[m].is_base for m in members):
                continue
            numbers = sorted(n for m in members for n in by_head.get(m, ()))
            recursive = len(members) > 1 or any(graph.has_edge(m, m) for m in members)
            components.append((members, numbers, recursive))
        return components

    def _order(self, decl: OrderedDecl) -> None:
        for name in decl.names:
            info = self.relations.get(name)
            stratum = next((s for s in self.strata if name in s.relations), None)
            if info is None or info.aggregate != "min" or stratum is None or not stratum.recursive \
                    or stratum.method != COUNTING:
                raise ProgramError(
                    f".ordered names '{name}', which is not a min aggregate of a recursion maintained by counting "
                    "(declare the recursion .acyclic)",
                    decl.location,
                )
            info.ordered = True
            stratum.ordered = stratum.ordered | {name}
            if decl.goal is not None:
                stratum.goals[name] = self._goal(decl, info, stratum)
            if decl.plus is not None:
                stratum.offsets[name] = self._offset(decl, info, stratum)
                # its changes re-order what is held, so they reach the stratum like any input's
                stratum.inputs = stratum.inputs | {decl.plus}

    def _goal(self, decl: OrderedDecl, info: RelationInfo, stratum: Stratum) -> str:
        """Check ``.ordered name up to goal``: the goals must be known before the release they stop,
        so ``goal`` is computed in a lower stratum, and its rows are groups of ``name``."""
        if len(decl.names) != 1:
            raise ProgramError(".ordered ... up to names one aggregate (its goal's rows are that aggregate's "
                               "groups)", decl.location)
        return self._settled_first(decl, info, stratum, f"up to {decl.goal}", decl.goal, info.arity - 1,
                                   "the goal's rows must be groups of")

    def _offset(self, decl: OrderedDecl, info: RelationInfo, stratum: Stratum) -> str:
        """Check ``.ordered name up to goal plus h``: like the goal, ``h`` is known before the release
        it orders, and its rows are groups of ``name`` with a number."""
        return self._settled_first(decl, info, stratum, f"up to {decl.goal} plus {decl.plus}", decl.plus,
                                   info.arity, "its rows must be groups with a value of")

    def _settled_first(self, decl: OrderedDecl, info: RelationInfo, stratum: Stratum, clause: str, name: str,
                       arity: int, rows: str) -> str:
        """``name``, checked to exist with ``arity`` columns and to be settled before ``stratum`` runs
        (an input, a memo or a lower stratum)."""
        relation = self.relations.get(name)
        if relation is None:
            raise ProgramError(f".ordered {info.name} {clause}: '{name}' is no such relation", decl.location)
        if relation.arity != arity:
            raise ProgramError(
                f".ordered {info.name} {clause}: {rows} {info.name}, with {arity} columns, but {name} has "
                f"{relation.arity}", decl.location)
        below = self.strata[:self.strata.index(stratum)]
        if not (relation.is_base or any(name in s.relations for s in below)):
            raise ProgramError(
                f".ordered {info.name} {clause}: {name} must be computed before {info.name}'s recursion (an "
                "input, a memo or a lower stratum)", decl.location)
        return name

    def _check_negation(self, members, rules, method) -> None:
        for rule in rules:
            for literal in rule.body:
                if not (isinstance(literal, Atom) and literal.negated):
                    continue
                if literal.name in members:
                    raise ProgramError(
                        f"'{rule.head.name}' negates '{literal.name}' inside their common recursion "
                        f"({', '.join(sorted(members))}); negation must read a relation computed before the rule's "
                        "own recursion (a lower stratum or a .memo)",
                        literal.location,
                    )
                if method != COUNTING:
                    raise ProgramError(
                        f"negation in the recursion of {', '.join(sorted(members))} needs counting maintenance; "
                        f"declare '.acyclic {', '.join(sorted(members))}.' if no derivation depends on itself",
                        literal.location,
                    )

    def _method(self, members, rules, recursive, declared_acyclic) -> str:
        if not recursive:
            return COUNTING
        marked = members & declared_acyclic.keys()
        if marked and marked != members:
            missing = ", ".join(sorted(members - marked))
            raise ProgramError(
                f"the recursive relations {', '.join(sorted(members))} are evaluated together; "
                f".acyclic must name all of them (missing: {missing})",
                declared_acyclic[sorted(marked)[0]],
            )
        if marked:
            return COUNTING
        for name in sorted(members):
            info = self.relations[name]
            if info.aggregate in ("count", "sum"):
                raise ProgramError(
                    f"'{name}' uses {info.aggregate}<...> inside recursion ({', '.join(sorted(members))}); "
                    "count and sum are only allowed where the relation does not depend on itself, or in a "
                    "recursion declared .acyclic",
                    info.location,
                )
        aggregated = {m for m in members if self.relations[m].aggregate}
        for rule in rules:
            if rule.head.name in aggregated:
                continue
            for literal in rule.body:
                if isinstance(literal, Atom) and literal.name in aggregated:
                    raise ProgramError(
                        f"'{rule.head.name}' depends on the aggregate '{literal.name}' inside a possibly cyclic "
                        "recursion, which the engine cannot maintain; if no derivation can depend on itself, "
                        f"declare '.acyclic {', '.join(sorted(members))}.'",
                        literal.location,
                    )
        return DRED

    def _compile(self, rule: Rule, written: Rule, members: frozenset[str], method: str,
                 rules: list[Rule]) -> CompiledRule:
        """Plans for ``rule`` (aliases resolved); errors quote the rule as ``written``."""
        deferral = None if rule.until is None else self._deferral(rule, members, method, rules)
        atoms = [i for i, lit in enumerate(rule.body) if isinstance(lit, Atom) and lit.name in self.relations]
        info = self.relations[rule.head.name]
        plans = [plan_rule(rule, i, self.functions, info.aggregate_position) for i in atoms]
        seed = None if atoms else plan_rule(rule, None, self.functions, info.aggregate_position)
        if deferral is not None:
            for plan in [*plans, deferral.resume]:
                plan.bounded_position = deferral.value_position
        return CompiledRule(written, plans, seed, deferral)

    def _deferral(self, rule: Rule, members: frozenset[str], method: str, rules: list[Rule]) -> Deferral:
        """Check a rule's ``until A(g) >= bound``: A is a min aggregate of the rule's own recursion,
        maintained by counting, whose one rule takes each group and value straight from a row of this
        rule's head; g is that group as this rule's head writes it; the literals before ``until`` are
        relation atoms without '_' and comparisons, and bind g and the bound."""
        until: Until = rule.until
        where = until.location
        name = self.aliases.get(until.aggregate.name, until.aggregate.name)
        info = self.relations.get(name)
        if info is None or info.aggregate != "min":
            raise ProgramError(f"'until {until.aggregate.name}(...)' needs a min aggregate", where)
        if name not in members or method != COUNTING:
            raise ProgramError(
                f"'until {until.aggregate.name}(...)' in a rule for '{rule.head.name}' needs {name} in the same "
                "recursion, maintained by counting (declare it .acyclic)", where)
        self._check_arity(name, len(until.aggregate.args) + 1, where)
        feeding = [r for r in rules if r.head.name == name]
        atom = feeding[0].body[0] if len(feeding) == 1 and len(feeding[0].body) == 1 else None
        head_args = feeding[0].head.args if feeding else ()
        wanted = [a.expr if isinstance(a, Aggregate) else a for a in head_args]
        if atom is None or not isinstance(atom, Atom) or atom.negated or atom.name != rule.head.name \
                or not all(isinstance(a, Var) and a in atom.args for a in wanted):
            raise ProgramError(
                f"'until {until.aggregate.name}(...)' needs {name} defined by one rule that takes its group and "
                f"value from a row of {rule.head.name}, as in '{name}(g, min<v>) :- {rule.head.name}(g, ..., v).'",
                where)
        positions = [atom.args.index(a) for a in wanted]
        value_position = positions.pop(info.aggregate_position)
        if tuple(until.aggregate.args) != tuple(rule.head.args[p] for p in positions):
            raise ProgramError(
                f"'until {until.aggregate}' must name the group this rule derives for {name}: "
                f"{name}({', '.join(str(rule.head.args[p]) for p in positions)})", where)
        if not isinstance(rule.head.args[value_position], Var):
            raise ProgramError(f"with 'until', the value {name} takes from '{rule.head.name}' must be a variable",
                               rule.head.location)
        bound: set[str] = set()
        for literal in rule.body[:rule.prefix]:
            if isinstance(literal, Atom) and (literal.negated or literal.name in self.functions
                                              or any(isinstance(a, Wildcard) for a in literal.args)):
                raise ProgramError(
                    f"'{literal}' comes before 'until': only relation atoms without '_' and comparisons may, "
                    "since they decide whether a derivation waits", literal.location)
            if isinstance(literal, Atom):
                bound |= set().union(*(variables(a) for a in literal.args))
            elif literal.op == "=":
                bound |= variables(literal.left) | variables(literal.right)
        free = sorted((set().union(*(variables(a) for a in until.aggregate.args)) | variables(until.bound)) - bound)
        if free:
            raise ProgramError(f"variable '{free[0]}' of '{until}' is not bound by the literals before it", where)
        if not any(isinstance(literal, Atom) for literal in rule.body[:rule.prefix]):
            raise ProgramError(f"'{until}' needs a relation atom before it", where)
        if self.relations[rule.head.name].aggregate is not None:
            raise ProgramError(f"'until' cannot guard a rule of the aggregate '{rule.head.name}'", where)
        return Deferral(name, tuple(positions), value_position, resume_plan(rule, self.functions, None))

    def index_patterns(self) -> dict[str, set[tuple[int, ...]]]:
        """The (relation, bound positions) lookups the plans make, so relations can index them."""
        patterns: dict[str, set[tuple[int, ...]]] = {name: set() for name in self.relations}
        for stratum in self.strata:
            for compiled in stratum.rules:
                for plan in compiled.delta_plans + ([compiled.seed_plan] if compiled.seed_plan else []):
                    for relation, positions in plan.lookups:
                        patterns[relation].add(positions)
        return patterns


def _has_wildcard(term) -> bool:
    if isinstance(term, Wildcard):
        return True
    if isinstance(term, BinOp):
        return _has_wildcard(term.left) or _has_wildcard(term.right)
    if isinstance(term, Neg):
        return _has_wildcard(term.operand)
    return False

