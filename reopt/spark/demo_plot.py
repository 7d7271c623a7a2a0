"""The demo's picture: each run's time per micro-batch, where the data drifted, and where the
adaptive run changed plan."""

from __future__ import annotations

from pathlib import Path

from .demo import Comparison

COLOURS = {"adaptive": "tab:green", "static": "tab:grey", "aqe": "tab:blue"}
LABELS = {"adaptive": "reopt adaptive", "static": "reopt static (initial plan)", "aqe": "Spark SQL with AQE"}


def plot(result: Comparison, path: str | Path, title: str, drifts: list[int]) -> Path:
    """Write the batch times of ``result`` as a PNG at ``path``; ``drifts``: batches where a new
    phase of the data begins."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(9, 4.5))
    runs = {"adaptive": [r.batch_s + r.reopt_s for r in result.adaptive],
            "static": [r.batch_s for r in result.static], "aqe": [r.batch_s for r in result.aqe]}
    batches = [r.batch for r in result.adaptive]
    for mode, seconds in runs.items():
        axes.plot(batches, seconds, marker="o", markersize=4, color=COLOURS[mode], label=LABELS[mode])
    changes = [(r.batch, s) for r, s in zip(result.adaptive, runs["adaptive"]) if r.changed]
    if changes:
        axes.scatter(*zip(*changes), marker="^", s=110, color=COLOURS["adaptive"], zorder=3,
                     label="adaptive run changed plan")
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
