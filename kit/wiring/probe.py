"""`python -m kit probe`: capture the target's hidden states where SGLang would, and show what the draft gets.

Forward hooks at the physical capture points (kit.reference.target.TargetCapture: point p = output of layer p-1,
p=0 the embeddings) on a real HF target, or with `--config-only` on the meta device from config.json alone (the
transformers class when it builds, else a Llama skeleton of the same depth and width), so a Kimi-K2.5 target is
probed without weights. The verdict: what a launch feeds the draft (k·Ht fused states or one Ht state) and whether
SGLang's fc gate (`hidden_states.shape[-1] != embeds.shape[-1]`) runs fc or bypasses it.

    python -m kit probe                                    # embedded SmolLM2 + demo draft
    python -m kit probe --target DIR --draft DIR --launch "python -m sglang.launch_server ..."
    python -m kit probe --target kimi/config.json --draft D --config-only --json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Self

from kit import config as kconfig
from kit.checkpoint.hf_config import read_config, target_facts, text_config
from kit.config import opt
from kit.findings import KitInputError
from kit.hf import HFConfig
from kit.models import files_id, load_target, resolve_target, result_path, shipped_draft, target_id, write_cache_json
from kit.sglang.cmdline import split_command
from kit.sglang.draft_config import read_draft_config
from kit.wiring.aux import capture_points, fc_in_features, read_ids, stack_table
from kit.wiring.plan import wiring_from_launch

HELP = "probe capture-point shapes on a real or meta-device target; fused vs single; fc runs or bypassed"


@dataclass
class ProbeConfig:
    target: str = opt("'embedded', a local HF model dir, or a config.json (with --config-only)", "embedded")
    draft: str | None = opt("draft dir or config.json (default: the kit's shipped demo draft)")
    launch: str | None = opt("SGLang launch command to judge (default: --speculative-algorithm EAGLE3)")
    algorithm: str | None = opt("shortcut for the launch's --speculative-algorithm")
    sglang_version: str | None = opt("SGLang version whose capture rules apply")
    config_only: bool = opt("no weights: build the target on the meta device", False)
    tokens: int = opt("probe input length", 8)
    json: bool = opt("print one JSON document as the last line", False)


@dataclass
class ProbeResult:
    """The probe's document: what `probe` returns, caches and `kit probe --json` prints (`to_dict`, the keys in
    this order; `cached_s` only when read back)."""

    target: str  # the target as given: 'embedded', a model dir or a config.json
    target_class: str | None  # its architecture (`TargetFacts.architecture`)
    num_layers: int  # its decoder layers
    built_as: str  # how it was built: "weights (CPU)", a transformers class on the meta device, or a Llama skeleton
    draft: str  # the draft dir or config.json probed
    wiring: str  # what the launch gives the draft (`Wiring.describe`)
    capture_points: list[int]  # points hooked (point p = output of layer p-1, 0 the embeddings)
    shapes: dict[str, Any]  # `hook_shapes`: {"points": {point: shape}, "fused": shape, "single": shape}
    verdict: dict[str, Any]  # `fc_gate`: what the draft is fed and what SGLang's fc gate does with it
    stacks: list[dict]  # `kit.wiring.aux.stack_table`: the ids each stack reads and the points they become
    build_s: float  # seconds to read the configs and build or load the target
    forward_s: float  # seconds of the hooked forward passes
    cached_s: float | None = None  # read back from the cache: seconds the read took (None: probed now)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "cached_s" or v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def hook_shapes(model, points: list[int], tokens: int = 8, device: str = "cpu") -> dict[str, Any]:
    """Shapes at each capture point plus the final post-norm state, from one forward pass."""
    import torch

    from kit.reference.target import TargetCapture

    ids = torch.zeros(1, tokens, dtype=torch.long, device=device)
    with torch.no_grad(), TargetCapture(model, points) as cap:
        model(input_ids=ids)
        shapes = {int(p): list(cap.store[p].shape) for p in points}
    with torch.no_grad(), TargetCapture(model, None) as cap1:
        model(input_ids=ids)
        final = list(cap1.store["final"].shape)
    return {"points": shapes, "fused": [1, tokens, sum(s[-1] for s in shapes.values())], "single": final}


def meta_model(cfg: HFConfig):
    """Build the target on the meta device from its config dict; (model, how)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    tc = dict(text_config(cfg))
    mt = tc.get("model_type", "llama")
    try:
        hf = AutoConfig.for_model(mt, **{k: v for k, v in tc.items() if k not in ("model_type", "architectures")})
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16), f"transformers {type(hf).__name__}"
    except Exception as e:  # noqa: BLE001 — unknown / remote-code model types: a residual-stream skeleton
        why = type(e).__name__
    sk = LlamaConfig(
        hidden_size=tc["hidden_size"],
        num_hidden_layers=tc["num_hidden_layers"],
        num_attention_heads=tc.get("num_attention_heads", 8) or 8,
        num_key_value_heads=tc.get("num_key_value_heads") or tc.get("num_attention_heads", 8),
        intermediate_size=tc.get("intermediate_size") or 4 * tc["hidden_size"],
        vocab_size=tc.get("vocab_size", 32000),
    )
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(sk, dtype=torch.bfloat16), f"Llama skeleton ({mt} not buildable: {why})"


