"""The ``reopt`` command line.

``reopt demo`` is the main job: an adaptive stream on local Spark over drifting generated data, each
micro-batch run with the current plan and re-optimized from what Spark observed, against the
initial plan kept static and against Spark SQL with AQE (``--workload`` picks the data). ``reopt engine-demo`` shows the incremental datalog engine alone: shortest
paths on a random graph kept up to date under single-edge changes, each checked against networkx.
``reopt explain QUERY.sql --tpch SCALE`` (or ``--stats FILE.json``) prints the best plan of a query
(``--format text|json|dot``); ``reopt explain Q5`` that of a bundled TPC-H query.
``reopt eval RULES.dl --facts FACTS.json`` evaluates any rule file on facts given as JSON. ``-`` in
place of the query or facts file reads standard input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Callable

import networkx as nx
from rich.console import Console
from rich.table import Table

from . import __version__
from .datalog import DatalogError, Engine, Program
from .optimizer import (Catalog, DeltaStats, Optimizer, OptimizerConfig, OptimizerError, Plan, QueryTooLargeError,
                        StatisticsError)
from .optimizer.optimizer import PRUNING_SETTINGS
from .optimizer.workloads import TPCH

EXAMPLES = resources.files("reopt.rules") / "examples"
# the demo's workloads (reopt.spark.drift.WORKLOADS), named here so that --help needs no Spark
WORKLOAD_NAMES = ("shuffled", "snowflake", "broadcast")


def _count(minimum: int = 1) -> Callable[[str], int]:
    """The type of a count a command takes: a whole number of at least ``minimum``, checked by the
    argument parser, before any work starts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected at least {minimum}, got {value}")
        return value

    return parse


