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
from ..optimizer.plan_change import saving
from ..optimizer.plan_space import SORT_MERGE_JOIN
from .execute import execute
from .metrics import executed_tree, observed_cardinalities
from .sampling import JoinSampler
from .stages import StageListener, cost_factor_feedback, stage_operators
from .state_folder import StateFolder

log = logging.getLogger(__name__)

# Plans estimated less than 5% apart are ties within the estimates' noise: switching between them
# buys nothing and makes the plan flip as the statistics wobble.
DEFAULT_SWITCH_MARGIN = 0.05


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

    ``switch_margin`` is the hysteresis of plan switches: the runner moves to a new best plan only if
    it is estimated at least that share cheaper than the running plan under the same statistics, so
    estimates that wobble around a tie do not flip the plan batch after batch (0: always switch).

    With ``state_dir`` (a folder, best kept beside the stream's checkpoint), the runner saves its
    optimizer and running plan there after every batch, and a runner started on a folder that holds
    a state resumes from it: ``optimizer`` gives the query and configuration, the folder the
    statistics learnt (``state_folder``).
    """

    def __init__(self, optimizer: Optimizer, spark: SparkSession, static_tables: Mapping[str, DataFrame],
                 stream: str, adaptive: bool = True, on_batch: Callable[[BatchRecord], None] | None = None,
                 stage_listener: StageListener | None = None, window: tuple[str, int] | None = None,
                 switch_margin: float = DEFAULT_SWITCH_MARGIN, state_dir: str | Path | None = None,
                 reoptimize_every: int = 1, sample_rows: int = 0):
        query = optimizer.query
        tables = {table for _alias, table in query.relations}
        for name in [stream] + ([window[0]] if window else []):
            if name not in tables:
                raise QueryError(f"'{name}' is not a table of the query (tables: {', '.join(sorted(tables))})")
        if window is not None and window[1] < 1:
            raise QueryError(f"a window holds at least one batch, not {window[1]}")
        if isinstance(switch_margin, bool) or not isinstance(switch_margin, (int, float)) or not 0 <= switch_margin < 1:
            raise OptimizerError(f"switch_margin is a share in [0, 1), got {switch_margin!r}")
        if isinstance(reoptimize_every, bool) or not isinstance(reoptimize_every, int) or reoptimize_every < 1:
            raise OptimizerError(f"reoptimize_every is a number of batches, at least 1, got {reoptimize_every!r}")
        if isinstance(sample_rows, bool) or not isinstance(sample_rows, int) or sample_rows < 0:
            raise OptimizerError(f"sample_rows is a number of rows (0: no sampling), got {sample_rows!r}")
        if window is not None and state_dir is not None:
            raise OptimizerError("a windowed runner cannot keep its state in a folder: the window's batches live in "
                                 "Spark's cache and would be lost on a restart; leave out state_dir or window")
        self.switch_margin = float(switch_margin)
        self.reoptimize_every = reoptimize_every
        self.state = None if state_dir is None else StateFolder(state_dir)
        saved: dict = {}
        if self.state is not None:
            optimizer, saved = self.state.resume(optimizer)
        self.optimizer = optimizer
        self.spark = spark
        self.static_tables = dict(static_tables)
        self.stream = stream
        self.stream_aliases = frozenset(alias for alias, table in query.relations if table == stream)
        self.adaptive = adaptive
        self.on_batch = on_batch
        self.stage_listener = stage_listener
        self.window = window
        self._recent: deque[tuple[DataFrame, int]] = deque()
        self.plan = StateFolder.plan(saved.get("plan"), optimizer) or optimizer.optimize()
        self.records: list[BatchRecord] = []
        self._last_key: str | None = saved.get("last_key")  # the plan the last batch ran
        self._why = ""  # why self.plan replaced the plan before it
        self.resumed_after: int | None = saved.get("batch")  # the last batch the saved state had seen
        self.setup_s = 0.0  # building the sampler: the static tables' key frequencies
        self.sampler: JoinSampler | None = None
        if adaptive and sample_rows:
            start = time.perf_counter()
            self.sampler = JoinSampler(query, self.static_tables, stream, rows=sample_rows)
            self.setup_s = time.perf_counter() - start
        self._pending = DeltaStats()  # observations of the batch before, applied with the next sample
        self._stream_rows = optimizer.catalog.table(stream).rows  # the stream's rows in the last batch

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
            self.plan = self._next_plan(self.optimizer.reoptimize(feedback))
        return time.perf_counter() - start, sample_s

    def run_batch(self, batch: DataFrame, batch_id: int) -> BatchRecord:
        reoptimizing = self._reoptimizes(len(self.records))
        planned_s, sample_s = self._plan_for(batch) if reoptimizing and self.sampler is not None else (0.0, 0.0)
        tables = {**self.static_tables}
        if self.window is not None:
            tables[self.window[0]] = self._window_frame(batch)
            batch = batch.persist()  # cached by this batch's own scan, read again by the next windows
        tables[self.stream] = batch
        query = self.optimizer.query
        executed_order, executed_key = self.plan.join_order(), self.plan.key()
        changed = self._last_key is not None and executed_key != self._last_key
        self._last_key = executed_key
        why = self._why if changed else ""
        start = time.perf_counter()
        frame = execute(self.plan, tables)
        tag = f"{id(self)}-{batch_id}"
        retried = False
        try:
            result = self._collect(frame, tag)
        except (Py4JJavaError, CapturedException) as error:  # Spark raises either, by error class
            log.warning("batch %s failed with plan %s (%s); running it again with sort-merge joins",
                        batch_id, executed_order, _reason(error))
            if self.stage_listener is not None:
                self.stage_listener.stages(tag)  # the failed attempt's stages: discarded
            frame = execute(self.plan, tables, join_strategy=SORT_MERGE_JOIN)
            result = [tuple(row) for row in frame.collect()]
            retried = True
        batch_s = time.perf_counter() - start
        tree = executed_tree(frame, query)
        input_rows = next((n.rows for n in tree.scans() if n.relations <= self.stream_aliases), None)
        if self.window is not None:
            self._remember(batch, input_rows if input_rows is not None else batch.count())
        reopt_s, stage_count = planned_s, None
        if input_rows is not None:
            self._stream_rows = max(1, input_rows)
        if not self.adaptive and self.stage_listener is not None:
            self.stage_listener.stages(tag)  # a batch that does not re-optimize: its stages are not needed
        if self.adaptive:
            feedback = observed_cardinalities(tree, query)
            if self.sampler is not None:  # the next batch's sample measures these again
                sampled = {frozenset(query.names(mask)) for mask in self.sampler.expressions}
                feedback = DeltaStats(c for c in feedback.changes if c.target not in sampled)
            if input_rows is not None:
                feedback = feedback + DeltaStats.table(self.stream, rows=max(1, input_rows))
            if self.window is not None:
                window_rows = sum(rows for _frame, rows in self._recent)
                feedback = feedback + DeltaStats.table(self.window[0], rows=max(1, window_rows))
            if self.stage_listener is not None and not retried:  # stage times of the plan it chose only
                stages = self.stage_listener.stages(tag)
                stage_count = len(stages)
                feedback = feedback + cost_factor_feedback(
                    self.plan, stages, stage_operators(frame._jdf.queryExecution().executedPlan()),
                    self.optimizer.catalog.cost_factors)
            if self.sampler is not None:
                self._pending = self._pending + feedback
            elif reoptimizing:
                start = time.perf_counter()
                self.plan = self._next_plan(self.optimizer.reoptimize(feedback))
                reopt_s = time.perf_counter() - start
        if self.state is not None:
            start = time.perf_counter()
            self.state.save(self.optimizer, {"plan": self.plan.to_dict(), "last_key": executed_key, "batch": batch_id})
            reopt_s += time.perf_counter() - start
        record = BatchRecord(batch_id, executed_order, changed, reopt_s, batch_s, input_rows, result,
                             stages=stage_count, key=executed_key, retried=retried, why=why, sample_s=sample_s)
        self.records.append(record)
        if self.on_batch is not None:
            self.on_batch(record)
        return record

    def _next_plan(self, best: Plan) -> Plan:
        """``best``, unless the running plan costs, under the same statistics, less than
        ``1 / (1 - switch_margin)`` times as much (or the plans are the same)."""
        if best.key() == self.plan.key():
            return best
        running = self.optimizer.costed(self.plan)
        if self.switch_margin and running is not None and best.cost > running.cost * (1 - self.switch_margin):
            log.info("keeping plan %s: the new best %s is estimated only %.1f%% cheaper (switch margin %.0f%%)",
                     running.join_order(), best.join_order(), 100 * (1 - best.cost / running.cost),
                     100 * self.switch_margin)
            return running
        change = self.optimizer.last_change
        moved = change.moved() if change is not None else "new statistics"
        self._why = f"{moved}; {saving(running, best, 'the running plan')}"
        log.info("new plan %s: %s", best.join_order(), self._why)
        return best

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
