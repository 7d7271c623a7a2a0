"""Memory benchmark: peak resident memory of one optimization per backend, each in its own process.

Optimizes one Join Order Benchmark query (default 26a, 12 relations), as the package ships it with its
IMDB statistics, once per evaluation backend, each in a fresh Python process so that
its peak resident set (getrusage) is its own. The query is parsed first; the time, the peak and
the growth are those of building the optimizer and optimizing, and native's share of python's
growth is the figure to read.

    .venv/bin/python experiments/bench_memory.py [--query 26a] [--pruning none] [--timeout 900]
        [--max-join-pairs N|none|auto]   # the optimizer's size limit (default auto: the library's); none lifts it
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace

from results import Results


def child(query: str, pruning: str, backend: str, max_join_pairs: int | str | None) -> None:
    import reopt
    from reopt.optimizer import parse_sql
    from reopt.optimizer.workloads import job_catalog, job_sql

    catalog = job_catalog()
    sql = job_sql(query)
    config = replace(reopt.OptimizerConfig.setting(pruning, backend=backend), max_join_pairs=max_join_pairs)
    parsed = parse_sql(sql, catalog)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    optimizer = reopt.Optimizer(parsed, catalog, config)
    plan = optimizer.optimize()
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"backend": backend, "seconds": elapsed, "peak_bytes": peak, "before_bytes": before,
                      "relations": len(optimizer.query.relations), "cost": plan.cost,
                      "alternatives": optimizer.metrics().alternatives_in_space}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--query", default="26a")
    parser.add_argument("--pruning", default="none")
    parser.add_argument("--backends", default="native,python")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--max-join-pairs", default="auto",
                        type=lambda v: None if v == "none" else v if v == "auto" else int(v),
                        help="the optimizer's size limit in connected pairs, 'none', or 'auto', the library's "
                             "for the pruning setting (default)")
    Results.option(parser, "bench_memory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.query, args.pruning, args.child, args.max_join_pairs)
        return
    results = {}
    for backend in args.backends.split(","):
        print(f"optimizing {args.query} on {backend} ...", flush=True)
        command = [sys.executable, __file__, "--query", args.query, "--pruning", args.pruning, "--child", backend,
                   "--max-join-pairs", str(args.max_join_pairs).lower()]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=True)
        except subprocess.TimeoutExpired:
            print(f"  {backend}: over {args.timeout:.0f} s")
            continue
        except subprocess.CalledProcessError as exc:  # e.g. the size limit refused the query
            print(f"  {backend}: failed: {(exc.stderr.strip().splitlines() or ['no message'])[-1][:300]}")
            continue
        r = results[backend] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  {backend}: {r['relations']} relations, {r['alternatives']} alternatives, {r['seconds']:.2f} s, "
              f"peak {r['peak_bytes'] / 2**20:.1f} MB (grew {(r['peak_bytes'] - r['before_bytes']) / 2**20:.1f} MB), "
              f"cost {r['cost']:.6g}")
    if "native" in results and "python" in results:
        n, p = results["native"], results["python"]
        assert n["cost"] == p["cost"], "the backends chose plans of different cost"
        share = (n["peak_bytes"] - n["before_bytes"]) / (p["peak_bytes"] - p["before_bytes"])
        print(f"native's growth is {share:.3f} of python's; peak {n['peak_bytes'] / p['peak_bytes']:.2f}; "
              f"time {p['seconds'] / n['seconds']:.1f}x faster")
    print(f"wrote {Results.of(args, 'bench_memory').json({'query': args.query, 'pruning': args.pruning, **results})}")


if __name__ == "__main__":
    main()
