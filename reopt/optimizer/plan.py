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
        self._key: str | None = None  # a plan is never changed once built, so its key is kept

    @property
    def cost(self) -> float:
        return self.root.cost

    def key(self) -> str:
        """A canonical string of the plan: operators, their inputs in order, and the relations scanned."""

        def render(node: PlanNode) -> str:
            if node.op == SCAN:
                return f"scan({self.query.names(node.expr)[0]})"
            return f"{node.op}({','.join(render(c) for c in node.children)})"

        if self._key is None:
            self._key = render(self.root)
        return self._key

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

    def join_predicates(self, node: PlanNode) -> list[str]:
        """A join node's equalities, each as ``left column = right column`` (both sides named)."""
        left, right = node.children
        out = []
        for p in self.query.joins_between(left.expr, right.expr):
            a, b = (p.left, p.right) if self.query.bit(p.left.alias) & left.expr else (p.right, p.left)
            out.append(f"{a} = {b}")
        return sorted(out)

    def _label(self, node: PlanNode) -> str:
        if node.op == SCAN:
            return f"scan {self.query.names(node.expr)[0]}"
        if node.op not in JOINS:
            return node.op
        left, right = node.children
        label = f"{node.op} on {', '.join(self.join_predicates(node))}"
        if node.op != "broadcast_hash_join":
            label += f", partitioned by {left.prop[left.prop.index('[') + 1:-1]}"
        if node.op != "sort_merge_join":
            label += f" (build: {self.query.label(right.expr)})"
        return label

    def explain(self) -> str:
        """One line per operator: what it does, the property it delivers, estimated rows and its
        cost (the subtree's and its own) in the cost model's unit, core-s: about a second of one core."""
        lines: list[str] = []

        def walk(node: PlanNode, depth: int) -> None:
            lines.append(
                f"{'  ' * depth}{self._label(node)}  [{node.prop}]  rows={node.rows:,.0f}  "
                f"cost={node.cost:.6g} core-s (own {node.local_cost:.6g})"
            )
            for child in node.children:
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The plan as plain data (JSON-ready): its cost, join order and key, and the operator tree."""

        def node(n: PlanNode) -> dict:
            out = {"operator": n.op, "relations": self.query.names(n.expr), "property": n.prop,
                   "rows": n.rows, "cost": n.cost, "own_cost": n.local_cost}
            if n.op in JOINS:
                out["predicates"] = self.join_predicates(n)
            if n.op in ("broadcast_hash_join", "shuffled_hash_join"):
                out["build"] = self.query.names(n.children[1].expr)
            out["children"] = [node(c) for c in n.children]
            return out

        return {"cost": self.cost, "cost_unit": "core-s (about a second of one core)", "join_order": self.join_order(),
                "key": self.key(), "root": node(self.root)}

    def to_dot(self) -> str:
        """The plan tree in Graphviz dot, one box per operator (render with ``dot -Tpng``)."""
        lines = ["digraph plan {", '  node [shape=box, fontname="Helvetica"];']
        counter = iter(range(1 << 30))

        def walk(n: PlanNode) -> int:
            me = next(counter)
            text = f"{self._label(n)}\\n[{n.prop}] rows={n.rows:,.0f}\\ncost={n.cost:.4g} core-s".replace('"', "'")
            lines.append(f'  n{me} [label="{text}"];')
            for child in n.children:
                lines.append(f"  n{me} -> n{walk(child)};")
            return me

        walk(self.root)
        lines.append("}")
        return "\n".join(lines)

    def _signature(self) -> tuple:
        def sign(n: PlanNode) -> tuple:
            return (n.op, tuple(self.query.names(n.expr)), n.prop, n.cost, tuple(sign(c) for c in n.children))

        return sign(self.root)

    def __eq__(self, other: object) -> bool:
        """Plans are equal when they run the same operators on the same relations with the same
        properties, at the same cost: what "re-optimization equals full optimization" means."""
        if not isinstance(other, Plan):
            return NotImplemented
        return self._signature() == other._signature()

    def __hash__(self) -> int:
        return hash(self._signature())

    def __repr__(self) -> str:
        return f"Plan(cost={self.cost:.6g}, {self.join_order()})"
