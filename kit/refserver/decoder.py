"""The CPU reference server's decoder: models, SGLang's flag semantics, one batched decode loop, statistics.

`ReferenceEngine(spec)` loads the target (`--model-path`, 'embedded' = SmolLM2) and, for an
EAGLE-family `--speculative-algorithm`, the draft, and runs them as SGLang's default release would run that
launch: the algorithm maps to a `Wiring` (EAGLE/NEXTN with an EAGLE-3 draft => no aux capture =>
`fc` bypassed, the seed's fault) and steps/topk/draft tokens resolve with `kit.sglang.params`.

Scheduling is SGLang's continuous batching, on one worker thread: every step admits waiting
requests (up to `--max-running-requests`, default 16; at most `--max-queued-requests` wait, default 256, past
which `submit` raises QueueFull; a long prompt is prefilled `--chunked-prefill-size` tokens a step, default 256;
a cancelled request leaves before the next step), runs one batched step of
`kit.reference.speculate.BatchDecoder` over all running requests (prefill of the new ones, draft +
verify of the others, each with its own KV caches and speculative state) and hands each request
the tokens that step accepted, at once, so streams carry them as they are verified. Greedy
verification, so every request's output == the target's plain greedy output, alone or batched.

It keeps SGLang's counters and prints SGLang-format decode lines every `--decode-log-interval`
decode forwards (`kit.serving.logs` parses them), and renders `/metrics` with SGLang's metric names.

    eng = ReferenceEngine(LaunchSpec(model_path="embedded"))
    out = eng.generate([1, 2, 3], max_new_tokens=32)       # blocking; eng.submit(...) streams
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.findings import KitInputError
from kit.serving.engines import get_engine

VERSION = "kit-reference-0.2"
DEFAULT_MAX_RUNNING = 16
# prompt tokens one step prefills, over all requests (SGLang's --chunked-prefill-size; -1: off): ~0.2 s of
# SmolLM2-135M on 2 cores, so a long prompt delays the others' next tokens by about that much per chunk
DEFAULT_CHUNKED_PREFILL = 256
# requests waiting for a running slot before a new one is refused with 503 (SGLang's --max-queued-requests,
# unbounded there by default; bounded here, so a flood costs each request a fast refusal instead of a timeout)
DEFAULT_MAX_QUEUED = 256
# decode steps between two returns of freed heap memory to the system while the engine stays busy (it also
# returns it each time it goes idle): see `trim_heap`
TRIM_EVERY_STEPS = 200


@functools.cache
def _libc_trim():
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc `malloc_trim(0)`; a no-op elsewhere).

    Every request allocates KV caches and activations of its own sizes (prompt + max_new_tokens, the batch's
    token count); glibc serves those below its mmap threshold (raised up to 32 MB by every freed mmapped
    block) from arenas it keeps after they are freed, so without this the server's RSS climbs to the
    high-water mark of every mix of sizes it has seen. Costs about a millisecond."""
    f = _libc_trim()
    if f is not None:
        f(0)


# how long a first start waits for its siblings' loads to end before it measures the GEMM plan (a reference
# server's load is ~6 s of CPU on 2 cores; three started together finish within ~12 s)
PLAN_WAIT_S = 20.0
# the protocol this server speaks (its /metrics names, /server_info fields, failed-load line): the engine object
# the measuring side reads it back through
PROTOCOL = get_engine("reference")
metric_name = functools.cache(PROTOCOL.metric_name)  # per scrape: the names are fixed for the process


