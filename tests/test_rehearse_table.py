"""bench/rehearse_table.py: a gpu_rehearse JSONL (real rows, a dry-run row, a case not rehearsable, the summary
line) becomes the doctor-vs-rehearsal-vs-truth table and its summary line.

    python -m pytest tests/test_rehearse_table.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from rehearse_table import write_table  # noqa: E402

SEED = {
    "case": "seed",
    "truth": "aux.algorithm, draft.config",
    "tp": {"rehearsal": 1, "launch": 8},
    "wall_s": 37.5,
    "doctor": ["draft.config:error", "aux.algorithm:error", "env.nccl_var:warning"],
    "facts": {"started": False, "clean": True},
    "observed": [{"code": "draft.config", "title": "SGLang did not start: ValueError: Unrecognized model `x`"}],
    "table": [
        {"code": "aux.algorithm", "verdict": "not reached"},
        {"code": "draft.config", "verdict": "confirmed"},
        {"code": "env.nccl_var", "verdict": "not rehearsed"},
    ],
}
HEALTHY_BUT_BYPASSED = {
    "case": "llama",
    "truth": "healthy",
    "wall_s": 106.5,
    "doctor": [],
    "facts": {
        "started": True,
        "captured": [2, 16, 29],
        "draft_input_width": [256],
        "draft_hidden": [256],
        "spec_verify_ct": [31],
        "load_weights": [{"skipped": ["midlayer.x"], "unfilled": []}],
        "clean": True,
    },
    "observed": [],
    "table": [{"code": "aux.algorithm", "verdict": "new"}],
}


STARTED = {"facts": {"started": True, "clean": True}, "observed": [], "wall_s": 90.0}
# a fault the truth states for 0.5.1 that needs a long request: started in miniature, explained by the case's data
LONG_REQUESTS_ONLY = {
    "case": "sglang-pr9658-gptoss20b-export-fa3-topk4",
    "doctor": ["draft.context_short:error"],
    "table": [{"code": "draft.context_short", "verdict": "not rehearsed"}],
    **STARTED,
}
# a fault of 0.4.8 that 0.4.9 fixed (truth.fixed_in): healthy at the rehearsed 0.5.17, as it started
FIXED_SINCE = {"case": "class-modelopt-kv-only-draft-fails-at-load-048", "doctor": [], "table": [], **STARTED}


def test_the_table_names_agreement_per_case_and_sums_it_up(tmp_path):
    rows = [
        SEED,
        HEALTHY_BUT_BYPASSED,
        LONG_REQUESTS_ONLY,
        FIXED_SINCE,
        {"case": "planned", "plan_changes": ["--tp-size=1"], "doctor": [], "wall_s": 2.0},
        {"case": "no-weights", "rehearsable": "no: no draft weights in the case", "wall_s": None},
        {"cases": 6, "not_run": ["late"], "batch_wall_s": 300.0, "gpus": [0, 1], "per_gpu": 5, "version": "0.5.17"},
    ]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    text = write_table(jsonl, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "rehearse_table.json").read_text())
    by = {r["case"]: r for r in doc["rows"]}
    assert by["seed"]["agreed"] and by["seed"]["exception"].startswith("ValueError: Unrecognized model")
    assert by["seed"]["doctor_errors"] == ["aux.algorithm", "draft.config"]
    assert not by["llama"]["agreed"] and by["llama"]["fc_used"] == "no: bypassed" and by["llama"]["dropped"] == 1
    assert by["planned"]["status"] == "planned (dry run)" and by["no-weights"]["status"].startswith("not rehearsable")
    assert "env.nccl_var" not in text.split("\n")[2]  # codes a rehearsal cannot observe stay out of the markdown
    # three ways: doctor, the rehearsal, and the truth at the rehearsed release (the case's own data)
    assert by["seed"]["matches_truth"] and by["class-modelopt-kv-only-draft-fails-at-load-048"]["matches_truth"]
    assert by["class-modelopt-kv-only-draft-fails-at-load-048"]["truth_release"] == "0.4.8"
    pr9658 = by["sglang-pr9658-gptoss20b-export-fa3-topk4"]
    assert pr9658["agreed"] and not pr9658["matches_truth"] and "4096 positions" in pr9658["explanation"]
    assert not by["llama"]["matches_truth"] and by["llama"]["explanation"] is None  # nothing in the case says why
    assert doc["summary"].startswith(
        "4 rehearsed: 3 agree with doctor, 2 match the truth, 2 differ (unexplained: llama); "
        "6 cases (5 rehearsable), 1 disagreements with doctor (llama)"
    )
    assert "- `llama`: **unexplained**" in text
    assert "max wall 106.5 s" in doc["summary"] and "not run (deadline): late" in doc["summary"]
    assert (tmp_path / "out" / "rehearse_table.md").read_text().startswith("| case |")
