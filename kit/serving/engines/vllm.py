"""vLLM as a serving engine: `vllm serve TARGET --speculative-config JSON`, its OpenAI API, on a GPU host.

As read from vLLM 0.33.0: a launch's three SGLang speculative values become one chain (`num_speculative_tokens`);
acceptance per request rides on an answer's `metrics.speculative_decoding` (the final chunk of a stream with
`include_usage`) when the server runs with `--per-request-spec-decode-metrics summary`, which `command` adds where
the installed release's parser has it (0.29.0 on; `answers_carry_metrics`); the run's counters are on /metrics
(accept length = 1 + accepted / drafts, vllm/v1/spec_decode/metrics.py `SpecDecodingProm`) and in its
`SpecDecoding metrics:` log line (`SpecDecodingLogging.log`). Flags the kit does not type reach vLLM where its
parser takes them (`own_extras`); a vLLM from the kit's bundle gets the bundle's launch flags.

    vl = get_engine("vllm")
    vl.argv(spec)   # [vllm, serve, TARGET, --speculative-config, {"method": "eagle3", ...}, ..., --port, ...]
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from typing import Any

from kit.findings import KitInputError
from kit.serving.engines.base import Engine, exception_line, visible_gpus
from kit.sglang.bundle_site import installed_bundle_flags
from kit.sglang.flags import known_flags
from kit.vllm.cmdline import ALGORITHM, FLAGS
from kit.vllm.rules import rules_for

SPEC_CONFIG = "--speculative-config"
# LaunchSpec field (SGLang's argument name) -> vLLM's flag (kit.vllm.cmdline.FLAGS: the ones it shares, read back
# there); the speculative fields go into SPEC_CONFIG's JSON, model_path and log_level into `command`; None where vLLM
# takes none or names its values otherwise (attention backends, SGLang's -1 = no chunked prefill, the decode log:
# vLLM logs every VLLM_LOG_STATS_INTERVAL s; /metrics is always served)
VLLM_FLAGS: dict[str, str | None] = {
    **FLAGS,
    "model_path": "--model",
    "log_level": "--log-level",
    **dict.fromkeys(("speculative_algorithm", "speculative_draft_model_path", "speculative_draft_model_revision",
                     "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"), SPEC_CONFIG),
    **dict.fromkeys(("speculative_draft_attention_backend", "attention_backend", "max_queued_requests",
                     "chunked_prefill_size", "decode_log_interval", "enable_metrics"), None),
}  # fmt: skip
IN_COMMAND = {n for n, f in VLLM_FLAGS.items() if f == SPEC_CONFIG} | {"model_path", "log_level"}
METHODS = {alg: method for method, alg in ALGORITHM.items()}  # SGLang's --speculative-algorithm -> vLLM's method
# `metrics.speculative_decoding` of an answer (vllm/entrypoints/generate/base/protocol.py SpeculativeDecodingMetrics)
# -> SPEC_KEYS. Its mean_acceptance_length leaves the prefill token out (1 + accepted / steps): not the kit's
# accept_length (tokens / verify steps), which the records compute from verify_ct
SPEC_NAMES = {
    "verify_ct": "num_spec_steps",
    "accept_rate": "draft_acceptance_rate",
    "num_correct": "num_accepted_draft_tokens",
    "num_proposed": "num_draft_tokens",
    "histogram": "acceptance_histogram",  # bucket j: steps that accepted j drafts, as SGLang's
}
# those fields in each answer (vllm/config/observability.py; vLLM refuses it without speculation)
PER_REQUEST = ["--per-request-spec-decode-metrics", "summary"]
DRAFTS, ACCEPTED = "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total"
# vllm/logger.py _FORMAT: `(APIServer pid=7) INFO 11-01 09:25:07 [metrics.py:120] message` (the process part is
# there since processes are named; VLLM_LOGGING_PREFIX may come first)
_PREFIX = re.compile(
    r"(?:\((?P<proc>[^)]*?) pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<time>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[[^\]]*\] (?P<msg>.*)$"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SPEC = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<al>[\d.]+|nan), .*Accepted: (?P<acc>\d+) tokens, "
    r"Drafted: (?P<dr>\d+) tokens"
)
EVENTS = [
    ("ready", re.compile(r"Starting vLLM (?:API )?server")),
    ("error", re.compile(r"^(Traceback \(most recent call last\)|[A-Za-z_.]*(Error|Exception): )")),
]
# what ends a failed startup (vllm/v1/engine/utils.py wait_for_engine_startup, multiproc_executor.py
# wait_for_ready): the root cause is an exception line above these
STARTUP_FAILED = re.compile(
    r"(Engine core|WorkerProc) initialization failed|Frontend process failed during engine core initialization"
    r"|Model architectures \[.*\] failed to be inspected"  # ModelConfig: the registry's subprocess failed
)


def split_line(line: str) -> tuple[str | None, str | None, str]:
    """(time, process name, message) of one vLLM log line; (None, None, line) for a line without its prefix."""
    line = _ANSI.sub("", line).strip()
    m = _PREFIX.search(line)
    return (m["time"], m["proc"], m["msg"]) if m else (None, None, line)


def answers_carry_metrics(version: str | None = None) -> bool:
    """Whether that release's `vllm serve` takes PER_REQUEST (None: the installed vLLM's, else the newest listed):
    before 0.29.0 its parser refuses the flag, and acceptance is on /metrics and in the log only."""
    table = rules_for(version).flag_table
    return table is not None and PER_REQUEST[0] in table.by_option()


def chain_length(steps: int | None, topk: int | None, tokens: int | None) -> int:
    """`num_speculative_tokens` of the chain SGLang's three flags describe; KitInputError where vLLM runs no such chain:
    a tree (topk > 1), draft tokens that are not steps + 1."""
    if topk not in (None, 1):
        raise KitInputError(
            f"--speculative-eagle-topk {topk}: vLLM's EAGLE drafts a chain (topk 1); a tree has no vLLM equivalent"
        )
    n = steps if steps is not None else (tokens - 1 if tokens is not None else None)
    if n is None or n < 1 or (tokens is not None and tokens != n + 1):
        raise KitInputError(
            f"speculative steps {steps}, draft tokens {tokens}: vLLM needs a chain of "
            "--speculative-num-steps N >= 1 (draft tokens N+1 when given)"
        )
    return n


class VllmEngine(Engine):
    name = "vllm"
    description = "vLLM (`vllm serve`, OpenAI API, EAGLE-3 via --speculative-config), on a GPU host"
    accepts_hub_ids = True
    bench_api = "completions"  # no native /generate
    ready_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"
    flush_path = "/reset_prefix_cache"  # served only with VLLM_SERVER_DEV_MODE=1 (else 404: not flushed)
    stop_grace_s = 20.0
    device_share = 0.9  # vLLM's default --gpu-memory-utilization

    def serves_here(self) -> bool:
        """A visible CUDA GPU and vLLM in this interpreter or on PATH (found, not imported)."""
        found = shutil.which("vllm") is not None or importlib.util.find_spec("vllm") is not None
        return found and visible_gpus() > 0

    def flag(self, name: str) -> str | None:
        return VLLM_FLAGS.get(name)

    def refuses(self, params) -> str | None:
        try:
            chain_length(
                params.speculative_num_steps, params.speculative_eagle_topk, params.speculative_num_draft_tokens
            )
        except KitInputError as e:
            return str(e)
        return None

    def speculative_config(self, spec) -> dict[str, Any] | None:
        """The launch's `--speculative-config` (None without speculation); KitInputError where vLLM runs no such
        chain: another algorithm, no draft, a tree (topk > 1), draft tokens that are not steps + 1."""
        alg = (spec.speculative_algorithm or "").upper()
        if not alg:
            return None
        if alg not in METHODS:
            raise KitInputError(f"--speculative-algorithm {alg}: the vllm engine runs {' or '.join(METHODS)}")
        if not spec.speculative_draft_model_path:
            raise KitInputError(f"--speculative-algorithm {alg}: the vllm engine needs --speculative-draft-model-path")
        n = chain_length(spec.speculative_num_steps, spec.speculative_eagle_topk, spec.speculative_num_draft_tokens)
        out = {"method": METHODS[alg], "model": spec.speculative_draft_model_path, "num_speculative_tokens": n}
        if spec.speculative_draft_model_revision:
            out["revision"] = spec.speculative_draft_model_revision
        return {**out, "draft_tensor_parallel_size": 1}

    def command(self, spec) -> list[str]:
        out = ["vllm", "serve", spec.model_path]
        if (cfg := self.speculative_config(spec)) is not None:
            out += [SPEC_CONFIG, json.dumps(cfg), *(PER_REQUEST if answers_carry_metrics() else [])]
        return out + (["--log-level", spec.log_level.upper()] if spec.log_level else [])

    def argv(self, spec) -> list[str]:
        own = spec.flags(lambda n: None if n in IN_COMMAND else self.flag(n))
        # a vLLM from the kit's bundle gets the flags its trimmed kernels need (kit.sglang.bundle_site), last, so
        # that argparse keeps their values over any the launch gives (`--attention-backend FLASH_ATTN`: not carried)
        return self.command(spec) + own + self.own_extras(spec) + installed_bundle_flags("vllm")

    def own_extras(self, spec) -> list[str]:
        """The untyped flags of `spec` (extra_args) that the installed vLLM's parser takes, with their values, e.g.
        `--load-format dummy`, `--enforce-eager`, by the release's recorded parser ([] where none is recorded)."""
        table = rules_for().flag_table
        return known_flags(spec.extra_args, table) if table else []

    def ignored_flags(self, spec) -> list[str]:
        passed = set(self.own_extras(spec))
        # vLLM always serves /metrics
        return [f for f in super().ignored_flags(spec) if f != "--enable-metrics" and f not in passed]

    def share_device(self, spec, servers: int, kv_tokens: int | None = None):
        """Each of `servers` on one GPU asks for its share of 0.9 of its memory (vLLM's default utilization; vLLM
        fills that share with its KV pool, so `kv_tokens` needs no flag)."""
        share = round(self.device_share / servers, 4)
        return spec if servers <= 1 else spec.replace(mem_fraction_static=min(spec.mem_fraction_static or 1, share))

    def parse_log_line(self, line: str) -> dict | None:
        time_, proc, msg = split_line(line)
        if m := _SPEC.search(msg):
            acc, dr = int(m["acc"]), int(m["dr"])
            al = float(m["al"])
            row = {"time": time_, "rank": proc, "kind": "decode", "message": msg}
            return {**row, "accept_len": None if al != al else al, "accept_rate": acc / dr if dr else None}
        kind = next((k for k, rx in EVENTS if rx.search(msg)), None)
        return None if kind is None else {"time": time_, "rank": proc, "kind": kind, "message": msg}

    def startup_failure(self, line: str, tail: list[str]) -> str | None:
        """On vLLM's `Engine core initialization failed` line: the root cause, the last exception line above it that
        vLLM logged (a failed process's traceback, each line prefixed), else the last one at all."""
        msg = split_line(line)[2]
        if not STARTUP_FAILED.search(msg):
            return None
        causes = [(when, m) for when, _, m in map(split_line, tail) if not STARTUP_FAILED.search(m)]
        return exception_line([m for when, m in causes if when]) or exception_line([m for _, m in causes]) or msg

    def spec_fields(self, obj: dict, api: str) -> dict[str, Any]:
        sd = (obj.get("metrics") or {}).get("speculative_decoding") or {}
        return {k: sd[n] for k, n in SPEC_NAMES.items() if sd.get(n) is not None}

    def accept_counters(self, metrics: dict[str, float] | None) -> tuple[float, float] | None:
        """(drafts + accepted, drafts): the tokens the verify steps emitted and the steps, so their delta ratio
        is vLLM's mean acceptance length, 1 + accepted / drafts."""
        if not metrics or DRAFTS not in metrics or ACCEPTED not in metrics:
            return None
        return metrics[DRAFTS] + metrics[ACCEPTED], metrics[DRAFTS]
