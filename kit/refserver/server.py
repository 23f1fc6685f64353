"""`python -m kit serve`: the CPU reference server, speaking SGLang's HTTP API on FastAPI + uvicorn.

    python -m kit serve --model-path embedded --speculative-algorithm EAGLE3 \
        --speculative-draft-model-path DRAFT --speculative-num-steps 3 --speculative-eagle-topk 1 \
        --speculative-num-draft-tokens 4 [--host 127.0.0.1] [--port 30000] [--api-key K] [--enable-metrics]

Takes SGLang's flag names and semantics (the same `kit.serving.launch.LaunchSpec`; flags it cannot
honour, like --tp-size, are logged and ignored), so `--speculative-algorithm EAGLE` with an EAGLE-3
draft runs without aux capture exactly as SGLang does and the seed's accept length ~1 reproduces on a
laptop. Decoding is real and batched (kit.refserver.decoder: one decode loop, continuous batching, greedy
verification, so each request's output == the target's plain greedy output).

Endpoints: GET /health, /health_generate (503 while loading), /get_server_info and /server_info
(resolved args + internal_states[0].avg_spec_accept_length), /v1/models, /model_info, /metrics
(with --enable-metrics; SGLang's metric names), POST/GET /flush_cache; POST /generate
(text | input_ids, sampling_params, stream: SSE with cumulative text and meta_info; finished
meta_info has completion_tokens, e2e_latency and spec_verify_ct, spec_accept_length,
spec_accept_rate, spec_num_correct_drafts, spec_num_proposed_drafts,
spec_correct_drafts_histogram), POST /v1/completions and /v1/chat/completions (stream or not;
`return_spec_tokens_details` -> sglext.spec_tokens_details). A stream sends one chunk per scheduler
output as it happens: the prefill token, then each verify step's accepted tokens (SGLang with
--stream-interval 1). Greedy only: temperature/top_p are checked (SGLang's ranges) and ignored (logged once).

Batches as SGLang serves them: a list `text`/`input_ids` in /generate answers a list of results (streamed: each
chunk with its prompt's `index`), a list `prompt` in /v1/completions one choice per prompt.

Bad input and load: every body goes through kit.refserver.validate before any work (a bad one is a 400 naming its
field; a prompt plus max_new_tokens over the context is refused there; on a streamed /generate the checks SGLang's
TokenizerManager makes are refused as SGLang does, inside the 200 stream); past
--max-queued-requests waiting requests a new one gets 503 with Retry-After; a request whose client disconnects
(streaming or not) is cancelled in the engine, which drops it before its next step (--chunked-prefill-size keeps
that step short for a long prompt). GET /get_load: the requests running and waiting.
"""

# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations (Request) at runtime
import argparse
import asyncio
import json
import os
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from kit import config as kconfig
from kit.findings import KitInputError
from kit.refserver.decoder import PROTOCOL, Outcome, ReferenceEngine, log

HELP = "CPU reference server with SGLang's HTTP API and speculative flags (EAGLE/EAGLE3)"
IGNORED_NOTE = "the CPU reference server ignores"
UNAUTHENTICATED = ("/health", "/health_generate")
# how often a request waiting for tokens asks whether its client is still connected (well under one decode step)
DISCONNECT_POLL_S = 0.05
# what a 503 for a full queue tells the client to wait before it retries
RETRY_AFTER_S = 1
ERROR_TYPES = {400: "BadRequestError", 503: "ServiceUnavailableError", 500: "InternalServerError"}


@dataclass
class ServeConfig:
    device: str = field(default="cpu", metadata={"help": "torch device"})
    dtype: str = field(default="float32", metadata={"help": "torch dtype of target and draft"})
    default_max_tokens: int = field(default=256, metadata={"help": "max new tokens when a request sets none"})


class State:
    def __init__(self, spec, cfg: ServeConfig):
        self.spec, self.cfg = spec, cfg
        self.engine: ReferenceEngine | None = None
        self.warned_sampling = False

    def limits(self):
        from kit.refserver.validate import Limits

        eng = self.engine
        api = PROTOCOL.api  # the release this server speaks
        return Limits(
            eng.context_length, eng.vocab_size, self.cfg.default_max_tokens, api.chat_roles, api.max_stop_strings
        )


class ClientGone(Exception):
    """The client disconnected before its answer was ready; its request was cancelled in the engine."""


def _sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def cut_at_stop(tok, tokens: list[int], stops: list[str]) -> tuple[int, str] | None:
    """(token count, matched string) of the first token whose decoded text completes a stop string."""
    if not stops:
        return None
    for i in range(1, len(tokens) + 1):
        text = tok.decode(tokens[:i], skip_special_tokens=True)
        hit = next((s for s in stops if s and s in text), None)
        if hit:
            return i, hit
    return None


