"""A serving engine that is nothing like SGLang, in one module: the proof that the engine seam holds.

`ToyEngine` is the protocol object (`kit.serving.engines.base.Engine`); `python -m
kit.tests.serving.toy_engine ...` is its server (stdlib only, no model: it "generates" `max_tokens`
words, `--lookahead` of them per verify step). Everything differs from SGLang: flag names (`--model`,
`--listen-port`, `--draft`, `--lookahead`), readiness (`/ready`), server info (`/stats`), metrics
(`/prom`, `toy_tokens_out_total` / `toy_steps_total`), per-request acceptance (`usage.toy_steps`,
`usage.toy_mean_accepted`), no native API, a `key=value` log format, and a startup failure that leaves
the process hanging (`level=fatal ...`, then sleep) where only the log tells.

Plugging it in is `register(ToyEngine())`; `kit/tests/serving/test_toy_engine.py` launches it, benches it
and reads its log through the kit's own launcher, process, client, metrics and bench.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from kit.serving.engines.base import Engine

# LaunchSpec field (SGLang's argument name) -> the toy server's flag
TOY_FLAGS = {
    "model_path": "--model",
    "host": "--listen-host",
    "port": "--listen-port",
    "speculative_draft_model_path": "--draft",
    "speculative_num_draft_tokens": "--lookahead",
}
_LINE = re.compile(r"(\w+)=(\"[^\"]*\"|\S+)")


class ToyEngine(Engine):
    name = "toy"
    description = "a test engine with its own flags, paths, metrics and log format (kit/tests/serving/toy_engine.py)"
    runs_here = True
    ready_path = "/ready"
    server_info_paths = ("/stats",)
    models_path = "/v1/models"
    metrics_path = "/prom"
    flush_path = None
    stop_grace_s = 2.0

    def command(self, spec) -> list[str]:
        return [sys.executable, "-m", "kit.tests.serving.toy_engine"]

    def flag(self, name: str) -> str | None:
        return TOY_FLAGS.get(name)

    def parse_log_line(self, line: str) -> dict | None:
        kv = {k: v.strip('"') for k, v in _LINE.findall(line)}
        if kv.get("event") == "step":
            return {"time": kv.get("ts"), "kind": "decode", "accept_len": float(kv["accepted"]), "message": line}
        if kv.get("event") == "listening":
            return {"time": kv.get("ts"), "kind": "ready", "message": line}
        if kv.get("level") == "fatal":
            return {"time": kv.get("ts"), "kind": "error", "message": kv.get("msg", line)}
        return None

    def startup_failure(self, line: str, tail: list[str]) -> str | None:
        row = self.parse_log_line(line)
        return row["message"] if row and row["kind"] == "error" else None

    def spec_fields(self, obj: dict, api: str) -> dict[str, Any]:
        usage = obj.get("usage") or {}
        out = {}
        if usage.get("toy_steps"):
            out["verify_ct"] = usage["toy_steps"]
        if usage.get("toy_mean_accepted") is not None:
            out["accept_length"] = usage["toy_mean_accepted"]
        return out

    def accept_counters(self, metrics: dict[str, float] | None) -> tuple[float, float] | None:
        if not metrics or "toy_steps_total" not in metrics:
            return None
        return metrics["toy_tokens_out_total"], metrics["toy_steps_total"]

    def server_info_accept_length(self, info: dict | None) -> float | None:
        return (info or {}).get("lifetime_mean_accepted")


# -- the toy server -------------------------------------------------------------------------------
def serve(argv: list[str]) -> None:
    import argparse
    import http.server
    import json
    import os
    import threading
    import time

    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--listen-host", default="127.0.0.1")
    p.add_argument("--listen-port", type=int, required=True)
    p.add_argument("--draft")
    p.add_argument("--lookahead", type=int, default=1)
    a = p.parse_args(argv)

    def log(**kv):
        print(f"ts={time.strftime('%H:%M:%S')} " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)

    if a.draft and not os.path.exists(a.draft):
        log(level="fatal", msg=f'"draft not found: {a.draft}"')
        time.sleep(600)  # hangs like a server whose worker died: only its log says so
    k = a.lookahead if a.draft else 1
    totals = {"tokens": 0, "steps": 0}
    lock = threading.Lock()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                t, s = totals["tokens"], totals["steps"]
            if self.path == "/ready":
                self._send(200, b"{}")
            elif self.path == "/stats":
                self._send(200, json.dumps({"lifetime_mean_accepted": t / s if s else None}).encode())
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": a.model}]}).encode())
            elif self.path == "/prom":
                self._send(200, f"toy_tokens_out_total {t}\ntoy_steps_total {s}\n".encode(), "text/plain")
            else:
                self._send(404, b"{}")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            if self.path != "/v1/completions":
                return self._send(404, b"{}")
            n = int(body.get("max_tokens") or 16)
            steps = -(-n // k)
            with lock:
                totals["tokens"] += n
                totals["steps"] += steps
            log(event="step", accepted=f"{n / steps:.2f}")
            usage = {"prompt_tokens": 1, "completion_tokens": n, "toy_steps": steps, "toy_mean_accepted": n / steps}
            answer = {"choices": [{"text": " w" * n, "finish_reason": "length"}], "usage": usage}
            self._send(200, json.dumps(answer).encode())

    server = http.server.ThreadingHTTPServer((a.listen_host, a.listen_port), H)
    log(event="listening", port=a.listen_port)
    server.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1:])
