"""Layout detection (with evidence) and the key maps between layouts."""

from kit.checkpoint.layouts import (
    detect_layout,
    from_canonical,
    sglang_to_speculators_config,
    speculators_to_sglang_config,
    to_canonical,
)

SPEC_KEYS = [
    "embed_tokens.weight",
    "fc.weight",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.hidden_norm.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
]
MID_KEYS = [k.replace("layers.0", "midlayer") for k in SPEC_KEYS]


def test_detects_each_layout():
    assert (
        detect_layout(SPEC_KEYS, {"architectures": ["Eagle3DraftModel"], "transformer_layer_config": {}}).name
        == "speculators"
    )
    assert detect_layout(SPEC_KEYS, {"architectures": ["Eagle3Speculator"]}).name == "speculators"
    lay = detect_layout(MID_KEYS, {"architectures": ["LlamaForCausalLMEagle3"]})
    assert lay.name == "sglang" and lay.evidence["midlayer_keys"] and lay.num_layers == 1
    assert detect_layout(MID_KEYS, {"architectures": ["LlamaForCausalLM"]}).name == "eagle"
    sf = detect_layout(["draft_model." + k for k in MID_KEYS], {"architectures": ["LlamaForCausalLMEagle3"]})
    assert sf.name == "specforge" and sf.prefix == "draft_model."
    mla = detect_layout(
        ["fc.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight"],
        {"architectures": ["Eagle3DeepseekV2ForCausalLM"]},
    )
    assert mla.name == "kimi_mla" and mla.evidence["mla_keys"]
    unk = detect_layout(["model.layers.0.mlp.down_proj.weight"], {"architectures": ["LlamaForCausalLM"]})
    assert unk.name == "unknown" and "why" in unk.evidence
    assert detect_layout(SPEC_KEYS, None).name == "speculators"  # weak: keys only


def test_key_maps_roundtrip():
    assert to_canonical("midlayer.mlp.up_proj.weight", "sglang") == "layers.0.mlp.up_proj.weight"
    assert to_canonical("aux_norm_mid.weight", "sglang") == "fc_norm.1.weight"
    assert to_canonical("verifier_lm_head.weight", "speculators") is None
    assert from_canonical("layers.0.mlp.up_proj.weight", "sglang", 1) == "midlayer.mlp.up_proj.weight"
    assert from_canonical("layers.0.mlp.up_proj.weight", "sglang", 2) == "layers.0.mlp.up_proj.weight"
    # SGLang applies hidden_norm as the pre-attention norm of layers >= 1
    assert from_canonical("layers.1.input_layernorm.weight", "sglang", 2) == "layers.1.hidden_norm.weight"
    assert to_canonical("layers.1.hidden_norm.weight", "sglang") == "layers.1.input_layernorm.weight"
    assert to_canonical("layers.1.input_layernorm.weight", "sglang") is None
    assert from_canonical("layers.1.input_layernorm.weight", "speculators", 2) == "layers.1.input_layernorm.weight"


def test_config_translation_roundtrip():
    spec = {
        "architectures": ["Eagle3DraftModel"],
        "draft_vocab_size": 100,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": [2, 4, 5],
        "norm_before_fc": True,
        "norm_output": False,
        "transformer_layer_config": {
            "model_type": "llama",
            "hidden_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 1000,
            "num_hidden_layers": 1,
            "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"},
        },
    }
    sg = speculators_to_sglang_config(spec, 3)
    assert sg["architectures"] == ["LlamaForCausalLMEagle3"] and sg["hidden_size"] == 64
    assert sg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5] and sg["eagle_config"]["norm_before_fc"]
    assert "target_hidden_size" not in sg and sg["rope_theta"] == 5e5 and sg["draft_vocab_size"] == 100
    back = sglang_to_speculators_config(sg)
    assert back["transformer_layer_config"]["hidden_size"] == 64 and back["eagle_aux_hidden_state_layer_ids"] == [
        2,
        4,
        5,
    ]
    assert back["norm_before_fc"] and back["speculators_model_type"] == "eagle3"
