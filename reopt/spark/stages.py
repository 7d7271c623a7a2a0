"""Stage times: how long Spark really spent, per stage, turned into operator cost factors.

``StageListener`` implements the JVM's ``SparkListenerInterface`` in Python through py4j. It records
each completed stage's executor run time, bytes read and shuffled, and the RDD scopes of the stage,
which name the physical operators that ran in it ("WholeStageCodegen (3)", "Exchange", ...). Stages
are grouped by the tag of ``listener.tagged(tag)`` when the action ran under one (a job property), else
by their SQL execution, whose end (``SparkListenerSQLExecutionEnd``, after all of its stages) hands
the execution's ``QueryExecution`` and stages to ``on_execution``. Every other callback of the
interface is accepted and ignored, and nothing raised inside a callback reaches Spark's listener bus.

``cost_factor_feedback`` compares measured with estimated time per operator: each stage's run time is
shared among the operator types that ran in it in proportion to their estimated local costs in the
plan, and an operator type whose measured share exceeds its estimated share gets a larger cost
factor. Factors are relative to the query as a whole (a uniformly slower machine changes nothing),
damped, and clamped, so one noisy stage cannot swing the plan.
"""

from __future__ import annotations

import logging
import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from pyspark.sql import SparkSession

from ..optimizer.deltas import DeltaStats
from ..optimizer.plan import Plan
from ..optimizer.plan_space import EXCHANGE, SCAN, SORT
from .callbacks import JvmObject, jvm_proxy
from .metrics import SPARK_JOINS, _seq, _unwrap

log = logging.getLogger(__name__)

TAG = "reopt.stage.tag"  # the job property that carries the caller's tag
EXECUTION_ID = "spark.sql.execution.id"  # the job property Spark sets for SQL executions


@dataclass(frozen=True)
class StageRecord:
    stage_id: int
    run_time_s: float  # executor run time summed over the stage's tasks
    input_bytes: int
    shuffle_read_bytes: int
    shuffle_write_bytes: int
    scopes: tuple[str, ...]  # RDD operation scopes of the stage: the operators that ran in it


class StageListener(JvmObject):
    """org.apache.spark.scheduler.SparkListenerInterface, implemented in Python.

    py4j makes a new JVM proxy each time a Python object crosses over, so the proxy is made once and
    kept for adding and removing the listener alike.
    """

    def __init__(self, spark: SparkSession,
                 on_execution: Callable[[object, list[StageRecord]], None] | None = None):
        self.spark = spark
        self.on_execution = on_execution
        self._lock = threading.Condition()
        self._execution_of_stage: dict[int, str] = {}  # stages of running jobs
        self._stages_of_job: dict[int, list[int]] = {}
        self._pending_jobs: dict[str, set[int]] = {}
        self._stages: dict[str, list[StageRecord]] = {}
        self._proxy = None
        self._attached = False
        self._logged = False

    def attach(self) -> "StageListener":
        if not self._attached:
            if self._proxy is None:
                self._proxy = jvm_proxy(self.spark, self)
            self.spark.sparkContext._jsc.sc().addSparkListener(self._proxy)
            self._attached = True
        return self

    def detach(self) -> None:
        if self._attached:
            self._attached = False
            self.spark.sparkContext._jsc.sc().removeSparkListener(self._proxy)

    @contextmanager
    def tagged(self, tag: str) -> Iterator[None]:
        """Tag the jobs this thread starts inside the block, so that ``stages(tag)`` finds their stages."""
        context = self.spark.sparkContext
        previous = context.getLocalProperty(TAG)
        context.setLocalProperty(TAG, tag)
        try:
            yield
        finally:
            context.setLocalProperty(TAG, previous)

    def stages(self, tag: str, timeout: float = 5.0) -> list[StageRecord]:
        """The completed stages of the jobs run under ``tag``, once all of them have ended (the listener
        bus is asynchronous) or at the timeout; they are handed over, not kept."""
        key = str(tag)
        with self._lock:
            self._lock.wait_for(lambda: not self._pending_jobs.get(key), timeout)
            self._pending_jobs.pop(key, None)
            return self._stages.pop(key, [])

    # -- the JVM interface ---------------------------------------------------------------------

    def onJobStart(self, event) -> None:  # noqa: N802 - JVM interface
        try:
            properties = event.properties()
            if properties is None:
                return
            execution = properties.getProperty(TAG)
            if execution is None:
                sql = properties.getProperty(EXECUTION_ID)
                if sql is None:
                    return
                execution = f"sql:{sql}"
            stage_ids = event.stageIds()
            with self._lock:
                self._pending_jobs.setdefault(execution, set()).add(event.jobId())
                self._stages_of_job[event.jobId()] = [stage_ids.apply(i) for i in range(stage_ids.size())]
                for stage_id in self._stages_of_job[event.jobId()]:
                    self._execution_of_stage[stage_id] = execution
        except Exception as exc:  # noqa: BLE001 - nothing may escape into Spark's listener bus
            self._failed(exc)

    def onJobEnd(self, event) -> None:  # noqa: N802
        try:
            with self._lock:
                for jobs in self._pending_jobs.values():
                    jobs.discard(event.jobId())
                for stage_id in self._stages_of_job.pop(event.jobId(), ()):  # skipped stages never complete
                    self._execution_of_stage.pop(stage_id, None)
                self._lock.notify_all()
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)

    def onStageCompleted(self, event) -> None:  # noqa: N802
        try:
            info = event.stageInfo()
            with self._lock:
                execution = self._execution_of_stage.get(info.stageId())
            if execution is None:
                return
            metrics = info.taskMetrics()
            scopes = []
            rdds = info.rddInfos()
            for i in range(rdds.size()):
                scope = rdds.apply(i).scope()
                if scope.isDefined() and scope.get().name() not in scopes:
                    scopes.append(scope.get().name())
            record = StageRecord(
                info.stageId(), metrics.executorRunTime() / 1000.0, metrics.inputMetrics().bytesRead(),
                metrics.shuffleReadMetrics().totalBytesRead(), metrics.shuffleWriteMetrics().bytesWritten(),
                tuple(scopes))
            with self._lock:
                self._stages.setdefault(execution, []).append(record)
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)

    def onOtherEvent(self, event) -> None:  # noqa: N802
        try:
            if event.getClass().getSimpleName() != "SparkListenerSQLExecutionEnd":
                return
            key = f"sql:{event.executionId()}"
            with self._lock:
                self._pending_jobs.pop(key, None)
                stages = self._stages.pop(key, [])
            error = event.errorMessage()  # None or "" when the execution succeeded
            if self.on_execution is not None and stages and (error.isEmpty() or not error.get()):
                self.on_execution(event.qe(), stages)
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)

    def __getattr__(self, name: str):
        """Every other callback of SparkListenerInterface: accepted and ignored."""
        if name.startswith("on"):
            return _ignore
        raise AttributeError(name)

    def _failed(self, exc: Exception) -> None:
        if not self._logged:
            log.error("reopt stage listener failed (stage times are skipped): %s: %s", type(exc).__name__, exc)
            self._logged = True

    class Java:
        implements = ["org.apache.spark.scheduler.SparkListenerInterface"]


