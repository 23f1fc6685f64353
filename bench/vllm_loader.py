"""vLLM's own EAGLE-3 draft loader, run on this CPU, beside `kit doctor`'s verdict on the same draft keys.

Why: doctor judges a draft's checkpoint keys on a `vllm serve` line from the release's derived loader rules
(`kit.vllm.loader`); only vLLM's loader can say whether it was right. For each variant of the kit's demo draft (its
keys as SpecForge, speculators and other exporters name them, a Qwen3-style layer, keys missing, fc norms, an MLA
layer), this builds vLLM's real draft class from a real `VllmConfig` (`EngineArgs(...).create_engine_config()`, vLLM's
CPU platform, one gloo rank), fills every parameter with a marker, calls the class's `load_weights` on zero tensors of
the header's names and shapes, and records the exception it raises, the keys it passes over (each loaded alone: no error, no
parameter filled) and the parameters it left unfilled (the target's embedding and head, which vLLM shares into a draft
that has none, set aside). The MLA variants' attention is built with a GPU backend's class standing in for the kernel
the CPU platform lacks (the layer holds no parameter of its own). Doctor reads the same folder with `--vllm-version`.
Prints one JSON document: per variant, vLLM's outcome, doctor's codes, and whether they agree.

    python bench/vllm_loader.py --site SITE [--vllm-version 0.24.0]
      # SITE: `pip install --no-deps --target SITE vllm==V` and the pure-Python packages its imports need (cbor2
      # openai-harmony openai cloudpickle pybase64 cachetools uvloop py-cpuinfo partial-json-parser watchfiles msgspec
      # blake3 einops gguf diskcache lark prometheus-fastapi-instrumentator; 0.33.0 also xgrammar apache-tvm-ffi
      # llguidance; 0.9.0-0.18.0 also setproctitle loguru compressed-tensors), minus those this venv already has
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

# what every interpreter of the run needs (the worker, and the subprocess vLLM inspects a model class in), installed
# as its sitecustomize: vLLM imported on its CPU platform (the version's "+cpu" suffix is what a CPU build reports, as
# kit.derive.vllm_scan's parser run does)
SHIMS = r"""
import importlib.metadata as md
_version = md.version
md.version = lambda name: _version(name) + ("+cpu" if name == "vllm" else "")
from transformers import AutoConfig  # releases up to ~0.9 register configs (aimv2) that transformers 5 now has
_register = AutoConfig.register
AutoConfig.register = lambda *a, **k: _register(*a, **{**k, "exist_ok": True})
import torch
torch._C._cpu._is_avx512_supported = getattr(torch._C._cpu, "_is_avx512_supported", lambda: True)
"""
# runs in a child with the shims and SITE first on PYTHONPATH (`run_worker`)
WORKER = r"""
import contextlib, json, os, sys
import torch
from kit.checkpoint.safetensors_io import read_checkpoint
from vllm.config import set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.model_loader.utils import get_model_architecture
from vllm.platforms.cpu import CpuPlatform
# the CPU platform builds no MLA attention; where the release has them, a GPU backend's class stands in, and a no-op
# for its prefill kernel (the layer is built, never run; it holds no parameter of its own)
with contextlib.suppress(ImportError, AttributeError):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    import vllm.model_executor.layers.attention.mla_attention as _mla
    _mla.get_mla_prefill_backend = lambda _config: lambda **_: None
    CpuPlatform.num_compute_units = classmethod(lambda cls, *_: 1)  # the stand-in's kernel sizing (0.21.0) asks this
    _backend = CpuPlatform.get_attn_backend_cls.__func__
    CpuPlatform.get_attn_backend_cls = classmethod(
        lambda cls, *a, **k: AttentionBackendEnum.TRITON_MLA.get_path()
        if (k.get("attn_selector_config") or a[1]).use_mla
        else _backend(cls, *a, **k)
    )

# a release whose CPU platform predates V1 there (0.9.0) is told it supports V1: the engine a GPU host runs; the CUDA
# kernel its layers look up when built (never run here) is declared, as a GPU wheel's extension would
CpuPlatform.supports_v1 = classmethod(lambda cls, *_, **__: True)
if not hasattr(torch.ops._C, "silu_and_mul"):
    _kernels = torch.library.Library("_C", "FRAGMENT")
    _kernels.define("silu_and_mul(Tensor! result, Tensor input) -> ()")


def runner_refuses(cfg):
    # the GPU model runner's check after loading: EAGLE-3 asks the target for aux hidden states, which its class must
    # offer (SupportsEagle3; before that interface, set_aux_hidden_state_layers)
    if getattr(cfg.speculative_config, "method", None) != "eagle3":
        return None
    target = get_model_architecture(cfg.model_config)[0]
    try:
        from vllm.model_executor.models.interfaces import supports_eagle3
    except ImportError:
        supports_eagle3 = lambda cls: hasattr(cls, "set_aux_hidden_state_layers")
    if not supports_eagle3(target):
        return RuntimeError("Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested")


