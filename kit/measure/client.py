"""HTTP client for one benchmark request (SGLang `/generate`, OpenAI `/v1/completions` and `/v1/chat/completions`,
streamed or not), plus the server probes kit.measure.bench needs around a run, at the engine's paths.

`send_one` turns one request into one `kit.measure.records.RequestRecord`: arrival time and token count of every
streamed chunk, TTFT, end-to-end latency, the server's token counts and its speculative fields as the engine
names them (`Engine.spec_fields`). It never raises for server or network errors: a failed request is a record
with `ok=False`, so one bad request cannot end a run. Per-chunk token counts are exact for `/generate` (its
cumulative `meta_info.completion_tokens`); an OpenAI content chunk counts as one token, its `usage` kept beside.

    async with httpx.AsyncClient() as c:       # or stream_session(...) (aiohttp) for streamed requests
        rec = await send_one(c, "http://127.0.0.1:30000", "sglang", "Hello", opts, model=None)

`opts` is anything with max_new_tokens, temperature, ignore_eos, stream (kit.measure.bench.BenchConfig).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from kit.measure import metrics as km
from kit.measure.records import RequestRecord
from kit.serving.engines import Engine, get_engine
from kit.serving.engines.base import Reply

# endpoint of each API a benchmark can speak: the engine's native one (SGLang's /generate), and OpenAI's
API_PATHS = {"sglang": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}

# --- one request ---


def build_payload(
    api: str, text: str, cfg: Any, model: str | None, engine: str | Engine | None = None
) -> tuple[str, dict]:
    if api == "sglang":
        return get_engine(engine).generate_request(
            text, cfg.max_new_tokens, cfg.temperature, ignore_eos=cfg.ignore_eos, stream=cfg.stream
        )
    body = dict(model=model or "default", max_tokens=cfg.max_new_tokens, temperature=cfg.temperature, stream=cfg.stream)
    if cfg.stream:
        body["stream_options"] = {"include_usage": True}
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    body.update({"messages": [{"role": "user", "content": text}]} if api == "chat" else {"prompt": text})
    return API_PATHS["chat" if api == "chat" else "completions"], body


async def send_one(
    client,
    base: str,
    api: str,
    text: str,
    cfg: Any,
    model: str | None,
    extra: dict | None = None,
    engine: str | Engine | None = None,
) -> RequestRecord:
    """Send one request; return its record (never raises for server/network errors)."""
    engine = get_engine(engine)
    path, body = build_payload(api, text, cfg, model, engine)
    if extra:
        body.update(extra)
    rec = RequestRecord(api=api, t_start=time.time())
    t0 = time.perf_counter()
    try:
        if cfg.stream:
            await _stream(client, base + path, body, api, rec, t0, engine)
        else:
            r = await client.post(base + path, json=body)
            r.raise_for_status()
            obj = r.json()
            _absorb(engine.read_response(obj, api), rec)
            if api == "sglang" and obj.get("output_ids") is not None:
                rec.output_ids = obj["output_ids"]  # the generated token ids (whole, unstreamed)
            n = rec.completion_tokens or 0
            rec.chunk_t, rec.chunk_tok = [time.perf_counter() - t0], [n]
            rec.client_tokens = n
        rec.ok = True
    except Exception as e:  # record the failure; one bad request must not end the run
        rec.error = f"{type(e).__name__}: {e}"[:500]
    rec.e2e = time.perf_counter() - t0
    return rec


@dataclass(slots=True)
class BodyAnswer:
    """What a server answered one arbitrary body (`post_body`): its status and whole answer, or how it failed."""

    status: int | None  # None: no HTTP answer (dropped or timed out)
    body: bytes = b""  # the answer read to its end (a stream: every event), at most 1 MiB kept
    seconds: float = 0.0
    dropped: bool = False  # the connection failed or closed before a whole answer
    timed_out: bool = False  # no whole answer within timeout_s (the client gave up: it left)
    error: str | None = None


async def post_body(client, url: str, body: dict | bytes, timeout_s: float) -> BodyAnswer:
    """POST one arbitrary body over an httpx.AsyncClient (a dict as JSON, bytes as they are), the answer read to
    its end. Never raises for server or network errors; past `timeout_s` the request is cancelled, closing its
    connection (a client that gives up)."""
    import asyncio

    import httpx

    kw = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {}
    kw = kw or {"json": body}
    ans = BodyAnswer(status=None)
    t0 = time.perf_counter()

    async def go() -> None:
        async with client.stream("POST", url, **kw) as r:
            ans.status = r.status_code
            async for chunk in r.aiter_bytes():
                if len(ans.body) < 1 << 20:
                    ans.body += chunk

    try:
        await asyncio.wait_for(go(), timeout_s)
    except (TimeoutError, httpx.TimeoutException):
        ans.timed_out = True
    except httpx.TransportError as e:  # refused, reset, closed mid-answer
        ans.dropped = True
        ans.error = f"{type(e).__name__}: {e}"[:300]
    ans.seconds = time.perf_counter() - t0  # status stays what the headers said, when they came
    return ans


def _absorb(reply: Reply, rec: RequestRecord) -> None:
    """Fold what one answer says (the engine read it: `Engine.read_response`) into the request's record."""
    if reply.spec:
        rec.spec = reply.spec
    for name in ("completion_tokens", "prompt_tokens", "finish_reason"):
        if getattr(reply, name) is not None:
            setattr(rec, name, getattr(reply, name))


