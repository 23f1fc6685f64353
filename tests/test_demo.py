"""The main job end to end: `python -m kit demo --quick` executes every notebook headless.

This is also the notebook test: each notebook runs with the demo's parameters, and the run
folder must hold every executed notebook and a summary. Run: python -m pytest tests/test_demo.py
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_quick_runs_all_notebooks(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kit", "demo", "--quick", "--runs-dir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = list(tmp_path.iterdir())
    executed = {p.name for p in run.glob("*.ipynb")}
    assert executed == {p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["accept_length"]) == {"seed_launch", "fixed_launch", "oracle"}
    assert (run / "summary.md").exists()


def test_demo_bad_path_is_one_line_exit_2(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kit", "demo", "--draft", str(tmp_path / "nope"), "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "nope" in r.stderr
    assert list(tmp_path.iterdir()) == []  # no partial run folder