class Generation:
    """One request inside the engine, seen from the event loop: an async stream of token updates.

    The engine's decode thread hands each step's tokens over with `call_soon_threadsafe`; stop
    strings are applied here, on the text, and end the request inside the engine too. While it waits
    for tokens it asks the connection every DISCONNECT_POLL_S whether the client is still there; a client
    that left has its request cancelled (the engine drops it before its next step) and ClientGone raised."""

    def __init__(self, state: State, ids: list[int], req, request=None):
        eng = state.engine
        if not state.warned_sampling and req.temperature > 0:
            state.warned_sampling = True
            log("reference server: greedy decoding only; temperature/top_p are ignored")
        self.stops = req.stop
        self.eng, self.ids, self.request = eng, list(ids), request
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.tokens: list[int] = []
        self.outcome: Outcome | None = None
        self.matched: str | None = None
        self.check_at = 0.0
        self.req = eng.submit(
            self.ids,
            req.max_new_tokens,
            stop_token_ids=req.stop_token_ids,
            ignore_eos=req.ignore_eos,
            on_update=self._from_engine,
        )

    def _from_engine(self, tokens: list[int], outcome: Outcome | None) -> None:  # decode thread
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (tokens, outcome))

    async def _next(self):
        while True:
            if self.request is not None and time.monotonic() >= self.check_at:  # at most every DISCONNECT_POLL_S
                self.check_at = time.monotonic() + DISCONNECT_POLL_S
                if await self.request.is_disconnected():
                    raise ClientGone()
            try:
                return await asyncio.wait_for(self.queue.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                continue

    async def updates(self) -> AsyncIterator[tuple[int, bool]]:
        """Yields (tokens so far, finished) once per engine step; cancels the request if abandoned."""
        try:
            while True:
                tokens, outcome = await self._next()
                if isinstance(outcome, Exception):
                    raise outcome
                self.tokens += tokens
                cut = cut_at_stop(self.eng.tok, self.tokens, self.stops) if self.stops else None
                if cut:
                    self.tokens, self.matched = self.tokens[: cut[0]], cut[1]
                    self.outcome = self.eng.finish(self.req, self.tokens, {"type": "stop", "matched": cut[1]})
                elif outcome is not None:
                    self.outcome = outcome
                yield len(self.tokens), self.outcome is not None
                if self.outcome is not None:
                    return
        finally:
            if self.outcome is None:
                self.eng.cancel(self.req)

    async def result(self) -> Outcome:
        async for _ in self.updates():
            pass
        return self.outcome

    def text(self, upto: int | None = None) -> str:
        text = self.eng.tok.decode(self.tokens[:upto], skip_special_tokens=True)
        if self.matched and self.matched in text:
            text = text[: text.find(self.matched)]
        return text

    def meta(self, rid: str, done: int, finished: bool) -> dict:
        o = self.outcome
        m = _meta(rid, o.finish_reason if finished else None, len(self.ids), done)
        if finished:
            m["e2e_latency"] = o.e2e_latency
            m.update(self.eng.spec_meta(o))
        return m


def submit_all(state: State, req, request) -> list["Generation | None"]:
    """Every prompt of `req` into the engine, or none (a full queue cancels the ones already queued); None for a
    batch's empty token list, which is answered aborted (`aborted_result`)."""
    gens: list[Generation | None] = []
    try:
        for ids in req.prompts:
            gens.append(None if ids is None else Generation(state, ids, req, request))
    except BaseException:
        for g in gens:
            if g is not None:
                state.engine.cancel(g.req)
        raise
    return gens


def aborted_result(rid: str) -> dict:
    """A batch entry SGLang admits but the reference server cannot run (an empty token list): its place in the
    answer, finished with SGLang's abort reason."""
    from kit.sglang.http_api import REQUEST_ERRORS

    reason = {"type": "abort", "message": REQUEST_ERRORS["empty_input_ids"], "status_code": 400}
    return {"text": "", "output_ids": [], "meta_info": {**_meta(rid, reason, 0, 0), "e2e_latency": 0.0}}


def _meta(rid: str, finish_reason, prompt_tokens: int, completion_tokens: int) -> dict:
    """The meta_info fields every /generate result carries, in SGLang's order."""
    m = {"id": rid, "finish_reason": finish_reason, "prompt_tokens": prompt_tokens, "weight_version": "default"}
    m.update(num_retractions=0, reasoning_tokens=0, completion_tokens=completion_tokens, cached_tokens=0)
    return m


async def merged(gens: list["Generation | None"]) -> AsyncIterator[tuple[int, int, bool]]:
    """(index, tokens so far, finished) of several generations, each update as it comes (SGLang's
    TokenizerManager._stream_batch_responses: FIRST_COMPLETED over the batch); None entries yield nothing."""
    its = {i: g.updates().__aiter__() for i, g in enumerate(gens) if g is not None}
    tasks = {asyncio.ensure_future(it.__anext__()): i for i, it in its.items()}
    try:
        while tasks:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                i = tasks.pop(t)
                try:
                    n, finished = t.result()
                except StopAsyncIteration:
                    continue
                yield i, n, finished
                tasks[asyncio.ensure_future(its[i].__anext__())] = i
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # each cancelled update ends (and cancels) its request
        for it in its.values():
            await it.aclose()


def error_body(message: str, code: int) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(code, "ServerError"), "code": code}}


