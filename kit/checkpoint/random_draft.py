"""A randomly initialised EAGLE-3 draft on disk, in any layout — for demos, tests and benchmarks.

Shaped for the embedded SmolLM2-135M target unless told otherwise, in the layout a stack saves (speculators 0.9.0
`Eagle3DraftModel` by default), with a sorted random draft vocabulary and matching d2t/t2d.

    from kit.checkpoint.random_draft import write_random_draft
    path = write_random_draft("runs/draft", layout="speculators")

How to run: `python -m kit.checkpoint.random_draft OUT_DIR [LAYOUT]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kit.checkpoint.layouts import from_canonical, sglang_to_eagle_config, sglang_to_speculators_config
from kit.checkpoint.safetensors_io import write_safetensors
from kit.hf import AUX_IDS, HFConfig
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
    import torch

    dims = dict(target_config or SMOLLM2)
    L = dims.get("num_hidden_layers", 30)
    ids = list(aux_layer_ids or [2, L // 2, L - 3])
    H, nh, V = dims["hidden_size"], dims["num_attention_heads"], dims["vocab_size"]
    Vd = draft_vocab_size or V
    g, dt = torch.Generator().manual_seed(seed), getattr(torch, dtype)
    kv, ff = dims["num_key_value_heads"], dims["intermediate_size"]
    shapes = llama_draft_shapes(H, nh, kv, dims.get("head_dim") or H // nh, ff, V, Vd, H, len(ids), num_layers)
    state = {  # norms start at one (as trained models do); matrices small and random
        name: torch.ones(shape, dtype=dt) if len(shape) == 1 else (torch.randn(*shape, generator=g) * 0.02).to(dt)
        for name, (shape, required) in shapes.items()
        if required
    }
    if Vd < V:
        kept = torch.sort(torch.randperm(V, generator=g)[:Vd]).values
        state["d2t"] = kept - torch.arange(Vd)
        state["t2d"] = torch.zeros(V, dtype=torch.bool)
        state["t2d"][kept] = True
    copied = """hidden_size num_attention_heads num_key_value_heads head_dim intermediate_size vocab_size rms_norm_eps
    hidden_act max_position_embeddings rope_parameters bos_token_id eos_token_id""".split()
    sg = {
        **{k: dims[k] for k in copied if k in dims},
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": num_layers,
        "draft_vocab_size": Vd,
        "tie_word_embeddings": False,
        "num_aux_hidden_states": len(ids),
        "torch_dtype": dtype,
        "eagle_config": {AUX_IDS: ids, "use_aux_hidden_state": True},
    }
    configs = {
        "speculators": {**sglang_to_speculators_config(sg, None, dims.get("architectures")), "dtype": dtype},
        "sglang": sg,
        "eagle": sglang_to_eagle_config(sg),
    }
    if layout not in configs:
        raise ValueError(f"layout {layout!r}: choose speculators, sglang or eagle")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", {from_canonical(k, layout, num_layers): v for k, v in state.items()})
    (out / "config.json").write_text(json.dumps(configs[layout], indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(write_random_draft(sys.argv[1], *(sys.argv[2:3] or ["speculators"])))
