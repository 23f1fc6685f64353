"""Proof on real SGLang: the oracle on server-captured states vs the kit's forward vs what EAGLE-3 servers observe.

On one GPU host with SGLang importable (the kit's bundle) and the embedded target converted in $KIT_CACHE_DIR, all
at once on the one GPU (each server a memory share and its own --port / --nccl-port):

  (a) the capture run: `python -m kit launch --capture-hidden W/capture` on the embedded target with the shipped
      draft's launch (kit.measure.capture: speculation, CUDA graphs and the radix cache off, the recorder on);
  (b) EAGLE-3 servers at 2-1-3 and 3-1-4 with the shipped draft, CUDA graphs on, measured as `kit bench` measures
      (kit.measure.client, completion tokens / verify steps), the same prompts, one request at a time;
  (c) a server with the capture run's flags and no recorder: the capture's cost to throughput (same prompts);
  meanwhile the oracle on the kit's own forward (`kit oracle`, CPU fp32) at both chains; then the oracle on the
  captured states (`kit oracle --hidden-states`) and the kit's forward on the capture's own text (`kit oracle
  --token-path`): beside the first, it splits a gap between the two oracles into the text's share and the states'.

OUT/summary.json is written whatever fails ({"hf_oracle", "server_oracle", "observed", "capture", "errors",
"machine"}); its logs beside it. Every subprocess and wait has a timeout inside `--timeout-s`.

    python bench/gpu_server_oracle.py --work W --out OUT [--timeout-s 330]
    python bench/gpu_server_oracle.py --work W --out OUT --dry-run     # the plan and launch lines; starts nothing
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _run import Record, emit  # noqa: E402

CHAINS = {"2-1-3": (2, 1, 3), "3-1-4": (3, 1, 4)}
NUM_PROMPTS, MAX_NEW_TOKENS = 24, 128
MEM_FRACTION, KV_TOKENS = 0.15, 32768
VERSION = "0.5.17"


def new_run(out: Path, timeout_s: float) -> Record:
    """This bench's document: OUT/summary.json with the oracle's, the server's and the capture's figures."""
    doc = {"hf_oracle": {}, "server_oracle": {}, "observed": {}, "capture": {}, "errors": []}
    return Record(out, "summary.json", doc, timeout_s)


def machine() -> dict:
    info = {"python": sys.version.split()[0]}
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        info["gpus"] = r.stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired) as e:
        info["gpus"] = f"nvidia-smi: {e}"
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError as e:
        info["torch"] = str(e)
    from kit.sglang.versions import importable_version

    info["sglang"] = importable_version()
    return info


def ports(n: int) -> list[int]:
    from kit.serving.process import free_port

    out: list[int] = []
    while len(out) < n:
        p = free_port()
        if p not in out and p + 1 not in out and p - 1 not in out:
            out.append(p)
    return out


def eagle_spec(target: str, draft: str, chain: tuple, port: int, nccl: int, log: Path):
    """The shipped draft's EAGLE-3 launch as `kit demo --gpu` runs it: CUDA graphs on (decode batch up to 4)."""
    from kit.serving.launch import LaunchSpec, resolve_local
    from kit.sglang.flags import DECODE_GRAPH_CAP, current_option
    from kit.sglang.params import SpecParams

    spec = LaunchSpec(
        model_path=target,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=draft,
        **SpecParams(*chain).given(),
        host="127.0.0.1",
        port=port,
        mem_fraction_static=MEM_FRACTION,
        python=sys.executable,
        log_file=str(log),
        extra_args=["--max-total-tokens", str(KV_TOKENS), "--nccl-port", str(nccl),
                    current_option(DECODE_GRAPH_CAP, VERSION), "4"],
    )  # fmt: skip
    return resolve_local(spec, "sglang", log=lambda *_: None, bundle=VERSION)


