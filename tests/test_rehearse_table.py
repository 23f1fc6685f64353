"""bench/rehearse_table.py: a gpu_rehearse JSONL (real rows, a dry-run row, a case not rehearsable, the summary
line) becomes the doctor-vs-rehearsal table and its summary line.

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


def test_the_table_names_agreement_per_case_and_sums_it_up(tmp_path):
    rows = [
        SEED,
        HEALTHY_BUT_BYPASSED,
        {"case": "planned", "plan_changes": ["--tp-size=1"], "doctor": [], "wall_s": 2.0},
        {"case": "no-weights", "rehearsable": "no: no draft weights in the case", "wall_s": None},
        {"cases": 4, "not_run": ["late"], "batch_wall_s": 300.0, "gpus": [0, 1], "per_gpu": 5},
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
    assert doc["summary"].startswith("4 cases (3 rehearsable), 2 rehearsed, 1 agreed, 1 disagreements (llama)")
    assert "max wall 106.5 s" in doc["summary"] and "not run (deadline): late" in doc["summary"]
    assert (tmp_path / "out" / "rehearse_table.md").read_text().startswith("| case |")
