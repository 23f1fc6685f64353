"""Each real exporter's EAGLE-3 checkpoint, judged by `kit inspect` with the rules of its own SGLang class.

The drafts are safetensors headers over sparse files (no weights): real key names and real shapes
(Kimi-K2.5 for the MLA class, Llama-3.1-8B for the Llama class). Where the names come from:

* ModelOpt  NVIDIA/Model-Optimizer modelopt/torch/export/plugins/hf_spec_export.py
            (KIMIK2_EAGLE_SINGLE_LAYER, LLAMA_EAGLE_SINGLE_LAYER: `layers.0.*`, `fc`, `norm`, optional
            `d2t`/`lm_head`, no `embed_tokens`) and its kimik2 template config (architectures
            Eagle3DeepseekV2ForCausalLM, model_type kimi_k2, `num_nextn_predict_layers` copied from the
            base, no `draft_vocab_size`) — e.g. nvidia/Kimi-K2.5-Thinking-Eagle3
* SpecForge sgl-project/SpecForge specforge/modeling/draft/deepseek_eagle3.py
            (DeepseekV3ForCausalLMEagle3: `embed_tokens`, `midlayer.*`, `fc`, `norm`, `lm_head`, `t2d`, `d2t`)
            and llama3_eagle.py (LlamaForCausalLMEagle3, the same surface with q/k/v_proj)
* TorchSpec torchspec-project/TorchSpec torchspec/models/draft/deepseek_eagle.py
            (DeepSeekForCausalLMEagle3, same names as SpecForge; published as Eagle3DeepseekV2ForCausalLM,
            e.g. lightseekorg/kimi-k2.5-eagle3-mla, which kimi_k25_eagle3.py names as its checkpoint)
* EAGLE     SafeAILab EAGLE-3 releases: `midlayer.*`, config LlamaForCausalLM (kit/checkpoint/layouts.py)
* speculators `layers.0.*`, config Eagle3Speculator with transformer_layer_config (layouts.py)
"""

import json
import math

import pytest

from kit.checkpoint.inspect import inspect
from kit.checkpoint.safetensors_io import WriteEntry, build_header

# Kimi-K2.5 text config (moonshotai/Kimi-K2.5 text_config) and its one-layer dense MLA draft
KIMI = dict(H=7168, V=163840, nh=64, q=1536, kv=512, nope=128, rope=64, v=128, I=18432)
# Llama-3.1-8B and its EAGLE-3 draft (32k draft vocab)
LLAMA = dict(H=4096, V=128256, Vd=32000, nh=32, nkv=8, hd=128, I=14336)


def mla_layer(p: str) -> dict:
    k = KIMI
    H, qk = k["H"], k["nope"] + k["rope"]
    return {
        f"{p}.self_attn.q_a_proj.weight": (k["q"], 2 * H),
        f"{p}.self_attn.q_a_layernorm.weight": (k["q"],),
        f"{p}.self_attn.q_b_proj.weight": (k["nh"] * qk, k["q"]),
        f"{p}.self_attn.kv_a_proj_with_mqa.weight": (k["kv"] + k["rope"], 2 * H),
        f"{p}.self_attn.kv_a_layernorm.weight": (k["kv"],),
        f"{p}.self_attn.kv_b_proj.weight": (k["nh"] * (k["nope"] + k["v"]), k["kv"]),
        f"{p}.self_attn.o_proj.weight": (H, k["nh"] * k["v"]),
        f"{p}.mlp.gate_proj.weight": (k["I"], H),
        f"{p}.mlp.up_proj.weight": (k["I"], H),
        f"{p}.mlp.down_proj.weight": (H, k["I"]),
        f"{p}.hidden_norm.weight": (H,),
        f"{p}.input_layernorm.weight": (H,),
        f"{p}.post_attention_layernorm.weight": (H,),
    }


def llama_layer(p: str) -> dict:
    k = LLAMA
    H = k["H"]
    return {
        f"{p}.self_attn.q_proj.weight": (k["nh"] * k["hd"], 2 * H),
        f"{p}.self_attn.k_proj.weight": (k["nkv"] * k["hd"], 2 * H),
        f"{p}.self_attn.v_proj.weight": (k["nkv"] * k["hd"], 2 * H),
        f"{p}.self_attn.o_proj.weight": (H, k["nh"] * k["hd"]),
        f"{p}.mlp.gate_proj.weight": (k["I"], H),
        f"{p}.mlp.up_proj.weight": (k["I"], H),
        f"{p}.mlp.down_proj.weight": (H, k["I"]),
        f"{p}.hidden_norm.weight": (H,),
        f"{p}.input_layernorm.weight": (H,),
        f"{p}.post_attention_layernorm.weight": (H,),
    }


