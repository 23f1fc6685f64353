"""The kit's CPU reference server as a serving engine: `python -m kit serve` (`kit.refserver.server`).

It speaks SGLang's HTTP API, log format and flag names, so it is the SGLang engine with three differences: it takes
only the flags it implements (`REFERENCE_FIELDS`; `kit launch` says which it drops), it runs on this machine (its
paths must exist here), and a launch with error findings still starts (the server ignores those flags). It is the
one home of the protocol both sides speak: the server writes its /metrics names (`metric_name`), /server_info field
and failed-load line (`error_line`) from here, and the measuring side reads them back through the same object.
"""

from __future__ import annotations

import sys
from typing import Any

from kit.serving.engines.sglang import SGLang

# the line `kit serve` ends a failed load with (then it exits: 2 for a user error, 1 otherwise)
ERROR_PREFIX = "kit serve: error: "

# the LaunchSpec fields the CPU reference server implements; other SGLang flags are dropped for it
REFERENCE_FIELDS = frozenset(
    "model_path speculative_algorithm speculative_draft_model_path speculative_num_steps speculative_eagle_topk "
    "speculative_num_draft_tokens host port api_key served_model_name decode_log_interval enable_metrics "
    "max_running_requests max_queued_requests chunked_prefill_size log_level trust_remote_code context_length".split()
)


class ReferenceServer(SGLang):
    name = "reference"
    description = "the kit's CPU reference server (`python -m kit serve`), SGLang's HTTP API and flag semantics"
    start_despite_errors = True
    runs_here = True
    passes_extra_args = False
    resolves_kit_names = True  # 'embedded' is resolved by the server itself
    accepts_hub_ids = False
    rehearses = False  # the rehearsal observes SGLang's own code paths
    captures = False  # the capture's recorder hooks SGLang's ModelRunner
    starts_together = True  # a start is mostly imports and a model load, on the CPU, with memory to spare
    device_share = None  # CPU servers: no device shared, and the server ignores SGLang's memory flags

    def serves_here(self) -> bool:
        return True  # CPU only

    def chain_for(self, target: str, draft: str):
        """The chain that pays on this CPU, measured (`kit.reference.chain.pick_chain`)."""
        from kit.reference.chain import pick_chain

        pick = pick_chain(target, draft)
        return pick.params, pick.why

    def command(self, spec) -> list[str]:
        return [sys.executable, "-m", "kit", "serve"]

    def flag(self, name: str) -> str | None:
        return super().flag(name) if name in REFERENCE_FIELDS else None

    def error_line(self, why: object) -> str:
        return f"{ERROR_PREFIX}{why}"

    def startup_failure(self, line: str, tail: list[str]) -> str | None:
        _, sep, why = line.partition(ERROR_PREFIX)
        return why.strip() if sep else super().startup_failure(line, tail)

    def metric_name(self, key: str) -> str:
        """The /metrics name the server writes SGLang's metric `key` (`generation_tokens_total`, ...) under: the
        release's names, which `accept_counters` reads back."""
        api, base = self.api, key.removesuffix("_total")
        named = {"generation_tokens": api.generation_tokens_metric, "spec_verify_calls": api.verify_calls_metric}
        return named.get(base, api.metric_prefix + base) + key[len(base) :]

    def localize(self, spec, target: str) -> dict[str, Any]:
        return {"model_path": target}
