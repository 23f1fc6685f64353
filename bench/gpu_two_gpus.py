"""Two GPUs for real: `kit env` facts, the NCCL all-reduce smoke test (defaults vs the seed's NCCL variables),
and SGLang `--tp-size 2` through the kit's lifecycle with and without `--disable-custom-all-reduce`.

Runs on a host with >= 2 GPUs, the offline SGLang bundle on PYTHONPATH and the repository importable. The
tensor-parallel target is a small Llama-shaped model with RANDOM weights (8 layers, hidden 512, 8 query / 4 KV
heads, so heads split over 2 GPUs) built here with transformers, using the SmolLM2 tokenizer files in
`--tokenizer` (a folder with tokenizer.json and its config); its draft is a random EAGLE-3 head
(kit.checkpoint.random_draft). Random weights exercise the lifecycle and the collectives, not acceptance.

    python bench/gpu_two_gpus.py --tokenizer TOKENIZER_DIR --work /tmp/w --out OUT/two_gpus

Prints one JSON line last; writes facts, smoke results and per-launch logs under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _run import emit, write_json  # noqa: E402
from gpu_sglang import MULTICAST_OFF, Row, lint_findings, log_events, measure, stop, wait  # noqa: E402

SEED_NCCL = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
TP_DIMS = {
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
# log lines that say what the tensor-parallel communicators did
COMM_PAT = re.compile(
    r"custom.?all.?reduce|CustomAllreduce|custom_ar|NCCL version|NCCL INFO (Channel \d+/\d+ : 0\[0\] -> 1\[1\] via|"
    r"comm .* nRanks|Using network|P2P/)|symm|pynccl|NVLS|all_reduce",
    re.I,
)


def kit_env(out: Path, launch: str | None, tag: str, env_vars: dict) -> dict:
    """`python -m kit env --allreduce --launch CMD --record FACTS --json` (the CLI, as a user runs it); if the CLI
    cannot run, the same pieces in-process: kit.env.machine.probe_machine -> facts, kit.env.multigpu.allreduce_smoke."""
    facts = out / f"facts_{tag}.json"
    cmd = [sys.executable, "-m", "kit", "env", "--allreduce", "--record", str(facts), "--json", "--timeout", "180"]
    if launch:
        cmd += ["--launch", launch]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env={**os.environ, **MULTICAST_OFF})
    (out / f"kit_env_{tag}.txt").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
    try:
        doc = json.loads(last)
    except json.JSONDecodeError:
        doc = {"unparsed": last[-500:]}
    res = {"rc": p.returncode, "wall_s": round(time.time() - t0, 1), "doc": doc, "facts_file": str(facts)}
    if "Traceback" in p.stderr or not doc or "unparsed" in doc:  # the CLI itself failed (not "errors found")
        from kit.env.machine import probe_machine, write_facts
        from kit.env.multigpu import allreduce_smoke

        if not facts.exists():
            write_facts(probe_machine(timeout=120), facts)
        res["fallback_smoke"] = allreduce_smoke(nprocs=2, launch_env=env_vars, timeout_s=180)
    return res


def build_target(tok_dir: Path, dest: Path) -> Path:
    """A random-weight Llama with TP-divisible heads, bf16, plus the tokenizer files given."""
    if (dest / "config.json").exists():
        return dest
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**TP_DIMS)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(dest)
    for f in tok_dir.iterdir():  # tokenizer.json, tokenizer_config.json, chat_template.jinja
        if f.is_file():
            (dest / f.name).write_bytes(f.read_bytes())
    return dest


def build_draft(dest: Path) -> Path:
    from kit.checkpoint.random_draft import write_random_draft

    if not (dest / "config.json").exists():
        write_random_draft(dest, layout="sglang", target_config=TP_DIMS, aux_layer_ids=[1, 3, 5], seed=0)
    return dest


def predictions(facts: dict, argv: list[str], env: dict) -> list[dict]:
    from kit.env.multigpu import custom_allreduce_findings
    from kit.env.nccl import nccl_findings

    fs = custom_allreduce_findings(facts, 2, argv) + nccl_findings(env, facts)
    return [f.to_dict() for f in fs]


def tp_launch(name, target, draft, port, out, extra, env_extra, facts, texts) -> dict:
    from gpu_sglang import BASE_EXTRA

    from kit.serving.launch import LaunchSpec
    from kit.serving.process import ServerProcess
    from kit.sglang.params import SpecParams

    log_file = out / f"tp2_{name}.log"
    env = {**MULTICAST_OFF, "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1", **env_extra}
    spec = LaunchSpec(
        model_path=str(target),
        tp_size=2,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft),
        **SpecParams(3, 1, 4).given(),
        attention_backend="triton",
        mem_fraction_static=0.3,
        port=port,
        host="127.0.0.1",
        python=sys.executable,
        log_file=str(log_file),
        extra_args=list(BASE_EXTRA) + ["--disable-cuda-graph", "--log-level", "info"] + list(extra),
        env=env,
    )
    row = Row(f"tp2_{name}", "random", "EAGLE3", (3, 1, 4), f"TP=2 {name}")
    h = {"row": row, "spec": spec, "t_launch": time.time(), "lint": lint_findings(spec, "sglang")}
    h["server"] = ServerProcess.from_spec(spec, grace=20).start()
    res = {
        "name": name,
        "command": spec.command(),
        "kit_predictions": predictions(facts, spec.argv(), spec.env),
        "lint_real_parser": h["lint"],
    }
    ok = wait(h, 420)
    res["started"], res["startup_s"], res["start_error"] = ok, h.get("startup_s"), h.get("error")
    if ok:
        try:
            m = measure(h, texts, 64, 4)
            res["served"] = sum(1 for r in m["records"] if r.get("ok"))
            res["tok_s"] = m["output_tok_per_s"]
            res["acceptance"] = m["acceptance"]
            res["sample"] = [(r.get("error") or "")[:200] for r in m["records"][:2]]
        except Exception as e:
            res["measure_error"] = f"{type(e).__name__}: {e}"
    res["stop"] = stop(h)
    time.sleep(2)
    left = subprocess.run(["pgrep", "-f", "sglang"], capture_output=True, text=True).stdout.split()
    res["sglang_processes_after_stop"] = len(left)
    lines = log_file.read_text(errors="replace").splitlines() if log_file.exists() else []
    res["comm_log_lines"] = [ln[:300] for ln in lines if COMM_PAT.search(ln)][:60]
    res["log"] = log_events(str(log_file))
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--work", default="/tmp/w")
    p.add_argument("--out", required=True)
    p.add_argument("--port", type=int, default=32000)
    p.add_argument("--skip-env", action="store_true")
    p.add_argument("--launches", nargs="*", default=["default", "no_custom_ar", "seed_nccl"])
    a = p.parse_args(argv)
    os.environ.update(MULTICAST_OFF)
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    doc: dict = {}
    launch_seed = " ".join(f"{k}={v}" for k, v in SEED_NCCL.items()) + " python -m sglang.launch_server --tp-size 2"
    if not a.skip_env:
        doc["env_default"] = kit_env(out, "python -m sglang.launch_server --tp-size 2", "default", {})
        doc["env_seed_nccl"] = kit_env(out, launch_seed, "seed_nccl", dict(SEED_NCCL))
        write_json(out / "summary.json", doc)
    facts_path = out / "facts_default.json"
    facts = json.loads(facts_path.read_text()) if facts_path.exists() else {}
    if a.launches:
        t0 = time.time()
        target = build_target(Path(a.tokenizer), work / "tp_target")
        draft = build_draft(work / "tp_draft")
        doc["build_s"] = round(time.time() - t0, 1)
    texts = ["Write a haiku about GPUs.", "What is 17 * 23?", "def fib(n):", "Explain NCCL in one sentence."]
    variants = {
        "default": ([], {}),
        "no_custom_ar": (["--disable-custom-all-reduce"], {}),
        "seed_nccl": ([], dict(SEED_NCCL)),
    }
    for i, name in enumerate(a.launches):
        extra, env_extra = variants[name]
        doc[f"tp2_{name}"] = tp_launch(name, target, draft, a.port + i, out, extra, env_extra, facts, texts)
        write_json(out / "summary.json", doc)
        print(f"[tp2] {name}: started={doc[f'tp2_{name}']['started']}", flush=True)
    write_json(out / "summary.json", doc)
    short = {
        k: (
            {kk: v.get(kk) for kk in ("started", "startup_s", "served", "tok_s", "sglang_processes_after_stop")}
            if k.startswith("tp2")
            else {"rc": v.get("rc")}
            if isinstance(v, dict)
            else v
        )
        for k, v in doc.items()
    }
    emit(short)
    return 0


if __name__ == "__main__":
    sys.exit(main())
