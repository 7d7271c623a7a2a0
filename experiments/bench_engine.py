"""Engine benchmark: shortest paths on a random graph, from scratch vs single-edge updates, per backend.

Times, in one process and for each evaluation backend (native and python side by side), a
from-scratch evaluation of reopt/rules/examples/shortest_paths.dl (new engine, all facts inserted, run)
and the same sequence of single-edge updates of four kinds (weight up, weight down, insert, delete),
and prints medians, the ratio scratch / update, and native's speedup over python. Each backend's
final incremental state is checked against networkx Dijkstra, so the figures are for correct results.

    .venv/bin/python experiments/bench_engine.py [--edges 10000] [--updates 40] [--backends native,python] [--json out.json]
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

RULES = Path(__file__).resolve().parent.parent / "reopt" / "rules" / "examples" / "shortest_paths.dl"


def random_graph(n_edges: int, rng: random.Random) -> dict[tuple[int, int], int]:
    nodes = max(2, n_edges // 5)
    edges: dict[tuple[int, int], int] = {}
    while len(edges) < n_edges:
        x, y = rng.randrange(nodes), rng.randrange(nodes)
        if x != y:
            edges[(x, y)] = rng.randint(1, 100)
    return edges


def from_scratch(program: Program, edges: dict, backend: str) -> tuple[Engine, float]:
    start = time.perf_counter()
    engine = Engine(program, backend=backend)
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


def measure(program: Program, edges: dict, backend: str, args) -> dict:
    """From-scratch and update medians for one backend; the update sequence depends only on the seed."""
    edges = dict(edges)
    rng = random.Random(args.seed + 1)
    nodes = max(2, args.edges // 5)
    from_scratch(program, edges, backend)  # warm-up
    scratch = [from_scratch(program, edges, backend)[1] for _ in range(args.scratch_runs)]
    engine, _ = from_scratch(program, edges, backend)
    kinds = ["weight up", "weight down", "insert", "delete"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.updates):
        for kind in kinds:
            times[kind].append(one_update(engine, edges, kind, rng, nodes))
    graph = nx.DiGraph()
    graph.add_weighted_edges_from((x, y, w) for (x, y), w in edges.items())
    expected = set(nx.single_source_dijkstra_path_length(graph, 0).items())
    return {
        "backend": backend,
        "correct": engine.rows("dist") == expected,
        "scratch": scratch,
        "updates": times,
        "any": [t for ts in times.values() for t in ts],
    }


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[-1] if len(samples) > 1 else samples[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=40, help="updates of each kind")
    parser.add_argument("--scratch-runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backends", default="native,python", help="comma-separated evaluation backends")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    edges = random_graph(args.edges, random.Random(args.seed))
    program = Program.load(RULES)
    results = [measure(program, edges, b, args) for b in args.backends.split(",")]
    print(f"shortest paths, {len(edges)} edges, {max(2, args.edges // 5)} nodes; "
          + "; ".join(f"{r['backend']} final state equals networkx: {r['correct']}" for r in results))
    print(f"{'backend':<9}{'operation':<14}{'runs':>6}{'median ms':>12}{'p90 ms':>10}{'scratch/median':>16}")
    for r in results:
        scratch = statistics.median(r["scratch"])
        for label, samples in [("from scratch", r["scratch"]), *r["updates"].items(), ("any update", r["any"])]:
            median = statistics.median(samples)
            print(f"{r['backend']:<9}{label:<14}{len(samples):>6}{median * 1e3:>12.3f}{p90(samples) * 1e3:>10.3f}"
                  f"{scratch / median:>16.1f}")
    by = {r["backend"]: r for r in results}
    if "native" in by and "python" in by:
        n, p = by["native"], by["python"]
        scratch_x = statistics.median(p["scratch"]) / statistics.median(n["scratch"])
        update_x = statistics.median(p["any"]) / statistics.median(n["any"])
        print(f"native vs python: from scratch {scratch_x:.1f}x faster (target 10x: {'met' if scratch_x >= 10 else 'NOT met'}), "
              f"median update {update_x:.1f}x faster (target 5x: {'met' if update_x >= 5 else 'NOT met'})")
    if args.json:
        record = [{
            "backend": r["backend"],
            "edges": len(edges),
            "correct": r["correct"],
            "scratch_median_s": statistics.median(r["scratch"]),
            "update_median_s": {k: statistics.median(v) for k, v in r["updates"].items()},
            "any_update_median_s": statistics.median(r["any"]),
        } for r in results]
        Path(args.json).write_text(json.dumps(record, indent=2))
    if not all(r["correct"] for r in results):
        raise SystemExit("incremental state differs from networkx")


if __name__ == "__main__":
    main()
