"""kit.sglang.dtype: the dtype each release runs the target and the draft in, and `draft.dtype`.

The recorded rule is checked by running each release's own `_get_and_verify_dtype` on the probe grid
(`kit.derive.dtype_scan`; skipped when that release's source is not cached). The finding: an embedded-like target
whose config says float32 beside a bfloat16 EAGLE-3 draft crashed real SGLang 0.5.17 during the draft's CUDA-graph
capture.

    python -m pytest kit/tests/sglang/test_dtype.py -q
"""

from __future__ import annotations

import json
import re

import pytest

from kit.derive.dtype_scan import derive, derive_forced, predict
from kit.sglang.dtype import DTYPE_RULES, NO_CAST_EVIDENCE, dtype_rule, forced_dtype, resolve_model_dtype
from kit.tests.sglang import source_or_skip
from kit.wiring.checks import draft_dtype_checks

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576}
FP32_TARGET = {**LLAMA, "dtype": "float32"}  # what the kit's embedded SmolLM2 said before it declared bfloat16
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "torch_dtype": "bfloat16"}
LAUNCH = (
    "python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 --speculative-draft-model-path D "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
).split()


# -- the recorded rule against the real source ----------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.4.4", "0.4.5", "0.5.1", "0.5.4", "0.5.8", "0.5.17", "0.5.23"])
def test_recorded_rule_matches_the_real_source(version):
    source_or_skip(version)
    got = derive(version, download=False)
    assert got["grid"] == predict(version)
    assert got["reads"] == dtype_rule(version).reads
    assert derive_forced(version, download=False) == dtype_rule(version).forced_bf16


@pytest.mark.parametrize("version", sorted(DTYPE_RULES))
def test_each_rule_evidence_is_that_line_of_its_first_release(version):
    from kit.sglang.source import source_text

    source_or_skip(version)
    path, line, text = re.match(r"(\S+):(\d+) (.*?)(?: \(.*\))?$", DTYPE_RULES[version].evidence).groups()
    assert source_text(version, path, download=False).splitlines()[int(line) - 1].strip() == text


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_no_release_casts_between_target_and_draft(version):
    from kit.sglang.source import source_files, source_text

    source_or_skip(version)
    if version == "0.5.17":  # the crash's release: the lines the finding cites
        for path, line in NO_CAST_EVIDENCE:
            assert line in source_text(version, path, download=False), path
    eagle3 = source_text(version, "srt/models/llama_eagle3.py", download=False)
    assert "torch.cat([embeds, hidden_states], dim=-1)" in eagle3 and not re.search(r"embeds\.to\(", eagle3)
    spec = source_files(version, "srt/speculative", download=False)
    assert not [p for p, t in spec.items() if re.search(r"server_args\.dtype\s*=", t)]  # the draft keeps --dtype


def test_auto_runs_float32_configs_as_float16_and_gemma_per_release():
    assert resolve_model_dtype(FP32_TARGET, None, "0.5.17").dtype == "float16"
    assert resolve_model_dtype(LLAMA, "auto", "0.5.17").dtype == "float16"  # no dtype: float32 to SGLang
    assert resolve_model_dtype(DRAFT, None, "0.5.17").dtype == "bfloat16"
    assert resolve_model_dtype(FP32_TARGET, "half", "0.5.17").dtype == "float16"
    assert resolve_model_dtype(DRAFT, "float32", "0.5.17").dtype == "float32"
    assert resolve_model_dtype(DRAFT, "fp16", "0.5.17") is None  # SGLang rejects it (launch.flag)
    gemma3 = {"model_type": "gemma3", "torch_dtype": "float32"}
    assert resolve_model_dtype(gemma3, None, "0.4.4").dtype == "float16"  # 0.4.4: gemma2 only
    assert resolve_model_dtype(gemma3, None, "0.4.5").dtype == "bfloat16"
    # a multimodal wrapper: SGLang reads the text config's dtype
    wrapped = {"model_type": "llava", "torch_dtype": "float32", "text_config": {"torch_dtype": "bfloat16"}}
    assert resolve_model_dtype(wrapped, None, "0.5.17").dtype == "bfloat16"


