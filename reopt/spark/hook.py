"""The listener hook: runtime metrics reach the optimizer by themselves.

``attach(spark, optimizer)`` registers a ``QueryExecutionListener`` (a JVM interface implemented in
Python through py4j). py4j makes a new JVM proxy each time a Python object crosses over, so the hook
creates the proxy once and keeps that JVM reference (and the Python object) for register and
unregister alike. After every
successful action whose executed plan is a plan of the optimizer's query (built by ``execute``), the
listener reads each join's output rows, re-optimizes, and makes the new plan the hook's ``plan``.

Spark calls listeners on its listener bus, after the action has finished, so the hook never delays
a job; and it never fails one: an error in the hook is logged once, counted, and the last good plan
stays. ``detach`` unregisters it.

With ``stage_times=True`` (the default) the hook also registers a ``stages.StageListener``: when a SQL
execution of the hook's current plan ends, its stage times become cost factors
(``stages.cost_factor_feedback``) and the optimizer re-optimizes again.

Each new plan is the choice of a ``feedback.PlanJudge``, as in the adaptive runner: the time each
execution of a plan the hook chose took (the listener's duration) is compared with the model's
prediction for it, and a plan replaces the running one only if it is expected cheaper by more than
the model's error; with ``spark_plan`` (Spark's own plan of the query, which ``PlannedFrame`` gives)
Spark's plan is a candidate too. ``trust_model=True`` leaves the choice to the cost model alone.

With ``state_dir``, the hook saves its optimizer there after every re-optimization and, created on
a folder that holds a state, starts from it (``state_folder``): a restarted driver keeps what the
hook had learnt.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession

from ..optimizer.errors import QueryError
from ..optimizer.optimizer import Optimizer
from ..optimizer.plan import Plan
from .callbacks import JvmObject, jvm_proxy
from .feedback import DEFAULT_MODEL_ERROR, DEFAULT_SWITCH_MARGIN, PlanJudge, Verdict, observed_delta, scanned_rows
from .metrics import describe, executed_tree_of, plan_shape
from .stages import StageListener, cost_factor_feedback, stage_operators
from .state_folder import StateFolder

log = logging.getLogger(__name__)


class MetricsHook:
    def __init__(self, spark: SparkSession, optimizer: Optimizer, on_plan: Callable[[Plan], None] | None = None,
                 stage_times: bool = True, relation_of: Callable[[Any], str | None] | None = None,
                 state_dir: str | Path | None = None, spark_plan: Plan | None = None, runs_spark_plan: bool = False,
                 switch_margin: float = DEFAULT_SWITCH_MARGIN, model_error: float = DEFAULT_MODEL_ERROR,
                 trust_model: bool = False, on_choice: Callable[[Verdict], None] | None = None):
        self.spark = spark
        self.on_choice = on_choice  # like on_plan, with whether the plan is Spark's own
        self.relation_of = relation_of
        self.state = None if state_dir is None else StateFolder(state_dir)
        if self.state is not None:
            optimizer, _saved = self.state.resume(optimizer)
        self.optimizer = optimizer
        self.on_plan = on_plan
        self.trust_model = trust_model
        self.judge = PlanJudge(optimizer.costed, switch_margin, 0.0 if trust_model else model_error)
        self.spark_plan = None if trust_model else spark_plan
        running = optimizer.costed(self.spark_plan) if runs_spark_plan and self.spark_plan is not None else None
        self.runs_spark_plan = running is not None
        self.plan = running or optimizer.optimize()
        self._chosen: dict = {}
        self._remember(self.plan, self.runs_spark_plan)
        self.updates = 0  # plans of the query seen and fed back
        self.stage_updates = 0  # executions of the current plan whose stage times were fed back
        self.errors = 0
        self._logged = False
        self._lock = threading.Lock()
        self._seen = threading.Condition(self._lock)
        self._listener = _Listener(self)
        self._stages = StageListener(spark, on_execution=self._handle_stages) if stage_times else None
        self._proxy = None
        self._attached = False

    def attach(self) -> "MetricsHook":
        if not self._attached:
            if self._proxy is None:
                self._proxy = jvm_proxy(self.spark, self._listener)
            self.spark._jsparkSession.listenerManager().register(self._proxy)
            if self._stages is not None:
                self._stages.attach()
            self._attached = True
        return self

    def detach(self) -> None:
        if self._attached:
            self._attached = False
            self.spark._jsparkSession.listenerManager().unregister(self._proxy)
            if self._stages is not None:
                self._stages.detach()

    @property
    def attached(self) -> bool:
        return self._attached

    def wait_for(self, events: int, timeout: float = 30.0, stages: int = 0) -> bool:
        """Block until ``events`` plans were handled (fed back or failed) and ``stages`` executions' stage
        times were fed back; for tests and scripts."""
        with self._seen:
            return self._seen.wait_for(
                lambda: self.updates + self.errors >= events and self.stage_updates >= stages, timeout)

    def _handle_stages(self, query_execution, stages) -> None:
        if not self._attached:
            return
        try:
            physical_plan = query_execution.executedPlan()
            tree = executed_tree_of(physical_plan, self.optimizer.query, self.relation_of)
        except QueryError:
            return
        except Exception as exc:  # noqa: BLE001 - a hook must never fail the job
            self._failed(exc)
            return
        try:
            with self._lock:
                ran, spark = self._chosen.get(describe(tree), (None, False))
                if ran is None or spark:
                    return  # not a reopt plan this hook chose: no estimates of its operators to compare with
                feedback = cost_factor_feedback(ran, stages, stage_operators(physical_plan),
                                                self.optimizer.catalog.cost_factors)
                if len(feedback):
                    self._adopt(self._choose(self.optimizer.reoptimize(feedback)))
                self.stage_updates += 1
                self._seen.notify_all()
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)

    def _handle(self, physical_plan, seconds: float = 0.0) -> None:
        if not self._attached:
            return
        try:
            tree = executed_tree_of(physical_plan, self.optimizer.query, self.relation_of)
        except QueryError:
            return  # some other query: not ours to learn from
        except Exception as exc:  # noqa: BLE001 - a hook must never fail the job
            self._failed(exc)
            return
        try:
            with self._lock:
                best = self.optimizer.reoptimize(observed_delta(tree, self.optimizer.query))
                ran, spark = self._chosen.get(describe(tree), (None, False))
                if ran is not None and not self.trust_model:
                    self.judge.record(ran, spark, seconds, scanned_rows(tree))
                self._adopt(self._choose(best))
                self.updates += 1
                self._seen.notify_all()
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)

    def _choose(self, best: Plan) -> Verdict:
        return self.judge.choose(self.plan, self.runs_spark_plan, best, self.spark_plan)

    def _adopt(self, verdict: Verdict) -> None:
        """Make the judge's choice the plan to run: hand it to ``on_plan`` first (if that raises, the
        last good plan stays), then keep it and save the state."""
        if verdict.changed:
            change = self.optimizer.last_change
            log.info("new plan %s: %s; %s", verdict.plan.join_order(), verdict.why,
                     change.moved() if change is not None else "new statistics")
        if self.on_choice is not None:
            self.on_choice(verdict)
        if self.on_plan is not None:
            self.on_plan(verdict.plan)
        self.plan, self.runs_spark_plan = verdict.plan, verdict.spark
        self._remember(verdict.plan, verdict.spark)
        if self.state is not None:
            self.state.save(self.optimizer)

    def _remember(self, plan: Plan, spark: bool) -> None:
        """Keep the last few chosen plans by shape, to know which one a finished execution ran."""
        self._chosen[plan_shape(plan)] = (plan, spark)
        while len(self._chosen) > 8:
            del self._chosen[next(iter(self._chosen))]

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            self.errors += 1
            if not self._logged:
                log.error("reopt metrics hook failed (keeping the last good plan): %s: %s", type(exc).__name__, exc)
                self._logged = True
            self._seen.notify_all()


class _Listener(JvmObject):
    """org.apache.spark.sql.util.QueryExecutionListener, implemented in Python."""

    def __init__(self, hook: MetricsHook):
        self.hook = hook

    def onSuccess(self, function_name, query_execution, duration_ns):  # noqa: N802 - JVM interface
        try:
            self.hook._handle(query_execution.executedPlan(), duration_ns / 1e9)
        except Exception:  # noqa: BLE001 - nothing may escape into Spark's listener bus
            pass

    def onFailure(self, function_name, query_execution, exception):  # noqa: N802 - JVM interface
        return None

    class Java:
        implements = ["org.apache.spark.sql.util.QueryExecutionListener"]


def attach(spark: SparkSession, optimizer: Optimizer, on_plan: Callable[[Plan], None] | None = None,
           stage_times: bool = True, relation_of: Callable[[Any], str | None] | None = None,
           state_dir: str | Path | None = None, trust_model: bool = False) -> MetricsHook:
    """Register a hook that feeds ``optimizer`` after every action on a plan of its query.
    ``relation_of`` tells which relation an executed operator reads (see ``executed_tree_of``);
    ``PlannedFrame.attach`` passes its own. With ``state_dir``, the hook starts from the state saved
    there, if any, and saves its optimizer there after every re-optimization."""
    return MetricsHook(spark, optimizer, on_plan, stage_times, relation_of, state_dir,
                       trust_model=trust_model).attach()


def detach(hook: MetricsHook) -> None:
    hook.detach()