def stream_session(concurrency: int, timeout_s: float):
    """An aiohttp session for streamed requests (connections kept alive), or None without aiohttp (httpx streams).
    Per chunk httpx (pure Python) costs ~2.5x the client CPU of aiohttp's C parser (110-140 vs 45-50 us at 16
    streams, 2-core machine), which queues chunks on one event loop and shows up as TTFT and ITL. aiohttp is also
    what `sglang.bench_serving` uses."""
    try:
        import aiohttp
    except ImportError:  # optional transport, third-party
        return None
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency + 4),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        read_bufsize=1 << 20,
    )


@contextlib.asynccontextmanager
async def _open_stream(client, url: str, body: dict):
    """POST `body` and yield the response's byte chunks as they arrive, over httpx or aiohttp alike;
    an HTTP error status raises with the start of the server's answer."""
    if type(client).__module__.startswith("aiohttp"):
        async with client.post(url, json=body) as resp:
            if resp.status >= 400:
                raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            yield resp.content.iter_any()
        return
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code >= 400:
            await resp.aread()
            raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
        yield resp.aiter_bytes()


try:  # orjson parses SGLang's cumulative chunks 2-3x faster; both take bytes
    from orjson import loads as _loads
except ImportError:  # optional speed-up, third-party
    _loads = json.loads


async def _stream(client, url: str, body: dict, api: str, rec: RequestRecord, t0: float, engine: Engine) -> None:
    """Read a server-sent-event stream as raw bytes: each network read stamped on arrival (before parsing),
    events split on newlines and parsed from bytes, and for `/generate` (cumulative meta_info) only the last
    absorbed in full. The client's cost per chunk inflates TTFT and ITL once many streams share one event
    loop, so the per-chunk lists are local names and the record's counters are set once, at the end."""
    prev_tokens = 0
    last = None
    buf = b""
    chunk_t, chunk_tok = rec.chunk_t, rec.chunk_tok
    try:
        async with _open_stream(client, url, body) as chunks:
            async for raw in chunks:
                now = time.perf_counter() - t0
                *lines, buf = (buf + raw).split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    obj = _loads(data)
                    if api == "sglang":
                        # the native stream's token count is cumulative: the delta is exact per chunk, and
                        # with speculative decoding one chunk carries one verify step's tokens; its speculative
                        # fields are read once, from the last event
                        total = engine.read_native(obj).completion_tokens or 0
                        k = total - prev_tokens
                        prev_tokens = max(prev_tokens, total)
                        last = obj
                    else:
                        reply = engine.read_response(obj, api)
                        k = 1 if reply.text else 0  # OpenAI streams carry no token counts
                        _absorb(reply, rec)
                    if k > 0:
                        chunk_t.append(now)
                        chunk_tok.append(k)
    finally:  # a stream cut short keeps what arrived
        if chunk_t:
            rec.ttft = chunk_t[0]
            rec.client_tokens = sum(chunk_tok)
    if last is not None:
        _absorb(engine.read_response(last, api), rec)


