"""What a vLLM release's EAGLE-3 draft loader does with a checkpoint's keys: the class it builds, the keys it refuses.

Why: vLLM stops at startup on a key its draft class has no parameter for (KeyError; 0.25.0 on ValueError), lets an
unexpected `.bias` pass unloaded from 0.25.0 (and, to 0.24.0, any unknown key of its MLA draft layer), and serves
parameters no key fills at their initial values; SGLang's loader drops unknown keys silently, so its verdict does not
speak for vLLM. How: the release's recorded loader ops (`VllmRules.draft_loaders`, derived from `load_weights` by
`kit.derive.vllm_scan`) replayed on the key names, against the parameters the class builds for the draft's config and
the fields the release's class reads (`draft_params`); checked against vLLM's own loader on CPU by
`bench/vllm_loader.py`.

    vllm_load(rules_for("0.24.0"), draft_config, ["midlayer.self_attn.q_proj.weight", ...])["refused"]
"""

from __future__ import annotations

from typing import Any

from kit.hf import AUX_IDS, HFConfig
from kit.vllm.rules import VllmRules


def draft_class(rules: VllmRules, draft_config) -> tuple[str, str] | None:
    """(the draft's architecture, the class name the release looks up for it: its model_type's `draft_override`, if
    any, then `draft_rename`); None where the release renames nothing, or the draft is in speculators' format (vLLM
    converts its config first)."""
    arch = ((draft_config or {}).get("architectures") or [None])[0]
    if not (arch and rules.draft_rename) or HFConfig.of(draft_config).is_speculators:
        return None
    given = rules.draft_override.get(draft_config.get("model_type"), arch)
    return arch, eval(rules.draft_rename, {"__builtins__": {}})(given)


# vLLM's EAGLE-3 draft classes whose parameters `draft_params` builds (model_executor/models/<module>.py): each decoder
# layer (`_layer`); fc, with the optional norms the release's class reads from the config (`draft_loaders[...]["reads"]`);
# lm_head, the vocabulary map
CLASSES = (
    "llama_eagle3.Eagle3LlamaForCausalLM",
    "qwen3_eagle3.Eagle3Qwen3ForCausalLM",
    "deepseek_eagle3.Eagle3DeepseekV2ForCausalLM",
)


def _layer(module: str, cfg: HFConfig, reads) -> list[str]:
    """A decoder layer's parameters: its three norms; DeepSeek-V2's MLA attention (the query through a low rank where
    the config sets q_lora_rank) and an MLP without biases; else q/k/v fused, with a bias where the class reads
    `attention_bias` (its own qkv_proj) and the config sets it, the Llama class's o_proj with llama.py's bias
    (`attention_bias` or `bias`), Qwen3's q/k norms, and the MLP with `mlp_bias`."""
    norms = ["input_layernorm.weight", "post_attention_layernorm.weight", "hidden_norm.weight"]
    if module.startswith("deepseek_eagle3."):
        lora = cfg.get("q_lora_rank") is not None
        q = ("fused_qkv_a_proj", "q_a_layernorm", "q_b_proj") if lora else ("kv_a_proj_with_mqa", "q_proj")
        attn = [f"self_attn.{n}.weight" for n in (*q, "kv_a_layernorm", "kv_b_proj", "o_proj")]
        return norms + attn + ["mlp.gate_up_proj.weight", "mlp.down_proj.weight"]
    with_bias = lambda names, on: [f"{n}.{w}" for n in names for w in ("weight", "bias")[: 1 + bool(on)]]
    qwen = module.startswith("qwen3_eagle3.")
    norms += ["self_attn.q_norm.weight", "self_attn.k_norm.weight"] if qwen else []
    attn = with_bias(["self_attn.qkv_proj"], "attention_bias" in reads and cfg.get("attention_bias"))
    attn += with_bias(["self_attn.o_proj"], not qwen and (cfg.get("attention_bias") or cfg.get("bias")))
    return norms + attn + with_bias(("mlp.gate_up_proj", "mlp.down_proj"), cfg.get("mlp_bias"))


def aux_count(cfg: HFConfig, reads) -> int:
    """How many aux hidden states a class that reads `reads` sizes its fc norms by: the first count field it reads
    that the config sets, else the aux ids it reads (top-level before `eagle_config`'s), else 3."""
    if n := next((cfg.get(f) for f in ("num_aux_layers", "num_aux_hidden_states") if f in reads and cfg.get(f)), 0):
        return n
    nested = (cfg.get("eagle_config") or {}).get(AUX_IDS) if f"eagle_config.{AUX_IDS}" in reads else None
    return len((cfg.get(AUX_IDS) if AUX_IDS in reads else None) or nested or [0, 0, 0])


