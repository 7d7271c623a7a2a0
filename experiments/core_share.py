"""How far the native core alone could take issue 13's TPC-H targets: native at least 10x python,
and at most 1.5x top-down.

``optimize()`` with no pruning runs Python on either backend: the plan space's splits and the cost
functions the rules call, the estimates, the engine's front end and the plan's extraction. This
times the native core's runs, less the Python functions they call, inside each native
``optimize()``, and divides the Python backend's time by what is left of the native one: the ratio
the native backend would reach with a core that took no time at all. Likewise against the top-down
optimizer: what is left of the native time over top-down's, the least native / top-down a core
that took no time would leave. Each optimizer is timed ``--runs`` times in turns, medians. The
timers' own cost falls on the Python side, top-down's included (it calls the same cost functions
and splits), so every time here is a little longer than in ``bench_optimizer.py`` and the bounds a
little generous. ``--setting goal`` measures the default optimizer instead, for issue 14's
target on initial optimization (at most 1.5x top-down).

    .venv/bin/python experiments/core_share.py [--runs 11] [--setting none|goal]
"""

from __future__ import annotations

import argparse
import statistics
import time

import reopt
from core_clock import Clock
from reopt.baselines import TopDownOptimizer
from reopt.optimizer import parse_sql
from reopt.optimizer.workloads import TPCH

QUERIES = ("Q5", "Q10", "Q8Join")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--setting", default="none", choices=("none", "goal"),
                        help="pruning setting of both backends' optimizers (none: issue 13's targets)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    clock = Clock()
    clock.install()
    catalog = reopt.Catalog.tpch(1)
    print(f"{'query':<8}{'native ms':>11}{'core ms':>10}{'python ms':>11}{'python/native':>15}"
          f"{'with the core at zero':>23}{'top-down ms':>13}{'native/top-down':>17}{'with the core at zero':>23}")
    for name in QUERIES:
        query = parse_sql(TPCH[name], catalog)
        # each timed call builds its optimizer: construction (estimates included) is part of optimizing
        configs = {backend: reopt.OptimizerConfig.setting(args.setting, backend=backend) for backend in ("native", "python")}
        optimizers = {kind: (lambda c=config: reopt.Optimizer(query, catalog, c)) for kind, config in configs.items()}
        optimizers["top-down"] = lambda: TopDownOptimizer(query, catalog)
        times: dict[str, list[float]] = {kind: [] for kind in optimizers}
        core: list[float] = []
        for _ in range(args.runs):
            for optimizer, build in optimizers.items():
                clock.reset()
                start = time.perf_counter()
                build().optimize()
                times[optimizer].append(time.perf_counter() - start)
                if optimizer == "native":
                    core.append(clock.core_own)
        native, python, topdown, inside = (statistics.median(v) for v in (*times.values(), core))
        print(f"{name:<8}{native * 1e3:>11.2f}{inside * 1e3:>10.2f}{python * 1e3:>11.2f}"
              f"{python / native:>14.1f}x{python / (native - inside):>22.1f}x"
              f"{topdown * 1e3:>13.2f}{native / topdown:>16.2f}x{(native - inside) / topdown:>22.2f}x")


if __name__ == "__main__":
    main()
