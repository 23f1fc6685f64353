"""Benchmark: `kit inspect --json` on a synthetic ~1T-parameter, 64-shard, ~70k-tensor checkpoint vs a floor.

The checkpoint is made of sparse files (headers only, data regions are holes: ~2 TB declared,
a few MB on disk), shaped like a Kimi-K2-class MoE (61 layers, 384 experts, hidden 7168). The
floor is a plain Python script that reads each shard's 8-byte length and header, parses the JSON
and prints the same listing (name, dtype, shape, file) as JSON. Both run as fresh processes
(interpreter start included), stdout to a file; peak RSS that child's own (`bench/_run.py`).
Targets: kit <= 1.5x floor wall time, peak RSS <= 200 MB.

    python bench/bench_inspect.py [--dir /tmp/kit-bench-1t] [--repeats 5]

Prints one JSON document (last line of stdout).
"""

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
from pathlib import Path

from _run import emit, run_timed

FLOOR = r"""
import json, struct, sys, os
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
out = []
for shard in sorted(set(idx["weight_map"].values())):
    p = os.path.join(d, shard)
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    for name, e in h.items():
        out.append({"name": name, "dtype": e["dtype"], "shape": e["shape"], "file": p})
print(json.dumps(out))
"""


def make_checkpoint(root: Path, shards: int = 64) -> dict:
    H, I_, E, L, V = 7168, 2048, 384, 61, 163840
    tensors = [("model.embed_tokens.weight", [V, H]), ("lm_head.weight", [V, H]), ("model.norm.weight", [H])]
    for l in range(L):
        p = f"model.layers.{l}"
        tensors += [
            (f"{p}.input_layernorm.weight", [H]),
            (f"{p}.post_attention_layernorm.weight", [H]),
            (f"{p}.self_attn.q_a_proj.weight", [1536, H]),
            (f"{p}.self_attn.q_b_proj.weight", [64 * 192, 1536]),
            (f"{p}.self_attn.kv_a_proj_with_mqa.weight", [576, H]),
            (f"{p}.self_attn.kv_b_proj.weight", [64 * 256, 512]),
            (f"{p}.self_attn.o_proj.weight", [H, 64 * 128]),
        ]
        if l == 0:
            tensors += [
                (f"{p}.mlp.{n}.weight", s)
                for n, s in (("gate_proj", [18432, H]), ("up_proj", [18432, H]), ("down_proj", [H, 18432]))
            ]
            continue
        tensors.append((f"{p}.mlp.gate.weight", [E, H]))
        for e in range(E):
            tensors += [
                (f"{p}.mlp.experts.{e}.gate_proj.weight", [I_, H]),
                (f"{p}.mlp.experts.{e}.up_proj.weight", [I_, H]),
                (f"{p}.mlp.experts.{e}.down_proj.weight", [H, I_]),
            ]
    root.mkdir(parents=True, exist_ok=True)
    per = -(-len(tensors) // shards)
    wm, params = {}, 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        doc, pos = {"__metadata__": {"format": "pt"}}, 0
        for tname, shape in tensors[s * per : (s + 1) * per]:
            n = 1
            for d in shape:
                n *= d
            doc[tname] = {"dtype": "BF16", "shape": shape, "data_offsets": [pos, pos + 2 * n]}
            pos += 2 * n
            params += n
            wm[tname] = name
        raw = json.dumps(doc).encode()
        with open(root / name, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + pos)  # sparse: the data region is a hole
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return {"tensors": len(tensors), "params": params, "shards": shards}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/kit-bench-1t")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    root = Path(a.dir)
    shutil.rmtree(root, ignore_errors=True)
    info = make_checkpoint(root)
    floor = root.parent / "kit_bench_floor.py"
    floor.write_text(FLOOR)
    repo = Path(__file__).resolve().parents[1]
    env_py = sys.executable
    runs = {"floor": [], "kit": []}
    for _ in range(a.repeats):  # interleaved so both see the same cache state
        runs["floor"].append(run_timed([env_py, floor, root], stdout=root.parent / "floor.out"))
        # `kit inspect` exits 1 when a finding is an error: the listing is written all the same
        kit = [env_py, "-m", "kit", "inspect", root, "--json"]
        runs["kit"].append(run_timed(kit, stdout=root.parent / "kit.out", ok=(0, 1)))
    listing = json.loads((root.parent / "floor.out").read_text())
    kit_doc = json.loads((root.parent / "kit.out").read_text().strip().splitlines()[-1])
    assert len(kit_doc["tensors"]) == len(listing) == info["tensors"], "listings differ"
    res = {
        k: {
            "wall_s_median": statistics.median(t.seconds for t in v),
            "wall_s_min": min(t.seconds for t in v),
            "peak_rss_mb": max(t.peak_rss_mb for t in v),
        }
        for k, v in runs.items()
    }
    ratio = res["kit"]["wall_s_median"] / res["floor"]["wall_s_median"]
    disk = sum(os.stat(p).st_blocks * 512 for p in root.iterdir())
    out = {
        "bench": "inspect",
        "machine": f"{os.cpu_count()} CPU",
        **info,
        "declared_bytes": sum(p.stat().st_size for p in root.iterdir()),
        "disk_bytes": disk,
        "floor": res["floor"],
        "kit": res["kit"],
        "ratio_kit_over_floor": round(ratio, 3),
        "target_ratio": 1.5,
        "target_rss_mb": 200,
        "pass": ratio <= 1.5 and res["kit"]["peak_rss_mb"] <= 200,
        "cwd": str(repo),
    }
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
        for f in (floor, root.parent / "floor.out", root.parent / "kit.out"):
            f.unlink(missing_ok=True)
    emit(out)


if __name__ == "__main__":
    main()