def fc_gate(shapes: dict[str, Any], draft_cfg: HFConfig | None, wiring, fc_in: int | None) -> dict[str, Any]:
    """What the draft receives under `wiring` and what SGLang's fc gate does with it."""
    fed = shapes["fused"][-1] if wiring.aux_capture else shapes["single"][-1]
    out = {"fed": "fused k*Ht" if wiring.aux_capture else "single Ht", "fed_width": fed}
    if draft_cfg:
        d = read_draft_config(draft_cfg)
        fc_in = fc_in or d.fed_width
        fc = "runs" if fed != d.hidden_size else "bypassed"
        if fc == "runs" and fc_in and fed != fc_in:
            fc = f"shape error: fc expects {fc_in}, gets {fed}"
        out |= {"embed_width": d.hidden_size, "fc_in_features": fc_in, "fc": fc}
    return out


def probe(cfg: ProbeConfig) -> ProbeResult:
    """The probe's document. It is a function of its inputs (the target's config and weights, the draft's files,
    the launch, the release, transformers' modeling code and the kit's): cached under $KIT_CACHE_DIR/probe-results
    by all of them, so a second notebook run or demo reads it back (`cached_s` says when it was read)."""
    t0 = time.perf_counter()
    draft_path = shipped_draft() if cfg.draft is None else Path(cfg.draft)
    cached = _result_path(cfg, draft_path)
    if cached.exists():
        doc = json.loads(cached.read_text())
        return ProbeResult.from_dict({**doc, "cached_s": round(time.perf_counter() - t0, 3)})
    data = json.loads(json.dumps(_probe(cfg, draft_path, t0).to_dict()))  # the shape a cached read returns
    write_cache_json(cached, data)
    return ProbeResult.from_dict(data)


def _result_path(cfg: ProbeConfig, draft_path):
    dcfg, ddir = read_config(draft_path)
    target = read_config(cfg.target)[0].to_dict() if cfg.config_only else target_id(resolve_target(cfg.target))
    key = {
        "cfg": {k: v for k, v in vars(cfg).items() if k != "json"},
        "target": target,
        "draft": files_id(ddir) if ddir else dcfg.to_dict(),
        "versions": [importlib.metadata.version(d) for d in ("torch", "transformers")],
    }
    kit_dir = Path(__file__).resolve().parents[1]
    code = [p for d in ("wiring", "sglang", "checkpoint") for p in (kit_dir / d).glob("*.py")]
    code += list((kit_dir / "sglang").glob("*.json")) + [kit_dir / "hf.py"]
    return result_path("probe-results", key, code)


def _probe(cfg: ProbeConfig, draft_path, t0: float) -> ProbeResult:
    dcfg, ddir = read_config(draft_path)
    tcfg = read_config(cfg.target if cfg.config_only else resolve_target(cfg.target))[0]
    if cfg.config_only:
        (model, how), device = meta_model(tcfg), "meta"
    else:
        model, how, device = load_target(cfg.target)[0], "weights (CPU)", "cpu"
    argv = split_command(cfg.launch)[1] if cfg.launch else ["--speculative-algorithm", (cfg.algorithm or "EAGLE3")]
    wiring = wiring_from_launch(argv, dcfg, tcfg, cfg.sglang_version, draft_dir=None)
    tf = target_facts(tcfg)
    if not tf.num_layers:
        raise KitInputError(f"{cfg.target}: config has no num_hidden_layers")
    L = tf.num_layers
    ids = read_ids("sglang", dcfg)[0]
    pts = wiring.capture_points or capture_points("sglang", ids, L, tf.architecture, cfg.sglang_version)
    pts = [p for p in pts if 0 <= p <= L]
    t1 = time.perf_counter()
    shapes = hook_shapes(model, pts, cfg.tokens, device)
    return ProbeResult(
        target=str(cfg.target),
        target_class=tf.architecture,
        num_layers=L,
        built_as=how,
        draft=str(draft_path),
        wiring=wiring.describe(),
        capture_points=pts,
        shapes=shapes,
        verdict=fc_gate(shapes, dcfg, wiring, fc_in_features(ddir)),
        stacks=stack_table(dcfg, L, tf.architecture, cfg.sglang_version),
        build_s=round(t1 - t0, 2),
        forward_s=round(time.perf_counter() - t1, 2),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, ProbeConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(ProbeConfig, args)
    # named paths first: a typo must not wait for the demo draft or the target to load
    if cfg.target != "embedded":
        kconfig.local_path(cfg.target, "--target", "a model directory or a config.json")
    if cfg.draft:
        kconfig.local_path(cfg.draft, "--draft", "a draft directory or its config.json")
    doc = probe(cfg)
    if cfg.json:
        print(json.dumps(doc.to_dict()))
        return 0
    print(f"target {doc.target_class} ({doc.num_layers} layers, {doc.built_as}); {doc.wiring}")
    for p, s in doc.shapes["points"].items():
        print(f"  capture point {p:>3} (output of layer {int(p) - 1:>3}): {s}")
    print(f"  fused: {doc.shapes['fused']}   single final state: {doc.shapes['single']}")
    print(f"draft receives {doc.verdict['fed']} (width {doc.verdict['fed_width']}); fc {doc.verdict.get('fc', '?')}")
    for r in doc.stacks:
        print(f"  {r['stack']:13s} ids {r['ids_read']} ({r['read_from']}) -> points {r['capture_points']}")
    return 0