def _ignore(*_args) -> None:
    return None


def _operator_type(name: str) -> str | None:
    if name in SPARK_JOINS:
        return SPARK_JOINS[name]
    if name == "BroadcastExchange":
        return SPARK_JOINS["BroadcastHashJoin"]  # building the broadcast side is the join's work
    if name == "Exchange":
        return EXCHANGE
    if name == "Sort":
        return SORT
    if name.startswith("Scan"):
        return SCAN
    return None


def stage_operators(physical_plan) -> dict[str, list[str]]:
    """Operator types behind each RDD scope name of a JVM physical plan: a whole-stage-codegen scope
    stands for the operators fused into it, any other scope for its own operator."""
    scopes: dict[str, list[str]] = {}

    def fused(node, types: list[str]) -> None:
        node = _unwrap(node)
        if node.nodeName() == "InputAdapter":
            return
        kind = _operator_type(node.nodeName())
        if kind is not None:
            types.append(kind)
        for child in _seq(node.children()):
            fused(child, types)

    def walk(node) -> None:
        node = _unwrap(node)
        name = node.nodeName()
        if name.startswith("WholeStageCodegen"):  # named "WholeStageCodegen (id)", as its RDD scope
            types: list[str] = []
            for child in _seq(node.children()):
                fused(child, types)
            scopes[name] = types
        else:
            kind = _operator_type(name)
            if kind is not None:
                scopes.setdefault(name, [kind])
        for child in _seq(node.children()):
            walk(child)

    walk(physical_plan)
    return scopes


def cost_factor_feedback(plan: Plan, stages: list[StageRecord], operators: dict[str, list[str]],
                         current: dict[str, float], damping: float = 0.5, clamp: float = 8.0,
                         threshold: float = 0.1) -> DeltaStats:
    """Cost-factor changes from measured stage times (see the module docstring).

    ``operators`` maps scope names to operator types (``stage_operators``); ``current`` holds the
    catalog's factors. A factor moves by ``(measured share / estimated share) ** damping``, stays
    within ``[1/clamp, clamp]``, and is reported only if it moves by more than ``threshold``.
    """
    estimated: dict[str, float] = {}
    for node in plan.nodes():
        estimated[node.op] = estimated.get(node.op, 0.0) + node.local_cost
    ran_in = [[t for scope in stage.scopes for t in operators.get(scope, ()) if estimated.get(t, 0.0) > 0]
              for stage in stages]
    stage_count: dict[str, int] = {}
    for types in ran_in:
        for t in set(types):
            stage_count[t] = stage_count.get(t, 0) + 1
    measured: dict[str, float] = {}
    for stage, types in zip(stages, ran_in):
        shares = {t: estimated[t] / stage_count[t] for t in set(types)}
        total = sum(shares.values())
        for t, share in shares.items():
            measured[t] = measured.get(t, 0.0) + stage.run_time_s * share / total
    seen = {t for t in measured if measured[t] > 0}
    measured_total = sum(measured[t] for t in seen)
    estimated_total = sum(estimated[t] for t in seen)
    if len(seen) < 2 or measured_total <= 0 or estimated_total <= 0:
        return DeltaStats.batch([])
    changes = []
    for t in sorted(seen):
        ratio = (measured[t] / measured_total) / (estimated[t] / estimated_total)
        old = current.get(t, 1.0)
        new = min(clamp, max(1.0 / clamp, old * ratio ** damping))
        if abs(math.log(new / old)) > math.log1p(threshold):
            changes.append(DeltaStats.cost_factor(t, new))
    return DeltaStats.batch(changes)