def mla_config(**kw) -> dict:
    k = KIMI
    c = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"],
        "model_type": "kimi_k2",
        "hidden_size": k["H"],
        "intermediate_size": k["I"],
        "num_attention_heads": k["nh"],
        "num_key_value_heads": k["nh"],
        "num_hidden_layers": 1,
        "q_lora_rank": k["q"],
        "kv_lora_rank": k["kv"],
        "qk_nope_head_dim": k["nope"],
        "qk_rope_head_dim": k["rope"],
        "v_head_dim": k["v"],
        "hidden_act": "silu",
        "vocab_size": k["V"],
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
    }
    c.update(kw)
    return c


def llama_config(**kw) -> dict:
    k = LLAMA
    c = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": k["H"],
        "intermediate_size": k["I"],
        "num_attention_heads": k["nh"],
        "num_key_value_heads": k["nkv"],
        "head_dim": k["hd"],
        "num_hidden_layers": 1,
        "vocab_size": k["V"],
        "draft_vocab_size": k["Vd"],
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
    }
    c.update(kw)
    return c


def modelopt_mla() -> tuple[dict, dict]:
    H, V = KIMI["H"], KIMI["V"]
    keys = {**mla_layer("layers.0"), "norm.weight": (H,), "fc.weight": (H, 3 * H), "lm_head.weight": (V, H)}
    return keys, mla_config(num_nextn_predict_layers=0)


def specforge_mla(arch="DeepseekV3ForCausalLMEagle3") -> tuple[dict, dict]:
    H, V, Vd = KIMI["H"], KIMI["V"], 32000
    keys = {
        "embed_tokens.weight": (V, H),
        **mla_layer("midlayer"),
        "fc.weight": (H, 3 * H),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
        "d2t": (Vd,),
        "t2d": (V,),
    }
    return keys, mla_config(architectures=[arch], model_type="deepseek_v3", draft_vocab_size=Vd)


def torchspec_mla() -> tuple[dict, dict]:
    H, V = KIMI["H"], KIMI["V"]
    keys = {
        "embed_tokens.weight": (V, H),
        **mla_layer("midlayer"),
        "fc.weight": (H, 3 * H),
        "norm.weight": (H,),
        "lm_head.weight": (V, H),
    }
    return keys, mla_config(draft_vocab_size=V)


def modelopt_llama() -> tuple[dict, dict]:
    H, Vd = LLAMA["H"], LLAMA["Vd"]
    keys = {**llama_layer("layers.0"), "norm.weight": (H,), "fc.weight": (H, 3 * H), "d2t": (Vd,)}
    keys["lm_head.weight"] = (Vd, H)
    return keys, llama_config()


def specforge_llama() -> tuple[dict, dict]:
    H, V, Vd = LLAMA["H"], LLAMA["V"], LLAMA["Vd"]
    keys = {
        "embed_tokens.weight": (V, H),
        **llama_layer("midlayer"),
        "fc.weight": (H, 3 * H),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
        "d2t": (Vd,),
        "t2d": (V,),
    }
    return keys, llama_config()


def eagle_llama() -> tuple[dict, dict]:
    keys, cfg = specforge_llama()
    del keys["embed_tokens.weight"]
    return keys, llama_config(architectures=["LlamaForCausalLM"])


def speculators_llama() -> tuple[dict, dict]:
    keys, _ = modelopt_llama()
    keys.update({"embed_tokens.weight": (LLAMA["V"], LLAMA["H"]), "t2d": (LLAMA["V"],)})
    cfg = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "draft_vocab_size": LLAMA["Vd"],
        "transformer_layer_config": {k: v for k, v in llama_config().items() if k not in ("architectures",)},
        "speculators_config": {"verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}},
    }
    return keys, cfg


def write_draft(d, keys: dict, cfg: dict):
    """config.json + one safetensors file: real header; d2t/t2d written (identity map onto the first
    draft-vocab ids), every other tensor's bytes a hole of the sparse file."""
    d.mkdir(parents=True, exist_ok=True)
    dt = {"d2t": "I64", "t2d": "BOOL"}
    order = sorted(keys, key=lambda n: n not in dt)  # vocab maps first: their bytes are real
    ents = [WriteEntry(n, dt.get(n, "BF16"), tuple(keys[n]), lambda: []) for n in order]
    header = build_header(ents)
    size = sum(math.prod(keys[n]) * {"d2t": 8, "t2d": 1}.get(n, 2) for n in order)
    vd = keys.get("d2t", (0,))[0]
    with open(d / "model.safetensors", "wb") as f:
        f.write(header)
        if "d2t" in keys:
            f.write(bytes(8 * vd))  # d2t = 0: draft id i is target id i
        if "t2d" in keys:
            f.write(b"\x01" * vd + bytes(keys["t2d"][0] - vd))
        f.truncate(len(header) + size)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def errors(ins) -> set[str]:
    return {f.code for f in ins.report.findings if f.severity == "error"}


