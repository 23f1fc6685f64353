"""`python -m kit serve`: the CPU reference server, speaking SGLang 0.5.23's HTTP API.

    python -m kit serve --model-path embedded --speculative-algorithm EAGLE3 \
        --speculative-draft-model-path DRAFT --speculative-num-steps 3 --speculative-eagle-topk 1 \
        --speculative-num-draft-tokens 4 [--host 127.0.0.1] [--port 30000] [--api-key K] [--enable-metrics]

Takes SGLang's flag names and semantics (the same `kit.serving.launch.LaunchSpec`; flags it cannot honour,
like --tp-size, are logged and ignored), so `--speculative-algorithm EAGLE` with an EAGLE-3 draft
runs without aux capture exactly as SGLang does and the seed's accept length ~1 reproduces on a
laptop. Decoding is real (kit.reference.speculate, greedy verification: output == plain greedy target output).

Endpoints: GET /health, /health_generate (503 while loading), /get_server_info and /server_info
(resolved args + internal_states[0].avg_spec_accept_length), /v1/models, /model_info, /metrics
(with --enable-metrics; SGLang's metric names), POST/GET /flush_cache; POST /generate
(text | input_ids, sampling_params, stream: SSE with cumulative text and meta_info; finished
meta_info has completion_tokens, e2e_latency and spec_verify_ct, spec_accept_length,
spec_accept_rate, spec_num_correct_drafts, spec_num_proposed_drafts,
spec_correct_drafts_histogram), POST /v1/completions and /v1/chat/completions (stream or not;
`return_spec_tokens_details` -> sglext.spec_tokens_details). Streams send one chunk per verify
step (SGLang with --stream-interval 1), after the request has been decoded. Greedy only:
temperature/top_p are accepted and ignored (logged once).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kit import config as kconfig
from kit.findings import KitInputError
from kit.serving.engine import ReferenceEngine, log

HELP = "CPU reference server with SGLang's HTTP API and speculative flags (EAGLE/EAGLE3)"
IGNORED_NOTE = "the CPU reference server ignores"


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


def _sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State  # set on the subclass built by make_server

    def log_message(self, fmt, *args):  # SGLang logs requests only at debug level
        pass

    # -- plumbing ---------------------------------------------------------------------------------
    def _send(self, status: int, payload, ctype: str = "application/json") -> None:
        data = (
            payload
            if isinstance(payload, bytes)
            else (payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        )
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self._chunk(_sse(b"[DONE]"))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return {}
        return json.loads(self.rfile.read(n))

    def _authorized(self) -> bool:
        key = self.state.spec.api_key
        path = self.path.split("?")[0]
        if not key or path in ("/health", "/health_generate"):
            return True
        return self.headers.get("Authorization", "") == f"Bearer {key}"

    # -- routing ----------------------------------------------------------------------------------
    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path.split("?")[0]
        try:
            body = self._body() if method == "POST" else {}
        except ValueError:
            return self._send(400, {"error": {"message": "invalid JSON body"}})
        if not self._authorized():
            return self._send(401, {"error": "Unauthorized"})
        eng = self.state.engine
        if path in ("/health", "/health_generate"):
            return self._send(200 if eng else 503, b"")
        if eng is None:
            return self._send(503, {"error": {"message": "server is starting"}})
        try:
            if path in ("/get_server_info", "/server_info"):
                return self._send(200, eng.server_info())
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [eng.model_card()]})
            if path == "/model_info":
                return self._send(
                    200,
                    {
                        "model_path": eng.spec.model_path,
                        "tokenizer_path": eng.spec.model_path,
                        "is_generation": True,
                        "weight_version": "default",
                        "architectures": eng.target_config.get("architectures"),
                        "model_type": eng.target_config.get("model_type"),
                    },
                )
            if path == "/metrics" and eng.spec.enable_metrics:
                return self._send(200, eng.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
            if path == "/flush_cache":
                return self._send(200, "Cache flushed.\n", "text/plain")
            if method == "POST" and path == "/generate":
                return self._generate(body)
            if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                return self._openai(body, chat=path.endswith("chat/completions"))
        except BadRequest as e:
            return self._send(400, {"error": {"message": str(e), "type": "BadRequestError"}})
        except (BrokenPipeError, ConnectionResetError):
            return None
        return self._send(404, {"detail": "Not Found"})

    # -- generation helpers -----------------------------------------------------------------------
    def _run(self, ids: list[int], sp: dict):
        eng = self.state.engine
        if not self.state.warned_sampling and float(sp.get("temperature") or 0) > 0:
            self.state.warned_sampling = True
            log("reference server: greedy decoding only; temperature/top_p are ignored")
        n = sp.get("max_new_tokens")
        n = self.state.cfg.default_max_tokens if n is None else int(n)
        if n < 1:
            raise BadRequest("max_new_tokens must be >= 1")
        ctx = self.state.spec.context_length
        if ctx and len(ids) >= ctx:  # SGLang's tokenizer manager refuses it with these words
            raise BadRequest(f"The input ({len(ids)} tokens) is longer than the model's context length ({ctx} tokens).")
        if ctx and n + len(ids) > ctx:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                f"a total of {n + len(ids)} tokens: {len(ids)} tokens from the input messages and {n} tokens for "
                "the completion. Please reduce the number of tokens in the input messages or the completion to "
                "fit within the limit."
            )
        out = eng.generate(ids, n, stop_token_ids=sp.get("stop_token_ids") or (), ignore_eos=bool(sp.get("ignore_eos")))
        stops = sp.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        tok = eng.tok
        if stops:  # stop strings: cut at the first token whose text completes a stop string
            for i in range(1, len(out.tokens) + 1):
                text = tok.decode(out.tokens[:i], skip_special_tokens=True)
                hit = next((s for s in stops if s and s in text), None)
                if hit:
                    out.tokens, out.finish_reason = out.tokens[:i], {"type": "stop", "matched": hit}
                    break
        return out

    def _chunks(self, out) -> list[int]:
        """Token counts emitted per scheduler output: prefill token, then each verify step's tokens."""
        sizes, left = [], len(out.tokens)
        steps = [1] + (out.accept_lengths or [1] * max(0, len(out.tokens) - 1))
        for s in steps:
            if left <= 0:
                break
            sizes.append(min(s, left))
            left -= sizes[-1]
        if left > 0:
            sizes.append(left)
        return sizes

    def _text(self, ids: list[int], finish: dict | None = None) -> str:
        text = self.state.engine.tok.decode(ids, skip_special_tokens=True)
        if finish and finish.get("type") == "stop" and isinstance(finish.get("matched"), str):
            text = text[: text.find(finish["matched"])] if finish["matched"] in text else text
        return text

    def _meta(self, rid: str, out, done: int, finished: bool) -> dict:
        m = {
            "id": rid,
            "finish_reason": out.finish_reason if finished else None,
            "prompt_tokens": out.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": done,
            "cached_tokens": 0,
        }
        if finished:
            m["e2e_latency"] = out.e2e_latency
            m.update(self.state.engine.spec_meta(out))
        return m

    # -- /generate ---------------------------------------------------------------------------------
    def _generate(self, body: dict) -> None:
        eng = self.state.engine
        sp = dict(body.get("sampling_params") or {})
        if body.get("input_ids") is not None:
            prompts = body["input_ids"]
            batch = bool(prompts) and isinstance(prompts[0], list)
            prompts = prompts if batch else [prompts]
        elif body.get("text") is not None:
            texts = body["text"]
            batch = isinstance(texts, list)
            prompts = [eng.tok.encode(t) for t in (texts if batch else [texts])]
        else:
            raise BadRequest("give text or input_ids")
        if body.get("stream"):
            if batch:
                raise BadRequest("streaming supports one prompt per request")
            rid = body.get("rid") or uuid.uuid4().hex
            out = self._run(prompts[0], sp)
            self._start_stream()
            done = 0
            sizes = self._chunks(out)
            for i, k in enumerate(sizes):
                done += k
                last = i == len(sizes) - 1
                self._chunk(
                    _sse(
                        {
                            "text": self._text(out.tokens[:done], out.finish_reason if last else None),
                            "output_ids": out.tokens[:done],
                            "meta_info": self._meta(rid, out, done, last),
                        }
                    )
                )
            return self._end_stream()
        res = []
        for ids in prompts:
            out = self._run(ids, sp)
            rid = body.get("rid") or uuid.uuid4().hex
            res.append(
                {
                    "text": self._text(out.tokens, out.finish_reason),
                    "output_ids": out.tokens,
                    "meta_info": self._meta(rid, out, len(out.tokens), True),
                }
            )
        self._send(200, res if batch else res[0])

    # -- OpenAI -----------------------------------------------------------------------------------
    def _openai(self, body: dict, chat: bool) -> None:
        eng = self.state.engine
        if chat:
            msgs = body.get("messages") or []
            if not msgs:
                raise BadRequest("messages is empty")
            text = eng.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            ids = eng.tok(text, add_special_tokens=False)["input_ids"]
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
                if len(prompt) != 1:
                    raise BadRequest("the reference server takes one prompt per request")
                prompt = prompt[0]
            ids = prompt if isinstance(prompt, list) else eng.tok.encode(prompt or "")
        n = body.get("max_completion_tokens") or body.get("max_tokens")
        sp = {
            "max_new_tokens": n if n is not None else (None if chat else 16),
            "temperature": body.get("temperature"),
            "stop": body.get("stop"),
            "stop_token_ids": body.get("stop_token_ids"),
            "ignore_eos": body.get("ignore_eos"),
        }
        out = self._run(ids, sp)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created, model = int(time.time()), body.get("model") or eng.model_name
        reason = "stop" if out.finish_reason["type"] == "stop" else "length"
        matched = out.finish_reason.get("matched") if reason == "stop" else None
        usage = {
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": len(out.tokens),
            "total_tokens": out.prompt_tokens + len(out.tokens),
            "reasoning_tokens": 0,
            "prompt_tokens_details": None,
        }
        spec = eng.spec_meta(out)
        ext = {"sglext": {"spec_tokens_details": spec}} if spec and body.get("return_spec_tokens_details") else {}
        obj = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            choice = {"index": 0, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            text = self._text(out.tokens, out.finish_reason)
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            return self._send(
                200,
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                    **ext,
                },
            )
        self._start_stream()
        head = {"id": rid, "object": obj + ".chunk" if chat else obj, "created": created, "model": model}
        if chat:
            self._chunk(
                _sse(
                    {
                        **head,
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                    }
                )
            )
        done, prev = 0, ""
        sizes = self._chunks(out)
        for i, k in enumerate(sizes):
            done += k
            last = i == len(sizes) - 1
            text = self._text(out.tokens[:done], out.finish_reason if last else None)
            delta, prev = text[len(prev) :], text
            ch = {
                "index": 0,
                "logprobs": None,
                "finish_reason": reason if last else None,
                "matched_stop": matched if last else None,
            }
            ch.update({"delta": {"content": delta}} if chat else {"text": delta})
            self._chunk(_sse({**head, "choices": [ch], **(ext if last else {})}))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk(_sse({**head, "choices": [], "usage": usage}))
        self._end_stream()


