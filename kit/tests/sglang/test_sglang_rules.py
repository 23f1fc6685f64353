"""The recorded SGLang rule table matches real sglang wheels, and simulate_load replays each era.

`test_table_matches_real_source` downloads (pip download --no-deps, cached) the releases on
each side of every loader boundary and re-derives the features from their source text (kit.derive.loader_scan).
"""

import pytest

from kit.derive import loader_scan
from kit.sglang import loader as sr
from kit.tests.sglang import derive_or_skip

BOUNDARIES = [
    "0.4.4",
    "0.4.5",
    "0.4.8",
    "0.4.9",
    "0.4.10",
    "0.5.1",
    "0.5.2",
    "0.5.11",
    "0.5.12",
    "0.5.13",
    "0.5.16",
    "0.5.17",
    "0.5.23",
]

H, V, VD = 8, 40, 16


def cfg(**kw):
    c = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 12,
        "vocab_size": V,
        "num_hidden_layers": 1,
        "draft_vocab_size": VD,
        "tie_word_embeddings": False,
    }
    c.update(kw)
    return c


def keys(prefix="layers.0", layers=1, lm_head=True, embed=True):
    k = {"fc.weight": (H, 3 * H), "norm.weight": (H,), "d2t": (VD,), "t2d": (V,)}
    if embed:
        k["embed_tokens.weight"] = (V, H)
    if lm_head:
        k["lm_head.weight"] = (VD, H)
    for i in range(layers):
        p = prefix if i == 0 else f"layers.{i}"
        w = 2 * H if i == 0 else H
        k.update(
            {
                f"{p}.self_attn.q_proj.weight": (8, w),
                f"{p}.self_attn.k_proj.weight": (4, w),
                f"{p}.self_attn.v_proj.weight": (4, w),
                f"{p}.self_attn.o_proj.weight": (H, 8),
                f"{p}.mlp.gate_proj.weight": (12, H),
                f"{p}.mlp.up_proj.weight": (12, H),
                f"{p}.mlp.down_proj.weight": (H, 12),
                f"{p}.input_layernorm.weight": (H,),
                f"{p}.post_attention_layernorm.weight": (H,),
            }
        )
        if i == 0:
            k[f"{p}.hidden_norm.weight"] = (H,)
    return k


@pytest.mark.parametrize("version", BOUNDARIES)
def test_table_matches_real_source(version):
    runtime = derive_or_skip(loader_scan.derive_runtime, version)
    derived = {cls: loader_scan.derive_features(version, architecture=cls) for cls in sr.DRAFT_CLASSES}
    reg = loader_scan.scan_registered(version)
    row = sr._table()["versions"][version]
    for cls, (feats, ev) in derived.items():
        assert feats == row["classes"][cls]["features"], f"sglang {version} {cls} changed: re-run --write"
        assert ev == row["classes"][cls]["evidence"]
    assert list(runtime) == [row["runtime"]["features"], row["runtime"]["evidence"]]
    assert reg == sr.registered_architectures(version)


def test_eras_and_registry():
    assert "0.5.23" in sr.known_versions() and sr.known_versions()[0] == "0.4.4"
    assert not sr.rules_for("0.4.4").features["has_eagle3"]
    assert sr.rules_for("0.5.5").exact  # every listed release has its own row (kit.sglang.releases)
    assert sr.rules_for("0.5.24").checked == "0.5.23" and not sr.rules_for("0.5.24").exact
    assert sr.rules_for("0.5.9").features["decoder_is_midlayer"]
    assert sr.rules_for("0.5.12").features["legacy_name_map"]["midlayer"] == "layers.0"
    assert not sr.rules_for("0.5.16").features["norm_before_fc"] and sr.rules_for("0.5.17").features["norm_before_fc"]
    reg = sr.registered_architectures("0.5.23")
    assert {"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM", "LlamaForCausalLM"} <= reg
    assert "LlamaForCausalLMEagle3" not in sr.registered_architectures("0.4.4")
    assert "Eagle3DraftModel" not in reg
    assert sr.eagle3_draft_architectures("0.5.23") >= {"LlamaForCausalLMEagle3"}


