"""Draft config fields SGLang reads at startup, against the target and the served context.

Configs: a Kimi-K2.5 target (kit/examples/kimi_k25_config.json) and a ModelOpt-style MLA EAGLE-3 draft
(the kimik2 template of NVIDIA/Model-Optimizer hf_spec_export: `num_nextn_predict_layers` copied from the
base, 0 for Kimi — the nvidia/Kimi-K2.5-Thinking-Eagle3 case of sglang PR #26726); an EAGLE-3 Llama draft
with `max_position_embeddings: 2048` as lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B ships (sglang #6783).
"""

import json
from pathlib import Path

from kit.checkpoint.hf_config import text_config
from kit.tests.checkpoint.test_exporter_keys import llama_config, mla_config
from kit.wiring.checks import draft_target_checks

KIMI = json.loads((Path(__file__).parents[2] / "examples" / "kimi_k25_config.json").read_text())
LLAMA_TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
}


def kimi_draft(**kw):
    t = text_config(KIMI)
    base = {k: t.get(k) for k in ("max_position_embeddings", "rope_theta", "rope_scaling")}
    return mla_config(**{**base, "num_nextn_predict_layers": 0, **kw})


def by_code(findings):
    return {f.code: f for f in findings}


def test_nextn_zero_is_an_error_only_where_sglang_crashes():
    # 0.5.12 tests `is not None`: zero draft KV layers -> IndexError on the first draft forward
    f = by_code(draft_target_checks(KIMI, kimi_draft(), version="0.5.12"))["draft.nextn_zero"]
    assert f.severity == "error" and f.evidence["source"][0].endswith("model_runner.py")
    # 0.5.13+ tests `> 0`: a healthy ModelOpt Kimi draft gets no finding at all
    assert draft_target_checks(KIMI, kimi_draft(), version="0.5.23") == []
    assert "draft.nextn_zero" not in by_code(
        draft_target_checks(KIMI, kimi_draft(num_nextn_predict_layers=1), version="0.5.12")
    )


