"""SQL to ``Query`` with sqlglot: select-project-join blocks with conjunctive local and equi-join
predicates. GROUP BY, ORDER BY, LIMIT and the select list are kept, unoptimized, as the final step.
"""

from __future__ import annotations

import warnings

import sqlglot
from sqlglot import exp

from .catalog import Catalog
from .errors import UnsupportedSQLError
from .query import ColumnRef, Filter, JoinPredicate, Query

_BITWISE = (exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot, exp.BitwiseLeftShift,
            exp.BitwiseRightShift)
_UNSUPPORTED = {
    exp.Subquery: "a subquery",
    exp.Exists: "EXISTS",
    exp.Union: "UNION",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
    exp.With: "a WITH clause (CTE)",
    exp.Lateral: "LATERAL",
}


def parse_sql(sql: str | exp.Expression, catalog: Catalog, dialect: str | None = None) -> Query:
    """Parse one SELECT statement (text, or a statement sqlglot already parsed) in sqlglot's
    ``dialect`` (``"spark"`` for Spark SQL, with its backticks; None: sqlglot's default). Unsupported
    constructs raise ``UnsupportedSQLError`` naming them."""
    try:
        return _parse(sql, catalog, dialect)
    except RecursionError:
        raise UnsupportedSQLError("the SQL is nested too deeply to analyse; simplify its expressions") from None


def _parse(sql: str | exp.Expression, catalog: Catalog, dialect: str | None) -> Query:
    if isinstance(sql, exp.Expression):
        statements = [sql.copy()]
    elif not isinstance(sql, str):
        raise UnsupportedSQLError(f"expected SQL text or a sqlglot expression, got {type(sql).__name__}")
    else:
        try:
            statements = sqlglot.parse(sql, read=dialect)
        except sqlglot.errors.ParseError as exc:
            raise UnsupportedSQLError(f"cannot parse the SQL: {_first_error(exc)}") from None
        except sqlglot.errors.TokenError as exc:
            raise UnsupportedSQLError(f"cannot read the SQL: {str(exc)[:200]}") from None
        except ValueError as exc:  # an unknown dialect
            raise UnsupportedSQLError(f"cannot parse the SQL: {str(exc)[:200]}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise UnsupportedSQLError(f"expected one SQL statement, got {len(statements)}")
    select = statements[0]
    if not isinstance(select, exp.Select):
        raise UnsupportedSQLError(f"only SELECT queries are supported, got {select.key.upper()}")
    for node in select.walk():
        if isinstance(node, _BITWISE):
            raise UnsupportedSQLError(
                f"a bitwise operator is not supported: {node.sql()[:80]} (is '> >' or '< <' a typo?)")
        for kind, name in _UNSUPPORTED.items():
            if isinstance(node, kind):
                raise UnsupportedSQLError(f"{name} is not supported: {node.sql()[:80]}")
        if isinstance(node, exp.Select) and node is not select:
            raise UnsupportedSQLError(f"a nested SELECT is not supported: {node.sql()[:80]}")

    if select.args.get("hint") is not None:
        warnings.warn(f"reopt chooses join order and strategies itself and ignores the hint "
                      f"{select.args['hint'].sql()[:80]}", UserWarning, stacklevel=3)
    relations: list[tuple[str, str]] = []
    conjuncts: list[exp.Expression] = []
    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is None:
        raise UnsupportedSQLError("the query has no FROM clause")
    sources = [from_.this, *from_.expressions] if hasattr(from_, "expressions") else [from_.this]
    for join in select.args.get("joins") or []:
        side, kind = (join.side or "").upper(), (join.kind or "").upper()
        if side or kind in ("OUTER", "SEMI", "ANTI"):
            raise UnsupportedSQLError(f"{' '.join(x for x in (side, kind) if x)} JOIN is not supported: {join.sql()[:80]}")
        if join.args.get("using"):
            raise UnsupportedSQLError(f"JOIN ... USING is not supported: {join.sql()[:80]}")
        sources.append(join.this)
        if join.args.get("on") is not None:
            conjuncts.extend(_conjuncts(join.args["on"]))
    for source in sources:
        if source is None:
            continue
        if not isinstance(source, exp.Table):
            raise UnsupportedSQLError(f"only base tables are supported in FROM, got: {source.sql()[:80]}")
        table = source.name.lower()
        catalog.table(table)
        relations.append(((source.alias_or_name).lower(), table))
    where = select.args.get("where")
    if where is not None:
        conjuncts.extend(_conjuncts(where.this))

    resolver = _Resolver(relations, catalog)
    joins: list[JoinPredicate] = []
    filters: list[Filter] = []
    for conjunct in conjuncts:
        columns = list(conjunct.find_all(exp.Column))
        if any(isinstance(n, exp.AggFunc) for n in conjunct.walk()):
            raise UnsupportedSQLError(f"an aggregate in WHERE is not supported: {conjunct.sql()}")
        aliases = {resolver.resolve(c) for c in columns}
        if not aliases:
            raise UnsupportedSQLError(f"a predicate without columns is not supported: {conjunct.sql()}")
        if len(aliases) == 1:
            filters.append(Filter(aliases.pop(), conjunct))
        elif (isinstance(conjunct, exp.EQ) and isinstance(conjunct.this, exp.Column)
              and isinstance(conjunct.expression, exp.Column)):
            joins.append(JoinPredicate(
                ColumnRef(conjunct.this.table, conjunct.this.name.lower()),
                ColumnRef(conjunct.expression.table, conjunct.expression.name.lower()),
            ))
        else:
            raise UnsupportedSQLError(
                f"only equi-joins between two columns are supported across relations, got: {conjunct.sql()}")
    resolver.qualify_final_step(select)
    return Query(relations, joins, filters, select)


def _conjuncts(expression: exp.Expression) -> list[exp.Expression]:
    """The conjuncts of an AND tree, left to right (iteratively: a WHERE may AND thousands)."""
    out, todo = [], [expression]
    while todo:
        node = todo.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.And):
            todo += [node.expression, node.this]
        else:
            out.append(node)
    return out


