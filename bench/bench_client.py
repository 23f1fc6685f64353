"""Benchmark of the benchmark client: how many requests/s kit.measure.bench can drive, and whether its
numbers agree with what servers report. Prints one JSON document (last line of stdout).

Why: a client that saturates before the server does measures itself. On a GPU host SGLang
serves thousands of tokens/s; the client must stay far below its own ceiling for TTFT/ITL to be
the server's. Mechanism: the near-zero-work endpoint is the SGLang API stub
(kit/tests/sglang_stub.py: raw asyncio HTTP, no model) in its own process pinned to one core,
the client pinned to the other, so requests/s here is the client's ceiling on one core.

Sections of the JSON:
  overhead     req/s and streamed chunks/s at concurrency 32/128, client CPU ms per request,
               for streaming /generate and non-streaming /generate and streaming /v1/completions
  agreement    stub: accept length vs the closed-form truth; llama.cpp (llama-cpp-python's
               OpenAI server on the embedded SmolLM2 GGUF): token counts vs usage, e2e latency
               vs llama.cpp's own `total time`, client per-token time vs llama.cpp eval time
  bench_serving  whether SGLang's own `python -m sglang.bench_serving` can run here, and why not

    python bench/bench_client.py [--requests 2000] [--skip-llamacpp]
Machine used for the committed numbers: 2-core CPU, no GPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _run import emit

from kit.measure.bench import BenchConfig, run_bench
from kit.serving.process import ServerProcess, free_port
from kit.tests.peers import llamacpp_timings

PROMPTS = [{"id": f"p{i}", "kind": "chat", "text": f"prompt number {i} " * 8} for i in range(16)]


def _pin(cpu: int) -> None:
    try:
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        pass


def _wait(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready")


def overhead(n: int, tmp: Path) -> dict:
    port = free_port()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    srv_cmd = [sys.executable, "-m", "kit.tests.sglang_stub", "--port", str(port)]
    if len(cpus) >= 2 and shutil.which("taskset"):
        srv_cmd = ["taskset", "-c", str(cpus[1])] + srv_cmd
    out = {}
    with ServerProcess(srv_cmd, port=port):
        url = f"http://127.0.0.1:{port}"
        _wait(url)
        _pin(cpus[0])
        for name, api, stream, conc in (
            ("generate_stream_c32", "sglang", True, 32),
            ("generate_stream_c128", "sglang", True, 128),
            ("generate_nostream_c32", "sglang", False, 32),
            ("completions_stream_c32", "completions", True, 32),
        ):
            cfg = BenchConfig(
                url=url,
                api=api,
                stream=stream,
                num_prompts=n,
                max_new_tokens=16,
                concurrency=conc,
                warmup=20,
                progress=False,
                out_dir=str(tmp / name),
            )
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            res = run_bench(cfg, prompts=PROMPTS)
            wall = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            recs = [r for r in res.records if not r.warmup]
            chunks = sum(len(r.chunk_tok) for r in recs)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            agg = res.summary["labels"]["spec"]
            out[name] = {
                "requests": len(recs),
                "concurrency": conc,
                "failed": agg["failed"],
                "req_s": round(agg["req_s"], 1),
                "chunks_s": round(chunks / agg["duration_s"], 1),
                "wall_s_incl_warmup_and_scoring": round(wall, 2),
                "client_cpu_ms_per_request": round(1000 * cpu / (len(recs) + 20), 3),
                "accept_length": agg.get("accept_length"),
            }
    # 16 tokens with accept pattern [3, 2, 1, 4]: prefill 1 + verify 3,2,1,4,3,2 -> 16/6
    out["accept_length_truth"] = 16 / 6
    out["accept_length_exact"] = all(
        abs((v.get("accept_length") or 0) - 16 / 6) < 1e-9 for k, v in out.items() if isinstance(v, dict)
    )
    return out


def llamacpp_agreement(tmp: Path) -> dict:
    from kit.models import gguf_path
    from kit.tests.peers import llama_cpp_server_argv

    port = free_port()
    lines: list[str] = []
    srv = ServerProcess(
        llama_cpp_server_argv(gguf_path(), port),
        port=port,
        on_line=lines.append,
    )
    with srv:
        url = srv.base_url
        _wait(url)
        srv.catch_up()
        n0 = len(lines)
        res = run_bench(
            BenchConfig(
                url=url,
                api="completions",
                num_prompts=8,
                max_new_tokens=24,
                concurrency=1,
                warmup=1,
                progress=False,
                out_dir=str(tmp / "llamacpp"),
            ),
            prompts=PROMPTS[:8],
        )
        srv.catch_up()
        perf = llamacpp_timings(lines[n0:])[1:]  # drop the warmup's block
        recs = [r for r in res.records if not r.warmup]
        usage = []
        for r in recs:
            text = next(p["text"] for p in PROMPTS if p["id"] == r.rid.split("#")[0])
            body = {"prompt": text, "max_tokens": 24, "temperature": 0.0}
            usage.append(
                httpx.post(url + "/v1/completions", json=body, timeout=60).json()["usage"]["completion_tokens"]
            )
    gaps = [r.e2e - p["total_s"] for r, p in zip(recs, perf)]
    ratios = [
        ((r.chunk_t[-1] - r.chunk_t[0]) / (len(r.chunk_t) - 1)) / (p["eval_s"] / p["eval_runs"])
        for r, p in zip(recs, perf)
        if len(r.chunk_t) > 2 and p.get("eval_runs")
    ]
    return {
        "requests": len(recs),
        "token_count_equal_usage": sum(r.client_tokens == u for r, u in zip(recs, usage)),
        "client_tokens": [r.client_tokens for r in recs],
        "usage_tokens": usage,
        "e2e_minus_llamacpp_total_ms_median": round(1000 * statistics.median(gaps), 2) if gaps else None,
        "e2e_minus_llamacpp_total_ms_max": round(1000 * max(gaps), 2) if gaps else None,
        "client_vs_llamacpp_per_token_time_ratio_median": round(statistics.median(ratios), 3) if ratios else None,
    }


def bench_serving_status() -> dict:
    """Try to import SGLang's own benchmark in the kit's SGLang side venv; report why it cannot run."""
    from kit.venvs import venv_python

    py = venv_python("sglang-0.5.23")
    if not py.exists():
        return {"ran": False, "why": "SGLang side venv not built (python -m kit.sglang.releases --side-env 0.5.23)"}
    r = subprocess.run([str(py), "-c", "import sglang.bench_serving"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return {
            "ran": False,
            "why": "sglang.bench_serving (0.5.23) does not import on this CPU host: "
            + last
            + " — its module imports multimodal configs (torchvision) and HF `datasets`; torchvision "
            "is not installable next to the CPU torch here, so its numbers cannot be compared on this machine",
        }
    return {"ran": False, "why": "importable; comparison run not implemented in this benchmark yet"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--skip-llamacpp", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_client_"))
    try:
        doc = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "httpx": httpx.__version__},
            "overhead": overhead(a.requests, tmp),
        }
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        doc["agreement_llamacpp"] = None if a.skip_llamacpp else llamacpp_agreement(tmp)
        doc["bench_serving"] = bench_serving_status()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(doc)


if __name__ == "__main__":
    main()