def build_plan(work: Path, out: Path, num_prompts: int = NUM_PROMPTS, max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """Every launch line and command of the run (nothing started)."""
    from kit.measure.capture import plan_capture
    from kit.models import embedded_dir, shipped_draft

    target, draft = str(embedded_dir()), str(shipped_draft())
    p_cap, p_213, p_314, p_base, *nccl = ports(8)
    cap_dir = work / "capture"
    cap_argv = [sys.executable, "-m", "kit", "launch", "--model-path", target, "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", draft, "--capture-hidden", str(cap_dir),
                "--num-prompts", str(num_prompts), "--max-new-tokens", str(max_new_tokens), "--port", str(p_cap),
                "--mem-fraction-static", str(MEM_FRACTION), "--log-file", str(out / "server_capture.log"),
                "--extra-args", f"--max-total-tokens {KV_TOKENS} --nccl-port {nccl[0]}",
                "--python", sys.executable, "--bundle", "--sglang-version", VERSION, "--ready-timeout", "240",
                "--json"]  # fmt: skip
    eagles = {
        name: eagle_spec(target, draft, chain, port, nc, out / f"server_eagle_{name}.log")
        for (name, chain), port, nc in zip(CHAINS.items(), (p_213, p_314), nccl[1:3])
    }
    # (c) the capture run's launch without the recorder (its flags, its prompts)
    from kit.serving.launch import LaunchSpec, resolve_local

    user = resolve_local(
        LaunchSpec(model_path=target, speculative_algorithm="EAGLE3", speculative_draft_model_path=draft,
                   host="127.0.0.1", port=p_base, mem_fraction_static=MEM_FRACTION, python=sys.executable,
                   log_file=str(out / "server_nohook.log"),
                   extra_args=["--max-total-tokens", str(KV_TOKENS), "--nccl-port", str(nccl[3])]),
        "sglang", log=lambda *_: None, bundle=VERSION,
    )  # fmt: skip
    cap_plan = plan_capture(user, str(work / "capture_nohook_plan"), None, num_prompts, max_new_tokens, VERSION)
    from kit.serving.capture_hook import BUDGET_ENV, CAPTURE_ENV, POINTS_ENV

    env = {k: v for k, v in cap_plan.spec.env.items() if k not in (CAPTURE_ENV, POINTS_ENV, BUDGET_ENV)}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    nohook = cap_plan.spec.replace(env=env)
    oracle = [sys.executable, "-m", "kit", "oracle", "--json", "--target", target, "--draft", draft,
              "--num-prompts", str(num_prompts), "--max-new-tokens", str(max_new_tokens)]  # fmt: skip
    return {
        "target": target,
        "draft": draft,
        "capture_dir": str(cap_dir),
        "capture_argv": cap_argv,
        "eagles": eagles,
        "nohook": nohook,
        "prompt_ids": cap_plan.prompt_ids,
        "points": cap_plan.points,
        "oracle_argv": oracle,
        "max_new_tokens": max_new_tokens,
    }


def chain_args(chain: tuple) -> list[str]:
    s, k, n = chain
    return [
        "--speculative-num-steps",
        str(s),
        "--speculative-eagle-topk",
        str(k),
        "--speculative-num-draft-tokens",
        str(n),
    ]


def run_oracle(run: Record, argv: list[str], log, env: dict, where: str) -> dict | None:
    """One `kit oracle --json` subprocess (timeout: what is left of the run); its last JSON line."""
    t = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=run.left(), env=env)
    except subprocess.TimeoutExpired:
        run.error(where, "timed out")
        return None
    with run.lock:
        log.write(f"== {where} ({time.monotonic() - t:.1f} s, rc {r.returncode}): {' '.join(argv)}\n")
        log.write(r.stderr[-3000:] + "\n" + r.stdout[-3000:] + "\n")
        log.flush()
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not lines:
        run.error(where, f"rc {r.returncode}: {(r.stderr or r.stdout)[-800:]}")
        return None
    doc = json.loads(lines[-1])
    res = doc["results"]["requested"]
    return {k: res.get(k) for k in ("meta_accept_length", "accept_length", "position_accept_length", "verify_steps")}


