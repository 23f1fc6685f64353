"""SGLang's HTTP API per release: paths, the speculative fields of a response, the /metrics counters.

What a client reads from a running SGLang, recorded per release it changed in (from `srt/entrypoints/` and
`srt/observability/metrics_collector.py`). Only `kit.serving.engines.sglang` and the kit's CPU reference server
(which speaks the same API) read it.

    from kit.sglang.http_api import http_api
    api = http_api("0.5.17")     # the records: http_api.json
    api.server_info_paths        # ("/server_info", "/get_server_info"), tried in order
    api.openai_spec_details      # False: /v1/chat/completions carries no speculative fields there
    api.spec_fields(meta_info)   # {"verify_ct": 12, "accept_length": 2.4, ...}

Run `python -m kit.sglang.http_api [VERSION]` to print one release's record.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit.sglang.versions import pick_recorded

TABLE = Path(__file__).with_name("http_api.json")

# normalised key -> every name SGLang has given the field in `meta_info` /
# `sglext.spec_tokens_details`, newest first (the older tokenizer_manager names after)
SPEC_FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "verify_ct": ("spec_verify_ct",),
    "accept_length": ("spec_accept_length",),
    "accept_rate": ("spec_accept_rate",),
    "num_correct": ("spec_num_correct_drafts", "spec_accept_token_num"),
    "num_proposed": ("spec_num_proposed_drafts", "spec_draft_token_num"),
    "histogram": ("spec_correct_drafts_histogram", "spec_accept_histogram"),
}

# SGLang's words for a refused request, the same in every recorded release (str.format fields; http_api.json's
# "request_errors": the context checks of TokenizerManager._validate_one_request, GenerateReqInput's prompt checks,
# SamplingParams.verify's ranges, the out-of-vocabulary words of its token_ids_logprob check, the full queue)
REQUEST_ERRORS: dict[str, str] = json.loads(TABLE.read_text())["request_errors"]


@dataclass(frozen=True)
class HttpApi:
    """One release's HTTP API, as far as the kit reads it."""

    release: str
    ready_path: str = "/health"  # 200 once the server serves; 503 while it loads
    # current releases serve /server_info (and still /get_server_info, logging a deprecation per call);
    # older ones only /get_server_info: tried in this order
    server_info_paths: tuple[str, ...] = ("/server_info", "/get_server_info")
    models_path: str = "/v1/models"
    metrics_path: str = "/metrics"  # with --enable-metrics
    flush_path: str = "/flush_cache"
    generate_path: str = "/generate"  # native API: meta_info carries the speculative fields per request
    # /v1/(chat/)completions return `sglext.spec_tokens_details` when the request asks
    # (`return_spec_tokens_details`); before that, the OpenAI endpoints return no speculative field
    openai_spec_details: bool = True
    spec_field_names: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(SPEC_FIELD_NAMES))
    # /metrics: every metric's name prefix, and the counters whose deltas give a run's accept length
    # (generation tokens / verify calls)
    metric_prefix: str = "sglang:"
    generation_tokens_metric: str = "sglang:generation_tokens"
    verify_calls_metric: str = "sglang:spec_verify_calls"
    # /server_info: internal_states[i][this] is the lifetime accept length
    server_info_accept_length: str = "avg_spec_accept_length"
    # request checks: the roles a chat message may have (srt/entrypoints/openai/protocol.py), the most stop strings
    # a request may give (sampling_params.MAX_STOP_COUNT; None: no limit)
    chat_roles: tuple[str, ...] = ("user", "system", "assistant", "tool", "function", "developer", "latest_reminder")
    max_stop_strings: int | None = None

    def generate_answer(self, obj: dict) -> tuple[int | None, int | None, str | None, str | None]:
        """(completion tokens, prompt tokens, finish reason, text) of one /generate answer or stream chunk (counts are
        cumulative in a stream; `finish_reason` is a dict with a `type`, or a string in older releases)."""
        meta = obj.get("meta_info") or {}
        fr = meta.get("finish_reason")
        fr = fr.get("type") if isinstance(fr, dict) else fr
        return meta.get("completion_tokens"), meta.get("prompt_tokens"), fr, obj.get("text")

    def spec_fields(self, meta: dict | None) -> dict[str, Any]:
        """The speculative fields of a `meta_info` / `spec_tokens_details` dict, normalised ({} when none)."""
        meta = meta or {}
        found = {k: [meta[n] for n in names if meta.get(n) is not None] for k, names in self.spec_field_names.items()}
        return {k: v[0] for k, v in found.items() if v}


@functools.cache
def recorded() -> dict[str, HttpApi]:
    """Every recorded release's API (`http_api.json`: the releases whose source was read)."""
    doc = json.loads(TABLE.read_text())
    return {
        v: HttpApi(v, **{k: tuple(x) if isinstance(x, list) else x for k, x in rec.items() if not k.startswith("_")})
        for v, rec in doc["releases"].items()
    }


def http_api(version: str | None = None) -> HttpApi:
    """The HTTP API of that release (default: the installed SGLang, else the default release)."""
    table = recorded()
    return table[pick_recorded(version, table).checked]


if __name__ == "__main__":
    print(json.dumps(asdict(http_api(sys.argv[1] if len(sys.argv) > 1 else None)), indent=2))
