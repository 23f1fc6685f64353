"""Reference EAGLE-3 draft in plain PyTorch computing what SGLang's `LlamaForCausalLMEagle3` computes
(`srt/models/llama_eagle3.py`, default release), for the oracle, the CPU reference server and the trainer:

* the fc gate: `fc` (after `input_norm` / per-chunk `fc_norm`) runs only when the incoming hidden width differs
  from the embedding width: a single-layer state skips it silently;
* layer 0 input `cat([input_layernorm(embeds), hidden_norm(h)])`, residual = un-normalized h; layers i>=1 use
  `hidden_norm` as their fused residual-add pre-norm; final `norm(h + residual)`, the next step's state pre-norm
  unless `norm_output`; logits over the draft vocab, mapped to target ids through `d2t`;
* `embed_tokens` / `lm_head` taken from the target as SGLang's worker does (`set_embed`, `set_embed_and_head`).

    draft = kit.reference.draft_io.load_draft("path/to/draft", target_model=model)   # checkpoint I/O lives there
    logits, aux, kv = draft(input_ids, hidden, positions)     # [B,T,Vd], [B,T,H], per-layer (k, v)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from kit.findings import KitInputError
from kit.hf import HFConfig
from kit.reference.llama import RMSNorm, activation
from kit.reference.target import half_applies, half_product, half_weight
from kit.sglang.draft_config import ABSENT, read_draft_config
from kit.sglang.loader import rules_for
from kit.sglang.versions import DEFAULT_RELEASE

# legacy substring renames SGLang applies to every checkpoint key (llama_eagle3.load_weights), per the
# default release's loader rules
LEGACY_NAME_MAP: dict[str, str] = rules_for(DEFAULT_RELEASE).features["legacy_name_map"]


@dataclass
class DraftSpec:
    """The architecture facts SGLang reads from an EAGLE-3 draft config.json."""

    hidden_size: int
    target_hidden_size: int
    num_aux: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int | None  # None: SGLang takes the target's lm_head
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    fc_bias: bool = False
    attention_bias: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    has_target_hidden_size: bool = False  # key present: set_embed keeps the draft's own embedding if != H
    aux_layer_ids: list[int] | None = None  # eagle_config ids (the only ones SGLang reads)
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, cfg: HFConfig, source: str = "config.json") -> DraftSpec:
        """Validate and type a flat (SGLang-layout) draft config, as SGLang's model constructor would."""
        c = read_draft_config(cfg)
        if c.hidden_size is None or c.num_attention_heads is None:
            raise KitInputError(
                f"{source}: not an EAGLE-3 draft config (missing/invalid hidden_size or num_attention_heads)"
            )
        if c.vocab_size is None:
            raise KitInputError(f"{source}: not an EAGLE-3 draft config (missing/invalid vocab_size)")
        if c.draft_vocab_size is ABSENT:
            raise KitInputError(
                f"{source}: no draft_vocab_size (SGLang raises AttributeError; write null to take the target's lm_head)"
            )
        if c.target_hidden_size is None:
            raise KitInputError(f"{source}: target_hidden_size is null (SGLang fails building fc)")
        same = ("hidden_size", "num_aux", "vocab_size", "draft_vocab_size", "rms_norm_eps", "hidden_act")
        same += ("tie_word_embeddings", "norm_before_fc", "fc_norm", "norm_output", "attention_bias", "rope_theta")
        return cls(
            **{k: getattr(c, k) for k in (*same, "rope_scaling", "aux_layer_ids")},
            target_hidden_size=int(c.effective_target_hidden_size),
            num_layers=c.num_hidden_layers or 1,
            num_heads=c.num_attention_heads,
            num_kv_heads=c.num_key_value_heads,
            head_dim=c.head_dim_or_default,
            intermediate_size=c.intermediate_size or 4 * c.hidden_size,
            fc_bias=c.bias,
            has_target_hidden_size=c.target_hidden_size is not ABSENT,
            raw=cfg,
        )


class Linear(nn.Linear):
    """nn.Linear that, with `half` set (`Eagle3Draft.use_plan`: the target's `GemmPlan.half`) and no gradient
    wanted, multiplies by its weight rounded to fp16 and packed by FBGEMM, as the target's products then do."""

    half = False

    def forward(self, x):
        if half_applies(self.half, self.weight, self.bias):
            return half_product(self, self.weight, x)
        return super().forward(x)