def measure_server(run: Record, name: str, spec, ids: list[list[int]], max_new_tokens: int, results: dict) -> None:
    """Start, wait, one warm-up request (kernel compilation), the prompts at batch 1, stop."""
    from kit.measure.capture import send_requests
    from kit.measure.metrics import acceptance_from_records
    from kit.serving.process import ServerProcess

    srv = ServerProcess.from_spec(spec, engine="sglang", grace=10)
    try:
        srv.start()
        srv.wait_ready(min(240.0, run.left(40)))
        # the capture run's own sequence: a warm-up request, the prompts one at a time, by token ids
        recs, secs = send_requests(srv.base_url, ids, max_new_tokens, timeout_s=run.left())
        ok = [r for r in recs if r.ok]
        toks = sum(r.completion_tokens or 0 for r in ok)
        acc = acceptance_from_records(ok)
        results[name] = {
            "ok": len(ok),
            "failed": [r.error for r in recs if not r.ok][:3],
            "completion_tokens": toks,
            "seconds": round(secs, 2),
            "tok_per_s": round(toks / max(secs, 1e-9), 1),
            "accept_length": None if acc.length is None else round(acc.length, 4),
        }
    except Exception as e:  # noqa: BLE001 — one server failing is a result; the others go on
        run.error(name, e)
    finally:
        try:
            srv.stop()
        except Exception as e:  # noqa: BLE001
            run.error(f"{name} stop", e)


def capture_run(run: Record, plan: dict, out: Path, results: dict) -> None:
    t = time.monotonic()
    with open(out / "capture_cli.log", "w") as log:
        try:
            r = subprocess.run(
                plan["capture_argv"], stdout=subprocess.PIPE, stderr=log, text=True, timeout=run.left(60)
            )
        except subprocess.TimeoutExpired:
            run.error("capture", "kit launch --capture-hidden timed out")
            return
        log.write("\n== stdout\n" + r.stdout[-6000:])
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not lines:
        run.error("capture", f"kit launch --capture-hidden exited {r.returncode} (capture_cli.log)")
        return
    s = json.loads(lines[-1])
    results["capture"] = {**s, "wall_s": round(time.monotonic() - t, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="work folder (the capture is written under it)")
    ap.add_argument("--out", required=True, help="results folder: summary.json and logs")
    ap.add_argument("--timeout-s", type=float, default=330.0, help="wall-clock limit of the whole run")
    ap.add_argument("--dry-run", action="store_true", help="build the plan, print the launch lines; start nothing")
    ap.add_argument("--num-prompts", type=int, default=NUM_PROMPTS, help="prompts per server and oracle")
    ap.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, help="greedy tokens per prompt")
    args = ap.parse_args(argv)
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    run = new_run(out, args.timeout_s)
    try:
        run.doc["machine"] = machine()
        plan = build_plan(work, out, args.num_prompts, args.max_new_tokens)
        lines = {
            "capture": " ".join(plan["capture_argv"]),
            **{f"eagle_{n}": s.command() for n, s in plan["eagles"].items()},
            "nohook": plan["nohook"].command(),
            "oracle": " ".join(plan["oracle_argv"]),
        }
        run.doc["plan"] = {"launch_lines": lines, "points": plan["points"], "prompts": len(plan["prompt_ids"])}
        if args.dry_run:
            for k, v in lines.items():
                print(f"{k}: {v}")
            run.doc["dry_run"] = True
            return 0
        _run(run, plan, work, out)
    except Exception as e:  # noqa: BLE001 — the summary is written whatever failed
        run.error("main", "".join(traceback.format_exception(e))[-3000:])
    finally:
        run.save()
        keys = ("hf_oracle", "server_oracle", "hf_oracle_on_server_text", "observed", "capture", "errors")
        emit({k: run.doc.get(k) for k in keys})
    return 0 if not run.doc["errors"] else 1


