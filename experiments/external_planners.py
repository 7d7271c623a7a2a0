"""What a user would plan the Join Order Benchmark with instead: DuckDB and Spark's CBO, planning only.

Both read the IMDB schema with ``job_catalog``'s statistics and plan each query from scratch; nothing is
executed. They search different spaces than reopt, which enumerates every bushy tree with Spark's
join strategies, build sides and partitioning properties, exactly:

* DuckDB (``EXPLAIN (FORMAT json)``; the boxes of the text format take longer to draw than the
  planning): DPhyp, exact below its threshold of 12 relations, greedy above, over join
  orders with hash joins. Its tables are empty (the IMDB data is not shipped); DuckDB's join order
  search enumerates the same pairs whatever the row counts, and the optimizers that would fold a plan
  over empty tables into an empty result are switched off, so that the join order search runs in full.
  Timed as the process's CPU seconds, on one thread.
* Spark's CBO join reordering (``spark.sql.cbo.joinReorder.enabled``): dynamic programming over
  left-deep and bushy orders up to ``spark.sql.cbo.joinReorder.dp.threshold`` (12) relations, then
  none. Its tables hold the IMDB's rows scaled down (``SPARK_SCALE``) and are analyzed, so that the
  reordering has row counts and distinct counts in the IMDB's proportions; planning reads only those
  numbers, never the rows. Timed on the wall clock (the planning runs in the JVM): the optimized
  logical plan only, the step that reorders joins.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable

# Spark's tables hold the IMDB rows, and each column its distinct values, divided by this, so that
# ANALYZE TABLE gives the reordering row counts and distinct counts in the IMDB's proportions.
SPARK_SCALE = 1000
INTEGER_COLUMNS = {"id", "production_year", "season_nr", "episode_nr", "nr_order", "imdb_id"}
# DuckDB optimizers that replace a plan over empty tables by an empty result before the join order
# search would see it.
DUCKDB_EMPTY_FOLDING = ("empty_result_pullup", "statistics_propagation", "join_elimination")


def column_type(column: str, text: str) -> str:
    return "INTEGER" if column in INTEGER_COLUMNS or column.endswith("_id") else text


def imdb_schema(catalog, text: str) -> dict[str, list[tuple[str, str]]]:
    """Every IMDB table's columns with their SQL types, strings as ``text``."""
    return {name: [(column, column_type(column, text)) for column in table.columns]
            for name, table in sorted(catalog.tables.items())}


def median_seconds(plan: Callable[[], object], repeat: int, clock: Callable[[], float]) -> float:
    """The median time, on ``clock``, of ``repeat`` calls of ``plan``."""
    times = []
    for _ in range(repeat):
        start = clock()
        plan()
        times.append(clock() - start)
    return statistics.median(times)


def duckdb_sql(sql: str) -> str:
    """The query as DuckDB reads it: JOB's alias ``at`` (aka_title) is a keyword there, so it is quoted."""
    sql = re.sub(r"\bAS at\b", 'AS "at"', sql.rstrip().rstrip(";"))
    return re.sub(r"\bat\.", '"at".', sql)


class DuckDBPlanner:
    """DuckDB planning the JOB queries over the empty IMDB schema."""

    def __init__(self, catalog) -> None:
        import duckdb

        self.version = duckdb.__version__
        self.refusals: tuple[type[Exception], ...] = (duckdb.Error,)  # a query DuckDB cannot plan
        self.connection = duckdb.connect(config={"threads": 1})
        available = {row[0] for row in self.connection.execute("SELECT name FROM duckdb_optimizers()").fetchall()}
        disabled = [name for name in DUCKDB_EMPTY_FOLDING if name in available]
        self.connection.execute(f"SET disabled_optimizers = '{','.join(disabled)}'")
        for table, columns in imdb_schema(catalog, "VARCHAR").items():
            body = ", ".join(f"{column} {kind}" for column, kind in columns)
            self.connection.execute(f"CREATE TABLE {table} ({body})")

    def plan(self, sql: str) -> str:
        """The physical plan DuckDB chose, as ``EXPLAIN (FORMAT json)`` prints it."""
        rows = self.connection.execute(f"EXPLAIN (FORMAT json) {duckdb_sql(sql)}").fetchall()
        return "\n".join(row[1] for row in rows)

    def joins(self, sql: str) -> int:
        """How many joins the plan holds: a check that the query was planned, not folded away."""
        plan = self.plan(sql)
        return sum(plan.count(f'"{name}"') for name in ("HASH_JOIN", "NESTED_LOOP_JOIN", "PIECEWISE_MERGE_JOIN"))

    def seconds(self, sql: str, repeat: int) -> float:
        """The median CPU seconds of planning ``sql`` from scratch, over ``repeat`` runs."""
        return median_seconds(lambda: self.plan(sql), repeat, time.process_time)

    def close(self) -> None:
        self.connection.close()


class SparkCBOPlanner:
    """Spark's cost-based join reordering, planning the JOB queries over statistics only."""

    def __init__(self, catalog) -> None:
        import tempfile

        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
        from pyspark.sql import SparkSession

        self.refusals: tuple[type[Exception], ...] = (PySparkException, Py4JError)  # a query Spark cannot plan
        self.warehouse = tempfile.TemporaryDirectory(prefix="reopt-bench-job-")
        self.spark = (SparkSession.builder.master("local[1]").appName("reopt-bench-job")
                      .config("spark.sql.warehouse.dir", self.warehouse.name)
                      .config("spark.ui.enabled", "false")
                      .config("spark.sql.cbo.enabled", "true")
                      .config("spark.sql.cbo.joinReorder.enabled", "true")
                      .config("spark.sql.cbo.planStats.enabled", "true")
                      .config("spark.sql.shuffle.partitions", "1")
                      .config("spark.driver.memory", "2g")
                      .getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        self.version = self.spark.version
        for table, columns in imdb_schema(catalog, "STRING").items():
            stats = catalog.table(table)
            rows = max(1, int(stats.rows) // SPARK_SCALE)
            columns_sql = []
            for column, kind in columns:
                distinct = stats.columns[column].ndv if column in stats.columns else stats.rows
                values = "id" if column == "id" else f"id % {max(1, int(distinct) // SPARK_SCALE)}"
                columns_sql.append(f"CAST({values} AS {kind}) AS {column}")
            self.spark.range(rows).selectExpr(*columns_sql).write.format("parquet").saveAsTable(table)
            self.spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS FOR ALL COLUMNS")

    def optimized(self, sql: str):
        return self.spark.sql(sql.rstrip().rstrip(";"))._jdf.queryExecution().optimizedPlan()

    def joins(self, sql: str) -> int:
        return str(self.optimized(sql).toString()).count("Join ")

    def seconds(self, sql: str, repeat: int) -> float:
        """The median wall seconds of planning ``sql`` from scratch (a new DataFrame each time)."""
        return median_seconds(lambda: self.optimized(sql), repeat, time.perf_counter)

    def close(self) -> None:
        self.spark.stop()
        self.warehouse.cleanup()


PLANNERS = {"duckdb": DuckDBPlanner, "spark_cbo": SparkCBOPlanner}
