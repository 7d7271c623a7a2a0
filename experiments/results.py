"""Where the benchmark scripts keep what they measured: one folder per script, ``experiments/out/NAME/``
by default (git ignores ``experiments/out/``), ``--out DIR`` to choose another. Each writes its
records as ``NAME.json``, and where it has them, one row per record as ``NAME.csv`` and its plot as
``NAME.png``."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"


class Results:
    """The output folder of one script, created on first write."""

    def __init__(self, name: str, directory: Path):
        self.name = name
        self.directory = directory

    @classmethod
    def option(cls, parser: argparse.ArgumentParser, name: str) -> None:
        """Add ``--out DIR`` to a script's parser (default ``experiments/out/NAME``)."""
        parser.add_argument("--out", type=Path, default=OUT / name,
                            help=f"folder for {name}.json and the script's CSV and PNG (default experiments/out/{name})")

    @classmethod
    def of(cls, args: argparse.Namespace, name: str) -> "Results":
        return cls(name, args.out)

    def path(self, suffix: str) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory / f"{self.name}.{suffix}"

    def json(self, data: Any) -> Path:
        path = self.path("json")
        path.write_text(json.dumps(data, indent=1))
        return path

    def csv(self, rows: list[dict], fields: list[str] | None = None) -> Path:
        path = self.path("csv")
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields or sorted({k for row in rows for k in row}),
                                    extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        return path

    def png(self) -> Path:
        return self.path("png")
