"""Join Order Benchmark at full size: every query, each optimizer, each in its own process.

For each of the 113 queries the package ships (``workloads.job_sql``, with ``job_catalog``'s IMDB statistics):
relations, connected sub-expressions and connected splits (the size of the space), and four
optimizers each run in a fresh process under ``--timeout`` seconds:

* ``default``: the declarative optimizer as shipped (``OptimizerConfig()``), then re-optimized after
  each change below (each change applied to the original statistics, and undone after);
* ``none``: the declarative optimizer with no pruning (initial optimization only);
* ``topdown``: the Volcano-style baseline, then a full top-down optimization of each changed catalog
  (what incremental re-optimization is measured against);
* ``bottomup``: the System R-style baseline;

and what a user would plan with instead (``external_planners.py``), each planning every query from
scratch in one process of its own, nothing executed:

* ``duckdb``: DuckDB's ``EXPLAIN`` over the IMDB schema (DPhyp below 12 relations, greedy above);
* ``spark_cbo``: Spark's cost-based join reordering, the optimized logical plan only (dynamic
  programming up to 12 relations, none above).

The changes: the selectivity of the query's first join predicate (by text) x8 and x1/8, and the row
count of its largest table x8. Times are the process's CPU seconds. The default makes and undoes each
change ``--repeat`` times and its re-optimization is timed as their median (as ``bench_reopt.py``
times its changes); the first of them, after ``optimize()``, does one-off work (it builds the indexes
its delta plans look up), and each change's first run is reported apart (``*_first_s``, and the summary's last lines). Top-down builds a new
optimizer for each catalog, so it is timed once per change. A timeout, or a peak resident set
over ``--memory`` GB, is recorded as a failure, never dropped, and so is a query the optimizers'
default size limit refuses (``QueryTooLargeError``, status ``refused``). Every plan is compared with
top-down's (cost and key) where top-down finished.

Writes ``job.json``, ``job.csv`` and ``job.png`` (time against relations, log scale, one series per
optimizer; below it, each change's re-optimization against the default's own initial optimization)
to ``--out`` and prints a summary by size class: re-optimization's time, and its speed against a
full top-down optimization and against the default optimizer's own initial optimization (above 1x,
re-optimizing pays; below, optimizing again would have been faster), then, per size class,
re-optimization after a join's change against DuckDB and Spark planning the query from scratch.

    .venv/bin/python experiments/bench_job.py [--only 1a,26a] [--timeout 60] [--jobs 1] [--repeat 3] [--resume]
        [--out experiments/out/job]
"""

from __future__ import annotations

import argparse
import json
import resource
import queue
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from results import Results

OPTIMIZERS = ("default", "none", "topdown", "bottomup")
EXTERNAL = ("duckdb", "spark_cbo")
CHANGES = ("join x8", "join x1/8", "table x8")
CLASSES = ((4, 6), (7, 9), (10, 12), (13, 17))


# -- one optimizer on one query, in a child process ---------------------------------------------

def _changes(query, catalog):
    """The measured changes as (name, change, undo) DeltaStats triples."""
    import reopt
    from changes import selectivity_change

    predicate = sorted(p.text for p in query.joins)[0]
    up, restore = selectivity_change(query, catalog, predicate, 8.0)
    down, _ = selectivity_change(query, catalog, predicate, 0.125)
    table = max({t for _, t in query.relations}, key=lambda t: (catalog.table(t).rows, t))
    rows = catalog.table(table).rows
    grow = reopt.DeltaStats.table(table, rows=rows * 8)
    return [("join x8", up, restore), ("join x1/8", down, restore),
            ("table x8", grow, reopt.DeltaStats.table(table, rows=rows))]


