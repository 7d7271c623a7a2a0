"""``optimize(df)``: any DataFrame's inner equi-joins planned by reopt, the rest as Spark planned it.

The DataFrame may come from ``spark.sql`` or the DataFrame API, over catalog tables, views or files.
reopt reads the join tree from Catalyst's optimized plan (``catalyst.read_join_region``), measures
its inputs (``statistics.region_catalog``), optimizes, and joins the inputs in its order with its
strategies under the operators Catalyst put above the joins. A DataFrame with nothing reopt plans
comes back unchanged, and the log says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql import DataFrame

from ..optimizer.catalog import Catalog
from ..optimizer.deltas import DeltaStats
from ..optimizer.errors import OptimizerError, QueryTooLargeError
from ..optimizer.optimizer import Optimizer, OptimizerConfig
from ..optimizer.plan import Plan
from .catalyst import JoinRegion, NotPlannable, key_column, read_join_region, rebuild
from .execute import broadcasts_allowed, join_tree
from .hook import MetricsHook
from .metrics import ExecutedNode, executed_tree_of
from .feedback import DEFAULT_MODEL_ERROR, PlanJudge, Verdict
from .session import session_weights
from .spark_plan import NoSparkPlan, spark_plan
from .statistics import STATISTICS, NotEstimated, region_catalog

log = logging.getLogger(__name__)


@dataclass
class PlannedFrame:
    """A DataFrame as reopt planned it, and what it takes to plan it again.

    ``plan`` and ``optimizer`` are None when reopt cannot plan the DataFrame; ``reason`` then says
    why. ``spark_plan`` is True when reopt could plan it but kept Spark's own plan, its
    ``plan`` being Spark's plan as reopt's model prices it; ``reason`` then says by how much reopt's
    best was predicted cheaper, and which statistics were used."""

    frame: DataFrame
    plan: Plan | None = None
    optimizer: Optimizer | None = None
    region: JoinRegion | None = None
    reason: str | None = None
    spark_plan: bool = False
    spark_choice: Plan | None = field(default=None, repr=False)  # Spark's own plan as reopt prices it
    original: DataFrame | None = field(default=None, repr=False)  # the DataFrame as Spark plans it

    def reoptimize(self, delta: DeltaStats) -> DataFrame:
        """Apply runtime statistics (relations are named as in ``plan.query``) and return the
        DataFrame of the new best plan; ``frame`` and ``plan`` become the new ones."""
        if self.optimizer is None or self.region is None:
            raise NotPlannable(f"reopt did not plan this DataFrame: {self.reason}")
        self._adopt(self.optimizer.reoptimize(delta))
        return self.frame


    def attach(self, stage_times: bool = True, trust_model: bool = False) -> MetricsHook:
        """Feed back every execution of this query's plans (see ``reopt.spark.attach``): each
        re-optimizes, and ``plan`` and ``frame`` follow the hook's choice, which may be Spark's own
        plan (``frame`` is then the DataFrame as Spark planned it)."""
        if self.optimizer is None or self.region is None:
            raise NotPlannable(f"reopt did not plan this DataFrame: {self.reason}")
        hook = MetricsHook(self.frame.sparkSession, self.optimizer, None, stage_times, self.region.relation_of,
                           spark_plan=self.spark_choice, runs_spark_plan=self.spark_plan, trust_model=trust_model,
                           on_choice=self._follow)
        return hook.attach()

    def _follow(self, verdict: Verdict) -> None:
        self.plan, self.spark_plan = verdict.plan, verdict.spark
        self.frame = self.original if verdict.spark else _planned(self.region, verdict.plan)

    def _adopt(self, plan: Plan) -> None:
        self.plan, self.spark_plan = plan, False
        self.frame = _planned(self.region, plan)

    def executed(self) -> ExecutedNode:
        """The join tree Spark executed for ``frame`` with each join's output rows (call it after an
        action on ``frame``)."""
        if self.plan is None or self.region is None:
            raise NotPlannable(f"reopt did not plan this DataFrame: {self.reason}")
        physical = self.frame._jdf.queryExecution().executedPlan()
        return executed_tree_of(physical, self.plan.query, self.region.relation_of)


def _planned(region: JoinRegion, plan: Plan) -> DataFrame:
    session = next(iter(region.inputs.values())).sparkSession
    joined = join_tree(plan.root, plan.query, region.inputs.__getitem__,
                       lambda ref: key_column(region, ref), broadcasts=broadcasts_allowed(session))
    return rebuild(region, joined)


def plan_frame(df: DataFrame, catalog: Catalog | None = None, config: OptimizerConfig | None = None,
               statistics: str = "estimated", model_error: float = DEFAULT_MODEL_ERROR) -> PlannedFrame:
    """Plan ``df``'s inner equi-joins with reopt.

    ``catalog`` gives the inputs' statistics (relations named as ``read_join_region`` names them:
    after their table or file); by default they come from what is known without reading the inputs
    in full (``statistics="estimated"``: ``statistics.region_catalog``), or from one job per input
    over its join keys (``statistics="exact"``). ``config`` defaults to reopt's, with the session's
    broadcast threshold.

    Spark's own plan of ``df`` is priced by reopt's model beside reopt's best, and kept
    (``spark_plan=True``) unless reopt's is predicted cheaper by more than ``model_error``."""
    if statistics not in STATISTICS:
        raise OptimizerError(f"statistics is one of {', '.join(STATISTICS)}, got {statistics!r}")
    try:
        region = read_join_region(df)
    except NotPlannable as exc:
        log.info("reopt leaves the DataFrame as Spark planned it: %s", exc)
        return PlannedFrame(df, reason=str(exc))
    spark = df.sparkSession
    if config is None:
        config = OptimizerConfig(weights=session_weights(spark))
    try:
        if config.beyond_limit == "refuse":
            region.query.connected_pairs(config.max_join_pairs)  # before any job measures the inputs
        if catalog is None:
            catalog, source = region_catalog(spark, region, exact=statistics == "exact")
        else:
            source = "the catalog given"
        optimizer = Optimizer(region.query, catalog, config)
    except (QueryTooLargeError, NotEstimated) as exc:
        log.info("reopt leaves the DataFrame as Spark planned it: %s", exc)
        return PlannedFrame(df, reason=str(exc))
    plan = optimizer.optimize()
    try:
        spark_choice = spark_plan(df, region.query, region.relation_of)
    except NoSparkPlan as exc:
        log.info("Spark's own plan is not a candidate: %s", exc)
        spark_choice = None
    verdict = PlanJudge(optimizer.costed, model_error=model_error).first(plan, spark_choice)
    reason = f"{verdict.why}; statistics: {source}"
    log.info("reopt: %s", reason)
    if verdict.spark:
        return PlannedFrame(df, verdict.plan, optimizer, region, reason, True, spark_choice, df)
    return PlannedFrame(_planned(region, plan), plan, optimizer, region, reason, False, spark_choice, df)


def optimize(df: DataFrame, catalog: Catalog | None = None, config: OptimizerConfig | None = None,
             statistics: str = "estimated", model_error: float = DEFAULT_MODEL_ERROR) -> DataFrame:
    """A DataFrame equal to ``df`` whose inner equi-joins run in reopt's order with reopt's join
    strategies where reopt's plan is predicted clearly cheaper than Spark's own, else ``df`` itself
    (see ``plan_frame``)."""
    return plan_frame(df, catalog, config, statistics, model_error).frame
