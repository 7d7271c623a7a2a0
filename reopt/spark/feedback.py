"""The feedback loop: what Spark observed becomes statistics, and what Spark spent judges the plans.

Three parts, used alike by the adaptive runner, the listener hook and ``PlannedFrame``:

* ``observed_delta``: an executed join tree as a ``DeltaStats`` (each join's output rows, the
  stream's input rows);
* ``ObservedSizes``: join sizes summarized over recent batches with a half-life, so that one
  batch's noise (or a skew that alternates) does not move the plan by itself;
* ``PlanJudge``: the switch policy. Every run's measured time is compared with what the cost model
  predicted for that plan on the statistics observed in the same run; the ratio is the model's
  error for that plan. Candidates (reopt's best plan, Spark's own plan, the plan running, and every
  plan tried before) are compared on their predicted costs scaled by those ratios, so a plan that
  has run is judged by its own measurements and a plan that has not by what the model's plans
  measure on this session. A plan replaces the running one only if it is expected cheaper by more
  than the model's error (for a plan not yet measured: how far the times expected of plans adopted
  before they ran were off) or than the run-to-run noise and the switch margin (between two
  measured plans). A plan adopted on a prediction is on probation until it has run: if its measured
  time shows that the plan it replaced would have been cheaper, the judge goes back, and its record
  says so.

Measured time is the wall time of the action that ran the plan: what the user waits for, driver
waits for broadcasts included (executor time would leave those out).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import OptimizerError
from ..optimizer.plan import Plan
from ..optimizer.query import Query
from .metrics import ExecutedNode, observed_cardinalities

# Plans estimated less than 5% apart are ties within the estimates' noise: switching between them
# buys nothing and makes the plan flip as measurements wobble.
DEFAULT_SWITCH_MARGIN = 0.05
# The model's error on relative plan costs before any plan has been measured twice on this session:
# a plan not yet run must be predicted this much cheaper than a measured one to replace it.
DEFAULT_MODEL_ERROR = 0.10
# Where reopt's plan is predicted to take less than half the time of Spark's own, it runs at once;
# otherwise a caller that can measure runs Spark's plan first, as the baseline.
STRONG_SAVING = 0.5
DEFAULT_HALF_LIFE = 1.0  # batches: the newest observation of a join counts for half its summary
_KEPT_ERRORS = 1000  # errors kept for the summary and the model's error
_KEPT_RATIOS = 3  # measurements per plan: the median of the last few resists one slow batch, and follows drift


def observed_delta(tree: ExecutedNode, query: Query, stream: str | None = None) -> DeltaStats:
    """What one execution observed: each join's output rows and, with ``stream`` (a table of the
    query), the rows its scan read."""
    delta = observed_cardinalities(tree, query)
    rows = None if stream is None else input_rows(tree, query, stream)
    return delta if rows is None else delta + DeltaStats.table(stream, rows=max(1, rows))


def input_rows(tree: ExecutedNode, query: Query, stream: str) -> int | None:
    """The rows the scan of ``stream`` read in an execution, if Spark reported them."""
    aliases = {alias for alias, table in query.relations if table == stream}
    return next((n.rows for n in tree.scans() if n.relations <= aliases and n.rows is not None), None)


def scanned_rows(tree: ExecutedNode) -> int | None:
    """The rows all the scans of an execution read (None if Spark reported none): the size of the
    data a query without a stream ran over."""
    rows = [n.rows for n in tree.scans() if n.rows is not None]
    return sum(rows) if rows else None


class ObservedSizes:
    """Join sizes summarized over recent batches: a geometric moving average whose weights halve
    every ``half_life`` batches (0: the last observation alone). Joins that read ``stream`` are
    averaged per row of the stream's batch, so batches of different sizes compare."""

    def __init__(self, query: Query, stream: str | None = None, half_life: float = DEFAULT_HALF_LIFE):
        if isinstance(half_life, bool) or not isinstance(half_life, (int, float)) or half_life < 0:
            raise OptimizerError(f"half_life is a number of batches, at least 0, got {half_life!r}")
        self.weight = 1.0 if half_life == 0 else 1.0 - 0.5 ** (1.0 / half_life)
        self.stream_aliases = frozenset(alias for alias, table in query.relations if table == stream)
        self._log: dict[frozenset[str], float] = {}

    def summarize(self, delta: DeltaStats, stream_rows: float | None = None) -> DeltaStats:
        """``delta`` with each join size replaced by its summary including this observation."""
        per_row = max(1.0, stream_rows or 1.0)
        sizes = delta.cardinalities()
        summary = []
        for target, rows in sizes.items():
            scale = per_row if target & self.stream_aliases else 1.0
            value = math.log(max(rows, 1.0) / scale)
            before = self._log.get(target)
            value = value if before is None else before + self.weight * (value - before)
            self._log[target] = value
            summary.append(DeltaStats.cardinality(sorted(target), math.exp(value) * scale))
        return delta.without_cardinalities(sizes) + DeltaStats.batch(summary)


