"""Real public vLLM launch lines (kit/tests/vllm/cases.json, in tests/corpus/cases.json's form, configs from
tests/corpus/configs.json with their provenance) through `kit doctor` at the vLLM release each truth holds for, judged
by the derived table (kit/vllm/rules.json): a fault's codes are raised, a healthy line gives no error.

Run: python -m pytest -q -n 0 kit/tests/vllm/test_corpus.py
"""

import json
import sys
import tempfile
from pathlib import Path

import pytest

from kit.doctor import DoctorConfig, diagnose
from kit.vllm.rules import RULES_PATH

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
from corpus_cases import build_case, load_configs, no_side_env_builds  # noqa: E402

CASES = json.loads((Path(__file__).with_name("cases.json")).read_text())


def test_cases_have_provenance():
    assert 3 <= len(CASES) <= 12 and any(c["truth"]["verdict"] == "healthy" for c in CASES)
    for c in CASES:
        assert c["sources"] and all(u.startswith("https://") for u in c["sources"]) and c["truth"]["stated"]
        assert c["vllm_version"] == c["truth"]["release"] and (c["launch_verbatim"] or c["note_launch"])
        for name in (c["target"], (c.get("draft") or {}).get("config")):
            assert name is None or load_configs()[name]["provenance"]["url"]


@pytest.mark.skipif(not RULES_PATH.is_file(), reason="kit/vllm/rules.json is not derived yet (kit.derive.vllm_scan)")
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_matches_truth(case):
    with tempfile.TemporaryDirectory(prefix="kit-vllm-corpus-") as tmp, no_side_env_builds():
        args = build_case(case, Path(tmp))
        rep = diagnose(DoctorConfig(**args))  # build_case: the case's vllm_version among them
    found = [f for f in rep.findings if f.code != "launch.path"]  # hub ids offline: a fact of this machine
    errors = {f.code for f in found if f.severity == "error"}
    if case["truth"]["verdict"] == "healthy":
        assert not errors, [f.title for f in found if f.severity == "error"]
    else:
        assert set(case["truth"]["codes"]) <= errors | {f.code for f in found if f.severity == "warning"}, found
