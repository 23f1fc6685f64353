"""A stand-in SGLang server for the capture's end-to-end test: SGLang's module path, call layout and HTTP API.

The test writes a `sglang` package whose `sglang.srt.model_executor.model_runner` re-exports `ModelRunner` below
and whose `sglang.launch_server` calls `main`, so `python -m sglang.launch_server --model-path T --port P ...`
starts this server with the kit's recorder (`kit.serving.capture_hook`, as `sitecustomize.py`) on its path.
`ModelRunner.load_model` builds a decoder laid out as SGLang's LlamaModel (`layers[i](positions, hidden_states,
forward_batch, residual)` returning (hidden, residual), then `norm(hidden, residual)`) whose states are the HF
target's own (`output_hidden_states`, recomputed over the whole sequence at each forward); the server decodes
greedily, one request at a time: an extend forward over the prompt, then one decode forward per token.
Flags other than --model-path and --port are accepted and ignored.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import torch


class Mode:
    def __init__(self, name: str):
        self.name = name

    def is_extend(self) -> bool:
        return self.name == "EXTEND"


class Layer(torch.nn.Module):
    def __init__(self, i: int, states: dict):
        super().__init__()
        self.i, self.states = i, states

    def forward(self, positions, hidden_states, forward_batch, residual):
        nxt = self.states["points"][self.i + 1][positions]
        return nxt * 0.5, nxt * 0.5  # their sum is the stream entering the next layer


class Norm(torch.nn.Module):
    def __init__(self, states: dict):
        super().__init__()
        self.states = states

    def forward(self, hidden_states, residual=None):
        x = hidden_states if residual is None else hidden_states + residual
        return self.states["final"][self.states["positions"]], x


class Decoder(torch.nn.Module):
    def __init__(self, n_layers: int, states: dict):
        super().__init__()
        self.states = states
        self.layers = torch.nn.ModuleList(Layer(i, states) for i in range(n_layers))
        self.norm = Norm(states)

    def forward(self, input_ids, positions, forward_batch):
        hidden, residual = self.states["points"][0][positions].clone(), None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, forward_batch, residual)
        self.states["positions"] = positions
        out, _ = self.norm(hidden, residual)
        return out


class Model(torch.nn.Module):
    def __init__(self, hf, states: dict):
        super().__init__()
        self.hf, self.states = hf, states
        self.model = Decoder(hf.config.num_hidden_layers, states)

    @torch.inference_mode()
    def step(self, seq: list[int], ids: list[int], mode: str) -> int:
        """One forward of `ids` (the end of `seq`): the states over all of `seq`, the layers read the new rows."""
        hs = self.hf(torch.tensor([seq]), output_hidden_states=True).hidden_states
        L = len(hs) - 1
        self.states["points"] = [h[0] for h in hs[:L]] + [hs[L][0]]  # point L is not read (post-norm in HF)
        self.states["final"] = hs[L][0]
        positions = torch.arange(len(seq) - len(ids), len(seq))
        fb = SimpleNamespace(input_ids=torch.tensor(ids), forward_mode=Mode(mode))
        out = self.model(fb.input_ids, positions, fb)
        return int(self.hf.lm_head(out[-1]).argmax())


class ModelRunner:
    is_draft_worker = False

    def __init__(self, model_path: str):
        self.model_path = model_path
        self.ps = SimpleNamespace(tp_rank=0, pp_size=1)

    def load_model(self):
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float64).eval()
        self.model = Model(hf, {})


def serve(runner: ModelRunner, port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send(200 if self.path == "/health" else 404, {})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/generate" or "input_ids" not in req:
                return self._send(400, {"error": "input_ids only"})
            seq = list(req["input_ids"])
            n = int(req["sampling_params"]["max_new_tokens"])
            out = [runner.model.step(seq, seq, "EXTEND")]
            while len(out) < n:
                seq.append(out[-1])
                out.append(runner.model.step(seq, [out[-1]], "DECODE"))
            meta = {"prompt_tokens": len(req["input_ids"]), "completion_tokens": len(out),
                    "finish_reason": {"type": "length", "length": n}}  # fmt: skip
            self._send(200, {"text": "", "output_ids": out, "meta_info": meta})

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--port", type=int, default=30000)
    args, _ = ap.parse_known_args()
    from sglang.srt.model_executor.model_runner import ModelRunner as Runner  # the module the recorder wraps

    runner = Runner(args.model_path)
    runner.load_model()
    serve(runner, args.port)
