"""`kit tune` end to end on the kit's CPU reference server: the embedded SmolLM2 with the shipped demo draft,
started through kit.serving.launch + kit.serving.process as the verb starts them (one batch size, a two-point
grid, 4 prompts x 16 new tokens). What it checks is the flow and its outputs, not which point wins (timing on a
shared CPU): every server it started is stopped, tune.json holds the calibration, the predictions and the
measured arms, and the answer comes with a launch line and the figure."""

import json
from pathlib import Path

import pytest

from kit.cli import main

pytestmark = pytest.mark.slow


def test_tune_on_the_reference_server(tmp_path, shipped_draft, capsys):
    out = tmp_path / "tune"
    launch = "python -m sglang.launch_server --model-path embedded --speculative-algorithm EAGLE3 "
    launch += f"--speculative-draft-model-path {shipped_draft}"
    argv = ["tune", "--engine", "reference", "--launch", launch, "--batch-size", "1", "--speculative-num-steps", "2", "3",
            "--speculative-eagle-topk", "1", "--top", "1", "--num-prompts", "4", "--calibration-prompts", "2",
            "--max-new-tokens", "16", "--warmup", "0", "--chat-template", "embedded", "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "tune.json").read_text())
    assert doc["status"] == "done" and set(doc["calibration"]) == {"1"}
    assert set(doc["predicted"]["1"]) == {"2-1-3", "3-1-4"}
    assert {a["source"] for a in doc["accept_length"].values()} == {"the draft's recorded oracle (training.json)"}
    (label, row), *_ = doc["measured"]["1"].items()  # --top 1: the best predicted point beside the baseline
    assert label == max(doc["predicted"]["1"], key=doc["predicted"]["1"].get)
    assert row["median"] > 0 and row["accept_length"] > 1 and row["n"] == 4
    answer = doc["best"]["1"]
    shown = capsys.readouterr().out
    assert f"batch 1: {answer['verdict']}" in shown and answer["launch"] in shown and "-m kit serve" in answer["launch"]
    assert (out / "tune.png").stat().st_size > 0
    # one server per arm, the calibration on the grid's own two points (no launch outside the grid), every server
    # stopped: no process holds its log open any more
    logs = out / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["2-1-3.log", "3-1-4.log", "baseline.log"]
    assert not [fd for fd in Path("/proc").glob("[0-9]*/fd/*") if _points_into(fd, logs)]


def _points_into(fd: Path, folder: Path) -> bool:
    try:
        return str(fd.readlink()).startswith(str(folder))
    except OSError:  # another user's process, or one that ended meanwhile
        return False
