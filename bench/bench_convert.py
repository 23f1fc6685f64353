"""Benchmark: `kit convert` of a ~2 GB speculators-layout draft into the SGLang layout, vs `cp -r`.

The draft is Llama-3.1-8B-shaped (hidden 4096, vocab 128256, draft vocab 32000, bf16; largest
tensor: embed_tokens, 1.05 GB), written once with random bytes (the converter copies bytes and
never interprets weights). Each run is a fresh process timed until `sync` returns, its peak RSS its own
(`bench/_run.py`).
Target: peak RSS <= largest tensor + 300 MB. Throughput is reported next to `cp -r` of the same
files (the converter also hashes every tensor twice: while writing and when re-verifying).

    python bench/bench_convert.py [--dir /tmp/kit-bench-convert] [--repeats 2]

Prints one JSON document (last line of stdout).
"""

import argparse
import json
import os
import shutil
import sys
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit, run_timed  # noqa: E402

from kit.checkpoint.safetensors_io import WriteEntry, write_stream  # noqa: E402


def rand_chunks(nbytes: int, chunk: int = 8 << 20):
    def gen():
        left = nbytes
        while left:
            n = min(chunk, left)
            yield os.urandom(n)
            left -= n

    return gen


def make_draft(d: Path) -> dict:
    H, V, Vd, I_, nh, nkv, hd = 4096, 128256, 32000, 14336, 32, 8, 128
    shapes = {
        "embed_tokens.weight": (V, H),
        "fc.weight": (H, 3 * H),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
        "layers.0.self_attn.q_proj.weight": (nh * hd, 2 * H),
        "layers.0.self_attn.k_proj.weight": (nkv * hd, 2 * H),
        "layers.0.self_attn.v_proj.weight": (nkv * hd, 2 * H),
        "layers.0.self_attn.o_proj.weight": (H, nh * hd),
        "layers.0.mlp.gate_proj.weight": (I_, H),
        "layers.0.mlp.up_proj.weight": (I_, H),
        "layers.0.mlp.down_proj.weight": (H, I_),
        "layers.0.input_layernorm.weight": (H,),
        "layers.0.post_attention_layernorm.weight": (H,),
        "layers.0.hidden_norm.weight": (H,),
    }
    entries = []
    for n, s in shapes.items():
        nb = 2
        for x in s:
            nb *= x
        entries.append(WriteEntry(n, "BF16", s, rand_chunks(nb)))
    kept = sorted(set(range(0, V, V // Vd)))[:Vd]
    d2t = array("q", [k - i for i, k in enumerate(kept)]).tobytes()
    t2d = bytearray(V)
    for k in kept:
        t2d[k] = 1
    entries += [WriteEntry("d2t", "I64", (Vd,), lambda: [d2t]), WriteEntry("t2d", "BOOL", (V,), lambda: [bytes(t2d)])]
    d.mkdir(parents=True, exist_ok=True)
    write_stream(d / "model.safetensors", entries, {"format": "pt"})
    tl = {
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": I_,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "vocab_size": V,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    }
    cfg = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "transformer_layer_config": tl,
        "draft_vocab_size": Vd,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
        "norm_before_residual": False,
        "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": None}},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return {"largest_tensor_bytes": V * H * 2}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/kit-bench-convert")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    root = Path(a.dir)
    shutil.rmtree(root, ignore_errors=True)
    src = root / "src"
    info = make_draft(src)
    # the target's config gives the aux layer-id translation (a Llama-3.1-8B-shaped, 32-layer target)
    (root / "target").mkdir()
    (root / "target" / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096})
    )
    nbytes = sum(p.stat().st_size for p in src.iterdir())
    conv, cp, cpn = [], [], []
    for _i in range(a.repeats):
        for d in (root / "out", root / "cp", root / "cpn"):
            shutil.rmtree(d, ignore_errors=True)
        os.sync()  # no run pays for another's dirty pages
        cp.append(run_timed(["cp", "-r", src, root / "cp"], sync=True))
        # coreutils 9 cp uses copy_file_range, which this VM's disk may offload: also time a byte copy
        cpn.append(run_timed(["cp", "--reflink=never", "-r", src, root / "cpn"], sync=True))
        argv = [src, root / "out", "--to", "sglang", "--target", root / "target"]
        conv.append(run_timed([sys.executable, "-m", "kit", "convert", *argv], sync=True))
    best_c, best_cp, best_cpn = (min(t.seconds for t in runs) for runs in (conv, cp, cpn))
    rss = max(t.peak_rss_mb for t in conv)
    limit = info["largest_tensor_bytes"] / 2**20 + 300
    out = {
        "bench": "convert",
        "machine": f"{os.cpu_count()} CPU",
        "bytes": nbytes,
        "largest_tensor_mb": round(info["largest_tensor_bytes"] / 2**20, 1),
        "convert_s": [round(t.seconds, 3) for t in conv],
        "cp_s": [round(t.seconds, 3) for t in cp],
        "convert_mb_per_s": round(nbytes / 2**20 / best_c, 1),
        "cp_mb_per_s": round(nbytes / 2**20 / best_cp, 1),
        "slowdown_vs_cp": round(best_c / best_cp, 2),
        "cp_byte_copy_s": [round(t.seconds, 3) for t in cpn],
        "cp_byte_copy_mb_per_s": round(nbytes / 2**20 / best_cpn, 1),
        "slowdown_vs_byte_copy": round(best_c / best_cpn, 2),
        "convert_peak_rss_mb": round(rss, 1),
        "rss_limit_mb": round(limit, 1),
        "pass_rss": rss <= limit,
    }
    shutil.rmtree(root, ignore_errors=True)
    emit(out)


if __name__ == "__main__":
    main()
