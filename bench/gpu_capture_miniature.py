"""The server capture on the seed's model class, in miniature: Kimi-K2.5 (MLA + MoE in a multimodal wrapper).

Runs on a GPU host with SGLang importable (the kit's bundle on PYTHONPATH: pass `--bundle`), the repository on
PYTHONPATH. Steps, each recorded in OUT/summary.json whatever fails:

  1. the rehearsal miniature of the seed's fix (`seed_dirs(fixed=True)` of bench/gpu_rehearse.py: the Kimi-K2.5
     target config, the SGLang-layout draft `kit convert` writes, the seed's launch with EAGLE3), planned by
     `kit.rehearsal.runner.plan_rehearsal` at TP1 under WORK/rehearsal;
  2. that plan's launch turned into a capture (`kit.measure.capture.plan_capture`): speculation, CUDA graphs,
     the radix cache and overlap off, three prompts given by `input_ids` (the miniature has no tokenizer); the
     capture recorder (kit.serving.capture_hook) is the one active: its site goes first on PYTHONPATH and the
     rehearsal's site and record variable are taken out of the launch; then `run_capture`;
  3. the capture folder checked: its points are those `capture_points` gives for the miniature, every request
     has the aux states [tokens, points x hidden] and the final state [tokens, hidden] at the miniature's hidden
     size, and its notes (recorder errors, failed requests, missing, mismatch) are listed;
  4. `kit oracle --hidden-states WORK/capture --draft <miniature draft>` at chain 2-1-3. The oracle takes the
     draft's input embedding from --target, and the miniature target has no weights: a stand-in target folder
     (the miniature's config, a random embedding) under WORK/oracle_target supplies it.

Known limitation: the miniature server runs with `--load-format dummy`, as the rehearsal does, so the target's
weights are random (and the oracle's embedding is another random one): this proves the capture path on the
seed's class (the recorder finds the decoder inside the wrapper, the states have the expected points and
shapes, the oracle reads them), not acceptance.

    python bench/gpu_capture_miniature.py --work /tmp/w/mini --out OUT --version 0.5.17 --bundle [--timeout-s 240]
    python bench/gpu_capture_miniature.py --work /tmp/w/mini --out OUT --dry-run     # CPU: the plan; starts nothing

Every wait has a timeout inside --timeout-s. Exit 0 when nothing failed, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _run import Record, emit  # noqa: E402
from gpu_server_oracle import new_run, run_oracle  # noqa: E402

CHAIN = ("--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")
PROMPT_LENS = (16, 24, 32)
MAX_NEW_TOKENS = 16
ORACLE_RESERVE_S = 60.0  # kept from the server's wait for the checks and the oracle


def prompt_rows(vocab: int) -> list[dict]:
    """Three prompts by token ids: deterministic, below the miniature's vocabulary, no chat template."""
    top = min(vocab, 30000)
    return [{"input_ids": [(1000 + 97 * j + 389 * i) % top for j in range(n)]} for i, n in enumerate(PROMPT_LENS)]


def capture_only_env(env: dict[str, str], rehearsal_site: str) -> dict[str, str]:
    """The rehearsal's launch environment without its recorder: its site off PYTHONPATH, its record unset, so
    the capture recorder that plan_capture puts first is the only kit recorder in the server."""
    pp = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != Path(rehearsal_site)]
    out = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "KIT_REHEARSAL_RECORD")}
    return {**out, "PYTHONPATH": os.pathsep.join(pp)} if pp else out


