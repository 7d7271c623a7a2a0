"""Why a re-optimization chose the plan it chose: the estimates that moved, the plan before and after,
and what the switch is predicted to save.

Everything here comes from state the optimizer already holds when it re-optimizes (the estimates it
replaced, the cost factors, the plan it returned last time re-costed under the new statistics); no
optimization is run again to explain one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .plan import Plan, PlanNode

if TYPE_CHECKING:
    from .deltas import DeltaStats


@dataclass(frozen=True)
class EstimateChange:
    """One expression's row estimate before and after a delta."""

    relations: tuple[str, ...]
    old_rows: float
    new_rows: float

    @property
    def ratio(self) -> float:
        return self.new_rows / self.old_rows if self.old_rows else float("inf")

    def describe(self) -> str:
        return (f"{{{', '.join(self.relations)}}} {self.old_rows:,.0f} -> {self.new_rows:,.0f} rows "
                f"(x{self.ratio:.3g})")


class PlanChange:
    """The outcome of one ``Optimizer.reoptimize`` call (``Optimizer.last_change``).

    ``previous`` is the plan the optimizer returned before the call and ``previous_now`` the same plan
    costed under the new statistics (None if it can no longer run, for example a broadcast that no
    longer fits). ``estimates`` are the expressions whose estimates moved, largest relative change
    first; ``entries`` the (relations, property) entries of the new plan whose sub-plan differs from
    the previous plan's.

    A re-optimization records only what it already has at hand (the rows it replaced, the plans);
    the descriptions are worked out when first read, so that a caller who never asks pays almost
    nothing. Only a changed plan is re-costed, since an unchanged one costs what the new plan costs.
    """

    def __init__(self, delta: "DeltaStats", moves: list[tuple[int, float, float]],
                 cost_factors: tuple[tuple[str, float, float], ...], previous: Plan, previous_now: Plan | None,
                 plan: Plan):
        self._delta = delta
        self._moves = moves  # (expression, old rows, new rows) of every estimate that moved
        self.cost_factors = cost_factors
        self.previous = previous
        self.previous_now = previous_now
        self.plan = plan

    @functools.cached_property
    def delta(self) -> str:
        """The delta, as ``DeltaStats.describe`` words it."""
        return self._delta.describe()

    @functools.cached_property
    def estimates(self) -> tuple[EstimateChange, ...]:
        query = self.plan.query
        changes = [EstimateChange(tuple(query.names(mask)), old, new) for mask, old, new in self._moves]
        return tuple(sorted(changes, key=lambda c: -abs(math.log(max(c.new_rows, 1e-300) / max(c.old_rows, 1e-300)))))

    @functools.cached_property
    def entries(self) -> tuple[tuple[tuple[str, ...], str], ...]:
        return changed_entries(self.previous, self.plan) if self.changed else ()

    @functools.cached_property
    def changed(self) -> bool:
        """Whether the best plan is a different plan (not merely re-costed)."""
        return self.plan.key() != self.previous.key()

    @property
    def predicted_saving(self) -> float | None:
        """Estimated cost of keeping the previous plan less that of the new one, in core-s, under the
        new statistics; None when the previous plan can no longer run."""
        return None if self.previous_now is None else self.previous_now.cost - self.plan.cost

    def moved(self, limit: int = 3) -> str:
        """The estimates and cost factors that moved, the largest first, ``limit`` estimates at most."""
        moved = "; ".join(change.describe() for change in self.estimates[:limit]) or "no estimate moved"
        if len(self.estimates) > limit:
            moved += f"; and {len(self.estimates) - limit} more"
        if self.cost_factors:
            moved += "; cost factors " + ", ".join(f"{op} {old:.3g} -> {new:.3g}" for op, old, new in self.cost_factors)
        return moved

    def reason(self, limit: int = 3) -> str:
        """One line: what moved, and what it is predicted to save."""
        moved = self.moved(limit)
        if not self.changed:
            return f"plan kept: {moved}"
        return f"plan changed: {moved}; {saving(self.previous_now, self.plan, 'the previous plan')}"

    def explain(self) -> str:
        """A few lines for a person: the delta, the estimates that moved, the plans and their costs."""
        lines = [f"delta: {self.delta}"]
        lines += [f"  estimate {change.describe()}" for change in self.estimates] or ["  no estimate moved"]
        lines += [f"  cost factor {op} {old:.3g} -> {new:.3g}" for op, old, new in self.cost_factors]
        before = "no longer runs" if self.previous_now is None else f"now {self.previous_now.cost:.4g} core-s"
        lines.append(f"previous plan: {self.previous.join_order()}  (was {self.previous.cost:.4g} core-s, {before})")
        if self.changed:
            lines.append(f"new plan:      {self.plan.join_order()}  ({self.plan.cost:.4g} core-s)")
            lines.append("entries with a new best plan: "
                         + ", ".join(f"{{{', '.join(relations)}}}[{prop}]" for relations, prop in self.entries))
        else:
            lines.append("the best plan is the same")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "changed": self.changed,
            "estimates": [{"relations": list(c.relations), "old_rows": c.old_rows, "new_rows": c.new_rows}
                          for c in self.estimates],
            "cost_factors": [{"operator": op, "old": old, "new": new} for op, old, new in self.cost_factors],
            "previous": {"join_order": self.previous.join_order(), "key": self.previous.key(),
                         "cost": self.previous.cost,
                         "cost_now": None if self.previous_now is None else self.previous_now.cost},
            "plan": {"join_order": self.plan.join_order(), "key": self.plan.key(), "cost": self.plan.cost},
            "entries": [{"relations": list(relations), "property": prop} for relations, prop in self.entries],
            "predicted_saving": self.predicted_saving,
        }


def saving(old: Plan | None, new: Plan, old_name: str) -> str:
    """What moving from ``old`` (costed under the current statistics; None if it can no longer run)
    to ``new`` is predicted to save, in words."""
    if old is None:
        return f"{old_name} can no longer run"
    if old.cost <= 0:
        return f"the new plan costs {new.cost:.4g} core-s"
    return f"{old_name} now costs {old.cost:.4g} core-s, the new one {new.cost:.4g} ({1 - new.cost / old.cost:.0%} less)"


def changed_entries(previous: Plan, plan: Plan) -> tuple[tuple[tuple[str, ...], str], ...]:
    """The (relations, property) entries of ``plan`` whose sub-plan is not the one ``previous`` used
    for that entry (or that ``previous`` did not use), in the order of ``Plan.nodes()``."""

    def signature(node: PlanNode) -> tuple:
        return (node.op, node.expr, node.prop, tuple(signature(child) for child in node.children))

    before = {(node.expr, node.prop): signature(node) for node in previous.nodes()}
    return tuple((tuple(plan.query.names(node.expr)), node.prop) for node in plan.nodes()
                 if before.get((node.expr, node.prop)) != signature(node))
