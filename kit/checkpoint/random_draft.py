"""A randomly initialised EAGLE-3 draft on disk, in any layout — for demos, tests and benchmarks.

Notebook 02 needs a draft before a trained one exists: this writes one shaped for the embedded
SmolLM2-135M target (hidden 576, 9/3 heads, intermediate 1536, vocab 49152) in the layout a
given stack saves (speculators 0.9.0 `Eagle3DraftModel` by default, keys and config.json as
that release writes them), with a sorted random draft vocabulary and matching d2t/t2d.

    from kit.checkpoint.random_draft import write_random_draft
    path = write_random_draft("runs/draft", layout="speculators")

How to run: `python -m kit.checkpoint.random_draft OUT_DIR [LAYOUT]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kit.checkpoint.layouts import from_canonical, sglang_to_eagle_config, sglang_to_speculators_config
from kit.hf import HFConfig
from kit.sglang.draft_config import llama_draft_shapes

SMOLLM2 = {
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "num_hidden_layers": 30,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "bos_token_id": 1,
    "eos_token_id": 2,
    "architectures": ["LlamaForCausalLM"],
}


def draft_state(
    dims: dict[str, Any],
    num_layers: int = 1,
    draft_vocab_size: int | None = None,
    num_aux: int = 3,
    seed: int = 0,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Canonical-name state dict (torch tensors) of a random draft with these target dims."""
    import torch

    g = torch.Generator().manual_seed(seed)
    H, nh, nkv = dims["hidden_size"], dims["num_attention_heads"], dims["num_key_value_heads"]
    hd = dims.get("head_dim") or H // nh
    I_, V = dims["intermediate_size"], dims["vocab_size"]
    Vd = draft_vocab_size or V
    dt = getattr(torch, dtype)

    shapes = llama_draft_shapes(H, nh, nkv, hd, I_, V, Vd, H, num_aux, num_layers)
    s = {}
    for name, (shape, required) in shapes.items():
        if not required:
            continue
        # norms start at one (as trained models do); matrices small and random
        s[name] = torch.ones(shape, dtype=dt) if len(shape) == 1 else (torch.randn(*shape, generator=g) * 0.02).to(dt)
    if Vd < V:
        kept = torch.sort(torch.randperm(V, generator=g)[:Vd]).values
        s["d2t"] = kept - torch.arange(Vd)
        t2d = torch.zeros(V, dtype=torch.bool)
        t2d[kept] = True
        s["t2d"] = t2d
    return s


def write_random_draft(
    out_dir: str | Path,
    layout: str = "speculators",
    target_config: HFConfig | None = None,
    draft_vocab_size: int | None = 8192,
    num_layers: int = 1,
    aux_layer_ids: list[int] | None = None,
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Write config.json + model.safetensors of a random draft in `layout`; returns the directory."""
    from kit.checkpoint.safetensors_io import write_safetensors

    dims = dict(target_config or SMOLLM2)
    L = dims.get("num_hidden_layers", 30)
    ids = list(aux_layer_ids or [2, L // 2, L - 3])
    state = draft_state(dims, num_layers, draft_vocab_size, len(ids), seed, dtype)
    base = {
        k: dims[k]
        for k in (
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "rms_norm_eps",
            "hidden_act",
            "max_position_embeddings",
            "rope_parameters",
            "bos_token_id",
            "eos_token_id",
        )
        if k in dims
    }
    sg = {
        **base,
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": num_layers,
        "draft_vocab_size": draft_vocab_size or dims["vocab_size"],
        "tie_word_embeddings": False,
        "num_aux_hidden_states": len(ids),
        "torch_dtype": dtype,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
    }
    if layout == "speculators":
        cfg = sglang_to_speculators_config(sg, None, dims.get("architectures"))
        cfg["dtype"] = dtype
        if (draft_vocab_size or dims["vocab_size"]) == dims["vocab_size"]:
            state.pop("d2t", None), state.pop("t2d", None)
    elif layout == "eagle":
        cfg = sglang_to_eagle_config(sg)
    elif layout == "sglang":
        cfg = sg
    else:
        raise ValueError(f"layout {layout!r}: choose speculators, sglang or eagle")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    named = {from_canonical(k, layout, num_layers): v for k, v in state.items()}
    write_safetensors(out / "model.safetensors", named)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(write_random_draft(sys.argv[1], *(sys.argv[2:3] or ["speculators"])))
