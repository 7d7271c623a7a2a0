"""The documentation as a user meets it: every code example in the README and in docs/ runs as
written, from a folder outside the checkout, and the docs site builds without a warning."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(python|sh)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent  # the environment reopt is installed in: its reopt command is here


def examples() -> list:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match.group(1), match.group(2), id=f"{page.name}:{line}"))
    return found


def test_the_readme_and_docs_hold_examples_of_every_entry_point():
    code = "\n".join(example.values[1] for example in examples())
    for entry in ("reopt.Optimizer", "optimize(", "AdaptiveRunner", "reopt explain", "Engine(", ".last_change"):
        assert entry in code, f"no example uses {entry}"


@pytest.mark.parametrize("language, code", examples())
def test_an_example_runs_as_written_outside_the_checkout(language, code, tmp_path):
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    environment.pop("PYTHONPATH", None)
    command = [sys.executable, "-c", code] if language == "python" else ["bash", "-e", "-o", "pipefail", "-c", code]
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"


def test_the_quick_start_is_on_the_first_screen_and_ci_runs_its_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = readme.index("## Quick start")
    assert start < 25
    block = readme[readme.index("```bash", start) + 1:]
    commands = [line.split("#")[0].strip() for line in block[:block.index("```")]]
    assert commands == ["bash run.sh demo", "bash run.sh test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "bash run.sh test" in [line.strip() for line in ci]


def test_the_docs_site_builds_strictly(tmp_path):
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8").count("reoptimize") > 0
