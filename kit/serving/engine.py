"""The CPU reference server's engine: models, SGLang's flag semantics, generation, statistics.

`ReferenceEngine(spec)` loads the target (`--model-path`, 'embedded' = SmolLM2) and, for an
EAGLE-family `--speculative-algorithm`, the draft, then generates with `kit.reference.speculate` exactly as
SGLang 0.5.23 would run that launch: the algorithm maps to a `Wiring` (EAGLE/NEXTN with an EAGLE-3
draft => no aux capture => `fc` bypassed, the seed's fault), steps/speculative_eagle_topk/draft tokens resolve as in
`_handle_eagle_family` (all unset => auto-chosen from the target architecture; speculative_eagle_topk 1 => draft
tokens = steps + 1). Greedy verification, so output == the target's plain greedy output.

It keeps SGLang's counters and prints SGLang-format decode lines every `--decode-log-interval`
verify/decode forwards (`kit.serving.logs` parses them), and renders `/metrics` with SGLang's metric
names. Requests run one at a time (kit.reference.speculate holds one lock around the shared target).
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kit.findings import KitInputError

VERSION = "kit-reference-0.1"


def log(msg: str, rank: bool = False) -> None:
    """SGLang's log format: `[%Y-%m-%d %H:%M:%S TP0] msg` (scheduler lines carry the rank)."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{ts}{' TP0' if rank else ''}] {msg}", flush=True)


def wiring_for(spec, draft_config: dict, target_config: dict):
    """The Wiring SGLang would give the draft for this launch (`kit.wiring.plan.wiring_from_launch`:
    EAGLE/NEXTN => no aux capture => fc bypassed; EAGLE3 => the draft's capture points)."""
    from kit.wiring.plan import wiring_from_launch

    return wiring_from_launch(spec.argv(), draft_config, target_config, draft_dir=spec.speculative_draft_model_path)


@dataclass
class Outcome:
    tokens: list[int]
    prompt_tokens: int
    finish_reason: dict
    accept_lengths: list[int] = field(default_factory=list)
    accepted_drafts: list[int] = field(default_factory=list)
    e2e_latency: float = 0.0
    decode_time: float = 0.0  # seconds after the prefill token

    @property
    def verify_ct(self) -> int:
        return len(self.accept_lengths)