def test_seed_fault_midlayer_era_drops_layers0():
    sim = sr.simulate_load(keys("layers.0"), cfg(), "0.5.8")
    dropped = {k.key for k in sim.by_status("dropped")}
    assert "layers.0.self_attn.q_proj.weight" in dropped and "layers.0.hidden_norm.weight" in dropped
    assert not any(k.loud for k in sim.by_status("dropped"))
    assert any(m["param"] == "model.midlayer.self_attn.qkv_proj.weight" and m["critical"] for m in sim.params_missing)
    assert not sim.ok


def test_0523_loads_both_spellings():
    for prefix in ("layers.0", "midlayer"):
        sim = sr.simulate_load(keys(prefix), cfg(), "0.5.23")
        assert sim.ok, sim.params_missing
        assert [k.key for k in sim.by_status("dropped")] == ["t2d"]
        q = next(k for k in sim.keys if k.key.endswith("q_proj.weight"))
        assert q.param == "model.layers.0.self_attn.qkv_proj.weight" and q.renamed == (prefix == "midlayer")
    assert any("overwritten by the target" in r for r in sim.runtime)


def test_delegating_era_crashes_on_layers0():
    sim = sr.simulate_load(keys("layers.0"), cfg(), "0.4.6.post5")
    fails = sim.by_status("fails")
    assert fails and "KeyError" in fails[0].reason and fails[0].loud


def test_lm_head_rules():
    sim = sr.simulate_load(keys(lm_head=False), cfg(), "0.5.23")
    assert [m["param"] for m in sim.params_missing] == ["lm_head.weight"] and not sim.ok
    sim = sr.simulate_load(keys(lm_head=False), cfg(draft_vocab_size=None), "0.5.23")
    assert sim.ok and any("both taken from the target" in r for r in sim.runtime)
    sim = sr.simulate_load(keys(lm_head=False), cfg(draft_vocab_size=None), "0.5.1")
    assert sim.build_errors and "TypeError" in sim.build_errors[0]
    c = cfg()
    del c["draft_vocab_size"]
    assert "AttributeError" in sr.simulate_load(keys(), c, "0.5.23").build_errors[0]
    sim = sr.simulate_load(keys(lm_head=True), cfg(tie_word_embeddings=True), "0.5.23")
    assert "lm_head.weight" in {k.key for k in sim.by_status("dropped")} and not sim.params_missing


def test_embed_kept_when_target_hidden_differs():
    k = keys(embed=False)
    k["fc.weight"] = (H, 3 * 16)
    sim = sr.simulate_load(k, cfg(target_hidden_size=16), "0.5.23")
    assert [m["param"] for m in sim.params_missing] == ["model.embed_tokens.weight"]
    sim = sr.simulate_load(keys(), cfg(target_hidden_size=None), "0.5.23")
    assert any("target_hidden_size: null" in e for e in sim.build_errors)


def test_multilayer_norm_names_and_limits():
    sim = sr.simulate_load(keys(layers=2), cfg(num_hidden_layers=2), "0.5.23")
    assert "model.layers.1.input_layernorm.weight" in sim.unused_loaded
    miss = {m["param"]: m for m in sim.params_missing}
    assert "model.layers.1.hidden_norm.weight" in miss and not miss["model.layers.1.hidden_norm.weight"]["critical"]
    sim = sr.simulate_load(keys(layers=2), cfg(num_hidden_layers=2), "0.5.8")
    assert any("only supports 1 layer" in e for e in sim.build_errors)


def test_optional_norms_and_shapes():
    k = keys()
    k["input_norm.weight"] = (3 * H,)
    c = cfg(eagle_config={"norm_before_fc": True})
    assert "input_norm.weight" in {x.key for x in sr.simulate_load(k, c, "0.5.16").by_status("dropped")}
    assert "input_norm.weight" in {x.key for x in sr.simulate_load(k, c, "0.5.17").by_status("loaded")}
    k = keys()
    k.update({"aux_norm_low.weight": (H,), "aux_norm_mid.weight": (H,), "aux_norm_high.weight": (H,)})
    sim = sr.simulate_load(k, cfg(use_aux_norm=True), "0.5.23")
    assert sim.ok and next(x for x in sim.keys if x.key == "aux_norm_mid.weight").param == "model.fc_norm.1.weight"
    k = keys()
    k["fc.weight"] = (H, 2 * H)
    sim = sr.simulate_load(k, cfg(), "0.5.23")
    assert sim.by_status("fails")[0].key == "fc.weight"
    sim = sr.simulate_load(k, cfg(num_aux_hidden_states=2), "0.5.23")
    assert not sim.by_status("fails")


