"""bench/gpu_capture_miniature.py on the CPU: its dry run plans the capture of the seed's fix in miniature (the
Kimi-K2.5 class's points read both ways, prompts by input_ids, only the capture recorder on the launch's path)
and starts nothing.

    python -m pytest tests/test_gpu_capture_miniature.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_capture_miniature as gcm  # noqa: E402


def test_the_dry_run_plans_the_capture_and_starts_nothing(tmp_path, monkeypatch, capsys):
    def no_start(*a, **k):
        raise AssertionError("a dry run started a server")

    monkeypatch.setattr("kit.serving.process.ServerProcess.start", no_start)
    work, out = tmp_path / "w", tmp_path / "o"
    assert gcm.main(["--work", str(work), "--out", str(out), "--bundle", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "summary.json").read_text())
    plan = doc["plan"]
    assert doc["dry_run"] and doc["errors"] == [] and not (work / "capture").exists()
    assert plan["points"] == [2, 3, 30, 31, 58, 59] and plan["hidden_size"] == 448
    assert plan["architecture"] == "KimiK25ForConditionalGeneration" and plan["prompts"] == list(gcm.PROMPT_LENS)
    assert "points: [2, 3, 30, 31, 58, 59] + final" in printed and "--hidden-states" in plan["oracle"]
    launch = plan["launch"]
    assert f"PYTHONPATH={work / 'capture' / '.site'}" in launch and str(work / "rehearsal" / "site") not in launch
    assert "KIT_REHEARSAL_RECORD" not in launch and "--load-format dummy" in launch
    assert "--speculative" not in launch and "--disable-radix-cache" in launch


def test_the_capture_check_names_bad_shapes_and_the_notes_failures(tmp_path):
    """A request with a state row the server never wrote (zeros before the last token), and a note of a failed
    request, each become an error of the summary (shapes that disagree are read_capture's one-line error)."""
    from types import SimpleNamespace

    import torch

    from kit.reference.captured import Capture, write_capture

    H, points, ids = 4, [1, 2], [[3, 4, 5], [6, 7]]
    aux = [torch.ones(3, 2 * H), torch.ones(2, 2 * H)]
    aux[0][-1] = aux[1][-1] = 0  # the last token's row: never fed to the target
    aux[1][0] = 0
    final = [a[:, :H].clone() for a in aux]
    notes = {"missing": [], "mismatch": [], "failed_requests": ["HTTPStatusError: 500"], "recorder_errors": []}
    write_capture(tmp_path, Capture("server capture", 3, H, points, ids, [2, 1], aux, final, notes))
    run = gcm.new_run(tmp_path, 10.0)
    run.doc = {"errors": []}
    shapes = gcm.check_capture(run, SimpleNamespace(out=str(tmp_path), points=points, hidden_size=H))
    assert [r["ok"] for r in shapes["requests"]] == [True, False] and shapes["final"]
    assert [e["where"] for e in run.doc["errors"]] == ["shapes", "capture notes: failed_requests"]