def test_draft_context_shorter_than_the_target():
    d = llama_config(max_position_embeddings=2048)
    f = by_code(draft_target_checks(LLAMA_TARGET, d, version="0.5.23"))["draft.context_short"]
    # the target's derived context: llama3 rope keeps the factor at 1 -> 131072
    assert f.severity == "error" and f.evidence["served_context"] == 131072 and f.evidence["draft_context"] == 2048
    env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert (
        by_code(draft_target_checks(LLAMA_TARGET, d, env, version="0.5.23"))["draft.context_short"].severity
        == "warning"
    )
    # 0.4.x allowed it by default and kept the draft's rotary cache short: requests past 2048 fault
    f = by_code(draft_target_checks(LLAMA_TARGET, d, version="0.4.9"))["draft.context_short"]
    assert f.severity == "error" and "illegal memory access" in f.title
    # rope factor counts when original_max_position_embeddings is absent (SGLang's get_context_length)
    d2 = llama_config(max_position_embeddings=32768, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    assert "draft.context_short" not in by_code(draft_target_checks(LLAMA_TARGET, d2, version="0.5.23"))


def test_a_speculators_draft_context_is_read_from_its_layer_config():
    """speculators nests the decoder's sizes under transformer_layer_config: the context is read there (as if
    flattened, as draft.config says), not as SGLang's 2048 default for an absent top-level field."""
    from kit.checkpoint.layouts import sglang_to_speculators_config

    def speculators(ctx):
        cfg = sglang_to_speculators_config(llama_config(max_position_embeddings=ctx))
        assert "max_position_embeddings" not in cfg and cfg["transformer_layer_config"]["max_position_embeddings"]
        return cfg

    assert "draft.context_short" not in by_code(
        draft_target_checks(LLAMA_TARGET, speculators(131072), version="0.5.23")
    )
    f = by_code(draft_target_checks(LLAMA_TARGET, speculators(32768), version="0.5.23"))["draft.context_short"]
    assert f.evidence["draft_context"] == 32768 == f.evidence["draft_max_position_embeddings"]


def test_served_context_flag_replaces_the_target_context():
    d = llama_config(max_position_embeddings=2048)
    argv = ["python", "-m", "sglang.launch_server", "--context-length", "2048"]
    assert "draft.context_short" not in by_code(draft_target_checks(LLAMA_TARGET, d, {}, argv, "0.5.23"))
    argv[-1] = "4096"
    f = by_code(draft_target_checks(None, d, {}, argv, "0.5.23"))["draft.context_short"]
    assert f.evidence["from"] == "--context-length" and f.evidence["served_context"] == 4096


def test_mla_geometry_and_rope_against_the_target():
    f = by_code(draft_target_checks(KIMI, kimi_draft(kv_lora_rank=256), version="0.5.23"))
    assert f["draft.mla_geometry"].severity == "warning"
    assert f["draft.mla_geometry"].evidence["draft_vs_target"] == {"kv_lora_rank": [256, 512]}
    f = by_code(draft_target_checks(KIMI, kimi_draft(rope_theta=10000.0), version="0.5.23"))
    assert f["draft.rope"].severity == "warning" and "rope_theta" in f["draft.rope"].evidence["draft_vs_target"]
    # Kimi-K2.5's YaRN (moonshotai/Kimi-K2.5 text_config), spelled "type" by the target, "rope_type" by the draft
    yarn = {"factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0, "beta_slow": 1.0}
    yarn.update(mscale=1.0, mscale_all_dim=1.0)
    target = {**KIMI, "text_config": {**text_config(KIMI), "rope_scaling": {"type": "yarn", **yarn}}}
    same = kimi_draft(rope_scaling={"rope_type": "yarn", **yarn})
    assert draft_target_checks(target, same, version="0.5.23") == []
    f = by_code(draft_target_checks(target, kimi_draft(rope_scaling=None), version="0.5.23"))["draft.rope"]
    assert f.evidence["draft_vs_target"]["factor"] == [None, 64.0]
    # transformers v5 rope_parameters is what the MLA layer reads first
    v5 = kimi_draft(rope_scaling=None, rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, **yarn})
    assert draft_target_checks(target, v5, version="0.5.23") == []
    # an MLA draft for a non-MLA target is a design choice (TorchSpec configs/draft_models/qwen3_8b_eagle3_mla.json)
    assert draft_target_checks(LLAMA_TARGET, kimi_draft(max_position_embeddings=131072), version="0.5.23") == []
    # a Llama-class draft has no MLA fields to compare
    assert draft_target_checks(LLAMA_TARGET, llama_config(), version="0.5.23") == []


# torchspec-project/TorchSpec configs/draft_models/qwen3_8b_eagle3_mla.json (an MLA draft for Qwen3-8B)
TORCHSPEC_QWEN3_MLA = {
    "architectures": ["DeepSeekForCausalLMEagle3"],
    "model_type": "deepseek_v3",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 1,
    "intermediate_size": 12288,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 262144,
    "rope_theta": 1000000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 64.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 1.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36}
QWEN3_8B.update(max_position_embeddings=40960, rope_theta=1000000, rope_scaling=None)


def test_torchspec_mla_draft_for_qwen3():
    from kit.sglang.loader import resolve_draft_class

    # TorchSpec's training architecture is no SGLang class: draft.arch (kit inspect) says so
    assert resolve_draft_class(TORCHSPEC_QWEN3_MLA, "0.5.23") == (None, "not_registered")
    fixed = dict(TORCHSPEC_QWEN3_MLA, architectures=["Eagle3DeepseekV2ForCausalLM"])
    assert resolve_draft_class(fixed, "0.5.23") == ("Eagle3DeepseekV2ForCausalLM", "eagle3")
    # yarn with original_max_position_embeddings: factor 1, 262144 >= the target's 40960; no MLA target to compare
    assert draft_target_checks(QWEN3_8B, fixed, version="0.5.23") == []


def test_kimi_mla_draft_through_the_doctor_providers(tmp_path):
    """The issue's case: a healthy Kimi-K2.5 MLA draft gets no error; a broken one still does."""
    import kit.checkpoint.inspect as ci
    import kit.wiring.checks as wc
    from kit.doctor import Deployment, DoctorConfig
    from kit.tests.checkpoint.test_exporter_keys import modelopt_mla, write_draft

    target = str(Path(__file__).parents[2] / "examples" / "kimi_k25_config.json")

    def errors(keys, cfg, version, name):
        ctx = Deployment.build(
            DoctorConfig(draft=str(write_draft(tmp_path / name, keys, cfg)), target=target, sglang_version=version)
        )
        return {f.code for f in ci.doctor_checks(ctx) + wc.doctor_checks(ctx) if f.severity == "error"}

    keys, cfg = modelopt_mla()
    assert errors(keys, cfg, "0.5.23", "ok") == set()
    assert errors(keys, cfg, "0.5.12", "old") == {"draft.nextn_zero"}
    del keys["layers.0.self_attn.q_a_proj.weight"]
    assert errors(keys, cfg, "0.5.23", "broken") == {"draft.keys_dropped", "draft.params_missing"}