class BadRequest(Exception):
    pass


def make_server(spec, cfg: ServeConfig | None = None) -> tuple[ThreadingHTTPServer, State]:
    """Bind (fails fast if the port is taken) and return (server, state); the engine loads later."""
    state = State(spec, cfg or ServeConfig())
    handler = type("BoundHandler", (Handler,), {"state": state})
    srv = ThreadingHTTPServer((spec.host or "127.0.0.1", spec.port or 30000), handler)
    srv.daemon_threads = True
    return srv, state


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
        f"({time.perf_counter() - t0:.1f} s)"
    )


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


def run(args: argparse.Namespace) -> int:
    from kit.serving.launch import LaunchSpec

    spec = kconfig.from_namespace(LaunchSpec, args)
    cfg = kconfig.from_namespace(ServeConfig, args)
    check_paths(spec)
    srv, state = make_server(spec, cfg)  # OSError (port in use) surfaces before any model loads
    host, port = srv.server_address[:2]

    def loader():
        try:
            load_engine(state)
        except KitInputError as e:  # a user error found while loading: one line, exit 2
            log(f"kit serve: error: {e}")
            os._exit(2)
        except Exception as e:  # the starter sees the exit code and these lines
            traceback.print_exc()
            log(f"kit serve: error: {e}")
            os._exit(1)
        log("The server is fired up and ready to roll!")

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start())
    log(f"Uvicorn running on http://{host}:{port} (kit reference server; /health is 503 until loaded)")
    threading.Thread(target=loader, name="kit-load", daemon=True).start()
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    srv.server_close()
    return 0
