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
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..optimizer.catalog import Catalog, ColumnStats, TableStats
from ..optimizer.deltas import DeltaStats
from ..optimizer.estimate import Estimator
from ..optimizer.query import ColumnRef, Query
from ..optimizer.sql import parse_sql
from .catalyst import JoinRegion, key_column
from .execute import renamed_key, renamed_scan

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


STATISTICS = ("estimated", "exact")


class NotEstimated(Exception):
    """An input's statistics cannot be had without reading it in full; the message names it."""
SAMPLE_ROWS = 10_000  # rows read from the start of each input to estimate its filters and keys

# What was learnt of each input, for the session: (session, the input's canonical plan hash) ->
# (rows, distinct counts by key column name, how they were found)
_LEARNT: dict[tuple[int, int], tuple[float, dict[str, float], str]] = {}


def region_catalog(spark: SparkSession, region: JoinRegion, exact: bool = False) -> tuple[Catalog, str]:
    """Statistics of a join region's inputs, and in words where they came from.

    Each input's rows and key distinct counts come from what Spark already knows (``ANALYZE TABLE``
    with ``spark.sql.cbo.enabled``), else from what this session learnt of the same input before,
    else (``exact=False``) from the Parquet footers' row counts and one job over the first
    ``SAMPLE_ROWS`` rows of every such input at once (``sampled_statistics``), or (``exact=True``, or
    a plain input that is not Parquet files) from one aggregation job over the whole input. An input
    that is a query of its own (a subquery below the joins) raises ``NotEstimated`` unless
    ``exact``: counting it would run that query in full. Widths are
    in-memory row sizes (``DataType.defaultSize``), what shuffles and broadcasts move."""
    found: dict[str, tuple[float, dict[str, float], str]] = {}
    to_sample: dict[str, float] = {}
    session = id(spark._jsparkSession)
    for name in region.inputs:
        key = (session, region.plans[name].semanticHash())
        known = _known_statistics(region.plans[name], region.keys[name])
        if known is not None:
            found[name] = (*known, "ANALYZE TABLE")
        elif key in _LEARNT and (not exact or _LEARNT[key][2] == "counted"):
            rows, ndv, how = _LEARNT[key]
            found[name] = (rows, ndv, f"{how}, remembered")
        else:
            footer_rows = None if exact else parquet_rows(spark, region.plans[name])
            if footer_rows is not None:
                to_sample[name] = footer_rows
            elif exact or _chain(region.plans[name]) is not None:
                found[name] = (*_counted(region, name), "counted")
                _LEARNT[key] = found[name]
            else:
                raise NotEstimated(f"input {name} is a query of its own (a subquery or a join Catalyst put below "
                                   "the joins): estimating it would read it in full; plan with statistics='exact' "
                                   "to count it")
    if to_sample:
        for name, (rows, ndv) in sampled_statistics(spark, region, to_sample).items():
            found[name] = (rows, ndv, "Parquet footers and a sample")
            _LEARNT[(session, region.plans[name].semanticHash())] = found[name]
    stats = {}
    for name in region.inputs:
        rows, ndv, _how = found[name]
        attributes = region.keys[name]
        output = region.plans[name].output()
        width = float(sum(output.apply(i).dataType().defaultSize() for i in range(output.size()))) or 1.0
        columns = {column: ColumnStats(max(1.0, ndv[column]), width=float(attribute.dataType().defaultSize()))
                   for column, attribute in attributes.items()}
        stats[name] = TableStats(max(1.0, rows), width, columns)
    sources: dict[str, list[str]] = {}
    for name in region.inputs:
        sources.setdefault(found[name][2], []).append(name)
    return Catalog(stats), "; ".join(f"{how} ({', '.join(names)})" for how, names in sources.items())


def _counted(region: JoinRegion, name: str) -> tuple[float, dict[str, float]]:
    """One aggregation job over the whole input: rows after its filters, distinct counts of its keys."""
    attributes = region.keys[name]
    aggregates = [F.count(F.lit(1)).alias("__rows")]
    aggregates += [F.approx_count_distinct(key_column(region, ColumnRef(name, column))).alias(f"ndv{i}")
                   for i, column in enumerate(attributes)]
    row = region.inputs[name].agg(*aggregates).collect()[0]
    return float(row["__rows"]), {column: float(row[f"ndv{i}"]) for i, column in enumerate(attributes)}


def _chain(plan) -> list:
    """The single-child operators from ``plan`` down to its leaf, leaf last; None if it branches."""
    chain = [plan]
    while chain[-1].children().size() == 1:
        chain.append(chain[-1].children().apply(0))
    return chain if chain[-1].children().size() == 0 else None