def draft_params(module: str, cfg: HFConfig, reads=()) -> set[str] | None:
    """The parameter names vLLM's draft class `module` builds for this config, honouring the optional fields the
    release's class reads (`reads`); None for a class the kit does not model."""
    if module not in CLASSES:
        return None
    inner = {"embed_tokens.weight", "fc.weight", "norm.weight"}
    inner |= {f"layers.{i}.{n}" for i in range(cfg.get("num_hidden_layers") or 1) for n in _layer(module, cfg, reads)}
    inner |= {"input_norm.weight"} if cfg.get("norm_before_fc") and "norm_before_fc" in reads else set()
    norms = cfg.get("fc_norm") and "fc_norm" in reads
    inner |= {f"fc_norm.{j}.weight" for j in range(aux_count(cfg, reads))} if norms else set()
    return {"lm_head.weight", "draft_id_to_target_id"} | {f"model.{n}" for n in inner}


def draft_module(rules: VllmRules, draft_config) -> tuple[str | None, HFConfig]:
    """("module.Class" of the release's EAGLE-3 draft class for this draft, the config it is built from): a
    speculators config is converted first (its layer's model_type picks the class), another names its architecture
    (`draft_class`; releases that rename nothing load their one Llama class)."""
    cfg = HFConfig.of(draft_config)
    named = (draft_class(rules, draft_config) or (None, "Eagle3LlamaForCausalLM"))[1]
    if cfg.is_speculators:
        cfg = HFConfig.of({**cfg, **(cfg.get("transformer_layer_config") or {})})
        qwen = cfg.get("model_type") == "qwen3" and "Eagle3Qwen3ForCausalLM" in rules.draft_archs
        named = "Eagle3Qwen3ForCausalLM" if qwen else "Eagle3LlamaForCausalLM"
    return rules.draft_archs.get(named), cfg


def vllm_load(rules: VllmRules, draft_config, keys, pp: int = 1) -> dict[str, Any] | None:
    """What the release's `load_weights` does with the draft's checkpoint keys (`draft_loaders` ops: on the class, the
    first that applies, as its if/elif chain; on its decoder model (`in`), each rename, then the first stacking):
    {"class", "refused": keys with no parameter, which stop startup, "ignored": such keys let pass (AutoWeightsLoader's
    `auto_ignores`, where the key reaches it; any unstacked one, where the decoder model's loader has `skip_unknown`),
    "unfilled": parameters no key fills, less the embedding and a head over the target's vocabulary, which vLLM shares
    from the target}. None where the class is not modelled.
    `pp`: the pipeline-parallel size, where the decoder model builds its embedding only for some (`embed_if`)."""
    module, cfg = draft_module(rules, draft_config)
    loader = rules.draft_loaders.get(module or "", {})
    params = draft_params(module or "", cfg, loader.get("reads", ()))
    if params is None or not loader:
        return None
    if (cond := loader.get("embed_if")) and not eval(cond, {"__builtins__": {}}, {"pp": pp}):
        params = params - {"model.embed_tokens.weight"}
    ops = loader["ops"]
    outer = [o for o in ops if "in" not in o and o["op"] in ("skip", "rename", "prefix")]
    renames = [o for o in ops if "in" in o and o["op"] in ("rename", "map") and o["to"] is not None]
    stacked = next((o["value"] for o in ops if o["op"] == "stacked"), [])
    out, filled = {"class": module, "refused": [], "ignored": []}, set()
    skips_unknown = any(o["op"] == "skip_unknown" for o in ops)  # its decoder model passes over an unknown name
    for key in keys:
        name, fused = key, None
        op = next((o for o in outer if eval(o["if"], {"__builtins__": {}}, {"name": key})), None)
        if op:
            name = (
                None
                if op["op"] == "skip"
                else op["add"] + key
                if op["op"] == "prefix"
                else key.replace(op["from"], op["to"])
            )
        inner = bool(name and name.startswith("model."))
        if inner:
            stem = name.removeprefix("model.")
            for o in renames:
                stem = stem.replace(o["from"], o["to"])
            fused = next(((p, w) for p, w in stacked if w in stem), None)
            name = "model." + (stem.replace(fused[1], fused[0]) if fused else stem)
        if name and name not in params:
            auto = loader.get("inner_auto") or not inner  # the class's own loader is AutoWeightsLoader
            passed = auto and name.endswith(tuple(rules.auto_ignores)) or inner and skips_unknown and not fused
            out["ignored" if passed else "refused"].append(key)
        filled.add(name)
    shared = {"model.embed_tokens.weight", "draft_id_to_target_id"}
    shared |= {"lm_head.weight"} if cfg.get("draft_vocab_size") in (None, cfg.get("vocab_size")) else set()
    return out | {"unfilled": sorted(params - filled - shared)}
