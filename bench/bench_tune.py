"""Benchmark: `kit tune` against the blind grid (`kit sweep`) on the same engine, grid, batch sizes and prompts.

Why: tune must name the grid's best point per batch size (or one inside its interval), "no speculation" included,
in a fraction of the grid's wall time. Both verbs run as fresh processes, one after the other; then per batch size:
tune's answer, the grid's best point (its speedup per request over the baseline's answer to the same prompt, the
median and its bootstrap interval: `kit.measure.metrics.paired_speedup`, judged by the same rule as tune's,
`kit.tune.predict.best`), whether they agree, and both wall times with their ratio. Prints one JSON document
(last line).

    python bench/bench_tune.py                                            # CPU reference server, embedded SmolLM2
    python bench/bench_tune.py --engine sglang --launch "python -m sglang.launch_server --model-path T \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path D" --batch-size 1 4 16 64 --num-prompts 64
    python bench/bench_tune.py --dummy-target 7b --batch-size 1 4 16    # the step costs alone, on a GPU host

A grid too long for one sitting runs in parts: `--only grid --grid-part-s S` stops it after S seconds and the same
command continues it; the wall times add up in walls.json. Until the grid is whole, the comparison covers the points
it measured, and its whole wall (`grid_s_whole`) is its pace per server so far times its servers (`grid_complete`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _run import emit, load_avg, run_timed

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_LAUNCH = (
    "python -m sglang.launch_server --model-path embedded --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path kit/assets/demo_draft"
)


def timed(argv: list[str], log: Path, interrupt_after: float | None = None) -> float:
    """Run a kit verb to its end, or until SIGINT after `interrupt_after` s, from the checkout's top (its stdout,
    then its stderr, in `log`); its wall seconds."""
    t = run_timed([sys.executable, "-m", "kit", *argv], stdout=log, cwd=ROOT, ok=None, interrupt_after=interrupt_after)
    with open(log, "a") as f:
        f.write(t.stderr)
    if t.returncode not in (0, 1) and not interrupt_after:
        raise RuntimeError(f"kit {argv[0]} exited {t.returncode}: see {log}")
    return round(t.seconds, 1)


def grid_answers(sweep_dir: Path, batch_sizes: list[int]) -> dict[str, dict]:
    """Per batch size, every grid point's paired per-request speedup over the baseline, and the best one."""
    from kit.measure.bench import read_records
    from kit.measure.metrics import paired_ratios, paired_speedup
    from kit.tune.predict import best

    out = {}
    for b in batch_sizes:
        base = read_records(sweep_dir / "points" / f"baseline_c{b}" / "records.jsonl")
        rows = {}
        for d in sorted((sweep_dir / "points").glob(f"*_c{b}")):
            label = d.name.rsplit("_c", 1)[0]
            if label != "baseline":
                p = paired_speedup(paired_ratios(base + read_records(d / "records.jsonl"), "baseline", label))
                rows[label] = {"median": p["median"], "ci95": [p["median_low"], p["median_high"]], "inconclusive": None}
        out[str(b)] = {"points": rows, "best": best(rows)}
    return out


def grid_flags(a: argparse.Namespace) -> list[str]:
    """The grid's three flags, as both verbs take them."""
    names = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    return [x for n in names for x in (f"--{n.replace('_', '-')}", *map(str, getattr(a, n)))]


def grid_done(sweep_dir: Path, a: argparse.Namespace) -> bool:
    """Whether the grid has measured every (point, batch size)."""
    from kit.measure.sweep import grid, missing

    points = grid(a.speculative_num_steps, a.speculative_eagle_topk, a.speculative_num_draft_tokens)
    return not any(missing(sweep_dir, points, a.batch_size).values())