# --- server probing and snapshots ---


def check_server(base: str, flag: str = "--url", timeout_s: float = 5.0, engine: str | Engine | None = None) -> None:
    """A one-line KitInputError naming `flag` when no server answers at `base`, or its ready path answers 503
    (SGLang loading its weights); any other HTTP answer counts as alive (OpenAI servers may have no /health)."""
    import httpx

    from kit.findings import KitInputError

    ready = get_engine(engine).ready_path
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as c:
            r = c.get(base + ready)
    except httpx.HTTPError as e:
        why = type(e).__name__ if not str(e) else str(e)
        raise KitInputError(
            f"{flag} {base}: no server answers ({why}); start it first (kit launch, or python -m "
            f"sglang.launch_server ...) or correct the URL"
        )
    if r.status_code == 503:
        raise KitInputError(f"{flag} {base}: {ready} answers 503 (still loading?); wait until the server is ready")


async def get_json(client, url: str) -> dict | None:
    try:
        r = await client.get(url)
        return r.json() if r.status_code == 200 else None
    except Exception:  # an endpoint the server does not have is just "absent"
        return None


async def server_info(client, base: str, engine: str | Engine | None = None) -> dict | None:
    """The engine's server info (the first of its server-info paths that answers), or None."""
    for path in get_engine(engine).server_info_paths:
        info = await get_json(client, base + path)
        if info is not None:
            return info
    return None


@dataclass(slots=True)
class ServerProbe:
    """What a server offers, asked once before an arm's requests (`probe_server`)."""

    sglang: bool  # the engine's server info answered: its speculative fields can be asked for
    model: str | None  # the first model id its models path lists (what OpenAI endpoints are sent)


async def probe_server(client, base: str, engine: str | Engine | None = None) -> ServerProbe:
    """What this server offers: the engine's server info, the model id."""
    engine = get_engine(engine)
    info = await server_info(client, base, engine)
    models = (await get_json(client, base + engine.models_path) or {}).get("data")
    return ServerProbe(sglang=info is not None, model=models[0].get("id") if models else None)


async def snapshot_metrics(client, base: str, engine: str | Engine | None = None) -> dict[str, float] | None:
    path = get_engine(engine).metrics_path
    if path is None:
        return None
    try:
        r = await client.get(base + path)
    except Exception:  # no /metrics (not launched with --enable-metrics)
        return None
    if r.status_code != 200 or "text" not in r.headers.get("content-type", "text"):
        return None
    return km.parse_prometheus(r.text)


async def flush_cache(client, base: str, engine: str | Engine | None = None) -> bool:
    path = get_engine(engine).flush_path
    if path is None:
        return False
    for method in ("POST", "GET"):
        try:
            r = await client.request(method, base + path)
            if r.status_code == 200:
                return True
            if r.status_code not in (404, 405):
                return False
        except Exception:
            return False
    return False


def log_accept_lengths(text: str, engine: str | Engine | None = None) -> list[float] | None:
    """Accept lengths of the decode log lines in `text`, read by the engine's log parser (kit.serving.logs)."""
    from kit.serving import logs

    rows = logs.parse_lines(text.splitlines(), get_engine(engine))
    return [r["accept_len"] for r in rows if r["kind"] == "decode" and isinstance(r.get("accept_len"), (int, float))]