def log(msg: str, rank: bool = False) -> None:
    """SGLang's log format: `[%Y-%m-%d %H:%M:%S TP0] msg` (scheduler lines carry the rank)."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{ts}{' TP0' if rank else ''}] {msg}", flush=True)


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


# on_update(tokens accepted by this step, Outcome when finished | None | the Exception that failed the step)
Update = Callable[[list, Any], None]


@dataclass(eq=False)
class Request:
    seq: Any  # kit.reference.speculate.Sequence
    max_new_tokens: int
    on_update: Update | None
    t0: float = field(default_factory=time.perf_counter)
    t_first: float = 0.0
    cancelled: bool = False
    outcome: Outcome | None = None


class QueueFull(Exception):
    """The waiting queue holds --max-queued-requests requests (SGLang's words; answered 503 + Retry-After)."""

    def __init__(self) -> None:
        from kit.sglang.http_api import REQUEST_ERRORS

        super().__init__(REQUEST_ERRORS["queue_full"])


class ReferenceEngine:
    """Target, draft and the decode loop, all on one thread ("kit-decode").

    Each OS thread that calls into torch's CPU kernels gets its own OpenMP team; a team that loaded
    the weights spins on the cores the decode thread's team then needs, and a 3-token verify forward
    took 1.5-2x its single-thread time (2-core AMD EPYC). So the decode thread loads the models too,
    and the constructor waits for it (re-raising what loading raised)."""

    def __init__(self, spec, device: str = "cpu", dtype: str = "float32"):
        self.cv = threading.Condition()
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.stopping = False
        loaded = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                self._load(spec, device, dtype)
            except BaseException as e:  # noqa: BLE001  (handed to the constructor's thread)
                failed.append(e)
                return
            finally:
                loaded.set()
            self._loop()

        self.thread = threading.Thread(target=run, name="kit-decode", daemon=True)
        self.thread.start()
        loaded.wait()
        if failed:
            raise failed[0]

    def _load(self, spec, device: str, dtype: str) -> None:
        import torch

        from kit.checkpoint.hf_config import read_config
        from kit.models import resolve_target
        from kit.reference.llama import load_engine_target
        from kit.reference.speculate import BatchDecoder
        from kit.reference.target import gemm_plan
        from kit.sglang.params import EAGLE_FAMILY

        self.spec = spec
        self.model_dir = resolve_target(spec.model_path)
        self.target, self.tok = load_engine_target(self.model_dir, dtype=dtype, device=device)
        self.target_config = read_config(self.model_dir)[0]
        arch = (self.target_config.get("architectures") or [None])[0]
        alg = (spec.speculative_algorithm or "").upper() or None
        self.algorithm = "EAGLE" if alg == "NEXTN" else alg
        if self.algorithm and self.algorithm not in ("EAGLE", "EAGLE3"):
            raise KitInputError(f"--speculative-algorithm {alg}: the reference server implements EAGLE and EAGLE3")
        self.draft = self.params = self.wiring = None
        if self.algorithm in EAGLE_FAMILY:
            from kit.reference.draft_io import load_draft
            from kit.wiring.plan import wiring_from_launch

            if not spec.speculative_draft_model_path:
                raise KitInputError(f"--speculative-algorithm {alg} needs --speculative-draft-model-path")
            self.params = spec.spec_params().resolved(self.algorithm, arch)
            self.draft = load_draft(
                spec.speculative_draft_model_path, target_model=self.target, dtype=getattr(torch, dtype)
            ).to(device)
            dcfg = read_config(spec.speculative_draft_model_path)[0]
            # the Wiring SGLang gives the draft: EAGLE/NEXTN => no aux capture => fc bypassed; EAGLE3 => its points
            draft_dir = spec.speculative_draft_model_path
            self.wiring = wiring_from_launch(spec.argv(), dcfg, self.target_config, draft_dir=draft_dir)
        # a first start on this machine measures how its matmuls run (servers started together: once, after their
        # loads, which would otherwise make every one of them give up on a busy machine and serve fp32)
        gemm_plan(self.target, wait_quiet_s=PLAN_WAIT_S)
        self.chunked_prefill_size = spec.chunked_prefill_size or DEFAULT_CHUNKED_PREFILL
        self.decoder = BatchDecoder(
            self.target, self.draft, self.params, self.wiring, chunked_prefill_size=self.chunked_prefill_size
        )
        self.max_queued_requests = spec.max_queued_requests or DEFAULT_MAX_QUEUED
        # most tokens per request, prompt + output: --context-length, else the target's positions
        self.context_length = spec.context_length or self.target_config.get("max_position_embeddings")
        self.vocab_size = self.target_config.get("vocab_size") or len(self.tok)
        self.device = device
        self.step_device = contextlib.nullcontext() if device == "cpu" else torch.device(device)
        self.eos = self.tok.eos_token_id
        self.model_name = spec.served_model_name or spec.model_path
        self.interval = spec.decode_log_interval or 40
        self.max_running = spec.max_running_requests or DEFAULT_MAX_RUNNING
        # SGLang's scheduler counters (metrics_reporter) and tokenizer-side totals
        self.forward_ct = 0
        self.iv_accept = self.iv_correct = self.iv_forward = self.iv_tokens = 0
        self.total_accept = self.total_forward = 0
        self.iv_time = 0.0
        self.gauges = {"spec_accept_length": 0.0, "spec_accept_rate": 0.0, "gen_throughput": 0.0}
        self.counters = dict.fromkeys(
            ("prompt_tokens_total", "generation_tokens_total", "spec_verify_calls_total", "num_requests_total"), 0
        )

    # -- requests -------------------------------------------------------------------------------
    def submit(
        self,
        input_ids: list[int],
        max_new_tokens: int = 128,
        stop_token_ids=(),
        ignore_eos: bool = False,
        on_update: Update | None = None,
    ) -> Request:
        """Queue a request; `on_update` is called on the decode thread after every step that gave it tokens
        (or finished it). Raises QueueFull when --max-queued-requests requests are already waiting."""
        from kit.reference.speculate import Sequence

        if not input_ids:
            raise KitInputError("empty prompt: give at least one input token")
        eos = ([] if ignore_eos or self.eos is None else [self.eos]) + list(stop_token_ids or [])
        r = Request(Sequence(list(input_ids), max_new_tokens, frozenset(eos)), max_new_tokens, on_update)
        with self.cv:
            if sum(not w.cancelled for w in self.waiting) >= self.max_queued_requests:
                raise QueueFull()
            self.waiting.append(r)
            self.cv.notify()
        return r

    def cancel(self, r: Request) -> None:
        """Stop decoding `r` (client gone); the loop drops it before its next step (a waiting one at once)."""
        r.cancelled = True
        with self.cv:
            if r in self.waiting:
                self.waiting.remove(r)

    def load(self) -> dict[str, int]:
        """Requests running and waiting (cancelled ones excluded): what is left once every client has gone."""
        with self.cv:
            return {
                "num_running_reqs": sum(not r.cancelled for r in self.running),
                "num_queue_reqs": sum(not r.cancelled for r in self.waiting),
            }

    def finish(self, r: Request, tokens: list[int], finish_reason: dict) -> Outcome:
        """End `r` early with `tokens` (a stop string matched): the Outcome as SGLang reports it."""
        r.cancelled = True
        out = self._outcome(r, tokens, finish_reason)
        self._account_finished(out)
        return out

    def generate(
        self, input_ids: list[int], max_new_tokens: int = 128, stop_token_ids=(), ignore_eos: bool = False
    ) -> Outcome:
        """Blocking generation (joins the running batch)."""
        done = threading.Event()
        box: list = []

        def on_update(_tokens, outcome):
            if outcome is not None:
                box.append(outcome)
                done.set()

        self.submit(input_ids, max_new_tokens, stop_token_ids, ignore_eos, on_update)
        done.wait()
        if isinstance(box[0], Exception):
            raise box[0]
        return box[0]

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify()

    # -- the decode loop ------------------------------------------------------------------------
    def _loop(self) -> None:

        steps = 0
        while True:
            steps += 1
            if steps % TRIM_EVERY_STEPS == 0:
                trim_heap()
            with self.cv:
                if not self.stopping and not self.waiting and not self.running:
                    trim_heap()  # idle: what the last requests freed goes back
                while not self.stopping and not self.waiting and not self.running:
                    self.cv.wait()
                if self.stopping:
                    return
                self.running = [r for r in self.running if not r.cancelled]
                while self.waiting and len(self.running) < self.max_running:
                    r = self.waiting.pop(0)
                    if not r.cancelled:
                        self.running.append(r)
            if not self.running:
                continue
            batch = list(self.running)
            decoding = [r for r in batch if r.t_first]
            t0 = time.perf_counter()
            try:
                # torch's default device is per thread: what the step builds without naming one
                # lands next to the weights. On the CPU that is already the default, and the device
                # mode (a TorchFunctionMode: Python on every op) cost 10-25% of a step on 2 cores
                with self.step_device:
                    emitted = self.decoder.step([r.seq for r in batch])
            except Exception as e:  # a failing step fails its requests, never the loop
                log(f"decode step failed: {type(e).__name__}: {e}")
                for r in batch:
                    if r.on_update is not None:
                        r.on_update([], e)
                self.running = []
                continue
            now = time.perf_counter()
            for r, toks in zip(batch, emitted):
                if toks:
                    r.t_first = r.t_first or now
                if r.seq.done and not r.cancelled:
                    r.outcome = self._outcome(r, r.seq.tokens, None)
                    self._account_finished(r.outcome)
                if r.on_update is not None and (toks or r.outcome is not None):  # a prompt chunk gives nothing
                    r.on_update(toks, r.outcome)
            if decoding:
                self._account_step(decoding, now - t0)
            self.running = [r for r in batch if not r.seq.done and not r.cancelled]

    def _outcome(self, r: Request, tokens: list[int], finish_reason: dict | None) -> Outcome:
        if finish_reason is None:
            last = tokens[-1] if tokens else None
            stop = last in r.seq.eos
            finish_reason = (
                {"type": "stop", "matched": last} if stop else {"type": "length", "length": r.max_new_tokens}
            )
        now = time.perf_counter()
        return Outcome(
            tokens=list(tokens),
            prompt_tokens=len(r.seq.prompt),
            finish_reason=finish_reason,
            accept_lengths=list(r.seq.accept_lengths),
            accepted_drafts=list(r.seq.accepted_drafts),
            e2e_latency=now - r.t0,
            decode_time=now - (r.t_first or now),
        )

    # -- SGLang's counters ------------------------------------------------------------------------
    def _account_finished(self, o: Outcome) -> None:
        with self.cv:
            self.counters["num_requests_total"] += 1
            self.counters["prompt_tokens_total"] += o.prompt_tokens
            self.counters["generation_tokens_total"] += len(o.tokens)
            self.counters["spec_verify_calls_total"] += o.verify_ct

    def _account_step(self, decoding: list[Request], dt: float) -> None:
        """One decode forward over `decoding` (SGLang counts accept length per request and step)."""
        self.forward_ct += 1
        self.iv_time += dt
        for r in decoding:
            s = r.seq
            acc = s.accept_lengths[-1] if self.draft is not None and s.accept_lengths else 1
            self.iv_forward += 1
            self.iv_accept += acc
            self.iv_correct += s.accepted_drafts[-1] if self.draft is not None and s.accepted_drafts else 0
            self.iv_tokens += acc
        if self.forward_ct % self.interval == 0:
            kv = sum(len(r.seq.prompt) + len(r.seq.tokens) for r in self.running)
            self._log_decode(len(decoding), kv)

    def _log_decode(self, running: int, kv_tokens: int) -> None:
        thr = self.iv_tokens / max(self.iv_time, 1e-9)
        self.iv_tokens, self.iv_time = 0, 0.0
        msg = f"Decode batch, #running-req: {running}, #token: {kv_tokens}, token usage: 0.00, "
        if self.draft is not None:
            al = self.iv_accept / self.iv_forward
            ar = self.iv_correct / (self.iv_forward * (self.params.speculative_num_draft_tokens - 1))
            self.total_accept += self.iv_accept
            self.total_forward += self.iv_forward
            self.gauges.update(spec_accept_length=al, spec_accept_rate=ar)
            msg += f"accept len: {al:.2f}, accept rate: {ar:.2f}, "
        self.iv_accept = self.iv_correct = self.iv_forward = 0
        self.gauges["gen_throughput"] = thr
        log(msg + f"cpu graph: False, gen throughput (token/s): {thr:.2f}, #queue-req: {len(self.waiting)}", rank=True)

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
            d.update(speculative_algorithm=self.algorithm, **self.params.given())
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
            state[PROTOCOL.api.server_info_accept_length] = self.total_accept / self.total_forward
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
        g = {**self.load(), "gen_throughput": self.gauges["gen_throughput"]}
        if self.draft is not None:
            g.update({k: self.gauges[k] for k in ("spec_accept_length", "spec_accept_rate")})
            g.update(spec_num_steps=self.params.speculative_num_steps)
            g.update(spec_num_draft_tokens=self.params.speculative_num_draft_tokens)
        lines = []
        for key, v in g.items():
            name = metric_name(key)
            lines += [f"# HELP {name} {key}", f"# TYPE {name} gauge", f"{name}{{{lab}}} {float(v)}"]
        for key, v in self.counters.items():
            name = metric_name(key)
            extra = ',is_streaming="false"' if key in ("prompt_tokens_total", "generation_tokens_total") else ""
            lines += [f"# HELP {name} {key}", f"# TYPE {name} counter", f"{name}{{{lab}{extra}}} {float(v)}"]
        return "\n".join(lines) + "\n"

    def model_card(self) -> dict:
        return {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.spec.model_path,
            "max_model_len": self.context_length,  # SGLang's model_config.context_len: --context-length wins
        }