def test_gpt_oss_mxfp4_is_forced_to_bfloat16_from_0_5_1():
    gpt_oss = {"architectures": ["GptOssForCausalLM"], "quantization_config": {"quant_method": "mxfp4"}}
    assert forced_dtype(gpt_oss, "0.5.17") == "gpt_oss_mxfp4" and forced_dtype(gpt_oss, "0.4.10") is None
    assert forced_dtype({**gpt_oss, "quantization_config": None}, "0.5.17") is None
    assert forced_dtype({"architectures": ["PixtralForConditionalGeneration"]}, "0.5.8") == "pixtral"
    assert forced_dtype({"architectures": ["PixtralForConditionalGeneration"]}, "0.5.4") is None


# -- draft.dtype --------------------------------------------------------------------------------------------
def test_a_float32_target_beside_a_bf16_draft_is_an_error_naming_both_sides_and_the_fix():
    (f,) = draft_dtype_checks(FP32_TARGET, DRAFT, LAUNCH, "0.5.17")
    assert f.code == "draft.dtype" and f.severity == "error"
    assert f.evidence["target"]["dtype"] == "float16" and f.evidence["draft"]["dtype"] == "bfloat16"
    assert 'config dtype "float32"' in f.title and "runs as float16" in f.title and "no --dtype" in f.title
    assert f.fix.startswith("launch with --dtype bfloat16") and "the target's config.json" in f.fix
    # a target whose config names no dtype at all is the same fault
    assert [g.code for g in draft_dtype_checks(LLAMA, DRAFT, LAUNCH, "0.5.17")] == ["draft.dtype"]


def test_dtype_on_the_launch_or_equal_dtypes_is_no_finding():
    assert draft_dtype_checks(FP32_TARGET, DRAFT, LAUNCH + ["--dtype", "bfloat16"], "0.5.17") == []
    assert draft_dtype_checks(FP32_TARGET, DRAFT, LAUNCH + ["--dtype=float16"], "0.5.17") == []
    assert draft_dtype_checks({**LLAMA, "torch_dtype": "bfloat16"}, DRAFT, LAUNCH, "0.5.17") == []
    # a float32 draft runs float16 under auto, as a float32 target does
    assert draft_dtype_checks(FP32_TARGET, {**DRAFT, "torch_dtype": "float32"}, LAUNCH, "0.5.17") == []


def test_only_eagle_launches_and_unforced_targets_are_judged():
    standalone = [a if a != "EAGLE3" else "STANDALONE" for a in LAUNCH]
    assert draft_dtype_checks(FP32_TARGET, DRAFT, standalone, "0.5.17") == []
    assert [f.code for f in draft_dtype_checks(FP32_TARGET, DRAFT, None, "0.5.17")] == ["draft.dtype"]  # no launch
    gpt_oss = {"architectures": ["GptOssForCausalLM"], "quantization_config": {"quant_method": "mxfp4"}}
    assert draft_dtype_checks(gpt_oss, {**DRAFT, "torch_dtype": "float16"}, LAUNCH, "0.5.17") == []


def test_kit_doctor_and_the_launch_preflight_report_it(tmp_path, monkeypatch):
    from kit.checkpoint.random_draft import write_random_draft
    from kit.preflight import launch_report
    from kit.serving.launch import LaunchSpec
    from kit.tests.checkpoint.test_checkpoint import TINY

    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))  # no side parser: the recorded flag table judges
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**TINY, "model_type": "llama", "dtype": "float32"}))
    draft = write_random_draft(tmp_path / "draft", "sglang", TINY, draft_vocab_size=32, dtype="bfloat16")
    spec = LaunchSpec(
        model_path=str(target),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    )
    codes = {f.code for f in launch_report(spec, sglang_version="0.5.17").errors}
    assert "draft.dtype" in codes
    fixed = spec.replace(extra_args=["--dtype", "bfloat16"])
    assert "draft.dtype" not in {f.code for f in launch_report(fixed, sglang_version="0.5.17").findings}


def test_a_rehearsal_crash_on_mixed_dtypes_is_named_draft_dtype():
    from kit.rehearsal.runner import observed_findings

    text = "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16"
    (f,) = observed_findings({"started": False, "exit": text})
    assert f.code == "draft.dtype"