def parquet_rows(spark: SparkSession, plan) -> float | None:
    """The rows of the Parquet files under an input's plan, from their footers (no data read); None if
    the input is not a chain of operators over Parquet files."""
    chain = _chain(plan)
    if chain is None or chain[-1].nodeName() != "LogicalRelation":
        return None
    relation = chain[-1].relation()
    try:
        if "Parquet" not in relation.fileFormat().toString():
            return None
        files = relation.location().inputFiles()
    except Exception:  # py4j: a relation other than files (JDBC, in-memory) has no such accessors
        return None
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    total = 0
    for path in files:
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
            jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(jvm.org.apache.hadoop.fs.Path(path), conf))
        try:
            total += reader.getRecordCount()
        finally:
            reader.close()
    return float(total)


def sampled_statistics(spark: SparkSession, region: JoinRegion,
                       footer_rows: dict[str, float]) -> dict[str, tuple[float, dict[str, float]]]:
    """Rows after the filters and key distinct counts of the given inputs (name -> rows in its files),
    from their first ``SAMPLE_ROWS`` rows: one small job per input, all at once.

    An input's rows are its files' rows times the share of the sample its filters keep. A key whose
    sampled values are all distinct is taken as a key of the input (distinct count = rows); any
    other key's distinct count is the GEE estimate, sqrt(rows / sampled) x (values seen once) +
    (values seen more often), whose error is bounded by the square root of the sampling ratio.
    The sample is the start of the input, not a random one: data sorted on a filtered column skews it."""
    with ThreadPoolExecutor(max_workers=max(1, len(footer_rows))) as pool:
        futures = {name: pool.submit(_sample, spark, region, name, total) for name, total in footer_rows.items()}
        return {name: future.result() for name, future in futures.items()}


def _sample(spark: SparkSession, region: JoinRegion, name: str, total: float) -> tuple[float, dict[str, float]]:
    chain = _chain(region.plans[name])
    sampled = min(float(SAMPLE_ROWS), total)
    limited = _frame_of(spark, chain[-1]).limit(SAMPLE_ROWS)._jdf.queryExecution().analyzed()
    to_seq = spark._jvm.org.apache.spark.api.python.PythonUtils.toSeq
    for node in reversed(chain[:-1]):
        limited = node.withNewChildren(to_seq([limited]))
    columns = list(region.keys[name])
    kept = _frame_of(spark, limited).select([F.hash(key_column(region, ColumnRef(name, c))) for c in columns])
    values = kept.collect()
    n = float(len(values))
    rows = n if sampled >= total else total * max(n, 0.5) / sampled  # half a row: a filter no sampled row passed
    ndv = {}
    for j, column in enumerate(columns):
        counts = Counter(row[j] for row in values)
        d, f1 = float(len(counts)), float(sum(1 for c in counts.values() if c == 1))
        if n == 0 or n >= rows:
            ndv[column] = max(d, 1.0)
        elif f1 == n:
            ndv[column] = rows
        else:
            ndv[column] = min(rows, math.sqrt(rows / n) * f1 + (d - f1))
    return max(rows, 1.0), ndv


def _frame_of(spark: SparkSession, plan) -> DataFrame:
    dataset = spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan)
    return DataFrame(dataset, spark)



EXPLOSION = 50  # a join estimated at more than this many times its largest input is not counted


def static_join_sizes(query: Query, tables: Mapping[str, DataFrame], catalog: Catalog, changing: set[str],
                      limit: int = 32) -> DeltaStats:
    """The true sizes of the joins among tables that do not change from batch to batch, one count
    job each, so that a stream's skew is never credited to them: every connected set of two or more
    relations of ``query`` whose tables are not in ``changing``, smallest first, at most ``limit``.
    A join estimated at more than ``EXPLOSION`` times its largest input (a join on a key with few
    values, which no good plan runs) keeps its estimate: counting it would take Spark minutes."""
    estimate = Estimator(query, catalog)
    static = query.mask(alias for alias, table in query.relations if table not in changing)
    masks = [m for m in query.connected_subsets() if m & static == m and not query.is_leaf(m)
             and estimate.rows(m) <= EXPLOSION * max(estimate.rows(query.mask([a])) for a in query.names(m))]
    masks.sort(key=lambda m: (m.bit_count(), m))
    sizes = []
    for mask in masks[:limit]:
        sizes.append(DeltaStats.cardinality(query.names(mask), max(1, _joined(query, tables, mask).count())))
    return DeltaStats.batch(sizes)


def _joined(query: Query, tables: Mapping[str, DataFrame], mask: int) -> DataFrame:
    """The join of the relations in ``mask`` with their filters, in an order that follows the join
    graph (no cross products)."""
    scan = renamed_scan(query, tables)
    aliases = query.names(mask)
    done = query.bit(aliases[0])
    frame = scan(aliases[0])
    while done != mask:
        alias = next(a for a in aliases if not query.bit(a) & done and query.joins_between(done, query.bit(a)))
        condition = None
        for p in query.joins_between(done, query.bit(alias)):
            term = renamed_key(p.left) == renamed_key(p.right)
            condition = term if condition is None else condition & term
        frame = frame.join(scan(alias), condition, "inner")
        done |= query.bit(alias)
    return frame
