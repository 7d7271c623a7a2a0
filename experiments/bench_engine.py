"""Engine benchmark: shortest paths on a random graph, from scratch vs single-edge updates.

Times, in one process, a from-scratch evaluation of rules/examples/shortest_paths.dl (new engine,
all facts inserted, run) and single-edge updates of four kinds (weight up, weight down, insert,
delete), and prints medians and the ratio scratch / update. The final incremental state is checked
against networkx Dijkstra, so the figures are for correct results.

    .venv/bin/python experiments/bench_engine.py [--edges 10000] [--updates 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import networkx as nx

from reopt.datalog import Engine, Program

RULES = Path(__file__).resolve().parent.parent / "rules" / "examples" / "shortest_paths.dl"


def random_graph(n_edges: int, rng: random.Random) -> dict[tuple[int, int], int]:
    nodes = max(2, n_edges // 5)
    edges: dict[tuple[int, int], int] = {}
    while len(edges) < n_edges:
        x, y = rng.randrange(nodes), rng.randrange(nodes)
        if x != y:
            edges[(x, y)] = rng.randint(1, 100)
    return edges


def from_scratch(program: Program, edges: dict) -> tuple[Engine, float]:
    start = time.perf_counter()
    engine = Engine(program)
    engine.insert("source", [(0,)])
    engine.insert("edge", [(x, y, w) for (x, y), w in edges.items()])
    engine.run()
    return engine, time.perf_counter() - start


def one_update(engine: Engine, edges: dict, kind: str, rng: random.Random, nodes: int) -> float:
    if kind == "insert":
        while True:
            x, y = rng.randrange(nodes), rng.randrange(nodes)
            if x != y and (x, y) not in edges:
                break
        edges[(x, y)] = rng.randint(1, 100)
        start = time.perf_counter()
        engine.insert("edge", [(x, y, edges[(x, y)])])
    else:
        (x, y), w = rng.choice(list(edges.items()))
        start = time.perf_counter()
        if kind == "delete":
            engine.delete("edge", [(x, y, w)])
            del edges[(x, y)]
        else:
            new = w + rng.randint(1, 50) if kind == "weight up" else max(1, w - rng.randint(1, 50))
            engine.update("edge", old=(x, y, w), new=(x, y, new))
            edges[(x, y)] = new
    engine.run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=40, help="updates of each kind")
    parser.add_argument("--scratch-runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    edges = random_graph(args.edges, rng)
    nodes = max(2, args.edges // 5)
    program = Program.load(RULES)
    from_scratch(program, edges)  # warm-up
    scratch = [from_scratch(program, edges)[1] for _ in range(args.scratch_runs)]
    engine, _ = from_scratch(program, edges)

    kinds = ["weight up", "weight down", "insert", "delete"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.updates):
        for kind in kinds:
            times[kind].append(one_update(engine, edges, kind, rng, nodes))

    graph = nx.DiGraph()
    graph.add_weighted_edges_from((x, y, w) for (x, y), w in edges.items())
    expected = set(nx.single_source_dijkstra_path_length(graph, 0).items())
    correct = engine.rows("dist") == expected

    scratch_median = statistics.median(scratch)
    all_updates = [t for ts in times.values() for t in ts]
    print(f"shortest paths, {len(edges)} edges, {nodes} nodes; final state equals networkx: {correct}")
    print(f"{'operation':<14}{'runs':>6}{'median ms':>12}{'p90 ms':>10}{'max ms':>10}{'scratch/median':>16}")

    def row(label: str, samples: list[float]) -> float:
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10, method="inclusive")[-1] if len(samples) > 1 else median
        print(f"{label:<14}{len(samples):>6}{median * 1e3:>12.3f}{p90 * 1e3:>10.3f}{max(samples) * 1e3:>10.3f}"
              f"{scratch_median / median:>16.1f}")
        return median

    row("from scratch", scratch)
    for kind in kinds:
        row(kind, times[kind])
    overall = row("any update", all_updates)
    print(f"target: median single-edge update >= 20x faster than from scratch: "
          f"{'met' if scratch_median / overall >= 20 else 'NOT met'}")
    if args.json:
        record = {
            "edges": len(edges),
            "correct": correct,
            "scratch_median_s": scratch_median,
            "update_median_s": {k: statistics.median(v) for k, v in times.items()},
            "any_update_median_s": overall,
            "ratio": scratch_median / overall,
        }
        Path(args.json).write_text(json.dumps(record, indent=2))
    if not correct:
        raise SystemExit("incremental state differs from networkx")


if __name__ == "__main__":
    main()