def engine_args(target, draft, flags):
    # the line's flags (less its model) through the release's own parser, the model paths made the local ones; no
    # line: EAGLE-3 with three tokens
    if flags is None:
        spec = {"method": "eagle3", "model": draft, "num_speculative_tokens": 3}
        return EngineArgs(model=target, speculative_config=spec, enforce_eager=True, skip_tokenizer_init=True)
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    args = EngineArgs.from_cli_args(make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", target, *flags]))
    spec = args.speculative_config
    spec = json.loads(spec) if isinstance(spec, str) else dict(spec or {})
    if getattr(args, "speculative_model", None):  # the older flags
        args.speculative_model = draft
    else:
        args.speculative_config = {**spec, "model": draft}
    args.enforce_eager, args.skip_tokenizer_init = True, True
    args.swap_space = 0  # GPU KV swap space in this host's memory: a limit of the host, not of the deployment
    return args


port, jobs = sys.argv[1], json.loads(open(sys.argv[2]).read())
said = lambda e: f"{type(e).__name__}: {str(e)[:300]}"
failed = lambda stage, cls, e: {"stage": stage, "class": cls, "error": said(e), "ignored": [], "unfilled": []}


def mark(params):  # every parameter filled with a marker no checkpoint tensor holds
    with torch.no_grad():
        for p in params.values():
            p.fill_(-7 if not p.dtype.is_floating_point else float("nan"))


marker = lambda p: p.isnan().all() if p.dtype.is_floating_point else (p == -7).all()
out = {}
ready = False
for job in jobs:
    draft = job["draft"]
    os.environ.update(job.get("env") or {})  # the line's own assignments (VLLM_USE_V1=1: its engine)
    try:
        cfg = engine_args(job["target"], draft, job.get("flags")).create_engine_config()
    except Exception as e:  # the launch or the draft's config refused before any class is built (startup stops here)
        out[draft] = failed("config", None, e)
        continue
    with set_current_vllm_config(cfg):
        if not ready:
            ready = True
            init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, "gloo")
            initialize_model_parallel(1, 1)
        cls = None
        try:
            if e := runner_refuses(cfg):
                raise e
            cls, arch = get_model_architecture(cfg.speculative_config.draft_model_config)
            model = cls(vllm_config=cfg, prefix="")
        except Exception as e:  # no class, or it refuses the draft's config (or this CPU cannot build its attention)
            out[draft] = failed("build", getattr(cls, "__name__", None), e)
            continue
    params = dict(model.named_parameters())
    mark(params)
    dtypes = {"I64": torch.int64, "BOOL": torch.bool}
    ckpt = read_checkpoint(draft)
    weights = [(k, torch.zeros(t.shape, dtype=dtypes.get(t.dtype, torch.bfloat16))) for k, t in ckpt.tensors.items()]
    ignored = []  # the keys passed over: those AutoWeightsLoader lets pass (where the release has that rule), and below
    from vllm.model_executor.models import utils as vutils
    can_ignore = getattr(vutils.AutoWeightsLoader, "_can_ignore_unexpected", None)
    if can_ignore:
        vutils.AutoWeightsLoader._can_ignore_unexpected = lambda self, q: can_ignore(self, q) and not ignored.append(q)
    error = None
    try:
        model.load_weights(iter(weights))
    except Exception as e:  # what vLLM's startup would stop on
        error = said(e)
    unfilled = sorted(k for k, p in params.items() if bool(marker(p)))
    for key, w in weights:  # a key loaded alone that raises nothing and fills nothing was passed over
        mark(params)
        try:
            model.load_weights(iter([(key, w)]))
        except Exception:
            continue
        if "t2d" not in key and all(bool(marker(p)) for p in params.values()):  # vLLM skips any t2d
            ignored.append(key)
    if can_ignore:
        vutils.AutoWeightsLoader._can_ignore_unexpected = can_ignore
    name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
    out[draft] = {"stage": "load", "class": name, "error": error, "ignored": sorted(set(ignored)), "unfilled": unfilled}
