"""Real vLLM on a GPU host: the kit's draft variants served by `vllm serve`, each beside `kit doctor`'s verdict.

Why: doctor judges a vLLM launch from vLLM's tables (kit.vllm); only vLLM itself can say whether it was right. Each
row of `gpu_sglang.ROWS` that vLLM can run (a chain) is read by `kit doctor --json --launch` as the line the kit
starts, then served through the kit's lifecycle and measured by `kit bench --engine vllm` (acceptance from vLLM's
/metrics counters and its SpecDecoding log lines), then stopped. OUT/rows.json is written as each row ends; one
JSON line is printed last.

Runs on the GPU host with the kit's vLLM bundle installed (`python -m kit.sglang.bundle install`, its folder on
PYTHONPATH and its bin/ on PATH), after `python bench/gpu_sglang.py setup --work W` (the embedded target, the
draft variants). `--doctor-only` reads the lines without starting anything (any machine).

    python bench/gpu_vllm.py --work /tmp/w --out OUT [--rows eagle3_chain_3-1-4 eagle_seed_3-1-4] [--extra '--dtype bfloat16']
    python bench/gpu_vllm.py ... --env VLLM_USE_V2_MODEL_RUNNER=0   # the first model runner (nested aux ids read)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit, write_json  # noqa: E402
from gpu_sglang import ROWS, _setup_ctx, make_spec, run_server, stop, wait  # noqa: E402

from kit.env.multigpu import MULTICAST_OFF  # noqa: E402


def kit(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kit", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **MULTICAST_OFF},
    )


def doctor(argv: list[str]) -> dict:
    """`kit doctor --json` on the line the kit starts: its exit code and the codes of its warnings and errors."""
    p = kit("doctor", "--json", "--launch", shlex.join(argv), timeout=300)
    try:
        doc = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"rc": p.returncode, "stderr": p.stderr[-600:]}
    found = [f for f in doc.get("findings", []) if f.get("severity") in ("error", "warning")]
    return {"rc": p.returncode, "codes": sorted({f"{f['severity']}:{f['code']}" for f in found})}


def bench(url: str, target: str, log: Path, out: Path, args) -> dict:
    """`kit bench --engine vllm` on one server: its acceptance sources, throughput and report codes."""
    argv = ["bench", "--engine", "vllm", "--url", url, "--num-prompts", str(args.num_prompts)]
    argv += ["--max-new-tokens", str(args.max_new_tokens), "--concurrency", str(args.concurrency)]
    argv += ["--chat-template", target, "--log-path", str(log), "--out-dir", str(out), "--no-progress"]
    t0 = time.time()
    p = kit(*argv)
    res: dict = {"rc": p.returncode, "wall_s": round(time.time() - t0, 1)}
    summary = out / "summary.json"
    if not summary.exists():
        return {**res, "stderr": p.stderr[-800:]}
    s = json.loads(summary.read_text())
    lab = (s.get("labels") or {}).get("spec") or {}
    src = (s.get("accept_sources") or {}).get("spec") or {}
    res |= {k: lab.get(k) for k in ("accept_length", "output_tok_s", "completion_tokens", "ttft_p50_s")}
    res["accept_sources"] = {k: v.get("value") if isinstance(v, dict) else v for k, v in src.items()}
    res["stdout_tail"] = p.stdout[-1500:]
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="/tmp/w")
    p.add_argument("--out", required=True)
    p.add_argument("--rows", nargs="*", default=[], help="row names (default: every chain row)")
    p.add_argument("--extra", default="--dtype bfloat16 --enforce-eager", help="server flags vLLM takes, one string")
    p.add_argument("--num-prompts", type=int, default=24)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--port", type=int, default=31100)
    p.add_argument("--ready-timeout", type=float, default=400.0)
    p.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for the servers, also on the line doctor reads")
    p.add_argument("--doctor-only", action="store_true")
    a = p.parse_args(argv)
    a.target, a.extra = None, shlex.split(a.extra)
    work, out, target, drafts = _setup_ctx(a)
    rows = [r for r in ROWS if (not a.rows or r.name in a.rows) and (r.params is None or r.params[1] == 1)]
    doc: dict = {"extra": a.extra, "env": a.env, "rows": []}
    env = dict(e.split("=", 1) for e in a.env)
    for row in rows:
        spec = make_spec(row, target, drafts, a.port, out / f"{row.name}.log", None, a.extra, "vllm")
        spec = spec.replace(env={**spec.env, **env})
        line = [*a.env, *spec.argv("vllm")]  # as the user would write it: the variables first
        r: dict = {"row": row.name, "what": row.what, "argv": line, "doctor": doctor(line)}
        if not a.doctor_only:
            h = run_server(row, target, drafts, None, a.port, out, "vllm", a.extra, env=env)
            r["started"] = wait(h, a.ready_timeout)
            if r["started"]:
                r["startup_s"] = h["startup_s"]
                r["bench"] = bench(h["server"].base_url, target, out / f"{row.name}.log", out / f"bench_{row.name}", a)
            else:
                r["error"] = (h.get("error") or "")[-1200:]
            r["stop"] = stop(h)
        doc["rows"].append(r)
        write_json(out / "rows.json", doc)
        print(f"[vllm] {row.name}: doctor {r['doctor'].get('codes')} -> {r.get('bench', r.get('error'))}", flush=True)
    emit(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
