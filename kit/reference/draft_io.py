"""EAGLE-3 draft checkpoints in and out of `kit.reference.draft.Eagle3Draft`, the way SGLang's default release loads them.

Loading follows `LlamaForCausalLMEagle3.load_weights`: legacy renames (`midlayer` -> `layers.0`, `aux_norm_*` ->
`fc_norm.*`), `model.` prefix fallback, `d2t` -> `hot_token_id`, `t2d` skipped, unmatched keys dropped (reported
here, silent in SGLang), shape mismatches loud, missing parameters left at init. Saving writes the SGLang layout
(`midlayer.*` for one layer, which every SGLang era loads) plus `d2t`/`t2d`, atomically.

    draft = load_draft("dir", target_model=model)        # speculators layout goes through kit.checkpoint.convert
    python -m kit.reference.draft_io DIR                 # load a draft and print its structure
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from kit.findings import KitInputError
from kit.hf import HFConfig
from kit.reference.draft import LEGACY_NAME_MAP, DraftSpec, Eagle3Draft


def normalize_key(name: str) -> str:
    """Checkpoint key -> our parameter name, following SGLang's renames (`kit.sglang.loader`) and `model.` fallback."""
    for legacy, new in LEGACY_NAME_MAP.items():
        name = name.replace(legacy, new)
    return name[len("model.") :] if name.startswith("model.") and name != "model.lm_head.weight" else name


def load_state(model: Eagle3Draft, state: dict[str, torch.Tensor], drop: tuple = ()) -> dict[str, list[str]]:
    """Load like SGLang: unmatched keys are dropped (reported here), missing params keep init."""
    params = dict(model.named_parameters())
    used, dropped = set(), []
    for key, t in state.items():
        name = normalize_key(key)
        if key in drop or name in drop:
            dropped.append(key)
            continue
        if "d2t" in name:
            model.hot_token_id = t.long() + torch.arange(t.shape[0], device=t.device)
        if "d2t" in name or "t2d" in name:
            continue
        if name not in params:
            dropped.append(key)
            continue
        p = params[name]
        if tuple(p.shape) != tuple(t.shape):
            raise KitInputError(
                f"{key}: shape {tuple(t.shape)} != expected {tuple(p.shape)} (SGLang asserts on this at load)"
            )
        with torch.no_grad():
            p.copy_(t.to(p.dtype))
        used.add(name)
    return {"dropped": dropped, "missing": sorted(set(params) - used)}


def reset_params(model: Eagle3Draft, names, seed: int = 0) -> None:
    """Give parameters SGLang's constructor state (norms ones, linears unset -> seeded N(0, 0.02))."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            p = params.get(normalize_key(n))
            if p is not None and "norm" in n:
                p.fill_(1.0)
            elif p is not None:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


def read_state_dict(d: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(d.glob("*.safetensors"))
    if not files and (d / "pytorch_model.bin").exists():
        return torch.load(d / "pytorch_model.bin", map_location="cpu", weights_only=True)
    if not files:
        raise KitInputError(f"{d}: no *.safetensors or pytorch_model.bin")
    return {k: v for f in files for k, v in load_file(f).items()}


def load_draft(
    path, target_model=None, algorithm: str = "EAGLE3", dtype=torch.float32, drop_keys: tuple = ()
) -> Eagle3Draft:
    """A draft directory as an `Eagle3Draft` (report: `draft.load_report`). `target_model`: embedding/lm_head shared
    as SGLang's worker does for `algorithm`; `drop_keys`: simulate a loader silently dropping those keys."""
    from kit.checkpoint.hf_config import read_config

    cfg, d = read_config(path)
    if d is None:
        raise KitInputError(f"{path}: give the draft directory (weights are needed), not a lone config")
    if "speculators_model_type" in cfg or "transformer_layer_config" in cfg:
        from kit.checkpoint.convert import convert_in_memory

        config, state = convert_in_memory(d)
        cfg = HFConfig.of(config, d / "config.json")
    else:
        state = read_state_dict(d)
    model = Eagle3Draft(DraftSpec.from_config(cfg, str(d / "config.json"))).to(dtype)
    model.load_report = rep = load_state(model, state, tuple(drop_keys))
    if drop_keys:
        reset_params(model, rep["dropped"])
    if target_model is not None:
        model.attach_target(target_model, algorithm)
    return model.eval()


def save_draft(
    model: Eagle3Draft, out_dir, config: HFConfig, extra_files=None, include_embed=False, dtype=torch.float32
) -> Path:
    """Write an SGLang-layout checkpoint, weights in `dtype` (d2t/t2d keep their types), via a temp dir renamed
    into place; `extra_files` are JSON-dumped next to it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {}
    for n, p in model.named_parameters():
        if n.startswith("embed_tokens") and not include_embed:
            continue
        if n.startswith("lm_head") and model.load_lm_head_from_target:
            continue
        if model.spec.num_layers == 1:
            n = n.replace("layers.0.", "midlayer.")
        state[n] = p.detach().to(dtype).contiguous().clone()
    if model.hot_token_id is not None:
        hot = model.hot_token_id.long()
        state["d2t"] = hot - torch.arange(hot.shape[0])
        state["t2d"] = torch.zeros(model.spec.vocab_size, dtype=torch.bool).index_fill_(0, hot, True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-", ignore_cleanup_errors=True) as t:
        tmp = Path(t)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, obj in {"config.json": dict(config), **(extra_files or {})}.items():
            (tmp / name).write_text(json.dumps(obj, indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    return out


if __name__ == "__main__":
    import sys

    m = load_draft(sys.argv[1])
    print(m.spec)
    print(m.load_report)
    print(sum(p.numel() for p in m.parameters()), "parameters")
