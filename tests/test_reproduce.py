"""The paper's evaluation by one command: ``experiments/reproduce.py --quick`` produces every figure's
CSV and PNG and a report that sets the paper's values beside reopt's."""

import csv
import subprocess
import sys

import pytest

from .conftest import ROOT

SCRIPT = ROOT / "experiments" / "reproduce.py"
FIGURES = ("fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11", "fig12", "fig13", "fig14",
           "table2", "table3", "table4")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reproduce")
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(folder / "out")], cwd=folder,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "out"


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_has_a_csv_of_numbers(out, name):
    with open(out / f"{name}.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    numeric = [key for key in rows[0] if key.endswith(("_s", "_kb", "_topdown", "_full", "touched", "pruned"))]
    assert numeric, f"{name}.csv has no measured column"
    for row in rows:
        for key in numeric:
            if row[key] != "":
                assert float(row[key]) >= 0, (name, key, row[key])


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_has_a_picture(out, name):
    data = (out / f"{name}.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5_000


def test_the_report_sets_the_papers_values_beside_reopts(out):
    report = (out / "report.md").read_text()
    for section in ("## Figure 5", "## Figure 6", "## Figure 7", "## Figure 8", "## Figure 9", "## Figure 10",
                    "## Figure 11", "## Figure 12", "## Figure 13", "## Figure 14", "## Table 3"):
        assert section in report
    for figure in FIGURES:
        if figure.startswith("fig"):
            assert f"({figure}.png)" in report
    assert "| 1 | " in report and "2.07 | 2.77" in report  # Table 2's first split, the paper's values
    assert "13.35" in report  # Table 4, the paper's execution time at 10-second slices
    assert "did not complete" in report  # Table 3, the paper's Q8Join without pruning


def test_the_script_refuses_a_repeat_count_below_one(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--repeat", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--repeat must be at least 1" in done.stderr