CASES = [
    # exporter, builder, release, error codes SGLang's behaviour calls for
    ("modelopt-mla", modelopt_mla, "0.5.23", set()),
    ("modelopt-mla", modelopt_mla, "0.5.12", set()),
    ("torchspec-mla", torchspec_mla, "0.5.23", set()),
    ("specforge-mla", lambda: specforge_mla("Eagle3DeepseekV2ForCausalLM"), "0.5.23", set()),
    ("specforge-mla as trained", specforge_mla, "0.5.23", {"draft.arch"}),
    ("modelopt-mla", modelopt_mla, "0.5.11", {"draft.arch", "draft.config", "draft.keys_dropped"}),
    ("modelopt-llama", modelopt_llama, "0.5.23", set()),
    ("modelopt-llama", modelopt_llama, "0.5.11", {"draft.keys_dropped", "draft.params_missing"}),
    ("specforge-llama", specforge_llama, "0.5.11", set()),
    ("specforge-llama", specforge_llama, "0.5.23", set()),
    ("eagle", eagle_llama, "0.5.23", {"draft.arch"}),
]


@pytest.mark.parametrize("exporter,build,version,want", CASES, ids=[f"{c[0]}@{c[2]}" for c in CASES])
def test_real_exporter_keys_judged_by_their_class(tmp_path, exporter, build, version, want):
    keys, cfg = build()
    ins = inspect(write_draft(tmp_path / "d", keys, cfg), version)
    assert errors(ins) == want, [(f.code, f.title) for f in ins.report.findings]
    if not want:
        assert ins.simulation.ok and not ins.simulation.by_status("dropped")[1:]


def test_speculators_config_is_not_loadable_as_is(tmp_path):
    keys, cfg = speculators_llama()
    ins = inspect(write_draft(tmp_path / "d", keys, cfg), "0.5.23")
    assert "draft.arch" in errors(ins)


def test_mla_class_dispatch_and_renames(tmp_path):
    keys, cfg = modelopt_mla()
    ins = inspect(write_draft(tmp_path / "d", keys, cfg), "0.5.23")
    sim = ins.simulation
    assert sim.draft_class == "Eagle3DeepseekV2ForCausalLM" and sim.arch_status == "eagle3"
    loaded = {k.key: k.param for k in sim.keys if k.status == "loaded"}
    fused = "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
    assert loaded["layers.0.self_attn.q_a_proj.weight"] == fused
    assert loaded["layers.0.self_attn.kv_a_proj_with_mqa.weight"] == fused
    assert loaded["layers.0.mlp.up_proj.weight"] == "model.midlayer.mlp.gate_up_proj.weight"
    assert loaded["layers.0.self_attn.kv_b_proj.weight"] == "model.midlayer.self_attn.kv_b_proj.weight"
    assert "draft.shape" not in errors(ins)  # MLA o_proj is nh*v_head_dim wide, not nh*head_dim


def test_broken_mla_drafts_still_fail(tmp_path):
    # half of the fused pair: the other half is cached forever, the fused projection stays random
    keys, cfg = modelopt_mla()
    del keys["layers.0.self_attn.kv_a_proj_with_mqa.weight"]
    ins = inspect(write_draft(tmp_path / "a", keys, cfg), "0.5.23")
    assert {"draft.keys_dropped", "draft.params_missing"} <= errors(ins)
    missing = [m["param"] for m in ins.simulation.params_missing]
    assert missing == ["model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"]
    # a whole-model save_pretrained (`model.` prefix): every name gets a second `model.` and is skipped
    keys, cfg = torchspec_mla()
    keys = {f"model.{k}" if not k.startswith("lm_head") else k: s for k, s in keys.items()}
    ins = inspect(write_draft(tmp_path / "b", keys, cfg), "0.5.23")
    assert {"draft.keys_dropped", "draft.params_missing"} <= errors(ins)
    # a q_lora_rank-free (q_proj) MLA draft: SGLang's MLA draft layer refuses it
    keys, cfg = torchspec_mla()
    ins = inspect(write_draft(tmp_path / "c", keys, mla_config(q_lora_rank=None)), "0.5.23")
    assert any("requires q_lora_rank" in f.title for f in ins.report.findings if f.code == "draft.config")
    # wrong kv_lora_rank in config.json: the fused rows disagree -> weight loader assertion
    keys, cfg = torchspec_mla()
    ins = inspect(write_draft(tmp_path / "e", keys, mla_config(kv_lora_rank=256)), "0.5.23")
    assert "draft.shape" in errors(ins)


def test_lone_config_uses_sglang_dispatch(tmp_path):
    from kit.checkpoint.inspect import doctor_checks
    from kit.preflight import Deployment, DoctorConfig

    def run(cfg):
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        dep = Deployment.build(DoctorConfig(draft=str(tmp_path), sglang_version="0.5.23"))
        return {f.code: f for f in doctor_checks(dep)}

    assert "draft.arch" not in run(mla_config())
    # a Kimi MLA draft exported under the base architecture: ModelConfig makes it the MTP class
    f = run(mla_config(architectures=["DeepseekV3ForCausalLM"]))["draft.arch"]
    assert f.evidence["dispatched_to"] == "DeepseekV3ForCausalLMNextN" and "loaded as" in f.title
    assert "draft.arch" in run(mla_config(architectures=["DeepSeekForCausalLMEagle3"]))  # TorchSpec's class name