class ReferenceEngine:
    def __init__(self, spec, device: str = "cpu", dtype: str = "float32"):
        from kit.checkpoint.hf_config import read_config
        from kit.models import load_target, resolve_target

        self.spec = spec
        self.model_dir = resolve_target(spec.model_path)
        self.target, self.tok = load_target(self.model_dir, dtype=dtype, device=device)
        self.target_config = read_config(self.model_dir)[0]
        arch = (self.target_config.get("architectures") or [None])[0]
        alg = (spec.speculative_algorithm or "").upper() or None
        self.algorithm = "EAGLE" if alg == "NEXTN" else alg
        if self.algorithm and self.algorithm not in ("EAGLE", "EAGLE3"):
            raise KitInputError(f"--speculative-algorithm {alg}: the reference server implements EAGLE and EAGLE3")
        self.draft = self.params = self.wiring = None
        if self.algorithm:
            from kit.reference.draft_io import load_draft

            if not spec.speculative_draft_model_path:
                raise KitInputError(f"--speculative-algorithm {alg} needs --speculative-draft-model-path")
            self.params = spec.spec_params().resolved(self.algorithm, arch)
            self.draft = load_draft(
                spec.speculative_draft_model_path, target_model=self.target, dtype=getattr(__import__("torch"), dtype)
            ).to(device)
            dcfg = read_config(spec.speculative_draft_model_path)[0]
            self.wiring = wiring_for(spec, dcfg, self.target_config)
        self.device = device
        self.eos = self.tok.eos_token_id
        self.model_name = spec.served_model_name or spec.model_path
        self.interval = spec.decode_log_interval or 40
        self.lock = threading.Lock()
        self.rid = itertools.count(1)
        # SGLang's scheduler counters (metrics_reporter) and tokenizer-side totals
        self.forward_ct = 0
        self.iv_accept = self.iv_correct = self.iv_forward = self.iv_tokens = 0
        self.total_accept = self.total_forward = 0
        self.iv_time = 0.0
        self.gauges = {"spec_accept_length": 0.0, "spec_accept_rate": 0.0, "gen_throughput": 0.0}
        self.counters = {
            "prompt_tokens_total": 0,
            "generation_tokens_total": 0,
            "spec_verify_calls_total": 0,
            "num_requests_total": 0,
        }
        self.waiting = 0  # requests inside generate(): one runs, the rest queue on kit.reference.speculate's lock

    # -- generation -----------------------------------------------------------------------------
    def generate(
        self, input_ids: list[int], max_new_tokens: int = 128, stop_token_ids=(), ignore_eos: bool = False
    ) -> Outcome:
        import torch

        from kit.reference.speculate import greedy_generate, speculative_generate

        eos = ([] if ignore_eos or self.eos is None else [self.eos]) + list(stop_token_ids or [])
        t0 = time.perf_counter()
        with self.lock:
            self.waiting += 1
        try:
            # requests run on the HTTP server's threads and torch's default device is per thread:
            # whatever the decode loop builds without naming a device lands next to the weights
            with torch.device(self.device):
                if self.draft is not None:
                    r = speculative_generate(
                        self.target,
                        self.draft,
                        list(input_ids),
                        max_new_tokens,
                        self.params,
                        self.wiring,
                        eos_token_id=eos,
                    )
                else:
                    r = greedy_generate(self.target, list(input_ids), max_new_tokens, eos_token_id=eos)
        finally:
            with self.lock:
                self.waiting -= 1
        last = r.tokens[-1] if r.tokens else None
        finish = {"type": "stop", "matched": last} if last in eos else {"type": "length", "length": max_new_tokens}
        out = Outcome(
            tokens=list(r.tokens),
            prompt_tokens=len(input_ids),
            finish_reason=finish,
            accept_lengths=list(r.accept_lengths),
            accepted_drafts=list(r.accepted_drafts),
            e2e_latency=time.perf_counter() - t0,
            decode_time=r.draft_time_s + r.verify_time_s,
        )
        self._account(out)
        return out

    def _account(self, o: Outcome) -> None:
        """Advance the forward counter step by step and log at every interval boundary, as SGLang does.

        Lines are printed when the request finishes; each step is charged its share of the
        request's decode time, so `gen throughput` is tokens / decode time of the interval."""
        with self.lock:
            self.counters["num_requests_total"] += 1
            self.counters["prompt_tokens_total"] += o.prompt_tokens
            self.counters["generation_tokens_total"] += len(o.tokens)
            self.counters["spec_verify_calls_total"] += o.verify_ct
            steps = (
                list(zip(o.accept_lengths, o.accepted_drafts))
                if self.draft is not None
                else [(1, 0)] * max(0, len(o.tokens) - 1)
            )
            dt = o.decode_time / len(steps) if steps else 0.0
            kv = o.prompt_tokens + 1
            for acc, correct in steps:
                kv += acc
                self.forward_ct += 1
                self.iv_forward += 1
                self.iv_accept += acc
                self.iv_correct += correct
                self.iv_tokens += acc
                self.iv_time += dt
                if self.forward_ct % self.interval == 0:
                    self._log_decode(kv)

    def _log_decode(self, kv_tokens: int) -> None:
        thr = self.iv_tokens / max(self.iv_time, 1e-9)
        self.iv_tokens, self.iv_time = 0, 0.0
        msg = f"Decode batch, #running-req: 1, #token: {kv_tokens}, token usage: 0.00, "
        if self.draft is not None:
            al = self.iv_accept / self.iv_forward
            ar = self.iv_correct / (self.iv_forward * (self.params.speculative_num_draft_tokens - 1))
            self.total_accept += self.iv_accept
            self.total_forward += self.iv_forward
            self.gauges.update(spec_accept_length=al, spec_accept_rate=ar)
            msg += f"accept len: {al:.2f}, accept rate: {ar:.2f}, "
        self.iv_accept = self.iv_correct = self.iv_forward = 0
        self.gauges["gen_throughput"] = thr
        log(
            msg + f"cpu graph: False, gen throughput (token/s): {thr:.2f}, #queue-req: {max(self.waiting - 1, 0)}",
            rank=True,
        )

    # -- reporting ------------------------------------------------------------------------------
    def spec_meta(self, o: Outcome) -> dict:
        """`_calculate_spec_decoding_metrics` fields (finished requests with verify_ct > 0 only)."""
        if self.draft is None or o.verify_ct == 0:
            return {}
        proposed = o.verify_ct * (self.params.speculative_num_draft_tokens - 1)
        correct = sum(o.accepted_drafts)
        hist: list[int] = []
        for c in o.accepted_drafts:
            hist += [0] * (c + 1 - len(hist))
            hist[c] += 1
        return {
            "spec_accept_rate": correct / proposed,
            "spec_accept_length": len(o.tokens) / o.verify_ct,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": o.verify_ct,
            "spec_correct_drafts_histogram": hist,
        }

    def server_args(self) -> dict[str, Any]:
        from kit.serving.launch import FIELDS

        d = {n: getattr(self.spec, n) for n in FIELDS}
        if self.params is not None:
            d.update(
                speculative_algorithm=self.algorithm,
                speculative_num_steps=self.params.speculative_num_steps,
                speculative_eagle_topk=self.params.speculative_eagle_topk,
                speculative_num_draft_tokens=self.params.speculative_num_draft_tokens,
            )
        d.update(
            host=self.spec.host or "127.0.0.1",
            port=self.spec.port or 30000,
            decode_log_interval=self.interval,
            api_key=None if self.spec.api_key is None else "<set>",
        )
        return d

    def server_info(self) -> dict[str, Any]:
        state: dict[str, Any] = {"last_gen_throughput": self.gauges["gen_throughput"]}
        if self.draft is not None and self.total_forward > 0:
            state["avg_spec_accept_length"] = self.total_accept / self.total_forward
        return {
            **self.server_args(),
            "version": VERSION,
            "frontend": "python",
            "launch_command": " ".join(sys.argv),
            "internal_states": [state],
            "wiring": self.wiring.describe() if self.wiring is not None else None,
        }

    def metrics_text(self) -> str:
        lab = f'model_name="{self.model_name}"'
        g = {
            "sglang:num_running_reqs": min(self.waiting, 1),
            "sglang:num_queue_reqs": max(self.waiting - 1, 0),
            "sglang:gen_throughput": self.gauges["gen_throughput"],
        }
        if self.draft is not None:
            g.update(
                {
                    "sglang:spec_accept_length": self.gauges["spec_accept_length"],
                    "sglang:spec_accept_rate": self.gauges["spec_accept_rate"],
                    "sglang:spec_num_steps": self.params.speculative_num_steps,
                    "sglang:spec_num_draft_tokens": self.params.speculative_num_draft_tokens,
                }
            )
        lines = []
        for name, v in g.items():
            lines += [f"# HELP {name} {name.split(':')[1]}", f"# TYPE {name} gauge", f"{name}{{{lab}}} {float(v)}"]
        for key, v in self.counters.items():
            name = "sglang:" + key
            extra = ',is_streaming="false"' if key in ("prompt_tokens_total", "generation_tokens_total") else ""
            lines += [f"# HELP {name} {key}", f"# TYPE {name} counter", f"{name}{{{lab}{extra}}} {float(v)}"]
        return "\n".join(lines) + "\n"

    def model_card(self) -> dict:
        ctx = self.target_config.get("max_position_embeddings")
        return {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.spec.model_path,
            "max_model_len": ctx,
        }