def test_architecture_status():
    assert sr.simulate_load(keys(), cfg(architectures=["Eagle3DraftModel"]), "0.5.23").arch_status == "not_registered"
    assert (
        sr.simulate_load(keys(), cfg(architectures=["LlamaForCausalLM"]), "0.5.23").arch_status
        == "registered_not_eagle3"
    )
    sim = sr.simulate_load(keys(), cfg(), "0.4.4")
    assert sim.build_errors and sim.arch_status == "not_registered"


# -- the MLA class and the release-wide rules ---------------------------------------------------------
MLA = "Eagle3DeepseekV2ForCausalLM"


def test_mla_class_rules_per_release():
    assert not sr.rules_for("0.5.11", MLA).features["has_eagle3"]
    f12, f23 = sr.rules_for("0.5.12", MLA).features, sr.rules_for("0.5.23", MLA).features
    assert (
        f12["has_eagle3"] and not f12["fc_norm"] and f23["fc_norm"] and sr.rules_for("0.5.13", MLA).features["fc_norm"]
    )
    for f in (f12, f23):  # load_weights read from the AST, unchanged 0.5.12-0.5.23
        assert f["renames"] == [["^layers\\.0\\.", "midlayer."]]
        assert f["fused"] == [{"param": "fused_qkv_a_proj_with_mqa", "parts": ["q_a_proj", "kv_a_proj_with_mqa"]}]
        assert f["stacked"] == [[".gate_up_proj", ".gate_proj", 0], [".gate_up_proj", ".up_proj", 1]]
    ev = sr.rules_for("0.5.23", MLA).evidence["unknown_key_warns"]
    assert ev[0] == "srt/models/kimi_k25_eagle3.py" and "skipping unexpected weight" in ev[2]
    # the Llama class's stacked mapping: its own from 0.4.9, LlamaForCausalLM's while it delegates
    assert sr.rules_for("0.4.5").features["stacked"] == sr.rules_for("0.5.23").features["stacked"]
    assert sr.eagle3_draft_architectures("0.5.23") == {"LlamaForCausalLMEagle3", MLA}
    assert sr.eagle3_draft_architectures("0.5.11") == {"LlamaForCausalLMEagle3"}


def test_runtime_rules_per_release():
    rt = lambda v: sr.runtime_rules(v).features  # noqa: E731
    assert rt("0.5.12")["nnpl_zero_sizes_draft_kv_at_zero"] and not rt("0.5.13")["nnpl_zero_sizes_draft_kv_at_zero"]
    assert rt("0.5.13")["nnpl_zero_treated_as_absent"] and rt("0.5.23")["nnpl_zero_treated_as_absent"]
    assert rt("0.4.9")["longer_context_allowed_by_default"] and not rt("0.5.2")["longer_context_allowed_by_default"]
    assert all(rt(v)["draft_context_is_target_context"] for v in ("0.4.5", "0.5.12", "0.5.23"))
    assert rt("0.5.23")["context_length_keys"][-1] == "max_position_embeddings"
    assert rt("0.5.23")["draft_arch_rewrites"]["DeepseekV3ForCausalLM"] == "DeepseekV3ForCausalLMNextN"


def test_dispatch_follows_sglang():
    # first registered name wins; ModelConfig rewrites DeepseekV3ForCausalLM to its MTP class for a draft
    assert sr.resolve_draft_class({"architectures": [MLA]}, "0.5.23") == (MLA, "eagle3")
    assert sr.resolve_draft_class({"architectures": ["Foo", MLA]}, "0.5.23") == (MLA, "eagle3")
    assert sr.resolve_draft_class({"architectures": ["DeepseekV3ForCausalLM"]}, "0.5.23") == (
        "DeepseekV3ForCausalLMNextN",
        "registered_not_eagle3",
    )
    assert sr.resolve_draft_class({"architectures": ["DeepseekV3ForCausalLMEagle3"]}, "0.5.23") == (
        None,
        "not_registered",
    )
    assert sr.resolve_draft_class({}, "0.5.23") == (None, "missing")


def mla_cfg(**kw):
    c = dict(cfg(architectures=[MLA]), q_lora_rank=6, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2)
    c.update(v_head_dim=2, num_key_value_heads=2)
    del c["draft_vocab_size"]
    c.update(kw)
    return c


