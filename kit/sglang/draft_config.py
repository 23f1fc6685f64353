"""One typed reader of an EAGLE-3 draft's config.json, whatever wrote it (no torch).

SGLang reads a flat config (`LlamaForCausalLMEagle3`: `hidden_size`, `target_hidden_size`, the ids under
`eagle_config`); speculators nests the decoder's numbers under `transformer_layer_config`, ids at top level. Every
consumer (the reference draft, `kit inspect`, the loader simulation, the wiring checks) reads it through
`read_draft_config`, which keeps what was *declared* apart from what SGLang *derives* (`num_aux`, `fed_width`), so
each rule can ask the question it needs ("was target_hidden_size given, and was it null?").

    cfg = read_draft_config(json.load(open("draft/config.json")))
    cfg.hidden_size, cfg.target_hidden_size, cfg.num_aux, cfg.aux_layer_ids
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.hf import AUX_IDS, HFConfig

ABSENT = object()  # a key not present in the file (distinct from an explicit null)


@dataclass(frozen=True)
class DraftConfig:
    layout: str  # "sglang" (flat) or "speculators" (nested transformer_layer_config)
    architectures: tuple[str, ...]
    model_type: str | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None  # as declared; `head_dim_or_default` derives H // heads
    intermediate_size: int | None
    vocab_size: int | None
    num_hidden_layers: int | None
    # declared value or ABSENT; None = an explicit null
    draft_vocab_size: Any
    target_hidden_size: Any
    num_aux_hidden_states: int | None
    aux_layer_ids: list[int] | None  # eagle_config.eagle_aux_hidden_state_layer_ids (the only ids SGLang reads)
    top_level_aux_layer_ids: list[int] | None  # speculators / vLLM place
    use_aux_hidden_state: bool | None  # eagle_config.use_aux_hidden_state as declared; False turns capture off
    rms_norm_eps: float
    hidden_act: str
    tie_word_embeddings: bool
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    bias: bool
    attention_bias: bool
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int | None
    # MLA (DeepSeek/Kimi-style attention) drafts
    kv_lora_rank: int | None = None
    q_lora_rank: Any = ABSENT
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_nextn_predict_layers: Any = ABSENT
    raw: dict = field(repr=False, default_factory=dict)
    # where the decoder's own fields are declared (speculators: transformer_layer_config; else the config), for a
    # rule that looks fields up by SGLang's own key list (the context-length keys), read as if flattened
    layer: HFConfig = field(repr=False, default_factory=HFConfig)

    @property
    def num_aux(self) -> int:
        """How many aux states SGLang concatenates into fc: declared count, else the id count, else 3."""
        ids = self.aux_layer_ids
        return self.num_aux_hidden_states or (len(ids) if ids else 3)

    @property
    def trained_num_aux(self) -> int:
        """How many aux states the writing stack built fc for: speculators' top-level id count (else 3) for a
        speculators config (SGLang would read none of them), `num_aux` otherwise."""
        if self.layout == "speculators":
            return len(self.top_level_aux_layer_ids or ()) or 3
        return self.num_aux

    @property
    def effective_target_hidden_size(self) -> int | None:
        """The target width fc expects: target_hidden_size when given (and not null), else hidden_size."""
        ht = self.target_hidden_size
        return self.hidden_size if ht is ABSENT or ht is None else ht

    @property
    def fed_width(self) -> int | None:
        """fc's input width: num_aux x target width."""
        ht = self.effective_target_hidden_size
        return self.num_aux * ht if isinstance(ht, int) else None

    @property
    def head_dim_or_default(self) -> int | None:
        if self.head_dim:
            return self.head_dim
        H, nh = self.hidden_size, self.num_attention_heads
        return H // nh if isinstance(H, int) and isinstance(nh, int) and nh else None

    @property
    def draft_vocab_or_target(self) -> int | None:
        """The draft head's row count: draft_vocab_size, or the target vocab when absent/null."""
        dv = self.draft_vocab_size
        return self.vocab_size if dv is ABSENT or dv is None else dv


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read_draft_config(cfg: HFConfig) -> DraftConfig:
    """Read a draft config of any layout; never raises (absent fields are None / ABSENT)."""
    nested = "transformer_layer_config" in cfg or "speculators_model_type" in cfg
    tl = (cfg.get("transformer_layer_config") or {}) if nested else cfg
    ec = cfg.get("eagle_config") or {}
    inter = tl.get("intermediate_size_mlp") if tl.get("model_type") == "llama4_text" else tl.get("intermediate_size")
    rp = tl.get("rope_parameters")
    theta = (rp or {}).get("rope_theta", tl.get("rope_theta", 10000.0)) if rp else tl.get("rope_theta", 10000.0)
    top_ids, ids = cfg.get(AUX_IDS), ec.get(AUX_IDS)
    nh = _int(tl.get("num_attention_heads"))
    return DraftConfig(
        layout="speculators" if nested else "sglang",
        architectures=tuple(cfg.get("architectures") or ()),
        model_type=tl.get("model_type"),
        hidden_size=_int(tl.get("hidden_size")),
        num_attention_heads=nh,
        num_key_value_heads=_int(tl.get("num_key_value_heads")) or nh,
        head_dim=_int(tl.get("head_dim")),
        intermediate_size=_int(inter),
        vocab_size=_int(tl.get("vocab_size")),
        num_hidden_layers=_int(tl.get("num_hidden_layers")),
        draft_vocab_size=cfg.get("draft_vocab_size", ABSENT),
        target_hidden_size=cfg.get("target_hidden_size", ABSENT),
        num_aux_hidden_states=_int(cfg.get("num_aux_hidden_states")),
        aux_layer_ids=list(ids) if ids else None,
        top_level_aux_layer_ids=list(top_ids) if top_ids else None,
        use_aux_hidden_state=ec.get("use_aux_hidden_state"),
        rms_norm_eps=float(tl.get("rms_norm_eps", 1e-6)),
        hidden_act=tl.get("hidden_act", "silu"),
        tie_word_embeddings=bool(tl.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))),
        norm_before_fc=bool(ec.get("norm_before_fc", cfg.get("norm_before_fc", False))),
        fc_norm=bool(cfg.get("fc_norm") or cfg.get("use_aux_norm", False)),
        norm_output=bool(cfg.get("norm_output", False)),
        bias=bool(cfg.get("bias", False)),
        attention_bias=bool(tl.get("attention_bias", False) or cfg.get("bias", False)),
        rope_theta=float(theta),
        rope_scaling=rp if rp is not None else tl.get("rope_scaling"),
        max_position_embeddings=_int(tl.get("max_position_embeddings")),
        kv_lora_rank=_int(tl.get("kv_lora_rank")),
        q_lora_rank=tl.get("q_lora_rank", ABSENT),
        qk_nope_head_dim=_int(tl.get("qk_nope_head_dim")),
        qk_rope_head_dim=_int(tl.get("qk_rope_head_dim")),
        v_head_dim=_int(tl.get("v_head_dim")),
        num_nextn_predict_layers=tl.get("num_nextn_predict_layers", ABSENT),
        raw=cfg,
        layer=HFConfig.of(tl, getattr(cfg, "path", None)),
    )


