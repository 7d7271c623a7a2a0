"""Statistics computed from data: one aggregation job per table (row count, and per column the
approximate distinct count and, for orderable types, min and max).

Widths are bytes as Spark sizes the table: its own size estimate (for files, the bytes on disk, so
compressed) over the rows, shared among the columns in proportion to their in-memory sizes
(``DataType.defaultSize``). Spark compares that same measure with its broadcast threshold, so a
build side reopt deems small enough to broadcast is one Spark would broadcast too. Where Spark has
no estimate (RDD-backed frames), widths are the in-memory sizes.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..optimizer.catalog import Catalog, ColumnStats, TableStats
from ..optimizer.query import ColumnRef
from ..optimizer.sql import parse_sql
from .catalyst import JoinRegion, key_column

# Bytes per value in memory (DataType.defaultSize): each column's share of the stored row.
_WIDTHS = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 4, T.LongType: 8, T.FloatType: 4, T.DoubleType: 8,
           T.DateType: 4, T.TimestampType: 8, T.BooleanType: 1, T.StringType: 20, T.BinaryType: 100}
_ORDERED = (T.NumericType, T.DateType, T.TimestampType)


def _width(data_type: T.DataType) -> int:
    if isinstance(data_type, T.DecimalType):
        return 8 if data_type.precision <= 18 else 16
    return _WIDTHS.get(type(data_type), 8)


def _plain(value):
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()[:10]
    return value


def _stored_bytes(spark: SparkSession, frame: DataFrame) -> float | None:
    """Spark's size estimate of the frame's data (``sizeInBytes`` of its optimized plan), or None
    where Spark has none (it then answers ``spark.sql.defaultSizeInBytes``, as for RDD-backed frames)."""
    size = frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
    unknown = spark._jsparkSession.sessionState().conf().defaultSizeInBytes()
    return float(size) if 0 < size < unknown else None


def catalog_from_spark(spark: SparkSession, tables: Mapping[str, DataFrame], sql: str | None = None,
                       dialect: str = "spark") -> Catalog:
    """A ``Catalog`` of the given DataFrames (``tables``: table name -> DataFrame), one job per table.
    With ``sql`` (one SELECT over those names, in sqlglot's ``dialect``), only the tables it reads
    are measured, and of each only the columns it uses: join keys, filtered columns and what its
    select list, grouping and ordering take (all of them under ``SELECT *``)."""
    used = None if sql is None else _used_columns(sql, tables, dialect)
    stats = {}
    for name, frame in tables.items():
        if used is not None and name.lower() not in used:
            continue
        wanted = None if used is None else used[name.lower()]
        fields = frame.schema.fields
        measured = [f for f in fields if wanted is None or f.name.lower() in wanted]
        aggregates = [F.count(F.lit(1)).alias("__rows")]
        for f in measured:
            aggregates.append(F.approx_count_distinct(F.col(f.name)).alias(f"ndv__{f.name}"))
            if isinstance(f.dataType, _ORDERED):
                aggregates += [F.min(f.name).alias(f"min__{f.name}"), F.max(f.name).alias(f"max__{f.name}")]
        row = frame.agg(*aggregates).collect()[0].asDict()
        rows = float(row["__rows"])
        in_memory = float(sum(_width(f.dataType) for f in fields)) or 1.0
        stored = _stored_bytes(spark, frame)
        width = stored / rows if stored is not None and rows else in_memory
        columns = {}
        for f in measured:
            columns[f.name.lower()] = ColumnStats(
                float(max(1, row[f"ndv__{f.name}"])),
                _plain(row.get(f"min__{f.name}")),
                _plain(row.get(f"max__{f.name}")),
                width=width * _width(f.dataType) / in_memory,
            )
        stats[name.lower()] = TableStats(rows, width, columns)
    return Catalog(stats)


def _used_columns(sql: str, tables: Mapping[str, DataFrame], dialect: str) -> dict[str, set[str] | None]:
    """Per table the statement reads, the columns it uses (None: all). The statement is resolved
    against the frames' schemas alone: a catalog whose statistics are placeholders, never returned."""
    schema = Catalog({name.lower(): TableStats(1.0, columns={f.name.lower(): ColumnStats(1.0)
                                                             for f in frame.schema.fields})
                      for name, frame in tables.items()})
    query = parse_sql(sql, schema, dialect)
    used: dict[str, set[str] | None] = {}
    for alias, table in query.relations:
        read = query.read_columns(alias)
        if table in used and used[table] is None:
            continue
        used[table] = None if read is None else used.get(table, set()) | read
    return used


def _big(value) -> float:
    """A Scala BigInt as py4j hands it over (a Python int, or a JVM object printing its digits)."""
    return float(str(value))


def _known_statistics(plan, attributes: Mapping[str, object]) -> tuple[float, dict[str, float]] | None:
    """Rows and key distinct counts as Spark already knows them for an input (the metastore's, from
    ``ANALYZE TABLE ... FOR COLUMNS``, carried through filters by Spark's cost-based estimation when
    ``spark.sql.cbo.enabled`` is on), or None if any is missing."""
    stats = plan.stats()
    if not stats.rowCount().isDefined():
        return None
    ndv = {}
    for column, attribute in attributes.items():
        column_stats = stats.attributeStats().get(attribute)
        if not column_stats.isDefined() or not column_stats.get().distinctCount().isDefined():
            return None
        ndv[column] = _big(column_stats.get().distinctCount().get())
    return _big(stats.rowCount().get()), ndv


def region_catalog(spark: SparkSession, region: JoinRegion) -> Catalog:
    """Statistics of a join region's inputs: what Spark already knows, else one aggregation job per
    input over its join keys only (rows after the input's own filters, distinct counts of its keys).
    Widths are in-memory row sizes (``DataType.defaultSize``), what shuffles and broadcasts move."""
    stats = {}
    for name, frame in region.inputs.items():
        attributes = region.keys[name]
        known = _known_statistics(region.plans[name], attributes)
        if known is None:
            aggregates = [F.count(F.lit(1)).alias("__rows")]
            aggregates += [F.approx_count_distinct(key_column(region, ColumnRef(name, column))).alias(f"ndv{i}")
                           for i, column in enumerate(attributes)]
            row = frame.agg(*aggregates).collect()[0]
            known = float(row["__rows"]), {column: float(row[f"ndv{i}"]) for i, column in enumerate(attributes)}
        rows, ndv = known
        output = region.plans[name].output()
        width = float(sum(output.apply(i).dataType().defaultSize() for i in range(output.size()))) or 1.0
        columns = {column: ColumnStats(max(1.0, ndv[column]), width=float(attribute.dataType().defaultSize()))
                   for column, attribute in attributes.items()}
        stats[name] = TableStats(rows, width, columns)
    return Catalog(stats)