def _cpu(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def child(name: str, optimizer: str, repeat: str) -> None:
    """Prints one JSON line per finished step, so that a step over the time limit loses only itself."""
    import reopt
    from reopt.optimizer import parse_sql

    def report(**fields) -> None:
        fields["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(fields), flush=True)

    from reopt.optimizer.workloads import job_catalog, job_sql

    catalog = job_catalog()
    query = parse_sql(job_sql(name), catalog)
    report(subsets=len(query.connected_subsets()), pairs=len(query.connected_pairs()))
    changes = _changes(query, catalog)
    try:
        _measure(query, catalog, optimizer, changes, report, int(repeat))
    except reopt.QueryTooLargeError as exc:  # the configured limit refused it before building anything
        report(status=f"refused: {str(exc)[:160]}")


def _measure(query, catalog, optimizer: str, changes, report, repeat: int) -> None:
    import reopt
    from reopt.baselines import BottomUpOptimizer, TopDownOptimizer

    if optimizer in ("default", "none"):
        config = reopt.OptimizerConfig() if optimizer == "default" else reopt.OptimizerConfig.setting("none")
        opt = reopt.Optimizer(query, catalog, config)
        plan, seconds = _cpu(opt.optimize)
        report(optimize_s=seconds, plan_initial=[plan.cost, plan.key()])
        for label, change, undo in changes if optimizer == "default" else ():
            # Made and undone `repeat` times, timed as the median, as bench_reopt.py does: the first
            # re-optimization after optimize() does one-off work (it builds the indexes its delta
            # plans look up, docs/architecture.md, and meets cold caches: 23b 18.7 ms, then 10.9 and
            # 11.2), so the first run is reported apart (`_first_s`). Each attempt reports, so that
            # no step waits longer than the time limit.
            times = []
            for _ in range(repeat):
                plan, seconds = _cpu(lambda: opt.reoptimize(change))
                opt.reoptimize(undo)
                times.append(seconds)
                report(**{f"{label}_s": statistics.median(times), f"{label}_first_s": times[0],
                          f"{label}_runs": len(times), f"plan_{label}": [plan.cost, plan.key()]})
    else:
        kind = TopDownOptimizer if optimizer == "topdown" else BottomUpOptimizer
        plan, seconds = _cpu(lambda: kind(query, catalog).optimize())
        report(optimize_s=seconds, plan_initial=[plan.cost, plan.key()])
        if optimizer == "topdown":
            # The same sequence of statistics the declarative optimizer sees: an undo sets the old
            # selectivity as a learnt one, which is not quite the catalog before the change.
            current = catalog
            for label, change, undo in changes:
                changed = change.apply(current, query)
                plan, seconds = _cpu(lambda: kind(query, changed).optimize())
                report(**{f"{label}_s": seconds, f"plan_{label}": [plan.cost, plan.key()]})
                current = undo.apply(changed, query)


def external_child(planner: str, names: str, repeat: str) -> None:
    """Plans each query with an external planner; one JSON line when ready, then one per query."""
    from external_planners import PLANNERS

    from reopt.optimizer.workloads import job_catalog, job_sql

    instance = PLANNERS[planner](job_catalog())
    print(json.dumps({"ready": instance.version}), flush=True)
    for name in names.split(","):
        sql = job_sql(name)
        try:
            record = {"query": name, "optimize_s": instance.seconds(sql, int(repeat)), "joins": instance.joins(sql)}
        except instance.refusals as exc:  # recorded, and the others go on
            record = {"query": name, "error": " ".join(str(exc).split())[:200]}
        print(json.dumps(record), flush=True)
    instance.close()


# -- the driver -----------------------------------------------------------------------------------

def _lines_of(process: subprocess.Popen) -> queue.Queue:
    """A queue of the child's output lines, then None when it closes its output."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, process.stdout), lines.put(None)], daemon=True).start()
    return lines


def run_one(name: str, optimizer: str, relations: int, timeout: float, memory_gb: float, repeat: int) -> dict:
    """Runs one child; each of its steps may take ``timeout`` seconds (wall) before it is killed."""
    process = subprocess.Popen([sys.executable, __file__, "--child", f"{name}:{optimizer}:{repeat}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = _lines_of(process)
    result = {"query": name, "optimizer": optimizer, "relations": relations, "status": "ok"}
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            process.kill()
            result["status"] = f"timeout ({timeout:.0f} s)"
            break
        if line is None:
            break
        result.update(json.loads(line))
    process.wait()
    if result["status"] == "ok" and process.returncode != 0:
        last = (process.stderr.read().strip().splitlines() or [f"exit code {process.returncode}"])[-1]
        result["status"] = f"error: {last[:200]}"
    if result.get("peak_mb", 0) > memory_gb * 1024:
        result["status"] = f"over memory ({result['peak_mb']:.0f} MB)"
    if result.get("optimize_s", 0) > timeout:  # CPU seconds over the limit, though the wall clock was not
        result["status"] = f"timeout ({timeout:.0f} s)"
    # Re-optimization steps may time out after an initial optimization that finished in time.
    result["initial_ok"] = "optimize_s" in result and result["optimize_s"] <= timeout and not result[
        "status"].startswith(("over memory", "error"))
    return result


def run_external(planner: str, names: list[str], relations: dict[str, int], timeout: float,
                 repeat: int) -> list[dict]:
    """Runs one child planning every query in ``names``; a query over ``timeout`` seconds (wall) is
    recorded as a timeout and the child is started again for the rest."""
    results: list[dict] = []

    def failed(query: str, status: str) -> None:
        results.append({"query": query, "optimizer": planner, "status": status, "initial_ok": False})

    left = list(names)
    while left:
        process = subprocess.Popen([sys.executable, __file__, "--external", f"{planner}:{','.join(left)}:{repeat}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = _lines_of(process)
        version = None
        while left:
            try:
                line = lines.get(timeout=timeout if version else max(timeout, 300.0))  # start-up: a JVM
            except queue.Empty:
                process.kill()
                failed(left.pop(0), f"timeout ({timeout:.0f} s)")
                break
            if line is None:
                process.wait()
                error = (process.stderr.read().strip().splitlines() or [f"exit code {process.returncode}"])[-1]
                for query in left:
                    failed(query, f"error: {error[:200]}")
                left = []
                break
            record = json.loads(line)
            if "ready" in record:
                version = record["ready"]
                continue
            left.remove(record["query"])
            if "error" in record:
                failed(record["query"], f"error: {record['error']}")
            else:
                results.append({**record, "optimizer": planner, "status": "ok", "initial_ok": True,
                                "version": version})
        process.kill()
        process.wait()
    for r in results:
        r["relations"] = relations[r["query"]]
    return results


def agreement(results: list[dict]) -> tuple[int, int, list[str]]:
    """(plans compared, plans equal to top-down's, the mismatches)."""
    topdown = {r["query"]: r for r in results if r["optimizer"] == "topdown"}
    compared = equal = 0
    mismatches = []
    for r in results:
        want = topdown.get(r["query"])
        if r["optimizer"] == "topdown" or want is None:
            continue
        for field in ("plan_initial", *(f"plan_{c}" for c in CHANGES)):
            if field in r and field in want and (field == "plan_initial" or r["optimizer"] != "bottomup"):
                compared += 1
                if r[field] == want[field]:
                    equal += 1
                else:
                    mismatches.append(f"{r['query']} {r['optimizer']} {field}: {r[field]} vs top-down {want[field]}")
    return compared, equal, mismatches


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3g}" if values else "-"


def summary(results: list[dict], optimizers: list[str]) -> list[str]:
    """The table by size class, with rows over all queries and over those of 10 or more relations,
    then the headline figures read off the same results."""
    by = {(r["query"], r["optimizer"]): r for r in results}
    queries = sorted({r["query"] for r in results})
    size = {r["query"]: r["relations"] for r in results}
    lines = ["| relations | queries | " + " | ".join(f"{o} s (fail)" for o in optimizers)
             + " | re-opt default s | re-opt vs full top-down (median, worst) "
             + "| re-opt vs own optimize (join changes; table change) | peak MB default |",
             "| --- " * (6 + len(optimizers)) + "|"]
    groups = [(f"{low}-{high}", low, high) for low, high in CLASSES] + [("all", 0, 99), ("10+", 10, 99)]
    for label, low, high in groups:
        members = [q for q in queries if low <= size.get(q, 0) <= high]
        if not members:
            continue
        cells = []
        for o in optimizers:
            ok = [by[q, o]["optimize_s"] for q in members if by.get((q, o), {}).get("initial_ok")]
            cells.append(f"{_median(ok)} ({len(members) - len(ok)})")
        reopt_times, ratios = [], []
        own: dict[bool, list[float]] = {False: [], True: []}  # keyed by: is it the table's change
        for q in members:
            d, t = by.get((q, "default"), {}), by.get((q, "topdown"), {})
            for change in CHANGES:
                field = f"{change}_s"
                if field in d:
                    reopt_times.append(d[field])
                    own[change.startswith("table")].append(d["optimize_s"] / max(d[field], 1e-6))
                    if field in t:
                        ratios.append(t[field] / max(d[field], 1e-6))
        peaks = [by[q, "default"]["peak_mb"] for q in members if "peak_mb" in by.get((q, "default"), {})]
        ratio = f"{statistics.median(ratios):.2f}x, {min(ratios):.2f}x" if ratios else "-"
        peak = f"{max(peaks):.0f}" if peaks else "-"
        own_cell = "; ".join(f"{statistics.median(v):.2f}x" if v else "-" for v in (own[False], own[True]))
        lines.append(f"| {label} | {len(members)} | " + " | ".join(cells)
                     + f" | {_median(reopt_times)} | {ratio} | {own_cell} | {peak} |")
    return lines + headline(by, queries, size) + against_external(by, queries, size, optimizers)


def against_external(by: dict, queries: list[str], size: dict[str, int], optimizers: list[str]) -> list[str]:
    """Per size class: the default's re-optimization after a join's change against each external
    planner planning the query from scratch (the medians, and their ratio: above 1x reopt is faster)."""
    lines = []
    for planner in (o for o in optimizers if o in EXTERNAL):
        for low, high in CLASSES:
            members = [q for q in queries if low <= size[q] <= high]
            reopt = [by[q, "default"][f"{c}_s"] for q in members for c in ("join x8", "join x1/8")
                     if f"{c}_s" in by.get((q, "default"), {})]
            planned = [by[q, planner]["optimize_s"] for q in members if by.get((q, planner), {}).get("initial_ok")]
            if reopt and planned:
                ratio = statistics.median(planned) / max(statistics.median(reopt), 1e-9)
                lines.append(f"{low}-{high} relations: re-opt after a join's change {_median(reopt)} s, "
                             f"{planner} plans from scratch in {_median(planned)} s: reopt {ratio:.2f}x as fast")
    return lines


def headline(by: dict, queries: list[str], size: dict[str, int]) -> list[str]:
    """The headline figures: how many queries the default optimized within the limits, the median
    initial optimization, and re-optimization after a join's change against a full top-down one."""
    default = [by[q, "default"] for q in queries if (q, "default") in by]
    optimized = [r for r in default if r.get("initial_ok")]
    lines = []
    if optimized:
        slowest = max(optimized, key=lambda r: r["optimize_s"])
        largest = max((r for r in default if "peak_mb" in r), key=lambda r: r["peak_mb"], default=None)
        lines.append(f"default: {len(optimized)} of {len(default)} optimized; median {_median([r['optimize_s'] for r in optimized])} s; "
                     f"slowest {slowest['query']} {slowest['optimize_s']:.1f} s"
                     + (f"; largest peak {largest['query']} {largest['peak_mb']:.0f} MB" if largest else ""))
    for timed, suffix in (("", "_s"), ("each change's first run alone, ", "_first_s")):
        for label, low in (("all queries", 0), ("10 or more relations", 10)):
            ratios, times = [], []
            for q in queries:
                if size[q] < low:
                    continue
                d, t = by.get((q, "default"), {}), by.get((q, "topdown"), {})
                for change in ("join x8", "join x1/8"):
                    if f"{change}{suffix}" in d:
                        times.append(d[f"{change}{suffix}"])
                        if f"{change}_s" in t:
                            ratios.append(t[f"{change}_s"] / max(d[f"{change}{suffix}"], 1e-6))
            if ratios:
                lines.append(f"after a join's change, {timed}{label}: re-opt {statistics.median(ratios):.2f}x a full "
                             f"top-down at the median over {len(ratios)}, in {_median(times)} s")
    return lines


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, gain) = plt.subplots(2, 1, figsize=(8, 9), height_ratios=(3, 2))
    for i, o in enumerate((*OPTIMIZERS, *EXTERNAL)):
        ok = [(r["relations"] + (i - 2.5) * 0.08, r["optimize_s"]) for r in results
              if r["optimizer"] == o and r["initial_ok"]]
        if ok:
            ax.scatter(*zip(*ok), s=14, label=f"{o}: {'plan' if o in EXTERNAL else 'optimize'}", alpha=0.7)
    reopt_points = [(r["relations"], r["join x8_s"]) for r in results
                    if r["optimizer"] == "default" and "join x8_s" in r]
    if reopt_points:
        ax.scatter(*zip(*reopt_points), s=14, marker="x", label="default: re-optimize (join x8)")
    ax.set_yscale("log")
    ax.set_xlabel("relations in the query")
    ax.set_ylabel("seconds (log scale; Spark's wall clock, the others' CPU)")
    ax.set_title("Join Order Benchmark: optimization time per query (timeouts and refusals not shown)")
    ax.legend(fontsize=8)
    # what re-optimizing saves over the same optimizer optimizing again; below 1x it costs more
    for i, change in enumerate(CHANGES):
        points = [(r["relations"] + (i - 1) * 0.12, r["optimize_s"] / max(r[f"{change}_s"], 1e-6)) for r in results
                  if r["optimizer"] == "default" and f"{change}_s" in r]
        if points:
            gain.scatter(*zip(*points), s=12, alpha=0.7, label=f"after {change}")
    gain.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    gain.set_yscale("log")
    gain.set_xlabel("relations in the query")
    gain.set_ylabel("initial optimization / re-optimization")
    gain.set_title("default: re-optimization's speed against optimizing again (below the line it is slower)")
    gain.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated query names, e.g. 1a,26a")
    parser.add_argument("--optimizers", default=",".join((*OPTIMIZERS, *EXTERNAL)))
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--memory", type=float, default=4.0, help="GB of peak resident memory allowed")
    parser.add_argument("--jobs", type=int, default=1, help="processes at once (1 keeps CPU times honest)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="times each change is made and undone; the default's re-optimization is their median")
    Results.option(parser, "bench_job")
    parser.add_argument("--resume", action="store_true", help="keep the results already in OUT/bench_job.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--external", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.child:
        child(*args.child.split(":"))
        return
    if args.external:
        external_child(*args.external.split(":"))
        return
    from reopt.optimizer import parse_sql
    from reopt.optimizer.workloads import JOB_NAMES, job_catalog, job_sql

    names = args.only.split(",") if args.only else list(JOB_NAMES)
    unknown = sorted(set(names) - set(JOB_NAMES))
    if unknown:
        parser.error(f"--only names no JOB query: {', '.join(unknown)}")
    optimizers = args.optimizers.split(",")
    unknown = sorted(set(optimizers) - {*OPTIMIZERS, *EXTERNAL})
    if unknown:
        parser.error(f"--optimizers names no optimizer: {', '.join(unknown)}; they are "
                     f"{', '.join((*OPTIMIZERS, *EXTERNAL))}")
    catalog = job_catalog()
    relations = {n: len(parse_sql(job_sql(n), catalog).relations) for n in names}
    output = Results.of(args, "bench_job")
    saved = output.path("json")
    # Results are saved after every task, so an interrupted run resumes where it stopped (--resume).
    results: list[dict] = json.loads(saved.read_text()) if args.resume and saved.exists() else []
    done = {(r["query"], r["optimizer"]) for r in results}
    for planner in (o for o in optimizers if o in EXTERNAL):
        todo = [n for n in names if (n, planner) not in done]
        if todo:
            print(f"{planner}: planning {len(todo)} queries from scratch", flush=True)
            results += run_external(planner, todo, relations, args.timeout, args.repeat)
            saved.write_text(json.dumps(results, indent=1))
    tasks = [(n, o) for n in names for o in optimizers if (n, o) not in done and o not in EXTERNAL]
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, n, o, relations[n], args.timeout, args.memory, args.repeat) for n, o in tasks]
        for i, future in enumerate(futures, 1):
            r = future.result()
            results.append(r)
            saved.write_text(json.dumps(results, indent=1))
            detail = f"optimized in {r['optimize_s']:.3f} s" if "optimize_s" in r else ""
            detail += "" if r["status"] == "ok" else f" {r['status']}"
            print(f"[{i}/{len(tasks)}] {r['query']} {r['optimizer']}: {detail}", flush=True)
    results = [r for r in results if r["query"] in relations and r["optimizer"] in optimizers]
    fields = ["query", "optimizer", "status", "relations", "subsets", "pairs", "optimize_s",
              *[f"{c}_s" for c in CHANGES], *[f"{c}_first_s" for c in CHANGES], "peak_mb", "joins"]
    output.csv(results, fields)
    plot(results, output.png())
    print("\n".join(summary(results, optimizers)))
    compared, equal, mismatches = agreement(results)
    print(f"plans equal to top-down's: {equal} of {compared} compared")
    for m in mismatches[:10]:
        print("  MISMATCH", m)
    print(f"wrote {saved}, {output.path('csv')}, {output.png()}")
    if mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