@dataclass
class Verdict:
    """The plan to run next, and why."""

    plan: Plan  # as reopt's model prices it (for Spark's own plan, its reopt equivalent)
    spark: bool  # run as Spark plans it (the query's SQL), not with reopt's hints
    changed: bool  # a different plan from the one running
    why: str


@dataclass
class _Record:
    plan: Plan
    spark: bool
    ratios: deque = field(default_factory=lambda: deque(maxlen=_KEPT_RATIOS))  # measured s / predicted core-s
    per_row: deque = field(default_factory=lambda: deque(maxlen=_KEPT_RATIOS))  # measured s per input row
    replaced: str | None = None  # on probation: the key of the plan it replaced, until it has run
    expected_s: float | None = None  # adopted untried: the seconds the judge expected, until it has run
    rejected: bool = False  # taken back after probation: it must win on the model's word again

    def scale(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None


SPARK_LABEL = "Spark's own plan"


class PlanJudge:
    """The switch policy of one query on one session (see the module's docstring).

    ``costed(plan, within_limits)`` prices a plan under the current statistics (``Optimizer.costed``:
    None when it can no longer run); Spark's own plan is priced without reopt's memory limits, since
    Spark chose it knowing its own. ``model_error`` is the error assumed before measurements say
    otherwise."""

    def __init__(self, costed: Callable[..., Plan | None], switch_margin: float = DEFAULT_SWITCH_MARGIN,
                 model_error: float = DEFAULT_MODEL_ERROR):
        for name, value in (("switch_margin", switch_margin), ("model_error", model_error)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise OptimizerError(f"{name} is a share in [0, 1), got {value!r}")
        self.costed = costed
        self.margin = float(switch_margin)
        self.prior_error = float(model_error)
        self._records: dict[str, _Record] = {}
        # |measured / predicted - 1| of the last runs; a stream runs for ever, so only the last are kept
        self.errors: deque[float] = deque(maxlen=_KEPT_ERRORS)
        # |measured / expected - 1| of each plan adopted before it had run: how far a switch made on
        # the model's word can be trusted
        self.prediction_errors: deque[float] = deque(maxlen=_KEPT_ERRORS)
        self.went_back = 0  # plans taken back after probation
        self.runs = 0  # runs measured

    # -- measurements ----------------------------------------------------------------------------

    def record(self, plan: Plan, spark: bool, measured_s: float, rows: float | None = None) -> float | None:
        """Charge ``plan`` (just run, ``spark``: as Spark planned it) the ``measured_s`` seconds it
        took over ``rows`` input rows (the stream's batch; None: unknown); the model's prediction is
        the plan's cost under the current statistics, so call it after the run's observations are
        applied. Returns measured over predicted (None if the plan cannot be priced)."""
        priced = self._price(plan, spark)
        if priced is None or priced.cost <= 0 or measured_s <= 0:
            return None
        entry = self._entry(plan, spark)
        entry.per_row.append(measured_s / max(1.0, rows or 1.0))
        if entry.expected_s is not None:
            self.prediction_errors.append(abs(measured_s / entry.expected_s - 1.0))
            entry.expected_s = None
        ratio = measured_s / priced.cost
        self.runs += 1
        entry.ratios.append(ratio)
        self.errors.append(abs(ratio - 1.0))
        return ratio

    def _price(self, plan: Plan, spark: bool) -> Plan | None:
        return self.costed(plan, within_limits=not spark)

    def _entry(self, plan: Plan, spark: bool) -> _Record:
        key = _key(plan, spark)
        entry = self._records.get(key)
        if entry is None:
            entry = self._records[key] = _Record(plan, spark)
        return entry

    def session_scale(self) -> float | None:
        """Seconds per predicted core-second on this session: the median over the plans measured."""
        scales = [s for s in (r.scale() for r in self._records.values()) if s is not None]
        return statistics.median(scales) if scales else None

    def model_error(self) -> float:
        """How far the model's word on a plan not yet run can be trusted on this session: the median
        of the errors of the times expected for the plans adopted before they had run, the prior
        counted as one of them."""
        if not self.prediction_errors:
            return self.prior_error
        return min(0.9, statistics.median([*self.prediction_errors, self.prior_error]))

    def noise(self) -> float:
        """How much one plan's time wanders from run to run on this session: the median distance of
        each measured run from its plan's median, over the plans run at least twice (0 before)."""
        spread = [abs(r / rec.scale() - 1.0) for rec in self._records.values() if len(rec.ratios) >= 2
                  for r in rec.ratios]
        return statistics.median(spread) if spread else 0.0

    def scale_spread(self) -> float | None:
        """How far the measured plans' scales lie from the session's: the model's error on the
        relative cost of plans whose statistics were observed (None before two plans have run)."""
        typical = self.session_scale()
        scales = [s for s in (r.scale() for r in self._records.values()) if s is not None]
        if typical is None or len(scales) < 2:
            return None
        return statistics.median(abs(s / typical - 1.0) for s in scales)

    # -- decisions -------------------------------------------------------------------------------

    def choose(self, running: Plan, running_spark: bool, best: Plan, spark_plan: Plan | None) -> Verdict:
        """The plan to run next: the running one unless another candidate (``best``, Spark's plan,
        a plan tried before) is expected cheaper by more than the error of that expectation."""
        typical = self.session_scale() or 1.0
        running_key = _key(running, running_spark)
        candidates = [(running, running_spark), (best, False)] + ([(spark_plan, True)] if spark_plan else [])
        candidates += [(r.plan, r.spark) for r in self._records.values()]
        expected: dict[str, tuple[float, Plan, bool, bool]] = {}
        for plan, spark in candidates:
            key = _key(plan, spark)
            if key in expected:
                continue
            priced = self._price(plan, spark)
            if priced is None:
                continue
            entry = self._records.get(key)
            scale = entry.scale() if entry is not None else None
            expected[key] = (priced.cost * (scale or typical), priced, spark, scale is not None)
        if running_key not in expected:  # the running plan can no longer run: the cheapest does
            key = min(expected, key=lambda k: expected[k][0])
            cost, plan, spark, _ = expected[key]
            return self._switch(running_key, plan, spark, cost, "the running plan can no longer run")
        now, running_priced, _, running_measured = expected[running_key]
        entry = self._records.get(running_key)
        on_probation = entry.replaced if entry is not None and entry.ratios else None
        if on_probation is not None:
            entry.replaced = None  # it has run: from now on its measurements judge it
            back = self._probation(entry, self._records.get(on_probation))
            if back is not None:
                return back
        winner, cost, plan, spark, measured = running_key, now, running_priced, running_spark, running_measured
        for key, (other_cost, other_plan, other_spark, other_measured) in expected.items():
            if other_cost < cost:
                winner, cost, plan, spark, measured = key, other_cost, other_plan, other_spark, other_measured
        if winner == running_key:
            return Verdict(running_priced, running_spark, False, "")
        if measured and running_measured and not self._records[winner].rejected:
            threshold, source = max((self.margin, "switch margin"), (self.noise(), "run-to-run noise"))
        else:
            threshold, source = max((self.margin, "switch margin"), (self.model_error(), "model error"))
        saving = 1.0 - cost / now if now > 0 else 0.0
        if saving <= threshold:
            return Verdict(running_priced, running_spark, False, "")
        basis = "measured" if measured else "predicted"
        why = f"{_label(plan, spark)} {basis} {saving:.0%} cheaper than the running plan (threshold {threshold:.0%}, the {source})"
        return self._switch(running_key, plan, spark, cost, why)

    def _probation(self, entry: _Record, replaced: _Record | None) -> Verdict | None:
        """Back to the plan ``entry`` replaced if, measured per input row, ``entry`` ran slower than
        it by more than the noise and the margin; None to keep ``entry``."""
        if replaced is None or not replaced.per_row or not entry.per_row:
            return None
        threshold = max(self.margin, self.noise())
        slower = entry.per_row[-1] / replaced.per_row[-1] - 1.0
        if slower <= threshold:
            return None
        priced = self._price(replaced.plan, replaced.spark)
        if priced is None:
            return None
        self.went_back += 1
        entry.rejected = True
        why = (f"going back: {_label(entry.plan, entry.spark)} ran {slower:.0%} slower per input row than "
               f"{_label(priced, replaced.spark)}, which it replaced (threshold {threshold:.0%})")
        return Verdict(priced, replaced.spark, True, why)

    def first(self, best: Plan, spark_plan: Plan | None, measure_first: bool = False) -> Verdict:
        """The first plan: Spark's own unless reopt's best is predicted cheaper by more than the
        model's error. With ``measure_first`` (a caller that will run the query again and can
        measure), Spark's plan runs first, as the measured baseline reopt's must then beat on
        probation, unless reopt's is predicted to take less than ``1 - STRONG_SAVING`` of its time:
        the model is trusted at once only where being wrong by its whole error would still pay."""
        if spark_plan is None:
            return Verdict(best, False, False, "Spark's own plan cannot be priced; reopt's best")
        priced = self._price(spark_plan, True)
        if priced is None:
            return Verdict(best, False, False, "Spark's own plan cannot be priced; reopt's best")
        threshold = max(self.margin, self.model_error(), STRONG_SAVING if measure_first else 0.0)
        saving = 1.0 - best.cost / priced.cost if priced.cost > 0 else 0.0
        if saving > threshold:
            self._entry(best, False).replaced = _key(priced, True)
            return Verdict(best, False, True, f"reopt's plan predicted {saving:.0%} cheaper than Spark's own "
                                              f"(threshold {threshold:.0%})")
        if measure_first:
            return Verdict(priced, True, False, f"Spark's own plan first, as the measured baseline: reopt's "
                                                f"predicted {saving:.0%} cheaper (at once above {threshold:.0%})")
        return Verdict(priced, True, False, f"Spark's own plan kept: reopt's predicted {saving:.0%} cheaper, "
                                            f"within the model's error ({threshold:.0%})")

    def _switch(self, running_key: str, plan: Plan, spark: bool, expected: float, why: str) -> Verdict:
        """Adopt ``plan``, expected to cost ``expected`` (seconds once the session's scale is known)."""
        entry = self._entry(plan, spark)
        if not entry.ratios:
            entry.replaced = running_key
            entry.expected_s = expected if self.session_scale() is not None else None
        return Verdict(plan, spark, True, why)

    def summary(self) -> dict:
        """The model's error on this session: the median |measured / predicted - 1| over every run,
        and after one scale for the session (what decisions rest on)."""
        typical = self.session_scale()
        scaled = [abs(r / typical - 1.0) for rec in self._records.values() for r in rec.ratios] if typical else []
        return {"runs": self.runs,
                "error": statistics.median(self.errors) if self.errors else None,
                "error_after_scale": statistics.median(scaled) if scaled else None,
                "prediction_error": statistics.median(self.prediction_errors) if self.prediction_errors else None,
                "model_error": self.model_error(), "noise": self.noise(), "seconds_per_core_s": typical,
                "plans_measured": sum(bool(r.ratios) for r in self._records.values()), "went_back": self.went_back}


def _key(plan: Plan, spark: bool) -> str:
    return ("spark:" if spark else "") + plan.key()


def _label(plan: Plan, spark: bool) -> str:
    return SPARK_LABEL if spark else f"plan {plan.join_order()}"