def _run(run: Record, plan: dict, work: Path, out: Path) -> None:
    import shutil

    shutil.rmtree(plan["capture_dir"], ignore_errors=True)
    results: dict = {}
    oracle_log = open(out / "oracles.log", "w")
    cpu_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "6"}

    def hf_oracles():
        for name, chain in CHAINS.items():  # one after the other: the second reuses the first's continuations
            r = run_oracle(run, plan["oracle_argv"] + chain_args(chain), oracle_log, cpu_env, f"hf_oracle {name}")
            if r is not None:
                run.doc["hf_oracle"][name] = r["meta_accept_length"]
                run.doc.setdefault("hf_oracle_detail", {})[name] = r

    def capture_then_oracles():
        capture_run(run, plan, out, results)
        if "capture" not in results:
            return
        for name, chain in CHAINS.items():  # a few seconds each: the draft alone, on the captured states
            argv = plan["oracle_argv"][:4] + ["--json", "--hidden-states", plan["capture_dir"], "--target",
                                              plan["target"], "--draft", plan["draft"]] + chain_args(chain)  # fmt: skip
            r = run_oracle(run, argv, oracle_log, cpu_env, f"server_oracle {name}")
            if r is not None:
                run.doc["server_oracle"][name] = r["meta_accept_length"]
                run.doc.setdefault("server_oracle_detail", {})[name] = r
        for name, chain in CHAINS.items():  # the kit's forward on the server's text: its states, SGLang's tokens
            argv = plan["oracle_argv"] + ["--token-path", plan["capture_dir"]] + chain_args(chain)
            r = run_oracle(run, argv, oracle_log, cpu_env, f"hf_oracle_on_server_text {name}")
            if r is not None:
                run.doc.setdefault("hf_oracle_on_server_text", {})[name] = r["meta_accept_length"]

    threads = [threading.Thread(target=hf_oracles, name="hf_oracle", daemon=True)]
    threads.append(threading.Thread(target=capture_then_oracles, name="capture", daemon=True))
    for name, spec in plan["eagles"].items():
        threads.append(
            threading.Thread(
                target=measure_server,
                args=(run, name, spec, plan["prompt_ids"], plan["max_new_tokens"], results),
                name=name,
                daemon=True,
            )
        )
    threads.append(
        threading.Thread(
            target=measure_server,
            args=(run, "nohook", plan["nohook"], plan["prompt_ids"], plan["max_new_tokens"], results),
            name="nohook",
            daemon=True,
        )
    )
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=run.left())
    for t in threads:
        if t.is_alive():
            run.error(t.name, "still running at the time limit")
    run.doc["observed"] = {n: results[n]["accept_length"] for n in CHAINS if n in results}
    run.doc["servers"] = {n: results[n] for n in (*CHAINS, "nohook") if n in results}
    cap = results.get("capture")
    if cap:
        base = (results.get("nohook") or {}).get("tok_per_s")
        run.doc["capture"] = {
            "bytes": cap.get("bytes"),
            "max_bytes": cap.get("max_bytes"),
            "seconds": cap.get("seconds"),
            "tokens": cap.get("tokens"),
            "requests": cap.get("requests"),
            "tok_per_s": cap.get("output_tok_per_s"),
            "tok_per_s_without": base,
            "throughput_cost": round(1 - cap["output_tok_per_s"] / base, 4)
            if base and cap.get("output_tok_per_s")
            else None,
            "missing": cap.get("missing"),
            "mismatch": cap.get("mismatch"),
            "points": cap.get("points"),
        }
    hf, so, ob = run.doc["hf_oracle"], run.doc["server_oracle"], run.doc["observed"]
    same_text = run.doc.get("hf_oracle_on_server_text", {})
    run.doc["agreement"] = {
        n: {
            "server_vs_hf": round(so[n] / hf[n] - 1, 4) if n in so and n in hf else None,
            "server_vs_hf_same_text": round(so[n] / same_text[n] - 1, 4) if n in so and n in same_text else None,
            "observed_vs_hf": round(ob[n] / hf[n] - 1, 4) if ob.get(n) and n in hf else None,
        }
        for n in CHAINS
    }
    oracle_log.close()


if __name__ == "__main__":
    sys.exit(main())
