"""Llama-layout targets (llama, mistral, qwen2, qwen3) built from `config.json` + safetensors with torch alone.

Why: importing transformers' model classes costs ~5 s of CPU per process on a 2-core EPYC (the reference server
starts five times in `kit demo`). These modules carry the attribute names and arithmetic of transformers' Llama
family for everything `kit.reference.target.RaggedTarget` runs, so either model gives the same tokens and
features bit for bit (kit/tests/reference/test_llama.py). What a checkpoint has (attention biases, qwen3's q/k
norms) is read from its keys. A target this does not cover is named by `unsupported` and loaded by transformers.

    from kit.reference.llama import load_llama, unsupported
    why = unsupported(model_dir)            # None: load_llama(model_dir) serves it
    model = load_llama(model_dir, dtype=torch.float32)
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

# model types whose decoder layers have the Llama layout RaggedTarget runs (q/k/v/o, gate/up/down, two RMSNorms)
LAYOUT_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def activation(name: str):
    """`hidden_act`'s activation: F.silu (what ACT2FN["silu"] runs), else transformers' table (a ~2 s import)."""
    if name == "silu":
        return F.silu
    from transformers.activations import ACT2FN

    return ACT2FN[name]


class Config(SimpleNamespace):
    """config.json as attributes, with the one method the kit calls on a transformers config."""

    def get_text_config(self):
        return self


def _rope(cfg: dict) -> tuple[str, float | None]:
    """(rope type, theta) from either spelling: transformers 5's `rope_parameters` or `rope_theta`/`rope_scaling`."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    rtype = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    return rtype, params.get("rope_theta", cfg.get("rope_theta"))


def _weight_files(d: Path) -> list[Path]:
    index = d / "model.safetensors.index.json"
    if index.exists():
        return sorted({d / f for f in json.loads(index.read_text())["weight_map"].values()})
    return [d / "model.safetensors"] if (d / "model.safetensors").exists() else []


def unsupported(model_dir) -> str | None:
    """Why `load_llama` cannot serve this target (None when it can): read from its config and key names."""
    from safetensors import safe_open

    d = Path(model_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError) as e:
        return f"config.json unreadable ({e})"
    if cfg.get("model_type") not in LAYOUT_TYPES:
        return f"model_type {cfg.get('model_type')!r}"
    rtype, theta = _rope(cfg)
    if rtype != "default" or theta is None:
        return f"rope type {rtype!r}" if rtype != "default" else "no rope_theta"
    files = _weight_files(d)
    if not files or not all(f.exists() for f in files):
        return "no safetensors weights"
    keys = set()
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            keys |= set(sf.keys())
    n = cfg.get("num_hidden_layers")
    modules = "self_attn.q_proj self_attn.k_proj self_attn.v_proj self_attn.o_proj mlp.gate_proj mlp.up_proj"
    modules += " mlp.down_proj input_layernorm post_attention_layernorm"
    need = ["model.embed_tokens.weight", "model.norm.weight"]
    need += [f"model.layers.{i}.{m}.weight" for i in range(n or 0) for m in modules.split()]
    missing = [k for k in need if k not in keys]
    if not n or missing:
        return f"not the Llama key layout (missing {missing[0] if missing else 'num_hidden_layers'})"
    if "lm_head.weight" not in keys and not cfg.get("tie_word_embeddings", True):
        return "no lm_head.weight and embeddings not tied"
    return None


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: normalised in fp32, scaled in the input dtype."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(x.dtype)


class Rotary(nn.Module):
    """transformers' default rope: inverse frequencies in fp32, cos/sin of position x frequency, doubled."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)  # transformers scales both by 1.0 here


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim: int = 1):
    """transformers' apply_rotary_pos_emb (rotate-half), the same operations in the same order."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def _linear(keys: set[str], name: str, n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=f"{name}.bias" in keys, device="meta")


