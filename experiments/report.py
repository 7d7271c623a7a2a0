"""``report.md`` for ``reproduce.py``: per figure, the paper's values beside reopt's, and a sentence
on where they agree and why they differ, worked out from what the run measured."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from paper import CLAIMS, TABLE2, TABLE3, TABLE4

# Why reopt's times differ from the paper's, whatever the run: the two setups, in one place.
SETUP = ("The paper's optimizers were all Java in one process. Here the declarative optimizer runs on "
         "reopt's native (Rust) engine, with Python around each call, while the top-down and bottom-up "
         "optimizers it is compared with are plain Python over the same cost functions: a ratio to "
         "top-down therefore mixes two languages. reopt's plan space is also larger than the paper's "
         "(every bushy tree with Spark's join strategies, build sides and partitioning properties).")


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def _span(values, digits: int = 2) -> str:
    values = sorted(values)
    return f"{values[0]:.{digits}f}-{values[-1]:.{digits}f}" if values else "n/a"


def _table(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _speedups(rows: list[dict]) -> list[float]:
    return [1 / float(r["time_vs_topdown"]) for r in rows]


def fig5(rows: list[dict]) -> tuple[str, str]:
    queries = list(dict.fromkeys(r["query"] for r in rows))
    by = {(r["query"], r["optimizer"]): r for r in rows}
    table = _table([[q] + [f"{float(by[(q, o)]['time_vs_topdown']):.2f}x" for o in ("all", "aggsel", "goal", "bottomup")]
                    + [f"{float(by[(q, o)]['entries_pruned']):.0%}" for o in ("all", "aggsel", "topdown")]
                    for q in queries],
                   ["query", "declarative, all pruning / top-down", "Evita Raced-style / top-down",
                    "reopt default / top-down", "bottom-up / top-down", "entries pruned: all", "Evita", "top-down"])
    ratios = [float(by[(q, "all")]["time_vs_topdown"]) for q in queries]
    pruned = [float(by[(q, "all")]["entries_pruned"]) for q in queries]
    more = sum(float(by[(q, "all")]["entries_pruned"]) > float(by[(q, "topdown")]["entries_pruned"]) for q in queries)
    topdown_ms = [1e3 * float(by[(q, "topdown")]["seconds"]) for q in queries]
    verdict = (f"The declarative optimizer with all pruning takes {_span(ratios)}x top-down's time (paper: "
               f"1.1-1.5x) and prunes {_span([100 * p for p in pruned], 0)}% of the plan-table entries (paper: "
               f"35-80%), more than top-down in {more} of {len(queries)} queries. "
               + ("The ratios fall inside the paper's band." if max(ratios) <= 1.5 else
                  f"The ratios are above the paper's band. Top-down takes {_span(topdown_ms)} ms here: one "
                  "Python call per alternative, where the engine derives several rows per alternative (about "
                  "19 index lookups and 25 row bindings per plan-cost row, docs/pruning.md)."))
    return table, verdict


def reopt_summary(rows: list[dict], group: str, optimizer: str = "all") -> tuple[str, list[float]]:
    mine = [r for r in rows if r["optimizer"] == optimizer]
    groups = list(dict.fromkeys(r[group] for r in mine))
    table_rows, medians = [], []
    for g in groups:
        these = [r for r in mine if r[group] == g]
        speedups = _speedups(these)
        medians.append(statistics.median(speedups))
        table_rows.append([g, f"{statistics.median(speedups):.1f}x", _span(speedups),
                           f"{_median(these, 'entries_touched'):.0%}", f"{_median(these, 'alternatives_touched'):.0%}"])
    return _table(table_rows, [group, "median speedup over top-down", "range", "entries touched",
                               "alternatives touched"]), medians


def fig6(rows: list[dict]) -> tuple[str, str]:
    table, medians = reopt_summary(rows, "change")
    default_table, default_medians = reopt_summary(rows, "change", "goal")
    topdown_ms = 1e3 * _median(rows, "topdown_s")
    changes = list(dict.fromkeys(r["change"] for r in rows))
    verdict = (f"The speedup of re-optimization over a top-down optimization (top-down's time over reopt's) "
               f"is {_span(medians)} at the median per join with all pruning, and {_span(default_medians)} with "
               "reopt's default, the goal bound, against the paper's 12 to over 300. Top-down optimizes Q5 "
               f"in {topdown_ms:.1f} ms here against about 500 ms in the paper, so a re-optimization's fixed "
               "costs (reading the delta, the engine's strata, Python around the call) weigh far more. With all "
               f"pruning a change touches {_span([100 * _median([r for r in rows if r['optimizer'] == 'all' and r['change'] == c], 'entries_touched') for c in changes], 0)}% "
               f"of the plan-table entries, with the goal bound {_span([100 * _median([r for r in rows if r['optimizer'] == 'goal' and r['change'] == c], 'entries_touched') for c in changes], 0)}%: "
               "reference counts and bounds move with every cost they depend on.")
    return table + "\n\nreopt's default configuration (goal bound):\n\n" + default_table, verdict


def pruning_figure(rows: list[dict], table: str) -> tuple[str, str]:
    settings = list(dict.fromkeys(r["optimizer"] for r in rows))
    stats = {s: [r for r in rows if r["optimizer"] == s] for s in settings}
    body = _table([[s, f"{_median(stats[s], 'time_vs_topdown'):.2f}", f"{_median(stats[s], 'entries_pruned'):.0%}",
                    f"{_median(stats[s], 'alternatives_pruned'):.0%}"] for s in settings],
                  ["pruning", "time / top-down (median)", "entries pruned", "alternatives pruned"])
    best = min(settings, key=lambda s: _median(stats[s], "time_vs_topdown"))

    def gain(setting: str, key: str) -> float:
        return 100 * (_median(stats[setting], key) - _median(stats["aggsel"], key))

    def added(setting: str, key: str) -> str:
        return f"{gain(setting, key):+.0f} points"

    each_adds = all(max(gain(t, "entries_pruned"), gain(t, "alternatives_pruned")) > 0
                    and min(gain(t, "entries_pruned"), gain(t, "alternatives_pruned")) >= 0
                    for t in ("aggsel+refcount", "aggsel+bounding"))

    verdict = (f"After a change of the {table} table's scan cost, the fastest combination is {best} (paper: All). Over "
               f"aggregate selection alone, reference counting adds {added('aggsel+refcount', 'entries_pruned')} "
               f"of entries and {added('aggsel+refcount', 'alternatives_pruned')} of alternatives pruned, "
               f"bounding {added('aggsel+bounding', 'entries_pruned')} and "
               f"{added('aggsel+bounding', 'alternatives_pruned')}: "
               + ("each technique adds pruning, as in the paper. " if each_adds else
                  "not every technique adds pruning here, unlike in the paper. ")
               + ("They also add time, unlike the paper's: each is rules the engine evaluates on every change, "
                  "and on Q5 what they prune is cheaper than maintaining them."
                  if best != "all" else "They also pay for themselves in time, as in the paper."))
    return body, verdict


def fig9(rows: list[dict]) -> tuple[str, str]:
    kinds = ("TD", "BU")
    by = {k: [r for r in rows if r["optimizer"] == k] for k in kinds}
    table = _table([[k, f"{statistics.median(1 / float(r['time_vs_full']) for r in by[k]):.1f}x",
                     _span([1 / float(r["time_vs_full"]) for r in by[k]]), f"{_median(by[k], 'entries_updated'):.0%}",
                     f"{_median(by[k], 'alternatives_recomputed'):.0%}"] for k in kinds],
                   ["procedural optimizer", "median speedup over itself from scratch", "range", "entries updated",
                    "alternatives recomputed"])
    td = statistics.median(1 / float(r["time_vs_full"]) for r in by["TD"])
    bu = statistics.median(1 / float(r["time_vs_full"]) for r in by["BU"])
    recomputed = _median(by["BU"], "alternatives_recomputed")
    verdict = (f"Made incremental, top-down is {td:.1f}x and bottom-up {bu:.1f}x faster than themselves from "
               f"scratch at the median (paper: 4-20x), and bottom-up recomputes {recomputed:.0%} of its "
               f"alternatives (paper: under 60%). "
               + ("Top-down gains more than bottom-up, as in the paper." if td > bu else
                  f"Unlike in the paper, bottom-up gains more here; incremental top-down recomputes "
                  f"{_median(by['TD'], 'alternatives_recomputed'):.0%} of its alternatives."))
    return table, verdict


def fig11(rows: list[dict]) -> tuple[str, str]:
    queries = list(dict.fromkeys(r["query"] for r in rows))
    by = {(r["query"], r["optimizer"]): r for r in rows}
    settings = [s for s in ("aggsel", "aggsel+refcount", "aggsel+bounding", "all") if (queries[0], s) in by]
    table = _table([[q] + [f"{float(by[(q, s)]['time_vs_topdown']):.2f}x / {float(by[(q, s)]['entries_pruned']):.0%}"
                           for s in settings] for q in queries], ["query"] + [f"{s}: time / top-down, entries pruned"
                                                                           for s in settings])
    overhead = [float(by[(q, "all")]["seconds"]) / float(by[(q, "aggsel")]["seconds"]) for q in queries]
    verdict = (f"All four techniques together take {_span(overhead)}x the time of aggregate selection alone "
               f"(paper: at most 1.1x). "
               + ("The overhead is within the paper's bound." if max(overhead) <= 1.1 else
                  "The overhead is above the paper's bound: reference counts and bounds are relations the engine "
                  "derives and maintains, row by row, on top of the plan costs."))
    return table, verdict


def scan_figure(rows: list[dict], minimum: float = 3.0) -> tuple[str, str]:
    table, medians = reopt_summary(rows, "change")
    default_table, default_medians = reopt_summary(rows, "change", "goal")
    slowest = min(_speedups([r for r in rows if r["optimizer"] == "all"]))
    verdict = (f"The speedup over a top-down optimization of the slowest re-optimization after a base table's "
               f"change is {slowest:.2f} with all pruning, the medians per table {_span(medians)}, and "
               f"{_span(default_medians)} with reopt's default, the goal bound (paper: at least {minimum:g}). "
               + ("reopt meets the paper's bound." if slowest >= minimum else
                  "Below the paper's bound, for the reasons of Figure 6: a top-down optimization here takes "
                  "milliseconds, and a base table's change reaches every expression that contains it."))
    return table + "\n\nreopt's default configuration (goal bound):\n\n" + default_table, verdict


def table3(rows: list[dict]) -> tuple[str, str]:
    body = _table([[r["query"], r["joins"], r["setting"], f"{float(r['state_kb']):.0f}", r["alternatives_alive"],
                    r["alternatives_remembered"],
                    "did not complete" if TABLE3[(r["query"], r["setting"])] is None else TABLE3[(r["query"], r["setting"])]]
                   for r in rows], ["query", "joins", "pruning", "reopt (KB)", "alternatives held", "costs remembered",
                                    "paper (KB)"])
    by = {(r["query"], r["setting"]): float(r["state_kb"]) for r in rows}
    growth = [by[(q, "all")] / by[(q, "none")] for q in ("Q10", "Q5", "Q8Join")]
    verdict = (f"With all pruning reopt holds {_span(growth)}x the state it holds without pruning, where the "
               "paper's pruning cut state 5-7x (and Q8Join did not complete without it). Pruning here keeps far "
               "fewer alternatives alive, but remembers the cost of every alternative it pruned (the cost memo), "
               "so that a later change revives exactly the ones it makes competitive without enumerating them "
               "again: state is traded for exact incremental maintenance. reopt counts engine values at 8 bytes "
               "each, not Java objects.")
    return body, verdict


def fig7(rows: list[dict], table2: list[dict]) -> tuple[str, str]:
    speedups = [float(r["topdown_s"]) / float(r["reopt_s"]) for r in rows if float(r["reopt_s"]) > 0]
    body = _table([[r["split"], f"{float(r['adaptive_s']):.2f}", f"{float(r['static_s']):.2f}", r["plan"],
                    *(TABLE2.get(int(r["split"]), ("", "")))] for r in table2],
                  ["split", "reopt adaptive (s)", "single plan (s)", "adaptive plan", "paper incremental (s)",
                   "paper single-stage (s)"])
    adaptive = sum(float(r["adaptive_s"]) for r in table2)
    single = sum(float(r["static_s"]) for r in table2)
    paper = sum(a for a, _s in TABLE2.values()) / sum(s for _a, s in TABLE2.values())
    changes = sum(str(r["changed"]) == "True" for r in table2)
    verdict = (f"The speedup of re-optimizing between splits over a top-down optimization is {_span(speedups)} "
               f"(paper: 10 or more). The adaptive run changed plan {changes} time(s), and over the splits it "
               f"took {adaptive / single:.2f}x the single plan's time (paper: {paper:.2f}x). "
               + ("" if changes else "With no plan change both runs executed the same plan, and their "
                  "difference is Spark's run-to-run noise: reopt learns the sizes of the joins its plan runs, "
                  "so in a partition where the region filter is the selective one, the joins through the "
                  "suppliers keep their uniform estimates while the plan joins the orders first. ")
               + "The splits here are Spark runs of Q5 over parts of "
               "lineitem whose suppliers' regions and orders' years are skewed differently, not the paper's "
               "Zipf-skewed TPC-D partitions; execution times include Spark's own start-up of each job.")
    return body, verdict


def fig10(rows: list[dict], table4: list[dict]) -> tuple[str, str]:
    body = _table([[r["variant"], f"{float(r['reopt_s']):.2f}", f"{float(r['exec_s']):.2f}", f"{float(r['total_s']):.2f}",
                    *(TABLE4.get(int(r["every"]), ("", "", "")) if r["every"] else ("", "", ""))] for r in table4],
                  ["variant", "re-optimization (s)", "execution (s)", "total (s)", "paper re-opt (s)",
                   "paper execution (s)", "paper total (s)"])
    totals = {r["variant"]: float(r["total_s"]) for r in table4}
    every1, hindsight = totals["every 1 s"], totals["best static plan in hindsight"]
    initial = totals["initial plan, static"]
    fastest = min(totals, key=totals.get)
    reopt_s = sum(float(r["reopt_s"]) for r in rows)
    scratch_s = sum(float(r["from_scratch_s"]) for r in rows)
    verdict = (f"Re-optimizing every second took {every1:.2f} s in all, the plan reopt picks knowing the whole "
               f"stream {hindsight:.2f} s ({hindsight / every1:.2f}x) and the initial plan kept {initial:.2f} s "
               f"({initial / every1:.2f}x); the fastest variant was {fastest}. The paper's adaptive run beat its "
               "best static plan; here it "
               + ("beat both static plans. " if every1 <= min(hindsight, initial) else
                  f"beat the plan chosen in hindsight but not the initial plan kept, by {every1 / initial - 1:.0%} "
                  "(fig10.csv has every batch's times). " if every1 <= hindsight else
                  "beat neither static plan (fig10.csv has every batch's times). ")
               + f"The incremental re-optimizations took {1e3 * reopt_s:.0f} ms over the stream, optimizing from "
               f"scratch each time would have taken {1e3 * scratch_s:.0f} ms, "
               f"{scratch_s / (every1 - reopt_s):.2%} of the execution time: "
               + ("unlike in the paper's Table 4, the optimizer does not bound how often to adapt here."
                  if scratch_s < 0.05 * (every1 - reopt_s) else
                  "as in the paper's Table 4, the optimizer's time weighs on how often to adapt."))
    return body, verdict


def write_report(out: Path, results: dict[str, list[dict]], quick: bool, backend: str, seconds: float) -> Path:
    sections = [("fig5", fig5), ("fig6", fig6), ("fig8", lambda r: pruning_figure(r, "orders")),
                ("fig9", fig9), ("fig11", fig11), ("fig12", lambda r: pruning_figure(r, "supplier")),
                ("fig13", scan_figure), ("fig14", scan_figure)]
    lines = ["# The reference paper's evaluation, reproduced", "",
             f"Run on {time.strftime('%Y-%m-%d')}, {'quick' if quick else 'full'} run, {backend} backend, "
             f"{seconds / 60:.1f} minutes. Command: `.venv/bin/python experiments/reproduce.py"
             f"{' --quick' if quick else ''}`. Every re-optimized plan was checked against a full top-down "
             "optimization. Each figure's CSV and PNG is beside this file.", "", SETUP, ""]
    if "fig7" in results:
        sections.insert(2, ("fig7", lambda r: fig7(r, results["table2"])))
        sections.append(("fig10", lambda r: fig10(r, results["table4"])))
    else:
        lines += ["Figures 7 and 10 (Spark runs) were left out of this run.", ""]
    for name, summarize in sections:
        source, claim = CLAIMS[name]
        table, verdict = summarize(results[name])
        lines += [f"## {source.split(' and ')[0].split(' (')[0]}", "", f"![{name}]({name}.png)", "",
                  f"**Paper** ({source}): {claim}", "", "**reopt:**", "", table, "", verdict, ""]
    body, verdict = table3(results["table3"])
    lines += ["## Table 3", "", "![table3](table3.png)", "", "**Paper** (Table 3): state of the declarative "
              "optimizer for Q10, Q5 and Q8Join without pruning, with aggregate selection, and with all pruning.",
              "", body, "", verdict, ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