def rope_inv_freq(spec: DraftSpec) -> torch.Tensor:
    """Inverse frequencies of SGLang's `get_rope` for this config (neox style); HF's table for scaled types."""
    sc = spec.rope_scaling or {}
    rtype = sc.get("rope_type", sc.get("type", "default"))
    if rtype in (None, "default"):
        exponents = torch.arange(0, spec.head_dim, 2, dtype=torch.float64) / spec.head_dim
        return 1.0 / (spec.rope_theta**exponents).float()
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = LlamaConfig(
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_heads,
        head_dim=spec.head_dim,
        rope_parameters={**sc, "rope_theta": spec.rope_theta},
    )
    return ROPE_INIT_FUNCTIONS[rtype](hf, None)[0].float()


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, hd]; positions [B, T]. Neox (rotate-half) style, as SGLang's Llama."""
    ang = positions[:, None, :, None].float() * inv_freq.to(x.device)[None, None, None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class DraftAttention(nn.Module):
    def __init__(self, spec: DraftSpec, in_dim: int):
        super().__init__()
        self.nh, self.nkv, self.hd = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.q_proj = Linear(in_dim, self.nh * self.hd, bias=False)
        self.k_proj = Linear(in_dim, self.nkv * self.hd, bias=False)
        self.v_proj = Linear(in_dim, self.nkv * self.hd, bias=False)
        self.o_proj = Linear(self.nh * self.hd, spec.hidden_size, bias=spec.attention_bias)

    def qkv(self, x, positions, inv_freq):
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, -1, self.hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        return apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq), v

    def attend(self, q, k, v, mask=None):
        """q [B,nh,T,hd], k/v [B,nkv,S,hd]; mask bool [.., T, S] (True = visible) or None (all visible)."""
        # grouped heads read their shared k/v in place (the same result as repeating them, without the copies)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.hd**-0.5, enable_gqa=self.nh > self.nkv)
        B, _, T, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class DraftMLP(nn.Module):
    def __init__(self, spec: DraftSpec):
        super().__init__()
        self.gate_proj = Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.up_proj = Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down_proj = Linear(spec.intermediate_size, spec.hidden_size, bias=False)
        self.act = activation(spec.hidden_act)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, spec: DraftSpec, layer_id: int):
        super().__init__()
        H = spec.hidden_size
        self.is_input_layer = layer_id == 0
        self.self_attn = DraftAttention(spec, 2 * H if self.is_input_layer else H)
        self.mlp = DraftMLP(spec)
        self.input_layernorm = RMSNorm(H, spec.rms_norm_eps)  # embeds (layer 0); unused for i>=1, as in SGLang
        self.hidden_norm = RMSNorm(H, spec.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(H, spec.rms_norm_eps)

    def pre_attention(self, embeds, h, residual):
        if self.is_input_layer:
            residual = h
            x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(h)], dim=-1)
        else:
            residual = h + residual
            x = self.hidden_norm(residual)
        return x, residual

    def post_attention(self, a, residual):
        residual = a + residual
        return self.mlp(self.post_attention_layernorm(residual)), residual


def causal_mask(t_new: int, t_past: int, device=None) -> torch.Tensor:
    """[T, S] bool: every past key visible, new keys causal among themselves."""
    return torch.ones(t_new, t_past + t_new, dtype=torch.bool, device=device).tril(t_past)


