"""Sharding under --tp/--dp/--ep, statically (`kit.sglang.sharding`, `launch.shard`): the recorded per-release facts
against each release's real source (`kit.derive.sharding_scan`; wheels downloaded once, cached; skipped offline),
the rule on tiny configs, and the seed's TP8 launch and its fix.
Run: python -m pytest kit/tests/sglang/test_sharding.py -q
"""

import json
from pathlib import Path

import pytest

from kit.derive.sharding_scan import RELEASES, derive
from kit.hf import HFConfig
from kit.sglang.sharding import Parallel, shard_findings, table
from kit.tests.sglang import derive_or_skip

EXAMPLES = Path(__file__).parents[2] / "examples"
LLAMA_DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 2560,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 9728,
    "vocab_size": 151936,
    "draft_vocab_size": 32000,
    "num_hidden_layers": 1,
}
# Kimi-K2.5's shipped quantization: routed experts only, compressed-tensors pack-quantized INT4, group 32
# (https://huggingface.co/eatang/Kimi-K2.5-2layer: "quantization_config ... kept as they ship")
KIMI_INT4 = {
    "quant_method": "compressed-tensors",
    "format": "pack-quantized",
    "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "group_size": 32, "strategy": "group"}}
    },
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"],
}


def _errors(target=None, draft=None, flags="--tp-size 8", version="0.5.17"):
    cfgs = [HFConfig.of(c) if c is not None else None for c in (target, draft)]
    return [f for f in shard_findings(*cfgs, flags.split(), version) if f.severity == "error"]


@pytest.mark.parametrize("version", RELEASES)
def test_recorded_facts_match_the_real_source(version):
    assert derive_or_skip(derive, version) == table()[version]


def test_every_recorded_release_divides_what_the_rule_assumes():
    for version, facts in table().items():
        assert {"heads", "kv_heads", "kv_replicas", "qkv_heads", "column", "vocab", "vocab_pad_64"} <= set(facts)
        assert ("mla_heads_attn_tp" in facts) != ("mla_heads_tp" in facts), version
        assert ("moe_inter" in facts) != ("moe_inter_floor" in facts), version


def test_draft_heads_that_do_not_divide_tp_stop_startup():
    [f] = _errors(draft={**LLAMA_DRAFT, "num_attention_heads": 20, "num_key_value_heads": 4})
    assert f.code == "launch.shard" and "draft" in f.title and "20" in f.title and "not yet rehearsed" in f.title
    assert f.evidence["source"] == table()["0.5.17"]["heads"] and f.evidence["source"].startswith(
        "srt/models/llama.py:"
    )
    assert "[1, 2, 4]" in f.fix
    assert not _errors(draft={**LLAMA_DRAFT, "num_attention_heads": 20}, flags="--tp-size 4")
    nested = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {**LLAMA_DRAFT, "num_attention_heads": 20},
    }
    assert _errors(draft=nested)  # speculators' layout, read through DraftConfig


def test_fewer_kv_heads_than_gpus_are_replicated_not_refused():
    found = shard_findings(None, HFConfig.of(LLAMA_DRAFT), ["--tp-size", "16"], "0.5.17")
    assert [f.severity for f in found] == ["info"] and "replicated 2x" in found[0].title
    [f] = _errors(draft={**LLAMA_DRAFT, "num_key_value_heads": 6}, flags="--tp-size 16")  # 16 % 6
    assert "KV heads" in f.title and f.evidence["source"] == table()["0.5.17"]["kv_replicas"]
    assert _errors(draft={**LLAMA_DRAFT, "num_key_value_heads": 12}, flags="--tp-size 8")  # 12 % 8


def test_experts_split_over_ep_and_the_moe_intermediate_over_tp_over_ep():
    moe = {"architectures": ["Qwen2MoeForCausalLM"], "num_attention_heads": 16, "num_key_value_heads": 16,
           "num_experts": 60, "moe_intermediate_size": 1408, "vocab_size": 151936}  # fmt: skip
    assert not _errors(moe, flags="--tp 8")  # experts whole per GPU, 1408 / 8 = 176
    [f] = _errors(moe, flags="--tp 8 --ep-size 8")  # 60 experts over EP 8
    assert "routed experts" in f.title and "moe" in f.evidence["source"]
    assert _errors({**moe, "moe_intermediate_size": 1412}, flags="--tp 8")  # 1412 / 8


