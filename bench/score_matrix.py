"""Score the real-SGLang matrix on CPU: the kit's prediction beside each observation.

For every row that `bench/gpu_sglang.py matrix` ran on the GPU host (its JSON under --results), this
* runs `kit doctor` (static: target + draft + the same launch command, `--sglang-version 0.5.17`, no probing)
  on the same draft files, rebuilt here with the same deterministic `make_variants`;
* scores the kit's oracle on the text SGLang itself produced: the prompt ids (chat template, the kit's
  tokenizer) and SGLang's `output_ids` are teacher-forced through the fp32 CPU target, with the wiring the
  kit predicts for that launch (`kit.wiring.plan.wiring_from_launch`, 0.5.17 rules);
* puts SGLang's observed accept lengths (meta_info pooled and mean, /server_info, log) beside it.

    python bench/score_matrix.py predict --base-draft DRAFT_DIR --out PREDICTIONS.json   # before launch
    python bench/score_matrix.py --results docs/results/h200_matrix --base-draft DRAFT_DIR --out FILE.json

Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _run import emit  # noqa: E402
from gpu_sglang import ROWS, make_variants  # noqa: E402

VERSION = "0.5.17"


def local_command(cmd: str, target: str, draft: str | None, row_draft_remote: str | None) -> str:
    """The GPU host's launch command with its paths replaced by this machine's copies."""
    import shlex

    from kit.sglang.cmdline import join_command, split_command

    env, argv = split_command(cmd, source="matrix row")
    out = []
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        out.append(a)
        if a == "--model-path":
            out.append(target)
            next(it)
        elif a == "--speculative-draft-model-path":
            out.append(draft or argv[i + 1])
            next(it)
        elif a == "--log-file":
            next(it)
            out.pop()
    env = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
    out[0] = "python"
    return join_command(env, out) if env else shlex.join(out)


def doctor(target: str, draft: str | None, cmd: str) -> dict:
    from kit.doctor import DoctorConfig, diagnose

    rep = diagnose(DoctorConfig(target=target, draft=draft, launch=cmd, sglang_version=VERSION, probe_env=False))
    fs = [f.to_dict() for f in rep.findings]
    return {
        "errors": [f"{f['code']}: {f['title']}" for f in fs if f["severity"] == "error"],
        "warnings": [f"{f['code']}: {f['title']}" for f in fs if f["severity"] == "warning"],
        "n_info": sum(1 for f in fs if f["severity"] == "info"),
    }


def predict(base: Path, out: Path) -> dict:
    """Before launch: `kit doctor` on every row's draft files and the launch command the GPU host will run."""
    from gpu_sglang import make_spec

    from kit.models import resolve_target

    drafts = make_variants(base, base.parent)
    target_dir = str(resolve_target("embedded"))
    res = {}
    for row in ROWS:
        spec = make_spec(row, target_dir, drafts, 31000, Path("/tmp/x.log"), None)
        cmd = local_command(spec.command(), target_dir, str(drafts[row.draft]) if row.draft else None, None)
        t0 = time.time()
        res[row.name] = {
            "command": cmd,
            "doctor": doctor(target_dir, str(drafts[row.draft]) if row.draft else None, cmd),
        }
        res[row.name]["doctor_s"] = round(time.time() - t0, 1)
        print(row.name, json.dumps(res[row.name]["doctor"])[:400], flush=True)
        out.write_text(json.dumps(res, indent=1))
    return res


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "predict":
        q = argparse.ArgumentParser()
        q.add_argument("--base-draft", required=True)
        q.add_argument("--out", required=True)
        b = q.parse_args(argv[1:])
        predict(Path(b.base_draft), Path(b.out))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True)
    p.add_argument("--base-draft", required=True, help="the demo draft (bf16, as trained) in SGLang layout")
    p.add_argument("--variants", default=None, help="where to rebuild the variants (default: beside --base-draft)")
    p.add_argument("--out", required=True)
    p.add_argument("--rows", nargs="*", default=[])
    a = p.parse_args(argv)

    import torch
    from transformers import AutoTokenizer

    from kit.checkpoint.hf_config import read_config
    from kit.models import load_target, resolve_target
    from kit.reference.draft_io import load_draft
    from kit.reference.oracle import evaluate
    from kit.sglang.cmdline import split_command
    from kit.sglang.params import SpecParams
    from kit.wiring.plan import wiring_from_launch

    torch.set_num_threads(2)
    res_dir = Path(a.results)
    base = Path(a.base_draft)
    drafts = make_variants(base, Path(a.variants) if a.variants else base.parent)
    target_dir = str(resolve_target("embedded"))
    tcfg = read_config(target_dir)[0]
    target, _ = load_target("embedded")
    tok = AutoTokenizer.from_pretrained(target_dir)
    prompts = json.loads((res_dir / "prompts.json").read_text())
    prompt_ids = [tok(p["rendered"], add_special_tokens=False)["input_ids"] for p in prompts]
    scored = {}
    for row in ROWS:
        f = res_dir / f"{row.name}.json"
        if not f.exists() or (a.rows and row.name not in a.rows):
            continue
        r = json.loads(f.read_text())
        t0 = time.time()
        draft_dir = str(drafts[row.draft]) if row.draft else None
        cmd = local_command(r["command"], target_dir, draft_dir, None)
        out = {
            "what": row.what,
            "command_local": cmd,
            "doctor": doctor(target_dir, draft_dir, cmd),
            "started": r["started"],
            "start_error": (r.get("log") or {}).get("error_lines", [])[-3:] if not r["started"] else None,
            "observed": r.get("acceptance"),
            "tok_s": r.get("output_tok_per_s"),
        }
        recs = r.get("records") or []
        if recs:
            out["prompt_tokens_match"] = sum(
                1 for rec, ids in zip(recs, prompt_ids) if rec.get("prompt_tokens") == len(ids)
            )
        if r["started"] and row.algorithm and recs:
            _, argv_ = split_command(cmd, source="row")
            dcfg = read_config(draft_dir)[0]
            try:
                wiring = wiring_from_launch(argv_, dcfg, tcfg, VERSION, draft_dir)
                draft = load_draft(Path(draft_dir), target_model=target)
                seqs = [(ids, rec["output_ids"]) for ids, rec in zip(prompt_ids, recs) if rec.get("output_ids")]
                ev = evaluate(target, draft, seqs, SpecParams(*row.params), wiring).to_dict()
                out["expected"] = {
                    k: ev.get(k) for k in ("accept_length", "meta_accept_length", "position_accept_length", "histogram")
                }
                out["wiring"] = wiring.describe()
            except Exception as e:  # the kit refusing this draft is a prediction too
                out["expected_error"] = f"{type(e).__name__}: {e}"[:400]
        out["score_s"] = round(time.time() - t0, 1)
        scored[row.name] = out
        print(f"{row.name}: {json.dumps({k: out.get(k) for k in ('started', 'observed', 'expected')})}", flush=True)
        Path(a.out).write_text(json.dumps(scored, indent=1, default=str))
    emit({k: {"expected": (v.get("expected") or {}).get("accept_length")} for k, v in scored.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
