"""What a vLLM release's EAGLE-3 draft loader does with a checkpoint's keys: the class it builds, the keys it refuses.

Why: vLLM stops at startup on a key its draft class has no parameter for (KeyError; 0.25.0 on ValueError), lets an
unexpected `.bias` pass unloaded from 0.25.0, and serves parameters no key fills at their initial values; SGLang's
loader drops unknown keys silently, so its verdict does not speak for vLLM. How: the release's recorded loader ops
(`VllmRules.draft_loaders`, derived from `load_weights` by `kit.derive.vllm_scan`) replayed on the key names, against
the parameters the class builds for the draft's config (`draft_params`); checked against vLLM's own loader on CPU by
`bench/vllm_loader.py`.

    vllm_load(rules_for("0.24.0"), draft_config, ["midlayer.self_attn.q_proj.weight", ...])["refused"]
"""

from __future__ import annotations

from typing import Any

from kit.hf import AUX_IDS, HFConfig
from kit.vllm.rules import VllmRules


def draft_class(rules: VllmRules, draft_config) -> tuple[str, str] | None:
    """(the draft's architecture, the class name the release looks up for it: `draft_rename`); None where the release
    renames nothing, or the draft is in speculators' format (vLLM converts its config first)."""
    arch = ((draft_config or {}).get("architectures") or [None])[0]
    if not (arch and rules.draft_rename) or HFConfig.of(draft_config).is_speculators:
        return None
    return arch, eval(rules.draft_rename, {"__builtins__": {}})(arch)


# the parameters of vLLM's Llama-layout EAGLE-3 draft classes (model_executor/models/llama_eagle3.py, qwen3_eagle3.py:
# each decoder layer with its `hidden_norm`, q/k/v and gate/up fused, biases where the config asks for them; fc with its
# optional norms; lm_head, the vocabulary map) beside the module each class file holds them in
LLAMA_CLASSES = {
    "llama_eagle3.Eagle3LlamaForCausalLM": (),
    "qwen3_eagle3.Eagle3Qwen3ForCausalLM": ("self_attn.q_norm", "self_attn.k_norm"),
}


def draft_params(module: str, cfg: HFConfig) -> set[str] | None:
    """The parameter names vLLM's draft class `module` builds for this config; None for a class the kit does not
    model (the MLA draft, whose keys are judged by SGLang's loader rules)."""
    if module not in LLAMA_CLASSES:
        return None
    with_bias = lambda names, on: [f"{n}.{w}" for n in names for w in ("weight", "bias")[: 1 + bool(on)]]
    norms = ("input_layernorm", "post_attention_layernorm", "hidden_norm", *LLAMA_CLASSES[module])
    layer = [f"{n}.weight" for n in norms]
    layer += with_bias(("self_attn.qkv_proj", "self_attn.o_proj"), cfg.get("attention_bias") or cfg.get("bias"))
    layer += with_bias(("mlp.gate_up_proj", "mlp.down_proj"), cfg.get("mlp_bias"))
    aux = len((cfg.get("eagle_config") or {}).get(AUX_IDS) or cfg.get(AUX_IDS) or [0, 0, 0])
    inner = {"embed_tokens.weight", "fc.weight", "norm.weight"}
    inner |= {f"layers.{i}.{n}" for i in range(cfg.get("num_hidden_layers") or 1) for n in layer}
    inner |= {"input_norm.weight"} if cfg.get("norm_before_fc") else set()
    inner |= {f"fc_norm.{j}.weight" for j in range(aux)} if cfg.get("fc_norm") else set()
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
    {"class", "refused": keys with no parameter, which stop startup, "ignored": such keys AutoWeightsLoader lets
    pass (`auto_ignores`, where the key reaches it), "unfilled": parameters no key fills, less the embedding and a
    head over the target's vocabulary, which vLLM shares from the target}. None where the class is not modelled.
    `pp`: the pipeline-parallel size, where the decoder model builds its embedding only for some (`embed_if`)."""
    module, cfg = draft_module(rules, draft_config)
    loader, params = rules.draft_loaders.get(module or "", {}), draft_params(module or "", cfg)
    if params is None or not loader:
        return None
    if (cond := loader.get("embed_if")) and not eval(cond, {"__builtins__": {}}, {"pp": pp}):
        params = params - {"model.embed_tokens.weight"}
    ops = loader["ops"]
    outer = [o for o in ops if "in" not in o and o["op"] in ("skip", "rename", "prefix")]
    renames = [o for o in ops if "in" in o and o["op"] in ("rename", "map") and o["to"] is not None]
    stacked = next((o["value"] for o in ops if o["op"] == "stacked"), [])
    out, filled = {"class": module, "refused": [], "ignored": []}, set()
    for key in keys:
        name = key
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
            out["ignored" if auto and name.endswith(tuple(rules.auto_ignores)) else "refused"].append(key)
        filled.add(name)
    shared = {"model.embed_tokens.weight", "draft_id_to_target_id"}
    shared |= {"lm_head.weight"} if cfg.get("draft_vocab_size") in (None, cfg.get("vocab_size")) else set()
    return out | {"unfilled": sorted(params - filled - shared)}