def test_quantization_blocks_and_groups_must_fit_a_shard():
    qwen3_30b = {"num_attention_heads": 32, "num_key_value_heads": 4, "num_experts": 128, "moe_intermediate_size": 768,
                 "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}  # fmt: skip
    [f] = _errors(qwen3_30b, flags="--tp 4")  # 768 / 4 = 192, not a multiple of 128 (QwenLM/Qwen3#1485)
    assert "FP8" in f.title and "192" in f.title and "quantization/fp8.py" in f.evidence["source"]
    assert "--ep-size 4" in f.fix and not _errors(qwen3_30b, flags="--tp 4 --ep 4")
    gptq = {"num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 29568,
            "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}  # fmt: skip
    [f] = _errors(gptq)  # 29568 / 8 = 3696 = 28.875 groups of 128
    assert "INT4 group 128" in f.title and "marlin_utils.py" in f.evidence["source"]


def test_dp_attention_splits_mla_heads_over_attention_tp():
    mla = {"num_attention_heads": 24, "kv_lora_rank": 512, "vocab_size": 129280}
    assert not _errors(mla, flags="--tp 8")
    assert _errors({**mla, "num_attention_heads": 20}, flags="--tp 8")
    assert not _errors({**mla, "num_attention_heads": 20}, flags="--tp 8 --dp 2 --enable-dp-attention")  # 20 / 4
    [f] = _errors({**mla, "num_attention_heads": 18}, flags="--tp 8 --dp 2 --enable-dp-attention")
    assert "attention TP 4" in f.title and "deepseek_v2.py" in f.evidence["source"]
    assert _errors(mla, flags="--tp 8 --dp 3 --enable-dp-attention")  # --tp-size 8 over --dp-size 3


def test_the_release_decides_padding_and_flag_names():
    draft = {**LLAMA_DRAFT, "num_attention_heads": 24, "num_key_value_heads": 6}
    assert any("vocabulary" in f.title for f in _errors(draft=draft, flags="--tp 6", version="0.5.17"))
    assert not any("vocabulary" in f.title for f in _errors(draft=draft, flags="--tp 6", version="0.5.23"))
    for v in ("0.4.4", "0.4.10", "0.5.1", "0.5.8", "0.5.23"):  # dest tensor_parallel_size etc. up to 0.5.13
        p = Parallel.of(["--tp", "8", "--dp", "2", "--ep-size", "4"], v)
        assert (p.tp_size, p.dp_size, p.ep_size) == (8, 2, 4), v
    assert Parallel.of(["--tp", "8", "--enable-dp-attention"], "0.4.4").sizes(table()["0.4.4"])["attn_tp_size"] == 1


@pytest.mark.parametrize("version", [None, "0.5.17"])
def test_the_seed_at_tp8_and_its_fix_split_evenly(version):
    """Kimi-K2.5 (64 MLA heads, 384 experts, moe_intermediate 2048, INT4 group 32) and the seed's 64-head draft:
    every division at TP8 is even, so the seed's launch and its fix get no launch.shard finding; at TP128 they would."""
    from kit.serving.checks import lint
    from kit.serving.launch import apply_fixes, spec_from_command
    from kit.sglang.cmdline import SEED_LAUNCH

    target = HFConfig.of(
        {**json.loads((EXAMPLES / "kimi_k25_config.json").read_text()), "quantization_config": KIMI_INT4}
    )
    draft = HFConfig.of(json.loads((EXAMPLES / "kimi_k25_eagle3_config.json").read_text()))
    seed = spec_from_command(SEED_LAUNCH, version)
    for spec in (seed, apply_fixes(seed, lint(seed, target, draft, parse_flags=False, sglang_version=version))):
        assert spec.tp_size == 8
        report = lint(spec, target, draft, parse_flags=False, sglang_version=version)
        assert not [f for f in report.findings if f.code == "launch.shard"]
    assert len(_errors(target.to_dict(), draft.to_dict(), "--tp-size 128", version)) == 3  # heads x2, INT4 groups
