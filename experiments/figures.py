"""What ``reproduce.py`` and its Spark half share: the run's size and output folder, progress lines,
and the figures' panels."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from changes import FACTORS
from results import Results


@dataclass(frozen=True)
class Run:
    """How big this run is: ``--quick`` shrinks every figure, never leaves one out."""

    quick: bool
    repeat: int
    backend: str
    out: Path

    @property
    def factors(self) -> tuple[float, ...]:
        return (0.125, 8.0) if self.quick else FACTORS

    def csv(self, name: str, rows: list[dict]) -> Path:
        """``name.csv`` in the output folder, columns in the order the rows first name them."""
        return Results(name, self.out).csv(rows, list(dict.fromkeys(key for row in rows for key in row)))


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def plot_panels(path: Path, title: str, panels: list[tuple[str, dict[str, list[tuple]]]], xlabel: str,
                log_x: bool = True, bars: bool = False) -> Path:
    """One row of panels; each maps a series label to its (x, y) points (x categorical with bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(label for _ylabel, series in panels for label in series))
    palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colour = {label: palette(i % palette.N) for i, label in enumerate(labels)}  # one colour a label, every panel
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (ylabel, series) in zip(axes[0], panels):
        if bars:
            categories = list(dict.fromkeys(x for points in series.values() for x, _y in points))
            width = 0.8 / max(1, len(series))
            for i, (label, points) in enumerate(series.items()):
                values = dict(points)
                ax.bar([c + i * width for c in range(len(categories))], [values.get(c, 0) for c in categories],
                       width, label=label, color=colour[label])
            ax.set_xticks([c + 0.4 - width / 2 for c in range(len(categories))], categories, rotation=20)
        else:
            for label, points in series.items():
                ax.plot(*zip(*sorted(points)), marker="o", markersize=3, label=label, color=colour[label])
            if log_x:
                ax.set_xscale("log", base=2)
            ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    first = set(panels[0][1])
    for ax, (_ylabel, series) in zip(axes[0], panels):
        if ax is axes[0][0] or not set(series) <= first:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def series(rows: list[dict], label: Callable[[dict], str], x: str, y: str) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for row in rows:
        if row[y] != "":
            out.setdefault(label(row), []).append((row[x], row[y]))
    return out
