"""Engine benchmark: shortest paths on a random graph, from scratch vs single-edge updates, per backend.

Times, in one process and for each evaluation backend (native and python side by side), a
from-scratch evaluation of rules/examples/shortest_paths.dl (new engine, all facts inserted, run)
and the same sequence of single-edge updates of four kinds (weight up, weight down, insert, delete),
and prints medians, the ratio scratch / update, and native's speedup over python. Each backend's
final incremental state is checked against networkx Dijkstra, so the figures are for correct results.
The backends take turns (each from-scratch round, and each block of 40 updates, timed on one backend
after the other), so that the ratios between them hold on a shared machine whose load drifts.

    .venv/bin/python experiments/bench_engine.py [--edges 10000] [--updates 40] [--backends native,python] [--out DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import networkx as nx

from reopt.datalog import Engine, Program
from results import Results
from timing import interleaved_samples

BLOCK = 10  # updates of each kind timed on one backend before the next takes its turn
RULES = Path(__file__).resolve().parent.parent / "rules" / "examples" / "shortest_paths.dl"


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


def next_update(edges: dict, kind: str, rng: random.Random, nodes: int) -> tuple:
    """A random update of this kind, as (kind, edge, old weight, new weight); ``edges`` is not changed."""
    if kind == "insert":
        while True:
            x, y = rng.randrange(nodes), rng.randrange(nodes)
            if x != y and (x, y) not in edges:
                return kind, (x, y), None, rng.randint(1, 100)
    (x, y), w = rng.choice(list(edges.items()))
    if kind == "delete":
        return kind, (x, y), w, None
    return kind, (x, y), w, w + rng.randint(1, 50) if kind == "weight up" else max(1, w - rng.randint(1, 50))


def apply_update(engine: Engine, update: tuple) -> float:
    """Queue the update and run the engine; the seconds both took."""
    kind, (x, y), old, new = update
    start = time.perf_counter()
    if kind == "insert":
        engine.insert("edge", [(x, y, new)])
    elif kind == "delete":
        engine.delete("edge", [(x, y, old)])
    else:
        engine.update("edge", old=(x, y, old), new=(x, y, new))
    engine.run()
    return time.perf_counter() - start


def measure(program: Program, edges: dict, backends: list[str], args) -> list[dict]:
    """From-scratch and update times per backend, the backends taking turns so that a shared
    machine's drifting load reaches all of them alike. The update sequence depends only on the seed."""
    edges = dict(edges)
    rng = random.Random(args.seed + 1)
    nodes = max(2, args.edges // 5)
    scratch = interleaved_samples({b: lambda b=b: from_scratch(program, edges, b) for b in backends},
                                  args.scratch_runs)
    engines = {b: from_scratch(program, edges, b)[0] for b in backends}
    kinds = ["weight up", "weight down", "insert", "delete"]
    times = {b: {k: [] for k in kinds} for b in backends}
    # Updates in blocks of ten of each kind, each block timed on every backend in turn: a block is
    # long enough for a backend to run with its own data in cache, short enough to share the load.
    for start in range(0, args.updates, BLOCK):
        block = []
        for _ in range(min(BLOCK, args.updates - start)):
            for kind in kinds:
                update = next_update(edges, kind, rng, nodes)
                block.append(update)
                _, edge, _, new = update
                if new is None:
                    del edges[edge]
                else:
                    edges[edge] = new
        for b in backends:
            for update in block:
                times[b][update[0]].append(apply_update(engines[b], update))
    graph = nx.DiGraph()
    graph.add_weighted_edges_from((x, y, w) for (x, y), w in edges.items())
    expected = set(nx.single_source_dijkstra_path_length(graph, 0).items())
    return [{
        "backend": b,
        "correct": engines[b].rows("dist") == expected,
        "scratch": scratch[b],
        "updates": times[b],
        "any": [t for ts in times[b].values() for t in ts],
    } for b in backends]


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[-1] if len(samples) > 1 else samples[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=40, help="updates of each kind")
    parser.add_argument("--scratch-runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backends", default="native,python", help="comma-separated evaluation backends")
    Results.option(parser, "bench_engine")
    args = parser.parse_args()

    edges = random_graph(args.edges, random.Random(args.seed))
    program = Program.load(RULES)
    results = measure(program, edges, args.backends.split(","), args)
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
        print(f"native vs python: from scratch {scratch_x:.2f}x faster, median update {update_x:.2f}x faster")
    record = [{
        "backend": r["backend"],
        "edges": len(edges),
        "correct": r["correct"],
        "scratch_median_s": statistics.median(r["scratch"]),
        "update_median_s": {k: statistics.median(v) for k, v in r["updates"].items()},
        "any_update_median_s": statistics.median(r["any"]),
    } for r in results]
    print(f"wrote {Results.of(args, 'bench_engine').json(record)}")
    if not all(r["correct"] for r in results):
        raise SystemExit("incremental state differs from networkx")


if __name__ == "__main__":
    main()