class Attention(nn.Module):
    def __init__(self, c: Config, keys: set[str], prefix: str):
        super().__init__()
        H, hd = c.hidden_size, c.head_dim
        self.q_proj = _linear(keys, f"{prefix}.q_proj", H, c.num_attention_heads * hd)
        self.k_proj = _linear(keys, f"{prefix}.k_proj", H, c.num_key_value_heads * hd)
        self.v_proj = _linear(keys, f"{prefix}.v_proj", H, c.num_key_value_heads * hd)
        self.o_proj = _linear(keys, f"{prefix}.o_proj", c.num_attention_heads * hd, H)
        if f"{prefix}.q_norm.weight" in keys:  # qwen3
            self.q_norm, self.k_norm = RMSNorm(hd, c.rms_norm_eps), RMSNorm(hd, c.rms_norm_eps)
        self.scaling = hd**-0.5


class MLP(nn.Module):
    def __init__(self, c: Config, keys: set[str], prefix: str):
        super().__init__()
        H, inter = c.hidden_size, c.intermediate_size
        self.gate_proj = _linear(keys, f"{prefix}.gate_proj", H, inter)
        self.up_proj = _linear(keys, f"{prefix}.up_proj", H, inter)
        self.down_proj = _linear(keys, f"{prefix}.down_proj", inter, H)
        self.act_fn = activation(c.hidden_act)

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: Config, keys: set[str], i: int):
        super().__init__()
        self.self_attn = Attention(c, keys, f"model.layers.{i}.self_attn")
        self.mlp = MLP(c, keys, f"model.layers.{i}.mlp")
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class Decoder(nn.Module):
    def __init__(self, c: Config, keys: set[str]):
        super().__init__()
        # given a (meta) weight, nn.Embedding skips its random init: on meta that init imports torch._dynamo (~2 s)
        meta = torch.empty(c.vocab_size, c.hidden_size, device="meta")
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, _weight=meta)
        self.layers = nn.ModuleList(DecoderLayer(c, keys, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary_emb = Rotary(c.head_dim, _rope(vars(c))[1])


class LlamaLayout(nn.Module):
    """The causal LM: `model` (the decoder) and `lm_head`, named as transformers names them."""

    def __init__(self, c: Config, keys: set[str]):
        super().__init__()
        self.config = c
        self.model = Decoder(c, keys)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False, device="meta")

    def get_decoder(self):
        return self.model

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head


def load_llama(model_dir, dtype: torch.dtype = torch.float32, device: str = "cpu") -> LlamaLayout:
    """The target in eval mode, every weight the checkpoint's (cast to `dtype`), the head tied when it is."""
    from safetensors.torch import load_file

    d = Path(model_dir)
    if why := unsupported(d):
        raise ValueError(f"{d}: load_llama does not cover this target ({why}); load it with transformers")
    raw = json.loads((d / "config.json").read_text())
    c = Config(**{"hidden_act": "silu", "tie_word_embeddings": True, **raw, "_name_or_path": str(d)})
    c.head_dim = raw.get("head_dim") or c.hidden_size // c.num_attention_heads
    # Each weight gets memory of its own: loaded tensors sit at 8-byte-aligned file offsets, and at some thread
    # counts the CPU GEMM splits an unaligned operand differently, changing the last bits of its sums.
    state = {k: v.to(dtype, copy=True) for f in _weight_files(d) for k, v in load_file(str(f)).items()}
    model = LlamaLayout(c, set(state))
    tied = "lm_head.weight" not in state
    if tied:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, _ = model.load_state_dict(state, strict=False, assign=True)  # unexpected: e.g. stored inv_freq
    if missing:
        raise ValueError(f"{d}: weights missing for {missing[:3]}")
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.requires_grad_(False).to(device).eval()


def load_engine_target(target, dtype: str = "float32", device: str = "cpu"):
    """(model, tokenizer) for `RaggedTarget` (decode engine, oracle): `load_llama` on a CPU when it covers the target,
    else `kit.models.load_target` (on a GPU the CUDA-graph engine keeps transformers' modules)."""
    from kit.models import load_target, load_tokenizer, resolve_target

    d = resolve_target(target)
    if device == "cpu" and unsupported(d) is None:
        return load_llama(d, getattr(torch, dtype), device), load_tokenizer(d)
    return load_target(d, dtype=dtype, device=device)