print("KIT-RESULT " + json.dumps(out))
"""


# what vLLM's proposer takes from the target where the draft has none (`process_eagle_weight`, `_maybe_share_lm_head`):
# the embedding, and the vocabulary map's absence (draft ids are target ids); the demo draft's head is its own vocabulary
SHARED = {"model.embed_tokens.weight", "draft_id_to_target_id"}


def variants(root: Path) -> dict[str, Path]:
    """The demo draft, and its keys as other exporters write them, each a folder (config.json, safetensors header
    over a sparse file, `corpus_cases.write_sparse_safetensors`)."""
    from corpus_cases import write_sparse_safetensors

    from kit.checkpoint.layouts import sglang_to_speculators_config
    from kit.checkpoint.safetensors_io import read_checkpoint
    from kit.hf import HFConfig
    from kit.models import embedded_dir, shipped_draft

    base = shipped_draft()
    cfg = json.loads((base / "config.json").read_text())
    ckpt = read_checkpoint(base)
    keys = {k: (t.dtype, t.shape) for k, t in ckpt.tensors.items()}
    H, hd = cfg["hidden_size"], cfg["head_dim"]

    def speculators(c: dict, layer: dict) -> dict:  # the config speculators writes, its decoder layer's fields edited
        doc = sglang_to_speculators_config(HFConfig.of(c), verifier=str(embedded_dir()))
        return doc | {"transformer_layer_config": {**doc["transformer_layer_config"], **layer}}

    norms = {f"layers.0.self_attn.{q}_norm.weight": ("BF16", (hd,)) for q in ("q", "k")}
    speculators_keys = lambda k: {n.replace("midlayer.", "layers.0."): v for n, v in k.items()}
    biases = {
        f"midlayer.self_attn.{n}_proj.bias": ("BF16", (s,)) for n, s in (("q", H), ("k", 192), ("v", 192), ("o", H))
    }
    same = lambda c: c
    # an MLA draft layer (vLLM's deepseek_eagle3 class) at the demo draft's width: q/kv low-rank projections
    mla = {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16}
    mla["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "mscale": 1.0}
    mla_config = lambda c: c | mla | {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "deepseek_v2"}
    nh, I = cfg["num_attention_heads"], cfg["intermediate_size"]
    attn = {"q_a_proj": (64, 2 * H), "q_a_layernorm": (64,), "q_b_proj": (nh * 32, 64), "kv_a_layernorm": (32,)}
    attn |= {"kv_a_proj_with_mqa": (48, 2 * H), "kv_b_proj": (nh * 32, 32), "o_proj": (H, nh * 16)}
    mla_layer = {f"midlayer.self_attn.{n}.weight": ("BF16", s) for n, s in attn.items()}
    mla_layer |= {f"midlayer.mlp.{n}_proj.weight": ("BF16", (I, H)) for n in ("gate", "up")}
    mla_layer |= {"midlayer.mlp.down_proj.weight": ("BF16", (H, I))}
    mla_keys = lambda k: {n: v for n, v in k.items() if not n.startswith("midlayer.") or "norm" in n} | mla_layer
    fc_norms = {f"fc_norm.{j}.weight": ("BF16", (H,)) for j in range(2)} | {"fc.weight": ("BF16", (H, 2 * H))}
    edits = {  # name: (config, keys)
        "specforge (midlayer.*)": (same, lambda k: k),
        "speculators (layers.0.*)": (same, speculators_keys),
        "model.-prefixed": (
            same,
            lambda k: {(n if n.startswith("lm_head") else "model." + n): v for n, v in k.items()},
        ),
        "no fc.weight": (same, lambda k: {n: v for n, v in k.items() if n != "fc.weight"}),
        "qwen3-style q_norm/k_norm": (
            same,
            lambda k: k | {n.replace("layers.0.", "midlayer."): v for n, v in norms.items()},
        ),
        "fc.bias": (same, lambda k: k | {"fc.bias": ("BF16", (H,))}),
        "with embed_tokens": (same, lambda k: k | {"embed_tokens.weight": ("BF16", (cfg["vocab_size"], H))}),
        "no lm_head": (same, lambda k: {n: v for n, v in k.items() if n != "lm_head.weight"}),
        "layers.1.* (a second layer)": (
            same,
            lambda k: k | {n.replace("midlayer.", "layers.1."): v for n, v in k.items() if n.startswith("midlayer.")},
        ),
        "attention_bias with q/k/v/o biases": (lambda c: c | {"attention_bias": True}, lambda k: k | biases),
        "speculators config, llama layer": (lambda c: speculators(c, {}), speculators_keys),
        "speculators config, qwen3 layer, q/k norms (vllm PR #43132)": (
            lambda c: speculators(c, {"model_type": "qwen3", "head_dim": hd}),
            lambda k: speculators_keys(k) | norms,
        ),
        "speculators config, llama layer, q/k norms": (
            lambda c: speculators(c, {}),
            lambda k: speculators_keys(k) | norms,
        ),
        "fc_norm, num_aux_hidden_states 2": (
            lambda c: c | {"fc_norm": True, "num_aux_hidden_states": 2},
            lambda k: k | fc_norms,
        ),
        "MLA draft (Eagle3DeepseekV3ForCausalLM)": (mla_config, mla_keys),
        "MLA draft, a q_norm it has no parameter for": (mla_config, lambda k: mla_keys(k) | norms),
        "MLA draft, no q_lora_rank": (lambda c: mla_config(c) | {"q_lora_rank": None}, mla_keys),
        "MLA draft, model_type deepseek_v3": (lambda c: mla_config(c) | {"model_type": "deepseek_v3"}, mla_keys),
    }
    out = {}
    for i, (name, (edit_config, edit_keys)) in enumerate(edits.items()):
        d = root / f"v{i}"
        d.mkdir()
        c = edit_config(dict(cfg))
        (d / "config.json").write_text(json.dumps(c))
        write_sparse_safetensors(d / "model.safetensors", edit_keys(dict(keys)), cfg)
        out[name] = d
    return out


def run_worker(site: str, port: str, jobs: list[dict]) -> dict[str, dict]:
    """WORKER over `jobs` ({"target", "draft", "flags": a launch's flags or none, "env": its assignments}) with `site`
    first on PYTHONPATH:
    {draft: vLLM's outcome}."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(json.dumps(jobs))
        f.flush()
        Path(f.name + ".d").mkdir()
        Path(f.name + ".d", "sitecustomize.py").write_text(SHIMS)
        path = os.pathsep.join([f.name + ".d", site, str(ROOT)])
        env = {**os.environ, "PYTHONPATH": path, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
        run = subprocess.run([sys.executable, "-c", WORKER, port, f.name], capture_output=True, text=True, env=env)
        shutil.rmtree(f.name + ".d")
    line = next((x for x in run.stdout.splitlines() if x.startswith("KIT-RESULT ")), None)
    if line is None:
        errors = [e[:400] for e in re.findall(r"^.*(?:Error|Exception)\b.*$", run.stderr, re.M)[-4:]]
        sys.exit("the vLLM worker failed:\n" + "\n".join(errors or [run.stderr[-3000:]]))
    return json.loads(line.split(" ", 1)[1])


def outcome(r: dict) -> str:
    """vLLM's outcome in the kit's terms: refuses (startup stops: the config, the class or its loader raised), drops
    (keys passed over), unfilled (parameters left at their initial values), loads; unbuilt: this CPU could not build
    the class (its attention, or a kernel the GPU wheel compiles for CUDA only): no verdict."""
    unfilled = [p for p in r["unfilled"] if p not in SHARED]
    if r.get("stage") == "build" and re.search(r"MLA|FlashAttention|not supported on CPU|'_C'", r["error"] or ""):
        return "unbuilt"
    return "refuses" if r["error"] else "drops" if r["ignored"] else "unfilled" if unfilled else "loads"


# doctor's codes for the same outcomes (the first that applies, in this order)
DOCTOR_OUTCOMES = {
    "draft.vllm_keys": "refuses",
    "draft.arch": "refuses",
    "launch.vllm_speculators": "refuses",
    "draft.keys_dropped": "drops",
    "draft.params_missing": "unfilled",
}


def doctor_outcome(codes: list[str]) -> str:
    return next((v for c, v in DOCTOR_OUTCOMES.items() if c in codes), "loads")


def doctor_codes(**flags) -> list[str]:
    """Doctor's error codes, run as a user runs it (its own process; each keyword its --flag, None left out)."""
    cmd = [sys.executable, "-m", "kit", "doctor", "--json"]
    for k, v in ((k, v) for k, v in flags.items() if v is not None):
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return sorted({f["code"] for f in json.loads(run.stdout)["findings"] if f["severity"] == "error"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", required=True, help="a folder with vllm==V and its pure-Python imports (see above)")
    ap.add_argument("--vllm-version", default="0.24.0", help="the release installed in --site")
    ap.add_argument("--port", default="29581", help="a free local port for the one-rank gloo group")
    a = ap.parse_args()
    from kit.models import embedded_dir

    target = embedded_dir()
    with tempfile.TemporaryDirectory(prefix="kit-vllm-loader-") as tmp:
        cases = variants(Path(tmp))
        real = run_worker(a.site, a.port, [{"target": str(target), "draft": str(d)} for d in cases.values()])
        rows = []
        for name, d in cases.items():
            r = real[str(d)]
            line = f"vllm serve {target} --speculative-config '{json.dumps({'method': 'eagle3', 'model': str(d)})}'"
            codes = doctor_codes(target=target, draft=d, vllm_version=a.vllm_version, launch=line)
            agree = None if outcome(r) == "unbuilt" else outcome(r) == doctor_outcome(codes)
            rows.append({"variant": name, "vllm": r, "doctor": codes, "agree": agree})
    judged = [r for r in rows if r["agree"] is not None]
    doc = {"vllm": a.vllm_version, "rows": rows, "agree": sum(r["agree"] for r in judged), "of": len(judged)}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
