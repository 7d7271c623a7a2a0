"""Queries to optimize, shipped as package data: TPC-H Q3, Q5, Q8, Q9, Q10 and the reference paper's Q8Join
(reopt/queries/*.sql), the 113 Join Order Benchmark queries with IMDB statistics (reopt/queries/job/),
and generated join graphs of every shape with random statistics."""

from __future__ import annotations

import random
from importlib import resources

from .catalog import Catalog, ColumnStats, TableStats
from .query import Query

QUERIES = resources.files("reopt") / "queries"

# TPC-H Q3, Q5, Q10 as in the specification; Q8 and Q9 with their derived table flattened into the
# outer query (the same rows: the derived table only names expressions the outer query groups and
# sums); and Q8Join from Table 5 of the reference paper.
TPCH = {name: (QUERIES / f"{name.lower()}.sql").read_text(encoding="utf-8")
        for name in ("Q3", "Q5", "Q8", "Q9", "Q10", "Q8Join")}

JOB = QUERIES / "job"

# Every JOB query's name, in the benchmark's order: 1a, 1b, ..., 33c.
JOB_NAMES = tuple(sorted((entry.name[:-4] for entry in JOB.iterdir() if entry.name.endswith(".sql")),
                         key=lambda name: (int(name[:-1]), name[-1])))


def job_sql(name: str) -> str:
    """The SQL text of Join Order Benchmark query ``name`` (``"1a"`` to ``"33c"``)."""
    if name not in JOB_NAMES:
        raise ValueError(f"no Join Order Benchmark query {name!r}; they are {JOB_NAMES[0]} to {JOB_NAMES[-1]}")
    return (JOB / f"{name}.sql").read_text(encoding="utf-8")


def job_catalog() -> Catalog:
    """Statistics of the IMDB tables the Join Order Benchmark reads: real row counts, estimated
    distinct counts and widths (reopt/queries/job/SOURCE.md says how they were made)."""
    with resources.as_file(JOB / "imdb_stats.json") as path:
        return Catalog.load(path)


SHAPES = ("chain", "star", "cycle", "clique", "random")


def shape_edges(shape: str, n: int, rng: random.Random) -> list[tuple[int, int]]:
    """Edges (i, j), i < j, of a connected join graph of ``n`` relations."""
    if n < 1:
        raise ValueError("a join graph needs at least one relation")
    if shape == "chain":
        return [(i, i + 1) for i in range(n - 1)]
    if shape == "star":
        return [(0, i) for i in range(1, n)]
    if shape == "cycle":
        return [(i, i + 1) for i in range(n - 1)] + ([(0, n - 1)] if n > 2 else [])
    if shape == "clique":
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    if shape == "random":
        edges = {(rng.randrange(i), i) for i in range(1, n)}  # a random spanning tree
        for i in range(n):
            for j in range(i + 1, n):
                if rng.random() < 0.3:
                    edges.add((i, j))
        return sorted(edges)
    raise ValueError(f"unknown shape {shape!r}; shapes: {', '.join(SHAPES)}")


def generated(shape: str, n: int, seed: int = 0) -> tuple[Query, Catalog]:
    """A join graph of the given shape over tables t0..t{n-1} with random statistics.

    Every edge (i, j) joins ``t{i}.k{j}`` with ``t{j}.k{i}``; tables have 10 to 10^6 rows, widths of
    20 to 200 bytes, and key columns whose distinct counts lie between 1 and the table's rows.
    """
    rng = random.Random(seed)
    edges = shape_edges(shape, n, rng)
    tables: dict[str, TableStats] = {}
    for i in range(n):
        rows = float(round(10 ** rng.uniform(1, 6)))
        tables[f"t{i}"] = TableStats(rows, float(rng.randint(20, 200)), {})
    for i, j in edges:
        for a, b in ((i, j), (j, i)):
            rows = tables[f"t{a}"].rows
            ndv = float(max(1, round(rows ** rng.uniform(0.3, 1.0))))
            tables[f"t{a}"].columns[f"k{b}"] = ColumnStats(ndv, 0, ndv)
    builder = Query.builder()
    for i in range(n):
        builder.table(f"t{i}")
    for i, j in edges:
        builder.join(f"t{i}.k{j}", f"t{j}.k{i}")
    return builder.build(), Catalog(tables)
