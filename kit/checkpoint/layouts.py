"""Which training stack wrote a draft checkpoint, and the key maps between the layouts.

The same EAGLE-3 draft is spelled differently by each stack:

    sglang       midlayer.* (or layers.N.*), config LlamaForCausalLMEagle3 (also SpecForge's `export --to sglang/hf`)
    eagle        midlayer.*, config LlamaForCausalLM (official SafeAILab EAGLE-3 release)
    speculators  layers.N.*, config Eagle3DraftModel / Eagle3Speculator, transformer_layer_config
    specforge    a SpecForge *training* checkpoint: keys still prefixed `draft_model.`
    kimi_mla     Eagle3DeepseekV2ForCausalLM (MLA attention: q_a_proj, kv_a_proj_with_mqa ...)
    unknown      none of the above (the evidence says what was seen)

`detect_layout(keys, config)` names it, with evidence. `to_canonical` / `from_canonical` translate key names
through one canonical spelling (speculators-style `layers.N.*`, whose layers >= 1 use `input_layernorm` as the
pre-attention norm where SGLang uses `hidden_norm`). No torch; names only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kit.hf import AUX_IDS, HFConfig

SPECULATORS_ARCHS = ("Eagle3DraftModel", "Eagle3Speculator")
MLA_MARKERS = ("q_a_proj", "kv_a_proj_with_mqa", "kv_b_proj", "q_b_proj", "kv_a_layernorm", "q_a_layernorm")
LEGACY_AUX = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1", "aux_norm_high": "fc_norm.2"}
_LAYER = re.compile(r"^layers\.(\d+)\.(.*)$")


@dataclass
class Layout:
    name: str
    evidence: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""  # stripped from every key before mapping (e.g. "draft_model.")
    num_layers: int = 0  # decoder layers present in the checkpoint


def _strip_prefix(keys: list[str]) -> str:
    for pre in ("draft_model.", "model."):
        rest = [k for k in keys if not k.startswith(pre)]
        if len(rest) < len(keys) and all(k in ("d2t", "t2d") or k.startswith("lm_head.") for k in rest):
            return pre
    return ""


def layer_indices(keys: Iterable[str]) -> set[int]:
    keys = list(keys)
    mid = {0} if any(k.startswith("midlayer.") for k in keys) else set()
    return mid | {int(m.group(1)) for k in keys if (m := _LAYER.match(k))}


def detect_layout(keys: Iterable[str], config: HFConfig | None = None) -> Layout:
    """Name the layout of a checkpoint from its key names and config.json, with evidence."""
    keys = list(keys)
    cfg = config or {}
    blob = "\n".join(keys) + "\n"  # one C-level substring scan instead of a Python loop over ~70k keys
    if not ("fc.weight\n" in blob or "d2t\n" in blob or "midlayer." in blob) and not cfg.get("architectures"):
        return Layout("unknown", {"architectures": None, "why": "no fc.weight/midlayer.*/d2t: not an EAGLE-3 draft"})
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else None
    pre = _strip_prefix(keys)
    bare = [k.removeprefix(pre) for k in keys]
    mid = sorted(k for k in bare if k.startswith("midlayer."))[:2]
    lay = sorted(k for k in bare if _LAYER.match(k))[:2]
    mla = sorted(k for k in bare if any(m in k for m in MLA_MARKERS))[:2]
    ev: dict[str, Any] = {"architectures": archs or None}
    ev |= {k: v for k, v in {"key_prefix": pre, "midlayer_keys": mid, "layers_keys": lay}.items() if v}
    n = len(layer_indices(bare))
    spec_cfg = [x for x in ("speculators_model_type", "transformer_layer_config", "speculators_config") if x in cfg]

    def out(name: str, why: str) -> Layout:
        ev["why"] = why
        return Layout(name, ev, pre, n)

    if arch == "Eagle3DeepseekV2ForCausalLM" or (mla and "fc.weight" in bare):
        ev |= {"mla_keys": mla} if mla else {}
        return out("kimi_mla", "MLA attention keys / Eagle3DeepseekV2ForCausalLM: SGLang's kimi_k25_eagle3 loader")
    if pre == "draft_model.":
        return out("specforge", "keys prefixed draft_model.: a SpecForge training checkpoint, not an export")
    if spec_cfg or arch in SPECULATORS_ARCHS:
        ev["speculators_config_keys"] = spec_cfg
        return out("speculators", "config written by vLLM speculators (Eagle3SpeculatorConfig)")
    if arch == "LlamaForCausalLMEagle3":
        return out("sglang", "config names SGLang's LlamaForCausalLMEagle3 (SpecForge exports look the same)")
    if mid and arch in (None, "LlamaForCausalLM"):
        return out("eagle", "midlayer.* keys with a plain Llama config: official EAGLE-3 release layout")
    if lay and not mid and "fc.weight" in bare:
        return out("speculators", "layers.N.* keys plus fc.weight without a speculators config (weak evidence)")
    if mid:
        return out("sglang", f"midlayer.* keys, architecture {arch!r} (weak evidence)")
    return out("unknown", "no midlayer.*/layers.N.* EAGLE-3 keys recognised")


def to_canonical(key: str, layout: Layout | str) -> str | None:
    """Canonical name of `key` (None: not a draft tensor, e.g. verifier_* or rotary buffers)."""
    lay = layout if isinstance(layout, Layout) else Layout(layout)
    k = key.removeprefix(lay.prefix)
    if k.startswith("verifier_") or "rotary_emb" in k:
        return None
    k = re.sub(r"^midlayer\.", "layers.0.", k)
    for old, new in LEGACY_AUX.items():
        k = k.replace(old, new)
    m = _LAYER.match(k)
    if m and lay.name == "sglang" and int(m.group(1)) >= 1:
        # SGLang layers >= 1: hidden_norm is the pre-attention norm, input_layernorm unused
        norms = {"input_layernorm.weight": None, "hidden_norm.weight": f"layers.{m.group(1)}.input_layernorm.weight"}
        return norms.get(m.group(2), k)
    return k


def from_canonical(key: str, dest: str, num_layers: int = 1) -> str:
    """Name of canonical `key` in layout `dest` (sglang, eagle or speculators)."""
    m = _LAYER.match(key)
    if dest == "speculators" or not m:
        return key
    i, rest = int(m.group(1)), m.group(2)
    if dest in ("sglang", "eagle") and num_layers == 1 and i == 0:
        return "midlayer." + rest  # loads in every SGLang era and in the official EAGLE code
    if dest == "sglang" and i >= 1 and rest == "input_layernorm.weight":
        return f"layers.{i}.hidden_norm.weight"
    return key


# -- config.json translations -----------------------------------------------------------------
_LAYER_FIELDS = tuple(
    """hidden_size intermediate_size num_attention_heads num_key_value_heads head_dim hidden_act rms_norm_eps
    max_position_embeddings vocab_size num_hidden_layers rope_parameters rope_theta rope_scaling attention_bias
    mlp_bias bos_token_id eos_token_id pad_token_id initializer_range model_type""".split()
)


def _rope_top_level(out: dict[str, Any]) -> None:
    # older SGLang releases read top-level rope_theta/rope_scaling only; newer ones read rope_parameters
    if isinstance(rp := out.get("rope_parameters"), dict):
        out.setdefault("rope_theta", rp.get("rope_theta", 10000.0))
        if rp.get("rope_type", "default") != "default":
            out.setdefault("rope_scaling", dict(rp))


def speculators_to_sglang_config(cfg: HFConfig, num_aux: int | None) -> dict[str, Any]:
    """Flatten an Eagle3SpeculatorConfig into the LlamaForCausalLMEagle3 config SGLang reads (§2.1); aux layer ids
    are copied unchanged under `eagle_config` (kit convert translates them, kit.wiring judges the shift)."""
    tl = dict(cfg.get("transformer_layer_config") or {})
    out: dict[str, Any] = {
        **{k: tl[k] for k in _LAYER_FIELDS if k in tl},
        "model_type": "llama" if tl.get("model_type") in (None, "llama") else tl["model_type"],
        "architectures": ["LlamaForCausalLMEagle3"],
        "tie_word_embeddings": False,
        "draft_vocab_size": cfg.get("draft_vocab_size", tl.get("vocab_size")),
    }
    if cfg.get("target_hidden_size") not in (None, tl.get("hidden_size")):
        out["target_hidden_size"] = cfg["target_hidden_size"]
    ids = cfg.get(AUX_IDS)
    eagle: dict[str, Any] = {"use_aux_hidden_state": True}
    eagle |= {AUX_IDS: list(ids)} if ids else {}
    if cfg.get("norm_before_fc"):
        eagle["norm_before_fc"] = out["norm_before_fc"] = True
    out |= {"eagle_config": eagle, "num_aux_hidden_states": num_aux or (len(ids) if ids else 3)}
    out |= {flag: True for flag in ("fc_norm", "norm_output") if cfg.get(flag)}
    if dtype := cfg.get("dtype") or cfg.get("torch_dtype"):
        out["torch_dtype"] = dtype
    _rope_top_level(out)
    return out


def sglang_to_speculators_config(
    cfg: HFConfig, verifier: str | None = None, verifier_archs: list | None = None
) -> dict[str, Any]:
    """An Eagle3SpeculatorConfig (speculators 0.9.0 `Eagle3DraftModel`) for an SGLang/EAGLE config."""
    tl = {**{k: cfg[k] for k in _LAYER_FIELDS if k in cfg}, "model_type": "llama", "tie_word_embeddings": False}
    if "rope_parameters" not in tl:
        tl["rope_parameters"] = {"rope_theta": cfg.get("rope_theta", 10000.0), "rope_type": "default"}
        tl["rope_parameters"] |= cfg.get("rope_scaling") or {}
        tl.pop("rope_scaling", None)
    tl.pop("rope_theta", None)
    eagle = cfg.get("eagle_config") or {}
    H, Vd = cfg.get("hidden_size"), cfg.get("draft_vocab_size")
    return {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1, "accept_tolerance": 0.0}
            ],
            "verifier": {"name_or_path": verifier, "architectures": verifier_archs or ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": tl,
        "draft_vocab_size": Vd if Vd is not None else cfg.get("vocab_size"),
        "norm_before_residual": False,
        "target_hidden_size": cfg["target_hidden_size"] if cfg.get("target_hidden_size") not in (None, H) else None,
        AUX_IDS: eagle.get(AUX_IDS),
        "norm_before_fc": bool(eagle.get("norm_before_fc", cfg.get("norm_before_fc", False))),
        "fc_norm": bool(cfg.get("fc_norm") or cfg.get("use_aux_norm")),
        "norm_output": bool(cfg.get("norm_output", False)),
        "embed_requires_grad": False,
        "tie_word_embeddings": False,
        "torch_dtype": cfg.get("torch_dtype") or cfg.get("dtype") or "float32",
    }


def sglang_to_eagle_config(cfg: HFConfig) -> dict[str, Any]:
    """The official EAGLE-3 config: plain LlamaConfig + draft_vocab_size (+ target_hidden_size)."""
    out = {
        **{k: cfg[k] for k in _LAYER_FIELDS if k in cfg},
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "tie_word_embeddings": False,
        "draft_vocab_size": cfg.get("draft_vocab_size") or cfg.get("vocab_size"),
    }
    if cfg.get("target_hidden_size") not in (None, cfg.get("hidden_size")):
        out["target_hidden_size"] = cfg["target_hidden_size"]
    _rope_top_level(out)
    return out
