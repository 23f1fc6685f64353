"""The request table (`bench/serve_table.py`) against real SGLang: one server on the embedded target, started by
the kit's launch path, the table run, the server stopped, one JSON written whatever happened.

Why: the kit's reference server should answer bad requests as SGLang does; this records SGLang's answers row by
row so that `python bench/serve_table.py --compare REF.json OUT/sglang_table.json` shows where they differ.

The server: `kit.serving.launch.LaunchSpec` (the embedded SmolLM2 as converted under WORK/cache, no speculation,
`--context-length 2048` so the long-prompt rows stay cheap, its own --port and --nccl-port), given the SGLang
bundle's launch flags by `kit.serving.launch.resolve_local`, and run by `kit.serving.process.ServerProcess`.
It shares the GPU with other work: its static memory is what the GPU already has in use plus
--mem-fraction-static (of the whole GPU), because SGLang sizes its pool as a fraction of the whole GPU and
refuses to start when less than the rest of the GPU is free; its KV pool is capped (--max-total-tokens) and CUDA
graphs are off (a quick start; the table times nothing that graphs change).
Every step has a timeout: ready within --ready-timeout-s (150), the table within what is left of --timeout-s
(200), the stop within 20 s.

    python bench/serve_table_sglang.py --work W --out OUT [--timeout-s 200] [--gpu 0]
    python bench/serve_table_sglang.py --work W --out OUT --dry-run     # the launch line only (no GPU needed)

Writes OUT/sglang_table.json (the table run, the launch argv, startup time, server version, log tail on error)
and OUT/sglang_server.log; prints the JSON's summary as one line last.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit  # noqa: E402

CONTEXT_LENGTH = 2048
MAX_TOTAL_TOKENS = 16384  # the KV pool: a few long-prompt rows at a time


def memory_fraction(gpu: str, share: float) -> tuple[float, dict]:
    """--mem-fraction-static for a server that should take about `share` of the GPU beside what runs there:
    SGLang starts only when the memory free is at least (1 - fraction) of the whole GPU."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", gpu],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        used, total = (float(x) for x in out.strip().splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return share, {"nvidia_smi": f"{type(e).__name__}: {e}"[:200]}
    return round(min(0.9, used / total + share), 3), {"gpu_used_mib": used, "gpu_total_mib": total}


def build_spec(args, out: Path, fraction: float):
    from kit.serving.launch import LaunchSpec, resolve_local
    from kit.serving.process import free_port

    port = args.port or free_port()
    nccl_port = args.nccl_port or free_port()
    spec = LaunchSpec(
        model_path="embedded",
        host="127.0.0.1",
        port=port,
        context_length=CONTEXT_LENGTH,
        mem_fraction_static=fraction,
        python=sys.executable,
        log_file=str(out / "sglang_server.log"),
        extra_args=["--nccl-port", str(nccl_port), "--max-total-tokens", str(MAX_TOTAL_TOKENS), "--disable-cuda-graph"],
        env={"CUDA_VISIBLE_DEVICES": args.gpu} if args.gpu is not None else {},
    )
    notes: list[str] = []
    return resolve_local(spec, "sglang", log=notes.append, bundle=args.bundle), notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="work dir of bench/gpu_sglang.py setup (the target under cache/)")
    ap.add_argument("--out", required=True, help="folder for sglang_table.json and the server log")
    ap.add_argument("--timeout-s", type=float, default=200.0, help="the whole run: start, table, stop")
    ap.add_argument("--ready-timeout-s", type=float, default=150.0)
    ap.add_argument("--gpu", default=None, help="CUDA_VISIBLE_DEVICES of the server (default: as inherited)")
    ap.add_argument("--mem-fraction-static", type=float, default=0.1, help="of the GPU, beside what is in use")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--nccl-port", type=int, default=None)
    ap.add_argument("--bundle", default="0.5.17", help="the kit bundle's launch flags when SGLang is not from one")
    ap.add_argument("--dry-run", action="store_true", help="print the launch line; start nothing")
    args = ap.parse_args()

    t_start = time.monotonic()
    work, out = Path(args.work), Path(args.out)
    os.environ.setdefault("KIT_CACHE_DIR", str(work / "cache"))  # where gpu_sglang.py setup converted the target
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"context_length": CONTEXT_LENGTH, "error": None}
    dest = out / "sglang_table.json"
    srv = None
    try:
        gpu_index = (args.gpu or os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        if args.dry_run:
            fraction, mem = args.mem_fraction_static, {}
        else:
            fraction, mem = memory_fraction(gpu_index, args.mem_fraction_static)
        result["memory"] = {"mem_fraction_static": fraction, **mem}
        spec, notes = build_spec(args, out, fraction)
        from kit.serving.engines import get_engine

        argv = get_engine("sglang").argv(spec)
        result.update(argv=argv, env=spec.env, launch_notes=notes)
        if args.dry_run:
            print(" ".join(f"{k}={shlex.quote(v)}" for k, v in spec.env.items()), shlex.join(argv))
            return 0

        import asyncio

        from kit.serving.process import ServerProcess
        from kit.tests.request_table import TableConfig, run_table

        srv = ServerProcess.from_spec(spec, engine="sglang", grace=15).start()
        ready = srv.wait_ready(args.ready_timeout_s)
        result["startup_s"] = round(time.monotonic() - t_start, 1)
        info = ready.get("server_info") or {}
        result["server"] = {"version": info.get("version"), "model": ready.get("model")}
        left = args.timeout_s - (time.monotonic() - t_start) - 25  # room for the stop
        # rows until `left` less the row in flight (20 s), the abandoned prompt (28 s) and the request after (30 s)
        cfg = TableConfig(context_length=CONTEXT_LENGTH, row_timeout_s=20.0, deadline_s=max(10.0, left - 80))
        result["table"] = asyncio.run(asyncio.wait_for(run_table(srv.base_url, cfg), max(10.0, left)))
    except BaseException as e:  # noqa: BLE001  (written into the JSON, whatever it was)
        result["error"] = f"{type(e).__name__}: {e}"[:4000]
        result["traceback"] = traceback.format_exc()[-4000:]
    finally:
        if srv is not None:
            t0 = time.monotonic()
            try:
                result["stop_rc"] = srv.stop(grace=15)
            except Exception as e:  # noqa: BLE001
                result["stop_error"] = f"{type(e).__name__}: {e}"
            result["stop_s"] = round(time.monotonic() - t0, 1)
            if result["error"]:
                result["log_tail"] = srv.tail(60)
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        if not args.dry_run:
            dest.write_text(json.dumps(result, indent=1) + "\n")
    summary = (result.get("table") or {}).get("summary")
    emit({"out": str(dest), "error": result["error"], "summary": summary, "wall_s": result["wall_s"]})
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
