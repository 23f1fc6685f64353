"""bench/gpu_rehearse.py's scheduler: rehearsals start `--stagger-s` apart (a first wave of ten SGLang startups at
once ran each 40-60% longer on 16 cores) and never more than `--per-gpu` at a time; a dry run does not wait.
Each "rehearsal" here is a Python process that sleeps, so the schedule is what is tested, not SGLang.

    python -m pytest tests/test_gpu_rehearse_schedule.py -q
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_rehearse  # noqa: E402


def _run(monkeypatch, tmp_path, stagger_s: float, dry_run: bool, n: int = 4, per_gpu: int = 2):
    monkeypatch.setattr(
        gpu_rehearse, "kit_argv", lambda job, opts: [sys.executable, "-c", "import time; time.sleep(0.6)"]
    )
    monkeypatch.setattr(gpu_rehearse, "finish", lambda job, why: {"case": job.case, "started_at": job.started_at})
    opts = SimpleNamespace(
        base_port=40000, deadline_s=60.0, case_timeout=30.0, min_start_s=0.0, per_gpu=per_gpu,
        dry_run=dry_run, stagger_s=stagger_s, work=str(tmp_path),
    )  # fmt: skip
    jobs = [gpu_rehearse.Job(case=f"c{i}", inputs={}, rehearsable="yes", group="family") for i in range(n)]
    rows, not_run = gpu_rehearse.run_batch(jobs, opts, [0], emit=lambda row: None)
    assert not not_run
    return sorted(r["started_at"] for r in rows)


def test_starts_are_staggered(monkeypatch, tmp_path):
    starts = _run(monkeypatch, tmp_path, stagger_s=0.4, dry_run=False)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) >= 0.4 - 1e-6, gaps


def test_dry_run_does_not_stagger(monkeypatch, tmp_path):
    starts = _run(monkeypatch, tmp_path, stagger_s=5.0, dry_run=True, n=2, per_gpu=2)
    assert starts[1] - starts[0] < 1.0


@pytest.mark.parametrize("per_gpu", [1, 2])
def test_never_more_than_per_gpu(monkeypatch, tmp_path, per_gpu):
    starts = _run(monkeypatch, tmp_path, stagger_s=0.0, dry_run=False, n=3, per_gpu=per_gpu)
    # with one slot, each start waits for the previous 0.6 s process; with two, the third waits
    assert starts[per_gpu] - starts[0] >= 0.5
