"""Batch times as a picture: each run's time per micro-batch, where the data drifted, and where the
adaptive run changed plan (the demo's, and the Spark benchmark's per workload)."""

from __future__ import annotations

import itertools
from pathlib import Path

from .demo import Comparison

COLOURS = {"adaptive": "tab:green", "static": "tab:grey", "aqe": "tab:blue"}
LABELS = {"adaptive": "reopt adaptive", "static": "reopt static (initial plan)", "aqe": "Spark SQL with AQE"}


def plot(result: Comparison, path: str | Path, title: str, drifts: list[int]) -> Path:
    """Write the batch times of the demo's three runs as a PNG at ``path``; ``drifts``: batches where
    a new phase of the data begins."""
    runs = {LABELS["adaptive"]: [r.batch_s + r.reopt_s for r in result.adaptive],
            LABELS["static"]: [r.batch_s for r in result.static], LABELS["aqe"]: [r.batch_s for r in result.aqe]}
    changes = [r.batch for r in result.adaptive if r.changed]
    return draw(runs, LABELS["adaptive"], changes, drifts, title, path)


def draw(runs: dict[str, list[float]], adaptive: str, changes: list[int], drifts: list[int], title: str,
         path: str | Path) -> Path:
    """Seconds per batch of each run (label -> one value per batch from 0), with the batches where
    run ``adaptive`` changed plan marked and a line before each batch of ``drifts``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(9, 4.5))
    known = {LABELS[mode]: colour for mode, colour in COLOURS.items()}
    palette = itertools.cycle(["tab:purple", "tab:orange", "tab:red", "tab:brown", "tab:pink", "tab:olive"])
    for label, seconds in runs.items():
        colour = known.get(label) or next(palette)
        axes.plot(range(len(seconds)), seconds, marker="o", markersize=4, color=colour, label=label)
        if label == adaptive and changes:
            axes.scatter(changes, [seconds[b] for b in changes], marker="^", s=110, color=colour, zorder=3,
                         label=f"{label} changed plan")
    for index, batch in enumerate(drifts):
        axes.axvline(batch - 0.5, color="black", linestyle=":", linewidth=1,
                     label="the data drifts" if index == 0 else None)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("micro-batch")
    axes.set_ylabel("seconds")
    axes.set_ylim(bottom=0)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
