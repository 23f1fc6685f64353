"""Soak benchmark of `kit serve`: N clients for M seconds, well-formed requests mixed with bad bodies and
clients that give up, against the real server process on loopback.

Why: the reference server is what every CPU user of the kit talks to; it must answer every bad request with
a 4xx, never a 5xx or a dropped connection, stop the work of clients that left, and hold its memory flat.
Each client loops: 60% well-formed requests (the three endpoints, streaming or not, 8-32 new tokens), 20% bad
bodies (a row of the table `kit.tests.request_table`: huge max_new_tokens, ids outside the vocabulary, wrong
types, an empty prompt, a prompt over the context, malformed JSON, ...), 20% requests abandoned after 0.05-1 s
(streaming or not, 64-160 new tokens).
A warm-up of the same mix runs first (its figures are not counted); the server's RSS is sampled every second.
After the clients leave: the work still running or queued (/get_load) one second later, and after it settles.
Then two rows of the issue's table are timed: a 6,000-token prompt abandoned after `--abandon-after` s and the
4-token request sent right after it, and a prompt over the context (refused before any work).

    python bench/serve_soak.py [--clients 6] [--seconds 60] [--warmup-s 30] [--draft demo|none]
                               [--max-queued-requests 64] [--chunked-prefill-size 256]

Prints one JSON document (last line of stdout): requests served, 2xx/4xx/5xx/503/dropped counts, p50/p99 latency
of the well-formed requests, RSS at start / after warm-up / end (MB) with its timeline, work left running.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time

import httpx
import psutil
from _run import emit

from kit.serving.process import free_port
from kit.tests.request_table import bad_rows

WORDS = "the quick brown fox jumps over the lazy dog while a cat watches from the warm window".split()


def prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def well_formed(rng: random.Random, n: int) -> tuple[str, dict]:
    text, stream = prompt(rng, rng.randint(4, 40)), rng.random() < 0.5
    kind = rng.randrange(3)
    if kind == 0:
        return "/generate", {"text": text, "stream": stream, "sampling_params": {"max_new_tokens": n}}
    if kind == 1:
        return "/v1/completions", {"prompt": text, "max_tokens": n, "stream": stream}
    msgs = [{"role": "user", "content": text}]
    return "/v1/chat/completions", {"messages": msgs, "max_tokens": n, "stream": stream}


def bad(rng: random.Random, rows: list) -> tuple[str, dict | bytes]:
    """One bad request: a row of the table `kit.tests.request_table.bad_rows` (all refused with a 400)."""
    row = rng.choice(rows)
    return row.endpoint, row.body


class Tally:
    def __init__(self):
        self.status: dict[str, int] = {}
        self.latency: list[float] = []
        self.dropped = 0  # a connection error on a request whose client did not give up
        self.abandoned = 0
        self.served = 0

    def count(self, code: int) -> None:
        self.status[str(code)] = self.status.get(str(code), 0) + 1
        self.served += 1


async def send(c: httpx.AsyncClient, path: str, body, give_up: float | None = None) -> int:
    """Status of one request, its whole answer read (a stream to its end); TimeoutError when abandoned."""
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}

    async def go() -> int:
        async with c.stream("POST", path, **kw) as r:
            async for _ in r.aiter_raw():
                pass
            return r.status_code

    if give_up is None:
        return await go()
    return await asyncio.wait_for(go(), give_up)  # cancelling closes the connection: the client has left


async def client(url: str, seed: int, until: float, tally: Tally, rows: list) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        while time.monotonic() < until:
            roll = rng.random()
            try:
                if roll < 0.6:
                    path, body = well_formed(rng, rng.randint(8, 32))
                    t0 = time.perf_counter()
                    code = await send(c, path, body)
                    if code == 200:
                        tally.latency.append(time.perf_counter() - t0)
                elif roll < 0.8:
                    code = await send(c, *bad(rng, rows))
                else:
                    path, body = well_formed(rng, rng.randint(64, 160))
                    try:
                        code = await send(c, path, body, give_up=rng.uniform(0.05, 1.0))
                    except TimeoutError:
                        tally.abandoned += 1
                        continue
                tally.count(code)
            except httpx.TransportError:
                tally.dropped += 1


def rss_mb(p: psutil.Process) -> float:
    return round(p.memory_info().rss / 2**20, 1)


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup-s", type=float, default=30)
    ap.add_argument("--draft", default="demo", help="'demo' (EAGLE3 3-1-4 with the shipped draft) or 'none'")
    ap.add_argument("--max-queued-requests", type=int, default=64)
    ap.add_argument("--chunked-prefill-size", type=int, default=256)
    ap.add_argument("--abandon-after", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-env", action="append", default=[], help="KEY=VALUE for the server process")
    args = ap.parse_args()

    from kit.models import SHIPPED_DRAFT_DIR

    port = free_port()
    argv = [sys.executable, "-m", "kit", "serve", "--model-path", "embedded", "--port", str(port)]
    argv += ["--max-queued-requests", str(args.max_queued_requests)]
    argv += ["--chunked-prefill-size", str(args.chunked_prefill_size), "--log-level", "warning"]
    if args.draft == "demo":
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(SHIPPED_DRAFT_DIR)]
        argv += ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in args.server_env))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    out: dict = {
        "machine": {"cpus": os.cpu_count()},
        "argv": argv[2:],
        "clients": args.clients,
        "server_env": args.server_env,
    }
    try:
        end = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > end or proc.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.5)
        ps = psutil.Process(proc.pid)
        context = httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"]
        rows = bad_rows(context)
        timeline: list[tuple[float, float]] = []
        t_start = time.monotonic()
        stop_sampling = threading.Event()

        def sample():
            while not stop_sampling.wait(1.0):
                timeline.append((round(time.monotonic() - t_start, 1), rss_mb(ps)))

        threading.Thread(target=sample, daemon=True).start()
        out["rss_start_mb"] = rss_mb(ps)

        def phase(seconds: float, seed: int) -> Tally:
            tally = Tally()
            until = time.monotonic() + seconds

            async def all_clients():
                await asyncio.gather(*(client(url, seed + i, until, tally, rows) for i in range(args.clients)))

            asyncio.run(all_clients())
            return tally

        if args.warmup_s > 0:
            phase(args.warmup_s, args.seed + 1000)
            time.sleep(1.0)
        out["rss_after_warmup_mb"] = rss_mb(ps)
        t0 = time.monotonic()
        tally = phase(args.seconds, args.seed)
        out["soak_s"] = round(time.monotonic() - t0, 1)
        time.sleep(1.0)
        out["left_running_1s_after"] = httpx.get(url + "/get_load").json()
        end = time.monotonic() + 30
        while any(httpx.get(url + "/get_load").json().values()) and time.monotonic() < end:
            time.sleep(0.2)
        out["left_running_settled"] = httpx.get(url + "/get_load").json()
        out["rss_end_mb"] = rss_mb(ps)
        codes = tally.status
        out["requests"] = {
            "served": tally.served,
            "by_status": dict(sorted(codes.items())),
            "2xx": sum(v for k, v in codes.items() if k.startswith("2")),
            "4xx": sum(v for k, v in codes.items() if k.startswith("4")),
            "5xx": sum(v for k, v in codes.items() if k.startswith("5") and k != "503"),
            "503_queue_full": codes.get("503", 0),
            "abandoned_by_client": tally.abandoned,
            "dropped_connections": tally.dropped,
        }
        out["latency_well_formed_s"] = {
            "n": len(tally.latency),
            "p50": pct(tally.latency, 0.5),
            "p99": pct(tally.latency, 0.99),
            "mean": round(statistics.fmean(tally.latency), 3) if tally.latency else None,
        }

        # the table: an abandoned 6,000-token prompt, then a 4-token request; a prompt over the context
        long = {"input_ids": [random.Random(1).randrange(100, 20000) for _ in range(6000)]}
        long["sampling_params"] = {"max_new_tokens": 64}
        try:
            httpx.post(url + "/generate", json=long, timeout=args.abandon_after)
        except httpx.TimeoutException:
            pass
        t0 = time.perf_counter()
        r = httpx.post(url + "/generate", json={"text": "Hello", "sampling_params": {"max_new_tokens": 4}}, timeout=120)
        out["after_abandoned_6000_token_prompt"] = {
            "abandoned_after_s": args.abandon_after,
            "next_request_status": r.status_code,
            "next_request_s": round(time.perf_counter() - t0, 3),
        }
        t0 = time.perf_counter()
        over = {"input_ids": [100] * (context + 1000), "sampling_params": {"max_new_tokens": 4}}
        r = httpx.post(url + "/generate", json=over, timeout=120)
        out["over_context_prompt"] = {
            "tokens": context + 1000,
            "status": r.status_code,
            "answer_s": round(time.perf_counter() - t0, 3),
            "message": r.json()["error"]["message"],
        }
        time.sleep(1.0)
        out["rss_final_mb"] = rss_mb(ps)
        stop_sampling.set()
        out["rss_timeline_mb"] = timeline[:: max(1, len(timeline) // 60)]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
