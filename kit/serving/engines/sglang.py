"""Real SGLang as a serving engine: `python -m sglang.launch_server`, on a GPU host.

The protocol object; what it knows of a release (HTTP paths, the speculative fields of a response, the
/metrics counters, log line formats) it reads from `kit.sglang.http_api` and `kit.sglang.log_format`,
per release, so a new release touches `kit.sglang` only.

    from kit.serving.engines import get_engine
    sg = get_engine("sglang")
    sg.argv(spec)                      # [python3, -m, sglang.launch_server, --model-path, ...]
    sg.spec_fields(meta_info, "sglang")  # {"verify_ct": 12, "accept_length": 2.4, ...}
"""

from __future__ import annotations

import sys
from typing import Any

from kit.serving.engines.base import Engine, exception_line, visible_gpus
from kit.sglang import log_format
from kit.sglang.http_api import HttpApi, http_api

SGLANG_MODULE = "sglang.launch_server"
# servers that share one GPU (notebook 05's three, `kit demo --gpu`'s three): what they fill together (weights
# and KV pools; the rest is CUDA graphs and activations) and each one's KV pool, ample for a small target
SHARED_GPU_MEMORY, SHARED_KV_TOKENS = 0.75, 32768


class SGLang(Engine):
    name = "sglang"
    description = "real SGLang (`python -m sglang.launch_server`), on a GPU host"
    passes_extra_args = True  # every SGLang flag, typed or not, reaches SGLang
    accepts_hub_ids = True

    def __init__(self, version: str | None = None, api: HttpApi | None = None):
        self.version = version  # None: the installed release, else the default one
        self._api = api

    @property
    def api(self) -> HttpApi:
        # version None reads the installed SGLang's metadata (~1 ms, a scan of sys.path): pinned() does it once
        return self._api or http_api(self.version)

    def pinned(self) -> SGLang:
        return SGLang(self.version, self.api)

    # HTTP paths of the release
    ready_path = property(lambda self: self.api.ready_path)
    server_info_paths = property(lambda self: self.api.server_info_paths)
    models_path = property(lambda self: self.api.models_path)
    metrics_path = property(lambda self: self.api.metrics_path)
    flush_path = property(lambda self: self.api.flush_path)

    def serves_here(self) -> bool:
        """A visible CUDA GPU and an importable SGLang."""
        import importlib.util

        return visible_gpus() > 0 and importlib.util.find_spec("sglang") is not None

    def command(self, spec) -> list[str]:
        return [spec.python, "-m", SGLANG_MODULE]

    def flag(self, name: str) -> str | None:
        return "--" + name.replace("_", "-")  # LaunchSpec fields are SGLang's argument names

    def localize(self, spec, target: str) -> dict[str, Any]:
        import importlib.util

        from kit.models import resolve_target
        from kit.sglang.bundle import installed_bundle_flags

        # 'embedded' is the SmolLM2 directory the kit converts from its GGUF (what SGLang loads)
        changes: dict[str, Any] = {"model_path": str(resolve_target(target)) if target == "embedded" else target}
        if importlib.util.find_spec("sglang") is not None:  # the seed's /root/ml-env python is not here
            changes["python"] = sys.executable
        # an SGLang from the kit's bundle starts only with the bundle's flags; the attention backend is a
        # spec field, and a flag the launch already sets keeps the launch's value
        flags, extra = installed_bundle_flags(), list(spec.extra_args)
        i = 0
        while i < len(flags):
            n = 2 if i + 1 < len(flags) and not flags[i + 1].startswith("--") else 1
            name, value = flags[i], flags[i + 1 : i + n]
            if name == "--attention-backend":
                changes["attention_backend"] = value[0]
            elif name not in extra:
                extra += [name, *value]
            i += n
        if extra != list(spec.extra_args):
            changes["extra_args"] = extra
        return changes

    def share_device(self, spec, servers: int):
        """Each of `servers` SGLang servers on one GPU fills a share of SHARED_GPU_MEMORY and caps its KV pool
        (SHARED_KV_TOKENS): left to itself a server sizes its pool from the memory free as it starts (0.9 of a
        141 GB H200 for the first), and the next one finds none left and stops with CUDA out of memory."""
        if servers <= 1:
            return spec
        share = round(SHARED_GPU_MEMORY / servers, 4)
        extra = list(spec.extra_args)
        if "--max-total-tokens" not in extra:
            extra += ["--max-total-tokens", str(SHARED_KV_TOKENS)]
        return spec.replace(mem_fraction_static=min(spec.mem_fraction_static or 1.0, share), extra_args=extra)

    def parse_log_line(self, line: str) -> dict | None:
        return log_format.parse_line(line)

    def startup_failure(self, line: str, tail: list[str]) -> str | None:
        if not log_format.STARTUP_FAILED.search(line):
            return None
        return exception_line(tail) or line.strip()

    def generate_request(
        self, text: str, max_new_tokens: int, temperature: float = 0.0, ignore_eos: bool = False, stream: bool = False
    ) -> tuple[str, dict]:
        sp: dict[str, Any] = {"max_new_tokens": max_new_tokens, "temperature": temperature}
        if ignore_eos:
            sp["ignore_eos"] = True
        return self.api.generate_path, {"text": text, "sampling_params": sp, "stream": stream}

    def request_extra(self, api: str) -> dict | None:
        # the OpenAI endpoints answer with `sglext.spec_tokens_details` only when asked (releases that have it)
        return {"return_spec_tokens_details": True} if api != "sglang" and self.api.openai_spec_details else None

    def spec_fields(self, obj: dict, api: str) -> dict[str, Any]:
        if api == "sglang":  # /generate: meta_info, per request
            return self.api.spec_fields(obj.get("meta_info"))
        det = (obj.get("sglext") or {}).get("spec_tokens_details")
        if isinstance(det, list):
            det = det[0] if det else None
        return self.api.spec_fields(det)

    def accept_counters(self, metrics: dict[str, float] | None) -> tuple[float, float] | None:
        if not metrics:
            return None

        def get(base):
            return metrics.get(base + "_total", metrics.get(base))

        gen, ver = get(self.api.generation_tokens_metric), get(self.api.verify_calls_metric)
        return None if gen is None or ver is None else (gen, ver)

    def server_info_accept_length(self, info: dict | None) -> float | None:
        """Lifetime accept length of /server_info (accumulated at decode-log intervals; 0 until the first)."""
        if not info:
            return None
        states = info.get("internal_states") or []
        vals = [s.get(self.api.server_info_accept_length) for s in states if isinstance(s, dict)]
        vals = [v for v in vals if v]
        return sum(vals) / len(vals) if vals else None