class Eagle3Draft(nn.Module):
    """SGLang `LlamaForCausalLMEagle3` numerics. Parameter names = the normalized checkpoint keys."""

    def __init__(self, spec: DraftSpec):
        super().__init__()
        self.spec = spec
        H, Ht, k = spec.hidden_size, spec.target_hidden_size, spec.num_aux
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.fc = Linear(Ht * k, H, bias=spec.fc_bias)
        self.input_norm = RMSNorm(Ht * k, spec.rms_norm_eps) if spec.norm_before_fc else None
        self.fc_norm = nn.ModuleList([RMSNorm(Ht, spec.rms_norm_eps) for _ in range(k)]) if spec.fc_norm else None
        self.layers = nn.ModuleList([DraftLayer(spec, i) for i in range(spec.num_layers)])
        self.norm = RMSNorm(H, spec.rms_norm_eps)
        vd = spec.draft_vocab_size if spec.draft_vocab_size is not None else spec.vocab_size
        self.lm_head = None if spec.tie_word_embeddings else Linear(H, vd, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(spec), persistent=False)
        self.hot_token_id: torch.Tensor | None = None  # d2t + arange(Vd); None -> indices used as target ids
        self.load_lm_head_from_target = spec.draft_vocab_size is None and not spec.tie_word_embeddings
        self.head_rows: int | None = None  # logits sliced to the first N columns (SGLang logits processor)
        self.load_report: dict | None = None  # set by kit.reference.draft_io.load_draft: dropped / missing keys
        self.half = False  # products on fp16-packed weights (`use_plan`)

    def head_rows_weight(self) -> torch.Tensor:
        """The rows of the head the logits use (`head_rows`: the EAGLE worker keeps the first Vd of the target's)."""
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return w if self.head_rows is None else w[: self.head_rows]

    def to_target_ids(self, idx: torch.Tensor) -> torch.Tensor:
        return idx if self.hot_token_id is None else self.hot_token_id.to(idx.device)[idx]

    def use_plan(self, plan) -> None:
        """Run the draft's products as the target's `kit.reference.target.GemmPlan` runs the target's: on
        fp16-packed weights when `plan.half` (a draft step and extend then read half the bytes), else fp32."""
        self.half = plan.half
        with torch.no_grad():  # the fp16 copies made now, not on the first request's first draft step
            for m in self.modules():
                if isinstance(m, Linear):
                    m.half = plan.half
                    if half_applies(m.half, m.weight, m.bias):
                        half_weight(m)
            if half_applies(self.half, self.head_rows_weight()):
                half_weight(self, self.head_rows_weight())

    def project(self, hidden: torch.Tensor, embed_width: int) -> torch.Tensor:
        """SGLang's fc gate: fc (and its norms) only when the incoming width != embedding width."""
        if hidden.shape[-1] == embed_width:
            return hidden
        if self.input_norm is not None:
            hidden = self.input_norm(hidden)
        if self.fc_norm is not None:
            chunks = hidden.chunk(self.spec.num_aux, dim=-1)
            hidden = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], dim=-1)
        return self.fc(hidden)

    def forward(self, input_ids, hidden, positions, past_kv=None, mask=None, logits_at=None):
        """One draft pass: input_ids [B,T]; hidden [B,T,W] (k*Ht fused, or H); positions [B,T]; past_kv: per-layer
        (k, v) [B,nkv,S,hd], all visible; mask: bool [T, S+T] overriding past-visible/new-causal; logits_at: long
        [B], the one position per row whose logits are wanted (logits then [B,1,Vd']).
        Returns (logits [B,T,Vd'], next-step hidden [B,T,H], per-layer (k, v) of the new tokens)."""
        embeds = self.embed_tokens(input_ids)
        h = self.project(hidden, embeds.shape[-1])
        residual = None
        new_kv = []
        for i, layer in enumerate(self.layers):
            x, residual = layer.pre_attention(embeds, h, residual)
            q, k, v = layer.self_attn.qkv(x, positions, self.inv_freq)
            new_kv.append((k, v))
            if past_kv is not None:
                k, v = torch.cat([past_kv[i][0], k], 2), torch.cat([past_kv[i][1], v], 2)
            T = q.shape[2]  # one new token sees every key: no mask unless one is given
            m = mask if mask is not None or T == 1 else causal_mask(T, k.shape[2] - T, q.device)
            a = layer.self_attn.attend(q, k, v, m)
            h, residual = layer.post_attention(a, residual)
        pre = h + residual
        normed = self.norm(pre)
        at = normed if logits_at is None else normed[torch.arange(normed.shape[0]), logits_at][:, None]
        return self.logits(at), (normed if self.spec.norm_output else pre), new_kv

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        # only the kept rows of the head are multiplied: the same logits as slicing the full product, without
        # reading the rest of a target-sized head (the EAGLE worker path) on every draft step
        w = self.head_rows_weight()
        if half_applies(self.half, w):
            return half_product(self, w, normed)
        return normed @ w.t()

    def attach_target(self, target_model, algorithm: str = "EAGLE3") -> Eagle3Draft:
        """Share the target's embedding / lm_head exactly as SGLang's `init_lm_head` does."""
        # set_embed_and_head(target embed, target head): EAGLE3 with draft_vocab_size null (untied), and the EAGLE/NEXTN
        # worker path, where the draft's own d2t is never consulted and the logits processor keeps the first Vd columns;
        # else set_embed (the checkpoint's embedding ignored) unless target_hidden_size is given and != hidden_size
        both = algorithm.upper() != "EAGLE3" or self.load_lm_head_from_target
        own_embed = self.spec.has_target_hidden_size and self.spec.target_hidden_size != self.spec.hidden_size
        if both or not own_embed:
            self._set("embed_tokens", target_model.get_input_embeddings().weight)
        if both:
            self._set("lm_head", target_model.get_output_embeddings().weight)
        if algorithm.upper() != "EAGLE3":
            self.hot_token_id = None
            if self.spec.draft_vocab_size is not None:
                self.head_rows = int(self.spec.draft_vocab_size)
        return self

    def _set(self, name: str, weight: torch.Tensor):
        if not isinstance(weight, nn.Parameter):
            weight = nn.Parameter(weight, requires_grad=False)
        if name == "embed_tokens":
            self.embed_tokens.weight = weight
        elif self.lm_head is not None:  # tied: lm_head is the embedding
            if self.lm_head.weight.shape != weight.shape:
                self.lm_head = Linear(weight.shape[1], weight.shape[0], bias=False)
            self.lm_head.weight = weight