def llama_draft_shapes(
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    vocab_size: int,
    draft_vocab_size: int,
    target_hidden_size: int,
    num_aux: int,
    num_hidden_layers: int = 1,
) -> dict[str, tuple[tuple[int, ...], bool]]:
    """Canonical tensor name -> (shape, required) of a Llama-class EAGLE-3 draft (`LlamaForCausalLMEagle3`). Layer 0
    attends over cat(embeds, hidden) (width 2H), later layers over H; the pre-fc `input_norm` and later layers'
    `hidden_norm` are optional (required=False)."""
    H, hd = hidden_size, head_dim
    s: dict[str, tuple[tuple[int, ...], bool]] = {
        "embed_tokens.weight": ((vocab_size, H), True),
        "fc.weight": ((H, num_aux * target_hidden_size), True),
        "norm.weight": ((H,), True),
        "lm_head.weight": ((draft_vocab_size, H), True),
        "input_norm.weight": ((num_aux * target_hidden_size,), False),
    }
    for i in range(max(num_hidden_layers, 1)):
        win = 2 * H if i == 0 else H
        for name, shape in {
            "self_attn.q_proj.weight": (num_attention_heads * hd, win),
            "self_attn.k_proj.weight": (num_key_value_heads * hd, win),
            "self_attn.v_proj.weight": (num_key_value_heads * hd, win),
            "self_attn.o_proj.weight": (H, num_attention_heads * hd),
            "mlp.gate_proj.weight": (intermediate_size, H),
            "mlp.up_proj.weight": (intermediate_size, H),
            "mlp.down_proj.weight": (H, intermediate_size),
            "input_layernorm.weight": (H,),
            "post_attention_layernorm.weight": (H,),
        }.items():
            s[f"layers.{i}.{name}"] = (shape, True)
        s[f"layers.{i}.hidden_norm.weight"] = ((H,), i == 0)
    return s
