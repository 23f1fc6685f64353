"""Measuring aid: the kit's streaming client vs a bench_serving-style reference client, at many streams.

Why: on the H200 (issue 22 item 5) `kit bench` at concurrency 16 reached ~25% less output throughput than
`python -m sglang.bench_serving` on the same server, with higher e2e and ITL, while both agreed at
concurrency 1: the client, not the server, set the pace. This reproduces that shape on a CPU: one SGLang
API stub (kit/tests/sglang_stub.py, own process, one SSE event per token every `--step-delay` seconds)
streams `/generate` to 16 concurrent requests, and two clients take turns on it in one process:

  kit        kit.measure.bench's request loop (`_run_requests` over `stream_session`, records written to
             a RecordLog as in a real run) — the code path `kit bench` runs
  kit_before the same loop with the engine left unpinned (`Engine.pinned` returning itself): how it ran
             before, when every request read the installed SGLang's metadata twice (payload, final answer)
  reference  what `sglang.bench_serving` does for `--backend sglang` (0.5.x): a semaphore, one
             aiohttp.ClientSession per request, `async for line in response.content`, strip, drop
             "data: ", json.loads, stamp when `text` is non-empty

Where SGLang is not installed (this CPU) that read finds nothing; `--installed-cost aiohttp` (default) makes
each read also read an installed distribution's metadata, the cost it has on a GPU host with SGLang in the
environment (`none`: leave it as it is here).

Rounds alternate the clients so all see the same machine load (2 shared cores here). Per client:
output tok/s, TTFT / ITL / e2e p50 (ms), achieved concurrency (sum of e2e / wall) and the client
process's CPU per streamed chunk (us). Prints one JSON document (last line of stdout).

    python bench/client_streams.py [--requests 400] [--rounds 3] [--concurrency 16] [--step-delay 0.0017]
                                   [--installed-cost aiohttp|none] [--url http://127.0.0.1:30000]

On a GPU host with SGLang installed, `--installed-cost none` measures the real read; `--url` runs the three
clients against a real server instead of the stub (same process, same prompts: the client alone differs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
from _run import emit, load_avg

from kit.measure.bench import BenchConfig, RecordLog, _run_requests
from kit.measure.client import stream_session
from kit.serving.engines.sglang import SGLang
from kit.serving.process import ServerProcess, free_port
from kit.sglang import versions

PROMPT = "the quick brown fox jumps over the lazy dog " * 5


async def kit_round(url: str, n: int, cfg: BenchConfig, log: RecordLog, pinned: bool = True) -> list[dict]:
    reqs = [{"rid": f"r{i}", "text": PROMPT} for i in range(n)]
    transport = stream_session(cfg.concurrency, cfg.timeout_s)
    saved = SGLang.pinned
    if not pinned:
        SGLang.pinned = lambda self: self  # the loop as it was: the release looked up on every use
    try:
        recs = await _run_requests(transport, url, "sglang", reqs, cfg, None, log, {"label": "kit"}, "kit", None, None)
    finally:
        SGLang.pinned = saved
        await transport.close()
    return [
        {
            "t_start": r.t_start,
            "ttft": r.ttft,
            "e2e": r.e2e,
            "tokens": r.client_tokens,
            "itl": [b - a for a, b in zip(r.chunk_t, r.chunk_t[1:])],
            "chunks": len(r.chunk_t),
            "ok": r.ok,
        }
        for r in recs
    ]


async def _reference_one(url: str, max_new_tokens: int) -> dict:
    payload = {
        "text": PROMPT,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        "stream": True,
    }
    out = {"t_start": time.time(), "ttft": None, "itl": [], "tokens": 0, "chunks": 0, "ok": False}
    st = time.perf_counter()
    last = st
    timeout = aiohttp.ClientTimeout(total=6 * 3600)
    async with aiohttp.ClientSession(timeout=timeout, read_bufsize=10 * 1024**2) as session:
        async with session.post(url + "/generate", json=payload) as resp:
            async for chunk_bytes in resp.content:
                chunk_bytes = chunk_bytes.strip()
                if not chunk_bytes:
                    continue
                chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                if chunk == "[DONE]":
                    continue
                data = json.loads(chunk)
                if data.get("text"):
                    ts = time.perf_counter()
                    if out["ttft"] is None:
                        out["ttft"] = ts - st
                    else:
                        out["itl"].append(ts - last)
                    last = ts
                    out["tokens"] = data["meta_info"]["completion_tokens"]
                    out["chunks"] += 1
    out["ok"] = True
    out["e2e"] = time.perf_counter() - st
    return out


async def reference_round(url: str, n: int, cfg: BenchConfig) -> list[dict]:
    sem = asyncio.Semaphore(cfg.concurrency)

    async def limited():
        async with sem:
            return await _reference_one(url, cfg.max_new_tokens)

    return await asyncio.gather(*(asyncio.create_task(limited()) for _ in range(n)))


def _ms(xs: list[float]) -> float | None:
    return round(1000 * statistics.median(xs), 3) if xs else None


def summarize(rows: list[dict], wall: float, cpu: float, concurrency: int) -> dict:
    ok = [r for r in rows if r["ok"]]
    chunks = sum(r["chunks"] for r in ok)
    # a freed slot's next request: the k-th end is followed by the (k + concurrency)-th start
    starts = sorted(r["t_start"] for r in rows)
    ends = sorted(r["t_start"] + r["e2e"] for r in ok)
    gaps = [s - e for e, s in zip(ends, starts[concurrency:])]
    return {
        "requests": len(rows),
        "failed": len(rows) - len(ok),
        "output_tok_s": round(sum(r["tokens"] for r in ok) / wall, 1),
        "ttft_p50_ms": _ms([r["ttft"] for r in ok if r["ttft"] is not None]),
        "itl_p50_ms": _ms([x for r in ok for x in r["itl"]]),
        "itl_mean_ms": round(1000 * statistics.fmean([x for r in ok for x in r["itl"]]), 3),
        "e2e_p50_ms": _ms([r["e2e"] for r in ok]),
        "achieved_concurrency": round(sum(r["e2e"] for r in ok) / wall, 2),
        "next_request_gap_p50_ms": _ms(gaps),
        "next_request_gap_p90_ms": round(1000 * sorted(gaps)[int(0.9 * len(gaps))], 3) if gaps else None,
        "client_cpu_us_per_chunk": round(1e6 * cpu / max(1, chunks), 1),
    }


async def measure(url: str, a: argparse.Namespace, tmp: Path) -> dict:
    cfg = BenchConfig(
        url=url,
        max_new_tokens=a.max_new_tokens,
        ignore_eos=True,
        concurrency=a.concurrency,
        progress=False,
        out_dir=str(tmp / "unused"),
    )
    log = RecordLog(tmp / "records.jsonl")
    clients = {
        "kit_before": lambda n: kit_round(url, n, cfg, log, pinned=False),
        "kit": lambda n: kit_round(url, n, cfg, log),
        "reference": lambda n: reference_round(url, n, cfg),
    }
    rounds: dict[str, list[dict]] = {name: [] for name in clients}
    for run in clients.values():  # warm every path once
        await run(a.concurrency)
    for _ in range(a.rounds):
        for name, run in clients.items():
            c0, t0 = time.process_time(), time.perf_counter()
            rows = await run(a.requests)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rounds[name].append(summarize(rows, wall, cpu, a.concurrency))
    out = {}
    for name, rs in rounds.items():
        out[name] = {k: statistics.median([r[k] for r in rs]) for k in rs[0] if rs[0][k] is not None}
        out[name]["rounds"] = rs
    for name in ("kit_before", "kit"):
        out[f"{name}_over_reference_tok_s"] = round(out[name]["output_tok_s"] / out["reference"]["output_tok_s"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400, help="requests per round per client")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--step-delay", type=float, default=0.0017, help="stub seconds per token per stream")
    ap.add_argument("--url", default=None, help="a running SGLang server instead of the stub (GPU host)")
    ap.add_argument(
        "--installed-cost",
        default="aiohttp",
        help="distribution whose metadata each release read also reads; none: off",
    )
    ap.add_argument("--label", default=None, help="free text stored in the JSON")
    a = ap.parse_args()
    if a.installed_cost != "none":
        versions.installed_version = lambda: importlib.metadata.version(a.installed_cost) and None
    port = free_port()
    cmd = [sys.executable, "-m", "kit.tests.sglang_stub", "--port", str(port), "--no-spec"]
    cmd += ["--step-delay", str(a.step_delay)]
    load0 = load_avg()
    stub = ServerProcess(cmd, port=port) if a.url is None else contextlib.nullcontext()
    with stub, tempfile.TemporaryDirectory() as tmp:
        url = a.url or f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        res = asyncio.run(measure(url, a, Path(tmp)))
    doc = {
        "label": a.label,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "aiohttp": aiohttp.__version__},
        "load_avg_before": load0,
        "load_avg_after": load_avg(),
        "settings": {k: v for k, v in vars(a).items() if k != "label"},
        **res,
    }
    emit(doc)


if __name__ == "__main__":
    main()