def agree(tune_best: dict, grid: dict) -> bool:
    """Tune names the grid's answer: the same point, or both no speculation; or a point whose grid speedup lies
    inside the interval of the grid's best by median, where that median is above 1 (a grid whose best pays by its
    median but whose interval reaches 1 says "no speculation": it could not tell that point from 1, tune did)."""
    want, got = grid["best"]["point"], tune_best.get("point")
    if want == got:
        return True
    points = grid["points"]
    if got is None or got not in points:
        return False
    top = max(points, key=lambda k: points[k]["median"])
    lo, hi = points[top]["ci95"]
    return lo <= points[got]["median"] <= hi and points[top]["median"] > 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="reference", choices=["reference", "sglang"])
    ap.add_argument("--launch", default=REFERENCE_LAUNCH)
    ap.add_argument("--batch-size", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--speculative-num-steps", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--speculative-eagle-topk", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--speculative-num-draft-tokens", type=int, nargs="+", default=[0])
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--chat-template", default="embedded", help="'' for none (a GPU host's own target: its dir)")
    ap.add_argument("--out", default=None, help="folder for both runs (default: a temporary one)")
    ap.add_argument("--only", choices=["tune", "grid", "compare"], default=None,
                    help="run one side into --out (its wall time kept there), or neither; the comparison once both are in")  # fmt: skip
    ap.add_argument("--grid-part-s", type=float, default=None,
                    help="stop the grid after this long; the same command again continues it, the walls add up")  # fmt: skip
    ap.add_argument("--dummy-target", default=None, choices=["360m", "1.7b", "3b", "7b"],
                    help="the cost check instead: tune alone on a target of these shapes with dummy weights and a "
                         "random draft of its width (bench/gpu_breakeven.py builds both), every accept length 1")  # fmt: skip
    a = ap.parse_args()
    if a.dummy_target:
        return cost_check(a)

    out = Path(a.out or tempfile.mkdtemp(prefix="bench_tune-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    n = max(a.num_prompts, *a.batch_size)  # tune fills each batch; the grid gets as many requests
    grid = grid_flags(a)
    common = ["--engine", a.engine, "--launch", a.launch, *grid, "--max-new-tokens", str(a.max_new_tokens)]
    common += ["--chat-template", a.chat_template] if a.chat_template else []
    walls_file = out / "walls.json"
    walls = json.loads(walls_file.read_text()) if walls_file.exists() else {}
    walls.setdefault("load_avg_before", load_avg())
    if a.only in (None, "tune"):
        walls["tune_s"] = timed(["tune", *common, "--batch-size", *map(str, a.batch_size), "--num-prompts", str(n),
                                 "--out-dir", str(out / "tune")], out / "tune.log")  # fmt: skip
        walls_file.write_text(json.dumps(walls))
    if a.only in (None, "grid") and not grid_done(out / "sweep", a):
        parts = walls.get("grid_parts_s", [])
        part = timed(["sweep", *common, "--concurrency", *map(str, a.batch_size), "--num-prompts", str(n),
                      "--no-progress", "--out-dir", str(out / "sweep")], out / f"sweep{len(parts)}.log",
                     a.grid_part_s)  # fmt: skip
        walls["grid_parts_s"] = [*parts, part]
        walls["grid_s"] = round(sum(walls["grid_parts_s"]), 1)
        walls_file.write_text(json.dumps(walls))
    if not {"tune_s", "grid_s"} <= set(walls):
        emit({"engine": a.engine, "out": str(out), **walls})
        return
    tune_s, grid_s, load_before = walls["tune_s"], walls["grid_s"], walls["load_avg_before"]
    doc = json.loads((out / "tune" / "tune.json").read_text())
    answers = grid_answers(out / "sweep", a.batch_size)
    per_batch = {}
    for b in map(str, a.batch_size):
        t = doc.get("best", {}).get(b, {})
        per_batch[b] = {"tune": {"point": t.get("point"), "verdict": t.get("verdict"),
                                 "measured": sorted(doc.get("measured", {}).get(b, {}))},
                        "grid": {"point": answers[b]["best"]["point"], "verdict": answers[b]["best"]["verdict"]},
                        "agree": agree(t, answers[b])}  # fmt: skip
    # a grid stopped part way: the answers over the points it measured, its wall at its pace per server so far
    points = len(doc["predicted"][str(a.batch_size[0])])
    servers = len({d.name.rsplit("_c", 1)[0] for d in (out / "sweep" / "points").glob("*_c*")})
    complete = grid_done(out / "sweep", a)
    whole = grid_s if complete else round(grid_s * (points + 1) / max(servers, 1), 1)
    emit({"engine": a.engine, "batch_sizes": a.batch_size, "grid_points": points, "grid_servers_run": servers,
          "grid_complete": complete, "per_batch": per_batch, "agree_all": all(r["agree"] for r in per_batch.values()),
          "tune_s": tune_s, "grid_s": grid_s, "grid_s_whole": whole, "tune_over_grid": round(tune_s / whole, 3),
          "load_avg_before": load_before, "load_avg_after": load_avg(), "out": str(out)})  # fmt: skip


def cost_check(a: argparse.Namespace) -> None:
    """The step-cost side of tune's prediction on a larger target: dummy weights accept nothing (every accept
    length 1, every request its full length), so a point's predicted speedup is its step costs alone, and each
    measured point against it checks them. Per batch size: the calibration's costs, then predicted vs measured."""
    from gpu_breakeven import Plan, build_dirs

    out = Path(a.out or tempfile.mkdtemp(prefix="bench_tune_cost-")).resolve()
    d = build_dirs(Plan(sizes=(a.dummy_target,)), out / "models")[a.dummy_target]
    launch = (f"python -m sglang.launch_server --model-path {d['target']} --load-format dummy --speculative-algorithm "
              f"EAGLE3 --speculative-draft-model-path {d['draft']} --speculative-draft-load-format auto "
              f"--cuda-graph-max-bs {max(a.batch_size)}")  # fmt: skip
    grid = grid_flags(a)
    tune_s = timed(["tune", "--engine", "sglang", "--launch", launch, *grid, "--batch-size", *map(str, a.batch_size),
                    "--num-prompts", str(max(a.num_prompts, *a.batch_size)), "--max-new-tokens", str(a.max_new_tokens),
                    "--chat-template", d["target"], "--accept-length", "1", "--ignore-eos",
                    "--out-dir", str(out / "tune")], out / "tune.log")  # fmt: skip
    doc = json.loads((out / "tune" / "tune.json").read_text())
    per_batch = {
        b: {lab: {k: r[k] for k in ("predicted", "median", "ci95", "accept_length")} for lab, r in rows.items()}
        for b, rows in doc.get("measured", {}).items()
    }
    emit({"dummy_target": a.dummy_target, "params": d["params"], "launch": launch, "calibration": doc["calibration"],
          "per_batch": per_batch, "misses": [f["title"] for f in doc["findings"]], "tune_s": tune_s, "out": str(out)})  # fmt: skip


if __name__ == "__main__":
    main()