def _first_error(exc: sqlglot.errors.ParseError) -> str:
    """The first parse error in reopt's words: where it is, what was expected, and the text around it.
    sqlglot's own description names its internal classes, which mean nothing to a user."""
    if not exc.errors:
        return "the statement is not valid SQL"
    error = exc.errors[0]
    found = str(error.get("highlight") or "")
    line, end = error.get("line") or 1, error.get("col") or 1
    column = max(1, end - len(found) + 1)
    description = str(error.get("description") or "")
    if description.startswith("Required keyword"):
        what = f"something is missing before or at {found!r}"
    elif description.startswith("Expecting "):
        what = f"expected {description[len('Expecting '):]} at {found!r}"
    elif description.startswith("Expected table name"):
        what = f"expected a table name at {found!r}"
    else:
        what = f"unexpected {found!r}" if found else "unexpected end of the statement"
    near = f"{error.get('start_context') or ''}{found}{error.get('end_context') or ''}".strip()
    return f"line {line}, column {column}: {what} (near: {near[-60:]!r})"


class _Resolver:
    """Qualifies each column with the relation it belongs to, in place."""

    def __init__(self, relations: list[tuple[str, str]], catalog: Catalog):
        self.relations = relations
        self.catalog = catalog
        self.aliases = {alias for alias, _ in relations}

    def qualify_final_step(self, select: exp.Select) -> None:
        """Qualify the columns of the select list, GROUP BY, HAVING and ORDER BY with their relation;
        names no relation has (aliases of the select list) stay as they are."""
        aliases = {e.alias.lower() for e in select.expressions if e.alias}
        for key in ("expressions", "group", "having", "order"):
            value = select.args.get(key)
            for part in value if isinstance(value, list) else [value] if value is not None else []:
                for column in part.find_all(exp.Column):
                    if column.table or any(self.catalog.has_column(t, column.name) for _, t in self.relations):
                        self.resolve(column)
                    elif column.name.lower() not in aliases:
                        raise UnsupportedSQLError(
                            f"no relation of the query has a column '{column.name[:60]}', and no item of the "
                            f"select list is named so (in {part.sql()[:80]})")

    def resolve(self, column: exp.Column) -> str:
        name = column.name.lower()
        qualifier = column.table.lower() if column.table else ""
        if qualifier:
            if qualifier not in self.aliases:
                raise UnsupportedSQLError(f"column {column.sql()} names an unknown relation '{qualifier}'")
            table = dict(self.relations)[qualifier]
            if not self.catalog.has_column(table, name):
                raise UnsupportedSQLError(f"table '{table}' has no column '{name}' (in {column.sql()})")
            alias = qualifier
        else:
            owners = [a for a, t in self.relations if self.catalog.has_column(t, name)]
            if not owners:
                raise UnsupportedSQLError(f"no relation of the query has a column '{name}'")
            if len(owners) > 1:
                raise UnsupportedSQLError(f"column '{name}' is ambiguous between {', '.join(owners)}; qualify it")
            alias = owners[0]
        column.set("table", exp.to_identifier(alias))
        column.set("this", exp.to_identifier(name))
        return alias
