"""Adaptive runners: run a query batch after batch with the current plan, feed what Spark observed
back to the optimizer, and use the re-optimized plan for the next batch.

* ``run_partitions``: the same query over successive partitions of a table (the reference paper's
  prepared-statement setting);
* ``run_stream``: a Structured Streaming query whose ``foreachBatch`` runs each micro-batch with the
  current plan (file source, ``trigger(availableNow=True)`` so runs are deterministic).

With ``adaptive=False`` the initial plan is kept throughout: the yardstick for the adaptive run.

A plan chosen from the previous batch's statistics can meet data it was not chosen for: when the
data drifts, a join input estimated small may be large, and a hash table built on it can exhaust
memory. A batch whose plan fails in Spark runs again in the same join order with sort-merge joins
(which spill to disk), its record says so, and its join cardinalities still feed back, so the next
plan knows the new sizes. Only a batch that fails that way too raises.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import OptimizerError, QueryError
from ..optimizer.optimizer import Optimizer
from ..optimizer.plan import Plan
from ..optimizer.plan_space import SORT_MERGE_JOIN
from .execute import execute
from .feedback import (DEFAULT_HALF_LIFE, DEFAULT_MODEL_ERROR, DEFAULT_SWITCH_MARGIN, ObservedSizes, PlanJudge,
                       input_rows, observed_delta)
from .metrics import executed_tree_of
from .sampling import JoinSampler
from .spark_plan import NoSparkPlan, alias_owners, spark_plan, spark_sql_frame
from .stages import StageListener, cost_factor_feedback, stage_operators
from .state_folder import StateFolder
from .statistics import static_join_sizes

log = logging.getLogger(__name__)


@dataclass
class BatchRecord:
    batch: int
    plan: str  # compact join order of the plan this batch ran with
    changed: bool  # whether this batch ran a different plan from the batch before it
    reopt_s: float
    batch_s: float
    input_rows: int | None
    result: list
    trigger_s: float | None = None  # Spark's own duration of the micro-batch (streams only)
    stages: int | None = None  # stages whose times were fed back (with a stage listener)
    key: str = ""  # Plan.key() of the plan this batch ran with
    retried: bool = False  # the plan failed in Spark; the batch ran again with sort-merge joins
    why: str = ""  # for a batch that ran a new plan: what moved, and the saving predicted for it
    sample_s: float = 0.0  # of reopt_s: measuring the batch's sample before planning it
    spark_plan: bool = False  # the batch ran Spark's own plan of the query (its SQL, no hints)
    model_ratio: float | None = None  # measured seconds over the cost model's core-s for this plan


class AdaptiveRunner:
    """Runs batches of a query whose table ``stream`` changes from batch to batch.

    With ``window=(table, n)``, ``table`` holds the previous ``n`` batches of the stream (a windowed
    self-join, as in Linear Road's SegTollS); the runner keeps them cached and tells the optimizer
    their size. With a ``stage_listener`` (attached), each batch's stage times also feed back, as cost
    factors.

    ``reoptimize_every`` re-optimizes after every n-th batch only, from that batch's observations:
    the plan then stays for n batches (the reference paper's "frequency of adaptation").

    ``sample_rows`` (0: off) plans each batch for itself: before it runs, a ``JoinSampler`` measures
    every join of the stream with the static tables on the batch's first ``sample_rows`` rows, and
    the runner re-optimizes with those sizes and what the batch before it observed. The first
    batch after the data drifts then runs a plan chosen for the new data, and a join the plan does
    not run is measured all the same. It costs one small Spark job per batch, and the static
    tables' key frequencies once (``setup_s``). Joins the sampler cannot measure (with the window,
    or past its work limit) still learn from execution; those observations wait for the next
    batch's re-optimization, so a state saved in ``state_dir`` does not hold them yet.

    Plan choices answer to the time Spark spends (``feedback.PlanJudge``): every batch's measured
    time is compared with what the model predicted for its plan on that batch's observations, and a
    plan replaces the running one only if it is expected cheaper by more than the model's error
    (``model_error`` until measurements say otherwise) or, between two measured plans, by more than
    ``switch_margin`` (0: any saving). Spark's own plan of the query (``spark_plan=True``, for a
    query built from SQL) is a candidate like reopt's: the first batch runs it, as the measured
    baseline, unless reopt's plan is predicted to take less than half its time
    (``feedback.STRONG_SAVING``), and a plan that then measures slower than the plan it replaced is
    taken back. Join sizes are summarized over recent batches with a
    ``half_life`` in batches (0: the last batch alone). With ``size_static_joins`` (the default), the
    joins among the static tables alone are counted once before the first batch (``setup_s``;
    ``statistics.static_join_sizes``), so the stream's skew is credited to the stream's own joins.
    ``trust_model=True`` leaves decisions to the
    cost model alone: reopt's best plan replaces the running one when predicted cheaper by more
    than ``switch_margin``, Spark's plan is not a candidate and measured times are not consulted.

    With ``state_dir`` (a folder, best kept beside the stream's checkpoint), the runner saves its
    optimizer and running plan there after every batch, and a runner started on a folder that holds
    a state resumes from it: ``optimizer`` gives the query and configuration, the folder the
    statistics learnt (``state_folder``). The judge's measurements start afresh after a restart.
    """

    def __init__(self, optimizer: Optimizer, spark: SparkSession, static_tables: Mapping[str, DataFrame],
                 stream: str, adaptive: bool = True, on_batch: Callable[[BatchRecord], None] | None = None,
                 stage_listener: StageListener | None = None, window: tuple[str, int] | None = None,
                 switch_margin: float = DEFAULT_SWITCH_MARGIN, state_dir: str | Path | None = None,
                 reoptimize_every: int = 1, sample_rows: int = 0, spark_plan: bool = True,
                 model_error: float = DEFAULT_MODEL_ERROR, half_life: float = DEFAULT_HALF_LIFE,
                 trust_model: bool = False, size_static_joins: bool = True):
        query = optimizer.query
        tables = {table for _alias, table in query.relations}
        for name in [stream] + ([window[0]] if window else []):
            if name not in tables:
                raise QueryError(f"'{name}' is not a table of the query (tables: {', '.join(sorted(tables))})")
        if window is not None and window[1] < 1:
            raise QueryError(f"a window holds at least one batch, not {window[1]}")
        if isinstance(reoptimize_every, bool) or not isinstance(reoptimize_every, int) or reoptimize_every < 1:
            raise OptimizerError(f"reoptimize_every is a number of batches, at least 1, got {reoptimize_every!r}")
        if isinstance(sample_rows, bool) or not isinstance(sample_rows, int) or sample_rows < 0:
            raise OptimizerError(f"sample_rows is a number of rows (0: no sampling), got {sample_rows!r}")
        if window is not None and state_dir is not None:
            raise OptimizerError("a windowed runner cannot keep its state in a folder: the window's batches live in "
                                 "Spark's cache and would be lost on a restart; leave out state_dir or window")
        self.judge = PlanJudge(self._costed, switch_margin, 0.0 if trust_model else model_error)
        self.trust_model = trust_model
        self.sizes = ObservedSizes(query, stream, half_life)
        self.reoptimize_every = reoptimize_every
        self.state = None if state_dir is None else StateFolder(state_dir)
        saved: dict = {}
        if self.state is not None:
            optimizer, saved = self.state.resume(optimizer)
        self.optimizer = optimizer
        self.spark = spark
        self.static_tables = dict(static_tables)
        self.stream = stream
        self.adaptive = adaptive
        self.on_batch = on_batch
        self.stage_listener = stage_listener
        self.window = window
        self._recent: deque[tuple[DataFrame, int]] = deque()
        resumed_plan = StateFolder.plan(saved.get("plan"), optimizer)
        self.setup_s = 0.0  # sizing the static joins and building the sampler, before the first batch
        if adaptive and size_static_joins and resumed_plan is None:
            start = time.perf_counter()
            changing = {table for _alias, table in query.relations if table not in self.static_tables}
            sizes = static_join_sizes(query, self.static_tables, optimizer.catalog, changing)
            if len(sizes):
                optimizer.reoptimize(sizes)
            self.setup_s += time.perf_counter() - start
        self.plan = resumed_plan or optimizer.optimize()
        self._resumed = resumed_plan is not None
        self.runs_spark_plan = bool(saved.get("spark_plan")) and self._resumed  # Spark's own plan runs
        # Spark's own plan is read from the first batch, before it runs; None: not a candidate
        self._consider_spark = adaptive and spark_plan and not trust_model and query.select is not None
        self.spark_plan: Plan | None = None
        self._unjudged: tuple[Plan, bool, int] | None = None  # a sampled run's last batch, until re-optimized
        self.records: list[BatchRecord] = []
        self._last_key: str | None = saved.get("last_key")  # the plan the last batch ran
        self._last_spark = bool(saved.get("last_spark"))  # and whether it ran as Spark's own plan
        self._why = ""  # why self.plan replaced the plan before it
        self.resumed_after: int | None = saved.get("batch")  # the last batch the saved state had seen
        self.sampler: JoinSampler | None = None
        if adaptive and sample_rows:
            start = time.perf_counter()
            self.sampler = JoinSampler(query, self.static_tables, stream, rows=sample_rows)
            self.setup_s += time.perf_counter() - start
        self._pending = DeltaStats()  # observations of the batch before, applied with the next sample
        self._stream_rows = optimizer.catalog.table(stream).rows  # the stream's rows in the last batch

    def _costed(self, plan: Plan, within_limits: bool = True) -> Plan | None:
        return self.optimizer.costed(plan, within_limits)

    def _window_frame(self, batch: DataFrame) -> DataFrame:
        if not self._recent:
            return batch.limit(0)
        return functools.reduce(DataFrame.unionByName, [frame for frame, _rows in self._recent])

    def _remember(self, kept: DataFrame, rows: int) -> None:
        self._recent.append((kept, rows))
        while len(self._recent) > self.window[1]:
            self._recent.popleft()[0].unpersist()

    def _reoptimizes(self, batch_index: int) -> bool:
        """Whether the plan is re-optimized at this batch: before it with a sampler, after it without."""
        if not self.adaptive:
            return False
        if self.sampler is not None:
            return batch_index % self.reoptimize_every == 0
        return (batch_index + 1) % self.reoptimize_every == 0

    def _plan_for(self, batch: DataFrame) -> tuple[float, float]:
        """Re-optimize for ``batch`` from a sample of it and the observations held back; the time
        taken in all, and by the sample."""
        start = time.perf_counter()
        sizes = self.sampler.measure(batch)
        sample_s = time.perf_counter() - start
        rows = sizes.sampled if 0 < sizes.sampled < self.sampler.rows else self._stream_rows  # all of it read
        feedback = self._pending + sizes.delta(rows)
        self._pending = DeltaStats()
        if len(feedback):
            best = self.optimizer.reoptimize(feedback)
            if self._unjudged is not None and not self.trust_model:
                plan, spark, index = self._unjudged
                record = self.records[index]
                record.model_ratio = self.judge.record(plan, spark, record.batch_s, record.input_rows)
            self._choose(best)
        self._unjudged = None
        return time.perf_counter() - start, sample_s

    def _read_spark_plan(self, tables: Mapping[str, DataFrame]) -> None:
        """Spark's own plan of the query over this batch's tables, and the first choice between it and
        reopt's best."""
        self._consider_spark = False
        start = time.perf_counter()
        try:
            frame = spark_sql_frame(self.optimizer.query, tables, tables[self.stream].sparkSession)
            self.spark_plan = spark_plan(frame, self.optimizer.query, alias_owners(frame, self.optimizer.query))
        except NoSparkPlan as exc:
            log.info("Spark's own plan is not a candidate: %s", exc)
        if self._resumed:  # the saved state chose the running plan already
            return
        verdict = self.judge.first(self.plan, self.spark_plan, measure_first=True)
        self.plan, self.runs_spark_plan = verdict.plan, verdict.spark
        self._why = verdict.why
        log.info("first plan: %s (%.0f ms to read Spark's)", verdict.why, 1e3 * (time.perf_counter() - start))

    def run_batch(self, batch: DataFrame, batch_id: int) -> BatchRecord:
        reoptimizing = self._reoptimizes(len(self.records))
        tables = {**self.static_tables}
        if self.window is not None:
            tables[self.window[0]] = self._window_frame(batch)
            batch = batch.persist()  # cached by this batch's own scan, read again by the next windows
        tables[self.stream] = batch
        query = self.optimizer.query
        spark_s = 0.0
        if self._consider_spark:
            start = time.perf_counter()
            self._read_spark_plan(tables)
            spark_s = time.perf_counter() - start
        planned_s, sample_s = self._plan_for(batch) if reoptimizing and self.sampler is not None else (0.0, 0.0)
        planned_s += spark_s
        ran_plan, ran_spark = self.plan, self.runs_spark_plan
        executed_order = ("Spark: " if ran_spark else "") + ran_plan.join_order()
        executed_key = ran_plan.key()
        changed = self._last_key is not None and (executed_key, ran_spark) != (self._last_key, self._last_spark)
        self._last_key, self._last_spark = executed_key, ran_spark
        why = self._why if changed or not self.records else ""
        start = time.perf_counter()
        if ran_spark:
            frame = spark_sql_frame(query, tables, batch.sparkSession)
            relation_of = alias_owners(frame, query)
        else:
            frame, relation_of = execute(ran_plan, tables), None
        tag = f"{id(self)}-{batch_id}"
        retried = False
        try:
            result = self._collect(frame, tag)
        except (Py4JJavaError, CapturedException) as error:  # Spark raises either, by error class
            if ran_spark:
                raise
            log.warning("batch %s failed with plan %s (%s); running it again with sort-merge joins",
                        batch_id, executed_order, _reason(error))
            if self.stage_listener is not None:
                self.stage_listener.stages(tag)  # the failed attempt's stages: discarded
            frame = execute(ran_plan, tables, join_strategy=SORT_MERGE_JOIN)
            result = [tuple(row) for row in frame.collect()]
            retried = True
        batch_s = time.perf_counter() - start
        tree = executed_tree_of(frame._jdf.queryExecution().executedPlan(), query, relation_of)
        rows_in = input_rows(tree, query, self.stream)
        if self.window is not None:
            self._remember(batch, rows_in if rows_in is not None else batch.count())
        reopt_s, stage_count, ratio = planned_s, None, None
        if rows_in is not None:
            self._stream_rows = max(1, rows_in)
        if self.stage_listener is not None and (not self.adaptive or ran_spark or retried):
            self.stage_listener.stages(tag)  # stage times of reopt's own chosen plan only are fed back
        if self.adaptive:
            start = time.perf_counter()
            feedback = self.sizes.summarize(observed_delta(tree, query, self.stream), rows_in)
            if self.sampler is not None:  # the next batch's sample measures these again
                feedback = feedback.without_cardinalities(query.names(mask) for mask in self.sampler.expressions)
            if self.window is not None:
                window_rows = sum(rows for _frame, rows in self._recent)
                feedback = feedback + DeltaStats.table(self.window[0], rows=max(1, window_rows))
            if self.stage_listener is not None and not retried and not ran_spark:
                stages = self.stage_listener.stages(tag)
                stage_count = len(stages)
                feedback = feedback + cost_factor_feedback(
                    ran_plan, stages, stage_operators(frame._jdf.queryExecution().executedPlan()),
                    self.optimizer.catalog.cost_factors)
            if self.sampler is not None:
                self._pending = self._pending + feedback
                self._unjudged = None if retried else (ran_plan, ran_spark, len(self.records))
            elif reoptimizing:
                best = self.optimizer.reoptimize(feedback)
                if not retried and not self.trust_model:
                    ratio = self.judge.record(ran_plan, ran_spark, batch_s, rows_in)
                self._choose(best)
            if reoptimizing and self.sampler is None:
                reopt_s += time.perf_counter() - start
        if self.state is not None:
            start = time.perf_counter()
            self.state.save(self.optimizer, {"plan": self.plan.to_dict(), "spark_plan": self.runs_spark_plan,
                                             "last_key": executed_key, "last_spark": ran_spark,
                                             "batch": batch_id})
            reopt_s += time.perf_counter() - start
        record = BatchRecord(batch_id, executed_order, changed, reopt_s, batch_s, rows_in, result,
                             stages=stage_count, key=executed_key, retried=retried, why=why, sample_s=sample_s,
                             spark_plan=ran_spark, model_ratio=ratio)
        self.records.append(record)
        if self.on_batch is not None:
            self.on_batch(record)
        return record

    def _choose(self, best: Plan) -> None:
        """The plan for the next batch: the judge's choice among the running plan, ``best``, Spark's
        own and the plans tried before."""
        verdict = self.judge.choose(self.plan, self.runs_spark_plan, best, self.spark_plan)
        if verdict.changed:
            change = self.optimizer.last_change
            moved = change.moved() if change is not None else "new statistics"
            self._why = f"{verdict.why}; {moved}"
            log.info("new plan %s: %s", verdict.plan.join_order(), self._why)
        self.plan, self.runs_spark_plan = verdict.plan, verdict.spark

    def _collect(self, frame: DataFrame, tag: str) -> list[tuple]:
        if self.stage_listener is None:
            return [tuple(row) for row in frame.collect()]
        with self.stage_listener.tagged(tag):
            return [tuple(row) for row in frame.collect()]


def _reason(error: Exception) -> str:
    """The first line of the JVM's innermost cause: a Py4JJavaError's own first line only names the
    py4j call, and Spark wraps failed stages (e.g. STAGE_MATERIALIZATION_MULTIPLE_FAILURES)."""
    if isinstance(error, Py4JJavaError):
        cause = error.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        text = str(cause.toString())
    else:
        text = str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def run_partitions(runner: AdaptiveRunner, partitions: Iterable[DataFrame]) -> list[BatchRecord]:
    """The prepared-statement setting: the query over each partition in turn."""
    for index, partition in enumerate(partitions):
        runner.run_batch(partition, index)
    return runner.records


class ProgressListener(StreamingQueryListener):
    """Collects Spark's progress of one streaming query: input rows and trigger time per micro-batch."""

    def __init__(self) -> None:
        self.query_id: str | None = None
        self.progress: dict[int, tuple[int, float]] = {}

    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's listener interface
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        progress = event.progress
        if self.query_id is None or str(progress.id) == self.query_id:
            self.progress[progress.batchId] = (progress.numInputRows,
                                               progress.durationMs.get("triggerExecution", 0) / 1000)

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass


def stream_batches(spark: SparkSession, source: DataFrame, checkpoint: str,
                   handle: Callable[[DataFrame, int], None]) -> dict[int, tuple[int, float]]:
    """Run ``handle(frame, batch_id)`` on every micro-batch of ``source`` (a streaming DataFrame)
    available now (``trigger(availableNow=True)``), then stop; Spark's own input rows and trigger
    time per batch id, from a ``StreamingQueryListener``. An error inside a micro-batch stops the
    stream and is raised here."""
    listener = ProgressListener()
    seen: list[int] = []

    def each(frame: DataFrame, batch_id: int) -> None:
        handle(frame, batch_id)
        seen.append(batch_id)

    spark.streams.addListener(listener)
    try:
        query = (source.writeStream.foreachBatch(each)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        listener.query_id = str(query.id)
        query.awaitTermination()
        deadline = time.monotonic() + 10  # progress events arrive asynchronously after each batch
        while time.monotonic() < deadline and not all(b in listener.progress for b in seen):
            time.sleep(0.05)
    finally:
        spark.streams.removeListener(listener)
    return dict(listener.progress)


def run_stream(runner: AdaptiveRunner, source: DataFrame, checkpoint: str) -> list[BatchRecord]:
    """A Structured Streaming run over ``source``, one plan per micro-batch (``stream_batches``); each
    record gets Spark's own trigger time."""
    progress = stream_batches(runner.spark, source, checkpoint, lambda frame, batch_id: runner.run_batch(frame, batch_id))
    for record in runner.records:
        if record.batch in progress:
            record.trigger_s = progress[record.batch][1]
    return runner.records