# --- a few answers at once, for a look at a live server (notebook 04) ---
def run_sync(coro):
    """asyncio.run, also from inside a running loop (Jupyter/papermill) via a helper thread."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:  # its exception is re-raised here, in the caller's thread
        return pool.submit(asyncio.run, coro).result()


def server_info_now(base_url: str, api_key: str | None = None, engine: str | Engine | None = None) -> dict | None:
    """`server_info` from synchronous code (a notebook cell): the engine's server info now, or None."""
    import httpx

    async def read() -> dict | None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with httpx.AsyncClient(timeout=30, trust_env=False, headers=headers) as c:
            return await server_info(c, base_url, engine)

    return run_sync(read())


def server_accept_length(base_url: str, api_key: str | None = None, engine: str | Engine | None = None):
    """The server's own lifetime accept length (`Engine.server_info_accept_length` of its server info), or None."""
    eng = get_engine(engine)
    return eng.server_info_accept_length(server_info_now(base_url, api_key, eng))


def ask(
    base_url: str,
    prompts: list[str],
    max_tokens: int = 64,
    api_key: str | None = None,
    engine: str | Engine = "sglang",
    chat_template: str | None = None,
):
    """Send chat requests all at once (the server batches them); a DataFrame of tokens, verify steps and accept
    length per prompt, in prompt order (latency_s: seconds from the first send to that answer). Acceptance comes
    from the engine's native generate API (every release serves it), the prompt rendered by the chat template of
    `chat_template` (a tokenizer dir or 'embedded'; default: the server's tokenizer path when local). Without a
    local tokenizer the OpenAI chat endpoint answers, its acceptance columns empty on releases whose chat
    endpoint carries no speculative fields."""
    import asyncio

    import httpx
    import pandas as pd

    from kit.findings import KitInputError
    from kit.models import chat_renderer

    eng = get_engine(engine)
    render = chat_renderer(chat_template or _served_tokenizer(server_info_now(base_url, api_key, eng)))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def one(c, p: str, t_start: float) -> dict:
        if render is not None:
            (path, body), api = eng.generate_request(render(p), max_tokens), "sglang"
        else:
            path, api = API_PATHS["chat"], "chat"
            body = {"messages": [{"role": "user", "content": p}], "max_tokens": max_tokens, "temperature": 0}
            body.update(eng.request_extra(api) or {})
        r = await c.post(base_url + path, json=body)
        if r.status_code != 200:
            raise KitInputError(f"{base_url}: {path} answered {r.status_code}: {r.text[:200]}")
        reply = eng.read_response(r.json(), api)
        rec = RequestRecord(api=api, ok=True)
        _absorb(reply, rec)
        return {
            "prompt": p[:40],
            "completion_tokens": rec.completion_tokens,
            "spec_verify_ct": reply.spec.get("verify_ct"),
            # the server's own figure where it sends one, else the request's (RequestRecord.accept_length)
            "spec_accept_length": reply.spec.get("accept_length") or rec.accept_length,
            "latency_s": round(time.perf_counter() - t_start, 3),
            "text": (reply.text or "")[:60],
        }

    async def run() -> list[dict]:
        async with httpx.AsyncClient(timeout=600, trust_env=False, headers=headers) as c:
            t_start = time.perf_counter()
            return await asyncio.gather(*(one(c, p, t_start) for p in prompts))

    return pd.DataFrame(run_sync(run()))


def _served_tokenizer(info: dict | None) -> str | None:
    """The server's tokenizer (or model) path from its server info, when it is a local directory here."""
    from pathlib import Path

    from kit.models import DEFAULT_TARGET

    for key in ("tokenizer_path", "model_path"):
        p = (info or {}).get(key)
        if p == DEFAULT_TARGET or (p and (Path(p) / "config.json").exists()):
            return p
    return None