def build_plan(work: Path, out: Path, version: str, bundle: bool, dry_run: bool) -> dict:
    """The miniature, the capture plan, the oracle's command; writes the miniature and the prompts, starts nothing."""
    from gpu_rehearse import seed_dirs

    from kit.hf import HFConfig
    from kit.measure.capture import plan_capture
    from kit.rehearsal.runner import SITE_DIR, RehearsalConfig, plan_rehearsal
    from kit.serving.launch import spec_from_argv

    inputs = seed_dirs(work / "seed-fix", fixed=True)
    cfg = RehearsalConfig(
        target=inputs["target"],
        draft=inputs["draft"],
        launch_file=inputs["launch_file"],
        out=str(work / "rehearsal"),
        dry_run=dry_run,
        sglang_version=version,
        bundle=bundle,
        mem_fraction=0.2,
        max_total_tokens=16384,
        tp=1,
    )
    rh = plan_rehearsal(cfg)
    tcfg = HFConfig.of(json.loads((Path(rh.target_dir) / "config.json").read_text()))
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in prompt_rows(int(tcfg.text["vocab_size"]))))
    spec = spec_from_argv(
        rh.argv, env=capture_only_env(rh.env, str(work / "rehearsal" / SITE_DIR)), sglang_version=version
    )
    spec = spec.replace(log_file=str(out / "server_capture.log"))
    cap = plan_capture(spec, str(work / "capture"), str(prompts), len(PROMPT_LENS), MAX_NEW_TOKENS, version)
    oracle_target = work / "oracle_target"
    oracle = [sys.executable, "-m", "kit", "oracle", "--json", "--hidden-states", cap.out, "--target",
              str(oracle_target), "--draft", rh.draft_dir, *CHAIN]  # fmt: skip
    return {"rehearsal": rh, "capture": cap, "oracle_argv": oracle, "oracle_target": oracle_target, "config": tcfg}


def write_oracle_target(plan: dict) -> None:
    """A target folder for the oracle: the miniature's config and one random input embedding [vocab, hidden]."""
    import shutil

    import torch

    from kit.checkpoint.safetensors_io import write_safetensors

    d, tcfg = plan["oracle_target"], plan["config"]
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(plan["rehearsal"].target_dir) / "config.json", d / "config.json")
    g = torch.Generator().manual_seed(0)
    shape = (int(tcfg.text["vocab_size"]), int(tcfg.text["hidden_size"]))
    embed = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
    write_safetensors(d / "model.safetensors", {"language_model.model.embed_tokens.weight": embed})