def _demo(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    try:
        from .spark.demo import MODES, compare
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        print("error: reopt demo runs on Spark, which is not installed: pip install 'reopt[spark]'", file=sys.stderr)
        return 2
    from .optimizer.weights_file import load_weights
    from .spark.demo_plot import plot
    from .spark.drift import WORKLOADS, drift_batches
    from .spark.session import local_session

    workload = WORKLOADS[args.workload]
    weights = None if args.weights is None else load_weights(args.weights)
    sizes = {"batches": args.batches, "rows_per_batch": args.rows, "dimension_keys": args.keys, "seed": args.seed}
    config = dataclasses.replace(workload.config, **{k: v for k, v in sizes.items() if v is not None})
    console = Console() if Console().is_terminal else Console(width=120)
    console.print(f"Workload {workload.name}: {workload.summary}.")
    console.print(f"A drifting stream: {config.batches} micro-batches of {config.rows_per_batch:,} events joined with "
                  f"{config.dimensions} dimensions of {config.dimension_keys * config.fanout:,} rows; the selective "
                  f"dimension changes at batches {', '.join(map(str, drift_batches(config))) or 'none'}; "
                  f"Spark master {args.master}")
    spark = local_session("reopt-demo", master=args.master, extra=workload.session)
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("starting", total=None)

            def on_phase(phase: str) -> None:
                total = config.batches * len(MODES) if phase == "batches" else None
                progress.reset(task, total=total, description=phase)

            result = compare(spark, config, on_batch=lambda mode, record: progress.advance(task),
                             optimizer_config=OptimizerConfig.setting(args.pruning, weights), on_phase=on_phase,
                             sample_rows=args.sample_rows)
    finally:
        spark.stop()
    table = Table("batch", "changed", "reopt ms", "adaptive s", "static s", "Spark SQL s", "first")
    table.add_column("adaptive plan (join order)", no_wrap=True)
    for adaptive, static, aqe, first in zip(result.adaptive, result.static, result.aqe, result.first):
        table.add_row(str(adaptive.batch), "yes" if adaptive.changed else "", f"{adaptive.reopt_s * 1000:.1f}",
                      f"{adaptive.batch_s:.2f}", f"{static.batch_s:.2f}", f"{aqe.batch_s:.2f}", first, adaptive.plan)
    console.print(table)
    learnt = (f"from a sample of its first {args.sample_rows:,} rows (in reopt ms) and the batches before it"
              if args.sample_rows else "from the batches before it")
    console.print(f"changed: the batch ran a new plan, learnt {learnt}. Spark SQL plans each batch itself with "
                  "adaptive query execution. first: the run that read the batch first (cold).")
    if args.sample_rows:
        console.print(f"The sampler read the dimensions' key frequencies once, in {result.setup_s:.2f} s, before the "
                      "stream started (not in the totals, like the statistics every run starts from).")
    for record in result.adaptive:
        if record.changed:
            console.print(f"batch {record.batch} ran a new plan, {record.plan}, because {record.why}")
    console.print(f"static plan: {result.static[0].plan}; results identical batch by batch: "
                  f"{'yes' if result.same_results else 'NO'}")
    title = (f"reopt demo --workload {workload.name}: adaptive {result.aqe_s / result.adaptive_s:.2f}x Spark AQE, "
             f"{result.static_s / result.adaptive_s:.2f}x its static plan")
    console.print(f"batch times plotted in {plot(result, args.plot or f'reopt-demo-{workload.name}.png', title, drift_batches(config))}")
    print(result.summary())
    return 0 if result.same_results else 1


def _calibrate(args: argparse.Namespace) -> int:
    try:
        from .spark.calibrate import calibrate
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        print("error: reopt calibrate runs on Spark, which is not installed: pip install 'reopt[spark]'",
              file=sys.stderr)
        return 2
    from .optimizer.weights_file import save_weights
    from .spark.session import local_session

    console = Console() if Console().is_terminal else Console(width=120)
    console.print(f"Calibrating reopt's cost model on {args.master}: {args.rows:,} events, {args.repeat} rounds.")
    spark = local_session("reopt-calibrate", master=args.master)
    try:
        result = calibrate(spark, rows=args.rows, keys=args.keys, repeat=args.repeat, progress=console.print)
    finally:
        spark.stop()
    console.print(result.table(), highlight=False)
    path = save_weights(args.out, result.weights, [f.to_dict() for f in result.figures], result.about)
    console.print(f"wrote {path}; use it with session_weights(spark, \"{path}\"), the session setting "
                  f"spark.reopt.costWeights={path}, or reopt demo --weights {path}", highlight=False)
    return 0


def _engine_demo(args: argparse.Namespace) -> int:
    console = Console()
    rng = random.Random(args.seed)
    nodes = max(2, args.edges // 5)
    while nodes * (nodes - 1) < args.edges:  # enough ordered pairs for the edges asked for
        nodes += 1
    edges: dict[tuple[int, int], float] = {}
    while len(edges) < args.edges:
        x, y = rng.randrange(nodes), rng.randrange(nodes)
        if x != y:
            edges[(x, y)] = float(rng.randint(1, 100))
    example = EXAMPLES / "shortest_paths.dl"
    engine = Engine(Program.parse(example.read_text(encoding="utf-8"), source=str(example)))
    engine.insert("source", [(0,)])
    engine.insert("edge", [(x, y, w) for (x, y), w in edges.items()])
    start = time.perf_counter()
    engine.run()
    scratch = time.perf_counter() - start
    console.print(f"shortest paths from node 0 over {len(edges)} edges, {nodes} nodes: "
                  f"from scratch in {scratch * 1000:.1f} ms, {len(engine.rows('dist'))} nodes reached")
    table = Table("step", "change", "dist rows changed", "time (ms)", "matches networkx")
    times = []
    for step in range(args.updates):
        (x, y), w = rng.choice(sorted(edges.items()))
        new_w = float(rng.randint(1, 100))
        engine.update("edge", (x, y, w), (x, y, new_w))
        edges[(x, y)] = new_w
        start = time.perf_counter()
        delta = engine.run()
        times.append(time.perf_counter() - start)
        changed = sum(len(d.inserted) + len(d.deleted) + len(d.updated) for d in delta.values())
        graph = nx.DiGraph()
        graph.add_weighted_edges_from((a, b, c) for (a, b), c in edges.items())
        expected = {(n, float(d)) for n, d in nx.single_source_dijkstra_path_length(graph, 0).items()}
        ok = {(n, float(d)) for n, d in engine.rows("dist")} == expected
        table.add_row(str(step + 1), f"w({x},{y}) {w:g} -> {new_w:g}", str(changed), f"{times[-1] * 1000:.2f}",
                      "yes" if ok else "NO")
        if not ok:
            console.print(table)
            console.print("[red]incremental result differs from networkx[/red]")
            return 1
    console.print(table)
    median = statistics.median(times)
    print(f"summary: edges={len(edges)} scratch_ms={scratch * 1000:.1f} update_median_ms={median * 1000:.2f} "
          f"ratio={scratch / median:.1f}")
    return 0


class _InputError(Exception):
    """A file the command was given cannot be used; the message says which and why."""


def _shown(path: str) -> str:
    """A path as an error message shows it, cut to a readable length from the front, since its
    end names the file."""
    return path if len(path) <= 60 else "..." + path[-57:]


def _typed(path: str) -> bool:
    """Whether text given where a path belongs looks typed in (a query on the command line)."""
    return any(c.isspace() for c in path)


def _read_text(path: str, what: str) -> str:
    """The file's text, or standard input's for ``-``."""
    if path == "-":
        try:
            return sys.stdin.read()
        except OSError as exc:
            raise _InputError(f"cannot read {what} from standard input: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise _InputError(f"{what} on standard input is not UTF-8 text (byte {exc.start})") from None
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        hint = " (give a file, or - to read standard input)" if _typed(path) else ""
        raise _InputError(f"cannot read {what} {_shown(path)}: {exc.strerror}{hint}") from None
    except UnicodeDecodeError as exc:
        raise _InputError(f"{what} {_shown(path)} is not UTF-8 text (byte {exc.start})") from None


def _facts(path: str) -> dict[str, list[tuple]]:
    try:
        facts = json.loads(_read_text(path, "facts file"))
    except json.JSONDecodeError as exc:
        raise _InputError(f"facts file {path}, line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(facts, dict) or not all(
            isinstance(rows, list) and all(isinstance(row, list) for row in rows) for rows in facts.values()):
        raise _InputError(f'facts file {path} must hold an object of rows: {{"relation": [[v1, v2], ...]}}')
    return {relation: [tuple(row) for row in rows] for relation, rows in facts.items()}


def _eval(args: argparse.Namespace) -> int:
    program = Program.load(args.rules)
    engine = Engine(program)
    for relation, rows in (_facts(args.facts) if args.facts else {}).items():
        engine.insert(relation, rows)
    engine.run()
    for name in args.show or program.derived:
        for row in sorted(engine.rows(name), key=repr):
            print(f"{name}{row}")
    return 0


def _query_text(name: str) -> str:
    """The query file's text; where no such file exists, the bundled TPC-H query of that name (any
    case), since the installed package's query files are not where a user would look for them."""
    if name != "-" and not Path(name).exists():
        bundled = {key.lower(): key for key in TPCH}
        if name.lower() in bundled:
            return TPCH[bundled[name.lower()]]
        if not _typed(name):  # a typed query: _read_text's error says so
            raise _InputError(f"no query file {_shown(name)}: give a file, - to read standard input, or a bundled "
                              f"query ({', '.join(TPCH)})")
    return _read_text(name, "query file")


def _explain(args: argparse.Namespace) -> int:
    sql = _query_text(args.query)
    catalog = Catalog.load(args.stats) if args.stats else Catalog.tpch(args.tpch)
    start = time.perf_counter()
    config = OptimizerConfig(beyond_limit=args.beyond_limit)
    delta = _delta(args.delta) if args.delta else None
    with warnings.catch_warnings(record=True) as approximations:
        warnings.simplefilter("always", UserWarning)
        try:
            optimizer = Optimizer.from_sql(sql, catalog, config, dialect=args.dialect)
            plan = optimizer.optimize()
        except QueryTooLargeError as exc:
            raise QueryTooLargeError(f"{exc}; here: reopt explain --beyond-limit greedy") from None
    for warning in approximations:
        print(f"warning: {warning.message}", file=sys.stderr)
    elapsed = time.perf_counter() - start
    if delta is not None:
        return _explain_change(optimizer, plan, delta, args.format)
    if args.format == "json":
        print(json.dumps(plan.to_dict(), indent=2))
    elif args.format == "dot":
        print(plan.to_dot())
    else:
        print(plan.explain())
        print(f"join order: {plan.join_order()}")
        print(f"cost: {plan.cost:.6g} core-s  (optimized in {elapsed * 1000:.1f} ms)")
    return 0


def _delta(path: str) -> DeltaStats:
    try:
        data = json.loads(_read_text(path, "delta file"))
    except json.JSONDecodeError as exc:
        raise _InputError(f"delta file {_shown(path)}, line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    try:
        return DeltaStats.from_dict(data)
    except StatisticsError as exc:
        raise _InputError(f"delta file {_shown(path)}: {exc}") from None


def _explain_change(optimizer: Optimizer, before: Plan, delta: DeltaStats, form: str) -> int:
    """The plan before and after ``delta``, and why it changed (``PlanChange``)."""
    start = time.perf_counter()
    after = optimizer.reoptimize(delta)
    elapsed = time.perf_counter() - start
    change = optimizer.last_change
    if form == "json":
        print(json.dumps({"before": before.to_dict(), "after": after.to_dict(), "change": change.to_dict()}, indent=2))
    elif form == "dot":
        print(after.to_dot())
    else:
        print("before the delta:")
        print(before.explain())
        print("\nafter the delta:")
        print(after.explain())
        print(f"\n{change.explain()}")
        print(f"(re-optimized in {elapsed * 1000:.1f} ms)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reopt", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the main job: an adaptive stream on Spark against a static plan")
    demo.add_argument("--workload", choices=list(WORKLOAD_NAMES), default=WORKLOAD_NAMES[0],
                      help=f"{WORKLOAD_NAMES[0]} (default): large dimensions, every join shuffled, where the join "
                           f"order decides the work; {WORKLOAD_NAMES[1]}: small dimensions, all broadcast")
    demo.add_argument("--batches", type=_count(), help="micro-batches (default 12)")
    demo.add_argument("--rows", type=_count(), help="events per micro-batch (default 1000000)")
    demo.add_argument("--keys", type=_count(), help="keys per dimension table (default 200000)")
    demo.add_argument("--master", default="local[2]", help="Spark master (default local[2]; spark://HOST:PORT for a "
                                                           "cluster)")
    demo.add_argument("--seed", type=int)
    demo.add_argument("--sample-rows", type=_count(0), default=0,
                      help="plan each micro-batch from a sample of its first N rows, e.g. 1000 (default 0: from "
                           "the batches before it only)")
    demo.add_argument("--plot", metavar="FILE.png", help="where to draw the batch times (default "
                                                         "reopt-demo-WORKLOAD.png in the current folder)")
    demo.add_argument("--weights", metavar="WEIGHTS.json",
                      help="cost weights measured by reopt calibrate (default: the built-in ones)")
    demo.add_argument("--pruning", choices=list(PRUNING_SETTINGS), default="goal",
                      help="the optimizer's pruning setting (default goal, the library's: best costs are released "
                           "cheapest first and nothing costlier than the best plan is costed)")
    demo.set_defaults(handler=_demo)
    calibrate = sub.add_parser("calibrate", help="measure the cost model's weights on this Spark and save them")
    calibrate.add_argument("--out", required=True, metavar="WEIGHTS.json", help="the weights file to write")
    calibrate.add_argument("--master", default="local[1]",
                           help="Spark master (default local[1]: the model's unit is a second of one core)")
    calibrate.add_argument("--rows", type=_count(10_000), default=1_000_000, help="events probed (default 1000000)")
    calibrate.add_argument("--keys", type=_count(1_000), default=200_000, help="dimension keys (default 200000)")
    calibrate.add_argument("--repeat", type=_count(), default=5, help="timed rounds of every probe (default 5)")
    calibrate.set_defaults(handler=_calibrate)
    engine_demo = sub.add_parser("engine-demo", help="the incremental datalog engine on shortest paths")
    engine_demo.add_argument("--edges", type=_count(), default=10_000, help="edges of the random graph (default 10000)")
    engine_demo.add_argument("--updates", type=_count(0), default=10, help="single-edge weight changes (default 10)")
    engine_demo.add_argument("--seed", type=int, default=7)
    engine_demo.set_defaults(handler=_engine_demo)
    explain = sub.add_parser("explain", help="print the best plan of a SQL query")
    explain.add_argument("query", help="a file holding one SELECT statement, - to read it from standard input, or "
                                       f"the name of a bundled TPC-H query ({', '.join(TPCH)})")
    source = explain.add_mutually_exclusive_group()
    source.add_argument("--tpch", type=float, default=1.0, metavar="SCALE",
                        help="use TPC-H statistics at this scale factor (default 1)")
    source.add_argument("--stats", metavar="FILE.json", help="use statistics from a JSON file")
    explain.add_argument("--dialect", help="the SQL dialect, as sqlglot names it (e.g. spark; default: generic)")
    explain.add_argument("--beyond-limit", choices=("refuse", "greedy"), default="refuse",
                         help="a query over the plan-space limit: refuse it (default) or plan it approximately over "
                              "one greedy join order")
    explain.add_argument("--format", choices=("text", "json", "dot"), default="text",
                         help="text (default), json (Plan.to_dict) or dot (Graphviz: reopt explain ... | dot -Tpng)")
    explain.add_argument("--delta", metavar="DELTA.json",
                         help='re-optimize after these runtime statistics and show the plan before and after, and '
                              'why: a JSON list of changes such as [{"table": "orders", "rows": 3e7}, {"selectivity": '
                              '"PREDICATE", "value": 0.01}, {"cardinality": ["c", "o"], "rows": 5e7}, '
                              '{"cost_factor": "sort_merge_join", "value": 2}]')
    explain.set_defaults(handler=_explain)
    evaluate = sub.add_parser("eval", help="evaluate a rule file on JSON facts")
    evaluate.add_argument("rules", help="a .dl rule file")
    evaluate.add_argument("--facts", help='JSON object: {"relation": [[v1, v2, ...], ...]}, in a file or - for standard input')
    evaluate.add_argument("--show", action="append", help="relation to print (repeatable; default: all derived)")
    evaluate.set_defaults(handler=_eval)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (DatalogError, OptimizerError, _InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (say, head) stopped reading: stop quietly, as other command-line tools do, and
        # point stdout at /dev/null so that flushing it at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