def mla_keys(prefix="layers.0", **drop):
    k = {"fc.weight": (H, 3 * H), "norm.weight": (H,), "lm_head.weight": (V, H)}
    p = prefix
    k.update(
        {
            f"{p}.self_attn.q_a_proj.weight": (6, 2 * H),
            f"{p}.self_attn.q_a_layernorm.weight": (6,),
            f"{p}.self_attn.q_b_proj.weight": (8, 6),
            f"{p}.self_attn.kv_a_proj_with_mqa.weight": (6, 2 * H),
            f"{p}.self_attn.kv_a_layernorm.weight": (4,),
            f"{p}.self_attn.kv_b_proj.weight": (8, 4),
            f"{p}.self_attn.o_proj.weight": (H, 4),
            f"{p}.mlp.gate_proj.weight": (12, H),
            f"{p}.mlp.up_proj.weight": (12, H),
            f"{p}.mlp.down_proj.weight": (H, 12),
            f"{p}.input_layernorm.weight": (H,),
            f"{p}.hidden_norm.weight": (H,),
            f"{p}.post_attention_layernorm.weight": (H,),
        }
    )
    return k


def test_simulate_mla_loader():
    for prefix in ("layers.0", "midlayer"):  # both spellings reach model.midlayer
        sim = sr.simulate_load(mla_keys(prefix), mla_cfg(), "0.5.23")
        assert sim.ok and sim.draft_class == MLA and not sim.by_status("dropped") and not sim.params_missing
    # no draft_vocab_size: the MLA class takes embed and head from the target (the Llama class raises)
    assert any("taken from the target" in r for r in sim.runtime)
    # layers.1: not renamed, becomes model.layers.1.* and is logged and skipped; 2 layers refused at build
    k = mla_keys()
    k["layers.1.mlp.down_proj.weight"] = (H, 12)
    sim = sr.simulate_load(k, mla_cfg(num_hidden_layers=2), "0.5.23")
    (d,) = sim.by_status("dropped")
    assert d.loud and "skipping unexpected weight" in d.reason
    assert sim.build_errors == ["num_hidden_layers=2: this SGLang raises 'EAGLE3 currently only supports 1 layer'"]
    # aux count: the MLA class reads only eagle_aux_hidden_state_layer_ids, never num_aux_hidden_states
    sim = sr.simulate_load({**mla_keys(), "fc.weight": (H, 2 * H)}, mla_cfg(num_aux_hidden_states=2), "0.5.23")
    assert [k.key for k in sim.by_status("fails")] == ["fc.weight"]
    ids = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}
    assert sr.simulate_load({**mla_keys(), "fc.weight": (H, 2 * H)}, mla_cfg(**ids), "0.5.23").ok
    # fc_norm exists from 0.5.13
    k = {**mla_keys(), **{f"fc_norm.{j}.weight": (H,) for j in range(3)}}
    assert sr.simulate_load(k, mla_cfg(fc_norm=True), "0.5.23").ok
    assert len(sr.simulate_load(k, mla_cfg(fc_norm=True), "0.5.12").by_status("dropped")) == 3
    # target_hidden_size: null falls back to hidden_size here (a TypeError for the Llama class)
    assert sr.simulate_load(mla_keys(), mla_cfg(target_hidden_size=None), "0.5.23").ok


def test_transformers_model_types_read_as_text_are_what_transformers_imports():
    """known_model_type reads Transformers' config registry from its source text (no import, no torch): the set
    must be exactly the one the import gives, or the rehearsal would judge model types wrongly."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    sr.transformers_model_types.cache_clear()
    got = sr.transformers_model_types()
    assert got == frozenset(CONFIG_MAPPING_NAMES) and "llama" in got and "gpt-sw3" in got
    assert sr.known_model_type("llama", "0.5.17") is True


def test_startup_rules_of_a_recorded_release_need_no_source(tmp_path, monkeypatch):
    """Which multimodal classes load their processor at startup and which model_types SGLang configures itself
    come from the recorded row: a host with an empty cache, no network and no SGLang judges as one with all."""
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("kit.sglang.versions.importable_version", lambda: None)
    sr.processor_archs.cache_clear()
    try:
        archs = sr.processor_archs("0.5.17")
        assert {"KimiK25ForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"} <= archs
        assert "LlamaForCausalLM" not in archs
        assert "kimi_k25" in sr.config_model_types("0.5.17")
        assert sr.processor_archs("0.4.4") != archs  # per release, not one list for all
    finally:
        sr.processor_archs.cache_clear()