class _Gate:
    """API key and 'starting' check, as plain ASGI: FastAPI's @app.middleware("http") hands the endpoint a
    receive channel on which a client's disconnect never shows, so abandoned work could not be stopped."""

    def __init__(self, app, state: State):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        from fastapi.responses import JSONResponse

        path = scope.get("path", "")
        if scope["type"] == "http" and path not in UNAUTHENTICATED:
            key = self.state.spec.api_key
            auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if key and auth != f"Bearer {key}":
                return await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
            if self.state.engine is None:
                answer = JSONResponse({"error": {"message": "server is starting"}}, status_code=503)
                return await answer(scope, receive, send)
        await self.app(scope, receive, send)


async def _body_of(request) -> dict:
    """The request's JSON object ({} for an empty body); KitInputError (a 400) for anything else."""
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise KitInputError(f"body: invalid JSON ({e})")
    if not isinstance(body, dict):
        raise KitInputError("body: the JSON body must be an object")
    return body


async def _one(*chunks: bytes) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c


def _stream(chunks: AsyncIterator[bytes]):
    """An SSE response; after the 200 and its headers, a failure is one SSE error event (SGLang's shape), then
    [DONE]."""
    from fastapi.responses import StreamingResponse

    async def guarded():
        try:
            async for c in chunks:
                yield c
        except ClientGone:
            return
        except KitInputError as e:
            yield _sse(error_body(str(e), 400))
            yield _sse(b"[DONE]")
        except Exception as e:  # noqa: BLE001  (the engine's step failed: the client hears why)
            yield _sse(error_body(f"{type(e).__name__}: {e}", 500))
            yield _sse(b"[DONE]")

    return StreamingResponse(guarded(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _finish_all(state: State, gens: list["Generation | None"]) -> None:
    """Every generation run to its end; the ones left unfinished (a client gone, a failure) cancelled."""
    try:
        for g in gens:
            if g is not None:
                await g.result()
    finally:
        for g in gens:
            if g is not None and g.outcome is None:
                state.engine.cancel(g.req)


async def _generate(state: State, request):
    """SGLang's native /generate: one prompt or a batch, streamed or whole. A batch is answered as SGLang does
    (TokenizerManager._handle_batch_request): whole, a JSON list of the results in prompt order; streamed,
    each result's chunks as they come, each carrying its prompt's `index`."""
    from kit.refserver.validate import generate_request

    req = generate_request(await _body_of(request), state.engine.tok, state.limits())
    gens = submit_all(state, req, request)  # submitted together: batched in the engine
    rids = [req.rid if req.rid and not req.batch else uuid.uuid4().hex for _ in gens]

    def result(i: int, done: int, finished: bool) -> dict:
        g = gens[i]
        if g is None:
            return aborted_result(rids[i])
        return {"text": g.text(done), "output_ids": g.tokens[:done], "meta_info": g.meta(rids[i], done, finished)}

    def chunk(i: int, done: int, finished: bool) -> dict:
        """A streamed result: a batch's carries its prompt's `index` (the whole answer's list does not)."""
        out = result(i, done, finished)
        return {**out, "index": i} if req.batch else out

    if req.stream:

        async def chunks():
            for i, g in enumerate(gens):
                if g is None:
                    yield _sse(chunk(i, 0, True))
            async for i, done, finished in merged(gens):
                yield _sse(chunk(i, done, finished))
            yield _sse(b"[DONE]")

        return _stream(chunks())
    await _finish_all(state, gens)
    res = [result(i, len(g.tokens) if g else 0, True) for i, g in enumerate(gens)]
    return res if req.batch else res[0]


async def _openai(state: State, request, chat: bool):
    """OpenAI's /v1/completions (chat=False) and /v1/chat/completions, streamed or whole, with SGLang's
    `sglext.spec_tokens_details` when asked. A batch of prompts gets one choice per prompt, `index` its place,
    and the usage summed over them (serving_completions._build_completion_response,
    UsageProcessor.calculate_response_usage)."""
    from kit.refserver.validate import openai_request

    eng = state.engine
    req = openai_request(await _body_of(request), eng.tok, state.limits(), chat)
    gens = submit_all(state, req, request)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created, model = int(time.time()), req.model or eng.model_name
    obj = "chat.completion" if chat else "text_completion"
    base = {"id": rid, "object": obj, "created": created, "model": model}

    def closing(g) -> tuple[str, str | None, dict]:
        o = g.outcome
        reason = "stop" if o.finish_reason["type"] == "stop" else "length"
        matched = o.finish_reason.get("matched") if reason == "stop" else None
        spec = eng.spec_meta(o)
        ext = {"sglext": {"spec_tokens_details": spec}} if spec and req.return_spec_tokens_details else {}
        return reason, matched, ext

    def usage() -> dict:
        prompt = sum(len(g.ids) for g in gens)
        done = sum(len(g.tokens) for g in gens)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": done,
            "total_tokens": prompt + done,
            "reasoning_tokens": 0,
            "prompt_tokens_details": None,
        }

    if not req.stream:
        await _finish_all(state, gens)
        choices, ext = [], {}
        for i, g in enumerate(gens):
            reason, matched, ext_i = closing(g)
            ext = ext or ext_i  # the first result's, as SGLang builds sglext
            choice = {"index": i, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            choice.update({"message": {"role": "assistant", "content": g.text()}} if chat else {"text": g.text()})
            choices.append(choice)
        return {**base, "choices": choices, "usage": usage(), **ext}
    head = {**base, "object": obj + ".chunk"} if chat else base

    async def chunks():
        if chat:
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            yield _sse({**head, "choices": [first]})
        prev = [""] * len(gens)
        async for i, done, finished in merged(gens):
            g = gens[i]
            text = g.text(done)
            delta, prev[i] = text[len(prev[i]) :], text
            ch: dict[str, Any] = {"index": i, "logprobs": None, "finish_reason": None, "matched_stop": None}
            ext: dict = {}
            if finished:
                reason, matched, ext = closing(g)
                ch.update(finish_reason=reason, matched_stop=matched)
            ch.update({"delta": {"content": delta}} if chat else {"text": delta})
            yield _sse({**head, "choices": [ch], **ext})
        if req.include_usage:
            yield _sse({**head, "choices": [], "usage": usage()})
        yield _sse(b"[DONE]")

    return _stream(chunks())


def _info_routes(app, state: State) -> None:
    """Readiness, server info, load, models, metrics and cache flush, as SGLang serves them."""
    from fastapi.responses import JSONResponse, PlainTextResponse, Response

    @app.get("/health")
    @app.get("/health_generate")
    async def health():
        return Response(status_code=200 if state.engine else 503)

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def server_info():
        return state.engine.server_info()

    @app.get("/get_load")
    async def get_load():
        return state.engine.load()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [state.engine.model_card()]}

    @app.get("/model_info")
    async def model_info():
        eng = state.engine
        return {
            "model_path": eng.spec.model_path,
            "tokenizer_path": eng.spec.model_path,
            "is_generation": True,
            "weight_version": "default",
            "architectures": eng.target_config.get("architectures"),
            "model_type": eng.target_config.get("model_type"),
        }

    @app.get("/metrics")
    async def metrics():
        if not state.engine.spec.enable_metrics:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return PlainTextResponse(state.engine.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache():
        return PlainTextResponse("Cache flushed.\n")


def create_app(state: State):
    """The HTTP app: the gate, the one place errors become answers, SGLang's info routes and its three
    generation APIs."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from kit.refserver.decoder import QueueFull

    app = FastAPI(title="kit reference server", openapi_url=None, docs_url=None, redoc_url=None)
    app.add_middleware(_Gate, state=state)

    # the one place a bad request becomes an answer: every check of kit.refserver.validate (and the engine's
    # own input checks) raises KitInputError, answered 400 with its one line; one SGLang's TokenizerManager makes
    # on a /generate body that asked to stream (RequestRefused.in_stream) is refused as SGLang does: after the
    # 200, one SSE error event in SGLang's shape, then [DONE] (http_server.generate_request.stream_results)
    @app.exception_handler(KitInputError)
    async def bad_request(_request: Request, e: KitInputError):
        if getattr(e, "in_stream", False):
            event = {"error": {"message": str(e), "type": "invalid_request_error", "code": 400, "retryable": False}}
            return _stream(_one(_sse(event), _sse(b"[DONE]")))
        return JSONResponse(error_body(str(e), 400), status_code=400)

    @app.exception_handler(QueueFull)
    async def queue_full(_request: Request, e: QueueFull):
        return JSONResponse(error_body(str(e), 503), status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(ClientGone)
    async def client_gone(_request: Request, _e: ClientGone):
        return Response(status_code=499)  # nobody reads it: the connection is closed

    _info_routes(app, state)

    @app.post("/generate")
    async def generate(request: Request):
        return await _generate(state, request)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _openai(state, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _openai(state, request, chat=True)

    return app


def load_engine(state: State) -> None:
    from kit.serving.engines import REFERENCE_FIELDS
    from kit.serving.launch import FIELDS

    spec = state.spec
    ignored = [n for n in FIELDS if n not in REFERENCE_FIELDS and getattr(spec, n) not in (None, False)]
    if ignored:
        log(f"{IGNORED_NOTE}: {', '.join('--' + n.replace('_', '-') for n in ignored)}")
    t0 = time.perf_counter()
    state.engine = eng = ReferenceEngine(spec, device=state.cfg.device, dtype=state.cfg.dtype)
    w = eng.wiring.describe() if eng.wiring is not None else "no speculation"
    p = eng.params.label() if eng.params is not None else "-"
    log(
        f"Load weight end. target={eng.model_dir} algorithm={eng.algorithm} params={p} wiring: {w} "
        f"products: {eng.decoder.runner.plan.describe()} ({time.perf_counter() - t0:.1f} s)"
    )


def make_server(spec, cfg: ServeConfig | None = None):
    """(uvicorn.Server, State): the app is served as soon as the server runs; the engine loads later."""
    import uvicorn

    state = State(spec, cfg or ServeConfig())
    host, port, level = spec.host or "127.0.0.1", spec.port or 30000, (spec.log_level or "info").lower()
    app = create_app(state)
    config = uvicorn.Config(app, host=host, port=port, log_level=level, access_log=False, timeout_graceful_shutdown=2)
    return uvicorn.Server(config), state


def add_arguments(p: argparse.ArgumentParser) -> None:
    from kit.serving.engines import REFERENCE_FIELDS
    from kit.serving.launch import LaunchSpec

    # the SGLang flags this server implements; the others (--tp-size, --attention-backend, ...) are refused
    kconfig.add_arguments(
        p, LaunchSpec, only=REFERENCE_FIELDS,
        refuse="the CPU reference server does not implement this SGLang flag; drop it, or serve with SGLang (kit launch)",
    )  # fmt: skip
    kconfig.add_arguments(p, ServeConfig)


def check_paths(spec) -> None:
    """The model and draft paths exist (one-line error naming the flag) before anything loads."""
    from kit.models import DEFAULT_TARGET

    if spec.model_path not in (None, "", DEFAULT_TARGET):
        kconfig.local_path(spec.model_path, "--model-path", "a model directory or 'embedded'")
    if spec.speculative_draft_model_path:
        kconfig.local_path(spec.speculative_draft_model_path, "--speculative-draft-model-path", "a draft directory")


def check_params(spec) -> None:
    """Steps/topk/draft tokens SGLang refuses or crashes on (`kit.sglang.params.resolve`, the rule the
    launch checks report): the same one-line message, before anything binds or loads."""
    from kit.sglang.params import EAGLE_FAMILY

    alg = (spec.speculative_algorithm or "").upper()
    if alg in EAGLE_FAMILY:
        spec.spec_params().resolved(alg)


def run(args: argparse.Namespace) -> int:
    from kit.serving.launch import LaunchSpec

    spec = kconfig.from_namespace(LaunchSpec, args)
    cfg = kconfig.from_namespace(ServeConfig, args)
    check_paths(spec)
    check_params(spec)
    server, state = make_server(spec, cfg)

    def loader():
        while not server.started:  # uvicorn binds first: a taken port fails before any model loads
            if server.should_exit:
                return
            time.sleep(0.05)
        try:
            load_engine(state)
        except KitInputError as e:  # a user error found while loading: one line, exit 2
            log(PROTOCOL.error_line(e))
            os._exit(2)
        except Exception as e:  # the starter sees the exit code and these lines
            traceback.print_exc()
            log(PROTOCOL.error_line(e))
            os._exit(1)
        log("The server is fired up and ready to roll!")

    threading.Thread(target=loader, name="kit-load", daemon=True).start()
    server.run()
    if state.engine is not None:
        state.engine.stop()
    return 0 if server.started else 1
