"""A chosen physical plan: a tree of Spark operators with estimates, a canonical key, and explain."""

from __future__ import annotations

from dataclasses import dataclass, field

from .plan_space import JOINS, SCAN


@dataclass
class PlanNode:
    op: str
    expr: int
    prop: str
    cost: float  # cumulative cost of the subtree
    local_cost: float
    rows: float
    children: list["PlanNode"] = field(default_factory=list)


class Plan:
    def __init__(self, root: PlanNode, query):
        self.root = root
        self.query = query

    @property
    def cost(self) -> float:
        return self.root.cost

    def key(self) -> str:
        """A canonical string of the plan: operators, their inputs in order, and the relations scanned."""

        def render(node: PlanNode) -> str:
            if node.op == SCAN:
                return f"scan({self.query.names(node.expr)[0]})"
            return f"{node.op}({','.join(render(c) for c in node.children)})"

        return render(self.root)

    def join_order(self) -> str:
        """The join tree without enforcers, e.g. ``((customer BHJ orders) SMJ lineitem)``."""
        short = {"broadcast_hash_join": "BHJ", "shuffled_hash_join": "SHJ", "sort_merge_join": "SMJ"}

        def render(node: PlanNode) -> str:
            if node.op == SCAN:
                return self.query.names(node.expr)[0]
            if node.op not in JOINS:
                return render(node.children[0])
            left, right = node.children
            return f"({render(left)} {short[node.op]} {render(right)})"

        return render(self.root)

    def joins(self) -> list[PlanNode]:
        """The join nodes, bottom-up (children before parents)."""
        return [node for node in self.nodes() if node.op in JOINS]

    def nodes(self) -> list[PlanNode]:
        """Every node of the plan, children before parents."""
        out: list[PlanNode] = []

        def walk(node: PlanNode) -> None:
            for child in node.children:
                walk(child)
            out.append(node)

        walk(self.root)
        return out

    def explain(self) -> str:
        lines: list[str] = []

        def walk(node: PlanNode, depth: int) -> None:
            label = node.op
            if node.op == SCAN:
                label = f"scan {self.query.names(node.expr)[0]}"
            elif node.op in JOINS:
                left, right = node.children
                keys = ", ".join(self.query.join_keys(left.expr, right.expr))
                label = f"{node.op} on {keys}"
                if node.op != "broadcast_hash_join":
                    label += f", partitioned by {left.prop[left.prop.index('[') + 1:-1]}"
                if node.op != "sort_merge_join":
                    label += f" (build: {self.query.label(right.expr)})"
            lines.append(
                f"{'  ' * depth}{label}  [{node.prop}]  rows={node.rows:,.0f}  "
                f"cost={node.cost:.6g} (local {node.local_cost:.6g})"
            )
            for child in node.children:
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Plan(cost={self.cost:.6g}, {self.join_order()})"
