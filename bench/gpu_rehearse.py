"""`kit rehearse` over the families, the seed's setup and its fix, the corpus and the built fault classes.

Runs on the GPU host with SGLang importable (the kit's bundle installed on PYTHONPATH: pass `--bundle`), the
repository on PYTHONPATH. Each case is materialised the way tests/test_corpus.py does it (real configs, sparse
safetensors with each exporter's key names and shapes; the miniature then gets real random tensors), then
`kit.rehearse.rehearse` builds the miniatures, runs real SGLang, and compares with `kit doctor` at the same
release. `--dry-run` does everything but start SGLang (works on a CPU machine).

    python bench/gpu_rehearse.py --work /tmp/rh --version 0.5.17 --bundle [--only seed seed-fix llama ...]
    python bench/gpu_rehearse.py --work /tmp/rh --dry-run            # CPU: miniatures and plans only

Prints one JSON line per case ({"case", "rehearsable", "wall_s", "started", "table", ...}) and a summary JSON
line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_corpus import (  # noqa: E402
    build_case,
    load_cases,
    load_classes,
    load_configs,
    rehearsable,
    weight_spec,
    write_sparse_safetensors,
)

LAUNCH = (
    "python3 -m sglang.launch_server --model-path /models/target --tp-size {tp} --speculative-algorithm {alg} "
    "--speculative-draft-model-path /models/draft --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --mem-fraction-static 0.85 --context-length 2048"
)  # 2048: within every family draft's trained context, so a healthy family shows the speculative path run
# six target families (+ the MLA draft), each with a draft trained for it (configs from tests/corpus)
FAMILIES = {
    "llama": ("target/llama-3.1-8b-instruct.json", "draft/specforge-llama3-8B-eagle3.json", "midlayer"),
    "qwen3": ("target/qwen3-8b.json", "draft/specforge-qwen3-8b-eagle3.json", "midlayer"),
    "qwen3-moe": ("target/qwen3-30b-a3b.json", "draft/specforge-qwen3-30B-A3B-eagle3.json", "midlayer"),
    "gpt-oss": ("target/gpt-oss-120b.json", "draft/specforge-gpt-oss-120B-eagle3.json", "midlayer"),
    "deepseek-v3": ("target/deepseek-v3.json", "draft/specforge-deepseek-v3-671b-eagle3.json", "midlayer"),
    "kimi-mla": ("target/kimi-k2.5.json", "draft/kimi-k2.6-eagle3.1-mla.json", "kimi_mla"),
    "llama4-newer": (
        "target/llama-4-scout-17b-16e-instruct.json",
        "draft/specforge-llama4-scout-17B-16E-eagle3.json",
        "midlayer",
    ),
}
SEED_LAUNCH = (ROOT / "kit" / "tests" / "data" / "seed_launch.sh").read_text()


def family_case(name: str, tp: int) -> dict:
    target, draft, layout = FAMILIES[name]
    return {
        "id": name,
        "target": target,
        "draft": {"config": draft, "weights": layout},
        "launch": LAUNCH.format(tp=tp, alg="EAGLE3"),
        "truth": {"verdict": "healthy"},
    }


def seed_dirs(root: Path, fixed: bool) -> dict:
    """The seed: Kimi-K2.5 target, a speculators-layout draft (layers.0.*, speculators config), its launch with
    --speculative-algorithm EAGLE and the NCCL variables; the fix: the SGLang layout `kit convert` writes, EAGLE3."""
    from kit.checkpoint.layouts import sglang_to_speculators_config

    kimi = load_configs()["target/kimi-k2.5.json"]["config"]
    sg = load_configs()["draft/specforge-kimi-k25-eagle3.json"]["config"]
    (root / "target").mkdir(parents=True, exist_ok=True)
    (root / "target" / "config.json").write_text(json.dumps(kimi))
    d = root / "draft"
    d.mkdir(exist_ok=True)
    spec = weight_spec(sg, "midlayer")
    if fixed:
        cfg = sg
    else:
        cfg = sglang_to_speculators_config(sg, None, kimi["architectures"])
        spec = {k.replace("midlayer.", "layers.0.", 1): v for k, v in spec.items()}
    (d / "config.json").write_text(json.dumps(cfg))
    write_sparse_safetensors(d / "model.safetensors", spec, sg)
    launch = (
        SEED_LAUNCH
        if not fixed
        else SEED_LAUNCH.replace("--speculative-algorithm EAGLE ", "--speculative-algorithm EAGLE3 ")
    )
    (root / "launch.sh").write_text(launch)
    return {"target": str(root / "target"), "draft": str(d), "launch_file": str(root / "launch.sh")}


def run_one(case_id: str, args_: dict, opts, rehearsable_: str) -> dict:
    from kit.rehearse import rehearse
    from kit.serving.rehearsal import RehearsalConfig

    out = Path(opts.work) / case_id / "rehearsal"
    row = {"case": case_id, "rehearsable": rehearsable_}
    if rehearsable_ != "yes":
        return row
    cfg = RehearsalConfig(
        target=args_["target"],
        draft=args_["draft"],
        launch_file=args_["launch_file"],
        out=str(out),
        dry_run=opts.dry_run,
        sglang_version=opts.version,
        bundle=opts.bundle,
        timeout=opts.timeout,
    )
    t0 = time.monotonic()
    try:
        rep = rehearse(cfg)
    except Exception as e:  # noqa: BLE001 — one case's failure is a row, not the end of the run
        row.update(error=f"{type(e).__name__}: {e}")
        return row
    row["wall_s"] = round(time.monotonic() - t0, 1)
    row["doctor"] = [d["code"] + ":" + d["severity"] for d in rep["doctor"]]
    row["plan_changes"] = [c["flag"] for c in rep["plan"]["changes"]]
    if "facts" in rep:
        row.update(facts=rep["facts"], table=rep["table"], observed=rep["observed"])
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True)
    p.add_argument("--version", default=None, help="SGLang release (default: the installed one)")
    p.add_argument("--bundle", action="store_true", help="SGLang is the kit's bundle: add its launch flags")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--tp", type=int, default=1, help="TP of the family launches")
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument("--only", nargs="*", default=None, help="case ids to run (default: all)")
    opts = p.parse_args()
    work = Path(opts.work)
    cases: list[tuple[str, dict, str]] = []
    for name in ("seed", "seed-fix"):
        root = work / name / "in"
        cases.append((name, seed_dirs(root, fixed=name == "seed-fix"), "yes"))
    for name in FAMILIES:
        c = family_case(name, opts.tp)
        root = work / name / "in"
        root.mkdir(parents=True, exist_ok=True)
        cases.append((name, build_case(c, root), rehearsable(c)))
    for c in load_cases() + load_classes():
        root = work / c["id"] / "in"
        root.mkdir(parents=True, exist_ok=True)
        if not any(root.iterdir()):
            a = build_case(c, root)
        else:
            a = {"target": str(root / "target"), "draft": str(root / "draft"), "launch_file": str(root / "launch.sh")}
        if c.get("launch") and (c.get("draft") or {}).get("weights"):
            cases.append((c["id"], a, rehearsable(c)))
        else:
            cases.append((c["id"], a, "no: the case has no draft weights or no launch"))
    rows = []
    for cid, a, reh in cases:
        if opts.only and cid not in opts.only:
            continue
        row = run_one(cid, a, opts, reh)
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    ran = [r for r in rows if "table" in r]
    summary = {
        "cases": len(rows),
        "rehearsed": len(ran),
        "started": sum(1 for r in ran if r["facts"]["started"]),
        "disagreements": {
            r["case"]: [t for t in r["table"] if t["verdict"] in ("refuted", "new")]
            for r in ran
            if any(t["verdict"] in ("refuted", "new") for t in r["table"])
        },
        "max_wall_s": max((r["wall_s"] for r in ran), default=None),
        "gpu_memory_returned": all(r["facts"]["gpu_memory_returned"] is not False for r in ran),
    }
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