def check_capture(run: Record, cap_plan) -> dict:
    """The capture folder against the plan: points, per-request shapes, finite states, the notes' failures."""
    import torch

    from kit.reference.captured import read_capture

    cap = read_capture(cap_plan.out)
    H, P = cap_plan.hidden_size, len(cap_plan.points)
    rows = []
    for i, (ids, a, f) in enumerate(zip(cap.ids, cap.aux, cap.final or [None] * len(cap.ids))):
        n = len(ids)
        row = {
            "tokens": n,
            "prompt_len": cap.prompt_lens[i],
            "aux": list(a.shape),
            "final": None if f is None else list(f.shape),
        }
        shaped = list(a.shape) == [n, P * H] and f is not None and list(f.shape) == [n, H]
        # the last row is zeros by design (the last token is never fed); the others hold the server's states
        fed = torch.cat([a[: n - 1], f[: n - 1]], 1) if f is not None else a[: n - 1]
        row["finite"] = bool(torch.isfinite(fed).all())
        row["nonzero_rows"] = int((fed.abs().sum(1) > 0).sum())
        row["ok"] = shaped and row["finite"] and row["nonzero_rows"] == n - 1
        rows.append(row)
        if not row["ok"]:
            run.error("shapes", f"request {i}: {row} (want aux [{n}, {P}x{H}], final [{n}, {H}], finite, rows set)")
    notes = {k: cap.notes.get(k) for k in ("recorder_errors", "failed_requests", "missing", "mismatch")}
    for k, v in notes.items():
        if v:
            run.error(f"capture notes: {k}", json.dumps(v)[:1500])
    if cap.points != cap_plan.points:
        run.error("points", f"capture has {cap.points}, the plan {cap_plan.points}")
    if cap.final is None:
        run.error("final", "the capture has no final state")
    return {
        "points": cap.points,
        "final": cap.final is not None,
        "hidden_size": cap.hidden_size,
        "num_hidden_layers": cap.num_hidden_layers,
        "requests": rows,
        "notes": notes,
        "source": cap.source,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="where the miniature, the prompts and the capture go")
    p.add_argument("--out", required=True, help="summary.json and the logs")
    p.add_argument("--version", default="0.5.17", help="SGLang release of the plan")
    p.add_argument("--bundle", action="store_true", help="add the kit bundle's launch flags of --version")
    p.add_argument("--timeout-s", type=float, default=240.0, help="seconds for the whole run, every wait inside")
    p.add_argument("--dry-run", action="store_true", help="the plan and launch lines only; starts nothing")
    args = p.parse_args(argv)
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    run = new_run(out, args.timeout_s)
    run.doc = {"plan": {}, "capture": {}, "shapes": {}, "oracle": {}, "errors": []}
    try:
        plan = build_plan(work, out, args.version, args.bundle, args.dry_run)
        cap = plan["capture"]
        run.doc["plan"] = {
            "points": cap.points,
            "num_hidden_layers": cap.num_hidden_layers,
            "hidden_size": cap.hidden_size,
            "architecture": plan["config"].architecture,
            "prompts": [len(x) for x in cap.prompt_ids],
            "max_new_tokens": cap.max_new_tokens,
            "max_bytes": cap.max_bytes,
            "recorder": "kit.serving.capture_hook: its site first on PYTHONPATH; the rehearsal's site "
            "(kit.rehearsal.hooks) and KIT_REHEARSAL_RECORD taken out of the launch",
            "rehearsal_launch": plan["rehearsal"].render().splitlines()[-1].strip(),
            "launch": cap.spec.command(),
            "changes": [f"{c.flag}: {c.original!r} -> {c.new!r} ({c.reason})" for c in cap.changes],
            "oracle": " ".join(plan["oracle_argv"]),
        }
        print(cap.render())
        print(f"points: {cap.points} + final (hidden {cap.hidden_size}, {cap.num_hidden_layers} layers)")
        print("oracle: " + " ".join(plan["oracle_argv"]))
        if args.dry_run:
            run.doc["dry_run"] = True
            return 0
        _run(run, plan, out)
    except Exception as e:  # noqa: BLE001 — the summary is written whatever failed
        run.error("main", "".join(traceback.format_exception(e))[-3000:])
    finally:
        run.doc["elapsed_s"] = run.elapsed()
        run.save()
        emit({k: run.doc.get(k) for k in ("capture", "oracle", "errors", "elapsed_s")})
    return 0 if not run.doc["errors"] else 1


def _run(run: Record, plan: dict, out: Path) -> None:
    from kit.measure.capture import run_capture

    cap = plan["capture"]
    with open(out / "capture.log", "w") as f:
        try:
            summary = run_capture(
                cap,
                ready_timeout=max(30.0, run.left(ORACLE_RESERVE_S)),
                log=lambda *a: (f.write(" ".join(map(str, a)) + "\n"), f.flush()),
            )
        except Exception as e:  # noqa: BLE001 — recorded; the server log is beside the summary
            run.error("run_capture", "".join(traceback.format_exception(e))[-3000:])
            return
        f.write("\n".join(summary.pop("server_log_tail", None) or []) + "\n")
    run.doc["capture"] = {**summary, "recorder_active": "kit.serving.capture_hook (its 'attached' line was read)"}
    run.save()
    try:
        run.doc["shapes"] = check_capture(run, cap)
    except Exception as e:  # noqa: BLE001
        run.error("shapes", "".join(traceback.format_exception(e))[-3000:])
        return
    run.save()
    try:
        write_oracle_target(plan)
    except Exception as e:  # noqa: BLE001
        run.error("oracle_target", "".join(traceback.format_exception(e))[-3000:])
        return
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with open(out / "oracle.log", "w") as log:
        r = run_oracle(run, plan["oracle_argv"], log, env, "oracle 2-1-3")
    if r is not None:
        run.doc["oracle"] = {"chain": "2-1-3", **r}


if __name__ == "__main__":
    sys.exit(main())
