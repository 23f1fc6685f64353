"""A STUB of SGLang's HTTP API for hermetic client tests — not a model, not a server to trust.

Why a stub: the bench client must be tested on its protocol handling (streaming, meta_info spec
fields, /flush_cache, /metrics, /server_info, OpenAI endpoints, failures) in milliseconds, with
exact known answers. Real servers are tested elsewhere: the CPU reference server (kit.refserver.server)
and llama-cpp-python's OpenAI server (tests/test_llamacpp_server.py).

It mimics SGLang 0.5.23's HTTP API: `/generate` (SSE stream with a
cumulative `meta_info.completion_tokens`, spec fields added only on the finished chunk),
`/v1/completions` and `/v1/chat/completions` (+ `sglext.spec_tokens_details` when asked),
`/flush_cache`, `/server_info` (`internal_states[0].avg_spec_accept_length`), `/metrics`
(Prometheus counters), and optionally decode log lines written to a file.

Generation is fake and deterministic: every request emits exactly max_new_tokens "tokens";
the first comes from "prefill", the rest in verify steps accepting `accept_pattern[i]` tokens
each (bonus included), so the expected accept length of any run is known in closed form.

Raw asyncio HTTP/1.1 (keep-alive, chunked streams) so it costs almost nothing per request —
bench/bench_client.py uses it as the near-zero-work endpoint:

    python -m kit.tests.sglang_stub --port 30000 [--accept 3 2 1] [--no-spec] [--step-delay 0.001]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class StubConfig:
    spec: bool = True  # speculative decoding on (spec fields reported)
    accept_pattern: list[int] = field(default_factory=lambda: [3, 2, 1, 4])
    speculative_num_draft_tokens: int = 4
    step_delay: float = 0.0  # seconds per decode/verify step
    prefill_delay: float = 0.0
    metrics: bool = True  # serve /metrics (SGLang needs --enable-metrics)
    has_flush: bool = True
    metrics_scale: float = 1.0  # fault injection: inflate generation_tokens_total
    fail_every: int = 0  # fault injection: every n-th /generate returns 500
    log_path: str | None = None  # append SGLang-format decode log lines here
    chunk_openai_tokens: bool = False  # OpenAI streams: one chunk per verify step (like SGLang)


class StubState:
    def __init__(self, cfg: StubConfig):
        self.cfg = cfg
        self.gen_tokens = 0
        self.decode_tokens = 0  # tokens from verify steps (not prefill)
        self.verify_calls = 0
        self.requests = 0
        self.flushes = 0
        self.bodies: list[dict] = []
        self.lock = threading.Lock()


def _steps(cfg: StubConfig, n: int) -> list[int]:
    """Tokens per emission: [1 (prefill)] + per-verify-step accepted counts, summing to n."""
    if n <= 0:
        return []
    out, i = [1], 0
    while sum(out) < n:
        k = cfg.accept_pattern[i % len(cfg.accept_pattern)] if cfg.spec else 1
        out.append(min(k, n - sum(out)))
        i += 1
    return out


def _spec_meta(cfg: StubConfig, steps: list[int]) -> dict:
    ver = len(steps) - 1
    if not cfg.spec or ver <= 0:
        return {}
    hist = [0] * cfg.speculative_num_draft_tokens
    for k in steps[1:]:
        hist[min(k - 1, cfg.speculative_num_draft_tokens - 1)] += 1
    correct = sum(k - 1 for k in steps[1:])
    proposed = ver * (cfg.speculative_num_draft_tokens - 1)
    return {
        "spec_verify_ct": ver,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_accept_rate": correct / proposed,
        "spec_accept_length": sum(steps) / ver,
        "spec_correct_drafts_histogram": hist,
    }


class Stub:
    def __init__(self, cfg: StubConfig | None = None):
        self.cfg = cfg or StubConfig()
        self.state = StubState(self.cfg)

    # -- HTTP plumbing -----------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                n = int(headers.get("content-length", 0))
                body = json.loads(await reader.readexactly(n)) if n else {}
                await self.route(method, path.split("?")[0], body, writer)
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _send(writer, status: int, payload, ctype="application/json"):
        data = (
            payload
            if isinstance(payload, bytes)
            else (payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        )
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data
        )

    @staticmethod
    def _chunk(writer, text: str):
        data = text.encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    # -- endpoints ---------------------------------------------------------------------------
    async def route(self, method, path, body, writer):
        st, cfg = self.state, self.cfg
        if path == "/flush_cache" and cfg.has_flush:
            st.flushes += 1
            self._send(writer, 200, "Cache flushed.\n", "text/plain")
        elif path in ("/server_info", "/get_server_info"):
            # SGLang accumulates this from verify steps only (decode-log intervals): no prefill token
            avg = st.decode_tokens / st.verify_calls if st.verify_calls else 0.0
            self._send(
                writer,
                200,
                {
                    "version": "stub",
                    "speculative_algorithm": "EAGLE3" if cfg.spec else None,
                    "speculative_num_draft_tokens": cfg.speculative_num_draft_tokens,
                    "internal_states": [{"avg_spec_accept_length": avg}],
                },
            )
        elif path == "/v1/models":
            self._send(writer, 200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        elif path == "/metrics" and cfg.metrics:
            txt = (
                "# HELP sglang:generation_tokens_total x\n# TYPE sglang:generation_tokens_total counter\n"
                f'sglang:generation_tokens_total{{model_name="stub"}} {st.gen_tokens * cfg.metrics_scale}\n'
                f'sglang:spec_verify_calls_total{{model_name="stub"}} {float(st.verify_calls)}\n'
            )
            self._send(writer, 200, txt, "text/plain; version=0.0.4")
        elif path == "/health":
            self._send(writer, 200, b"")
        elif path in ("/generate", "/v1/completions", "/v1/chat/completions") and method == "POST":
            await self.generate(path, body, writer)
        else:
            self._send(writer, 404, {"detail": "Not Found"})
        await writer.drain()

    async def generate(self, path, body, writer):
        st, cfg = self.state, self.cfg
        with st.lock:
            st.requests += 1
            st.bodies.append(body)
            nreq = st.requests
        if cfg.fail_every and nreq % cfg.fail_every == 0:
            self._send(writer, 500, {"error": "stub: injected failure"})
            return
        if path == "/generate":
            n = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
            prompt = body.get("text") or ""
        else:
            n = int(body.get("max_tokens", 16))
            prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        steps = _steps(cfg, n)
        spec = _spec_meta(cfg, steps)
        ptoks = max(1, len(prompt.split()))
        t0 = time.perf_counter()
        if cfg.prefill_delay:
            await asyncio.sleep(cfg.prefill_delay)

        def meta(done: int, finished: bool) -> dict:
            m = {
                "id": f"req{nreq}",
                "prompt_tokens": ptoks,
                "completion_tokens": done,
                "cached_tokens": 0,
                "finish_reason": {"type": "length", "length": n} if finished else None,
            }
            if finished:
                m.update(spec, e2e_latency=time.perf_counter() - t0)
            return m

        stream = bool(body.get("stream"))
        if stream:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        done = 0
        for i, k in enumerate(steps):
            if i and cfg.step_delay:
                await asyncio.sleep(cfg.step_delay)
            done += k
            last = i == len(steps) - 1
            if not stream:
                continue
            if path == "/generate":
                self._chunk(
                    writer, "data: " + json.dumps({"text": "tok " * done, "meta_info": meta(done, last)}) + "\n\n"
                )
            else:
                pieces = [k] if cfg.chunk_openai_tokens else [1] * k
                for j, cnt in enumerate(pieces):
                    fin = last and j == len(pieces) - 1
                    self._chunk(writer, "data: " + json.dumps(self._oa_chunk(path, "tok " * cnt, fin, nreq)) + "\n\n")
            await writer.drain()
        self._account(steps, spec)
        usage = {"prompt_tokens": ptoks, "completion_tokens": n, "total_tokens": ptoks + n}
        ext = (
            {"sglext": {"spec_tokens_details": {k: v for k, v in spec.items()}}}
            if spec and body.get("return_spec_tokens_details")
            else {}
        )
        if stream:
            if path != "/generate":
                final = {"id": f"req{nreq}", "choices": [], "usage": usage, **ext}
                self._chunk(writer, "data: " + json.dumps(final) + "\n\n")
            self._chunk(writer, "data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
        elif path == "/generate":
            self._send(writer, 200, {"text": "tok " * n, "meta_info": meta(n, True)})
        else:
            choice = {"index": 0, "finish_reason": "length"}
            choice.update(
                {"message": {"role": "assistant", "content": "tok " * n}} if "chat" in path else {"text": "tok " * n}
            )
            self._send(writer, 200, {"id": f"req{nreq}", "choices": [choice], "usage": usage, **ext})

    @staticmethod
    def _oa_chunk(path, text, finished, nreq):
        ch = {"index": 0, "finish_reason": "length" if finished else None}
        ch.update({"delta": {"content": text}} if "chat" in path else {"text": text})
        return {"id": f"req{nreq}", "choices": [ch]}

    def _account(self, steps, spec):
        st, cfg = self.state, self.cfg
        with st.lock:
            st.gen_tokens += sum(steps)
            st.decode_tokens += sum(steps[1:]) if spec else 0
            st.verify_calls += spec.get("spec_verify_ct", 0)
        if cfg.log_path and spec:
            dec = sum(steps[1:]) / spec["spec_verify_ct"]
            with open(cfg.log_path, "a") as f:
                f.write(
                    f"[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: {sum(steps)}, "
                    f"token usage: 0.00, accept len: {dec:.2f}, accept rate: {spec['spec_accept_rate']:.2f}, "
                    f"cuda graph: False, gen throughput (token/s): 1.00, #queue-req: 0\n"
                )

    # -- running -----------------------------------------------------------------------------
    async def serve(self, host="127.0.0.1", port=0):
        self.server = await asyncio.start_server(self.handle, host, port, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.server


class StubThread:
    """Run a Stub on a background event loop; `with StubThread(cfg) as s: s.url`."""

    def __init__(self, cfg: StubConfig | None = None):
        self.stub = Stub(cfg)
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.stub.serve())
        self._ready.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.stub.port}"

    @property
    def state(self) -> StubState:
        return self.stub.state

    def __enter__(self):
        self.thread.start()
        self._ready.wait(10)
        return self

    async def _shutdown(self):
        self.stub.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:  # open keep-alive connections: end their handlers cleanly
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--accept", type=int, nargs="+", default=[3, 2, 1, 4])
    p.add_argument("--no-spec", action="store_true")
    p.add_argument("--step-delay", type=float, default=0.0)
    a = p.parse_args(argv)
    stub = Stub(StubConfig(spec=not a.no_spec, accept_pattern=a.accept, step_delay=a.step_delay))

    async def run():
        srv = await stub.serve(port=a.port)
        print(f"stub listening on http://127.0.0.1:{stub.port}", flush=True)
        async with srv:
            await srv.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
