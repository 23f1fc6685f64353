"""Real SGLang as a serving engine: `python -m sglang.launch_server`, on a GPU host.

What it knows of a release (HTTP paths, a response's speculative fields, /metrics counters, log formats) it reads
from `kit.sglang.http_api` and `kit.sglang.log_format`, so a new release touches `kit.sglang` only.

    sg = get_engine("sglang")
    sg.argv(spec)                        # [python3, -m, sglang.launch_server, --model-path, ...]
    sg.spec_fields(meta_info, "sglang")  # {"verify_ct": 12, "accept_length": 2.4, ...}
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from typing import Any

from kit.serving.engines.base import Engine, Reply, exception_line, visible_gpus
from kit.sglang import log_format
from kit.sglang.bundle_site import bundle_launch_flags
from kit.sglang.http_api import HttpApi, http_api

SGLANG_MODULE = "sglang.launch_server"
# servers that share one GPU (notebook 05's three, `kit demo --gpu`'s three, `kit tune`'s): the part of its memory
# they fill together, and each one's KV pool where the caller names none, ample for a small target
SHARED_GPU_MEMORY, SHARED_KV_TOKENS = 0.75, 32768
BUNDLE_REASON = "the kit's SGLang bundle needs it"
# a launch's own value of a bundle flag that the bundle runs as well, so it is kept: sgl_kernel carries bf16 and
# fp16 rmsnorm kernels (float32 has none, and `auto` reads float32 from a float32 checkpoint)
BUNDLE_ALSO_RUNS = {"--dtype": ("bfloat16", "float16", "half")}
# flags that override --attention-backend for a part of the model: each must be the bundle's one backend too
ATTENTION_OVERRIDES = tuple(
    "--speculative-draft-attention-backend --prefill-attention-backend --decode-attention-backend".split()
)


def drop_option(args: list[str], opt: str, takes_value: bool) -> tuple[list[str], str | None]:
    """`args` without `opt` (`opt value`, `opt=value` or a bare flag), and its last value ('True' for a flag; None
    when absent)."""
    out, old, it = [], None, iter(args)
    for a in it:
        if a == opt:
            old = next(it, "True") if takes_value else "True"
        elif a.startswith(opt + "="):
            old = a.split("=", 1)[1]
        else:
            out.append(a)
    return out, old


def bundle_changes(spec, flags: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The changes that give `spec` the bundle launch `flags` (`Release.launch_flags`), and one line per flag added or
    replaced. A flag the launch sets keeps its value only where the bundle runs it too (the same, or one of
    BUNDLE_ALSO_RUNS); a flag the spec types is set on its field, any other in `extra_args`."""
    fields = {f.name for f in dataclasses.fields(spec)}
    wanted: list[tuple[str, str | None, bool]] = []  # (flag, value or None for a switch, added when unset)
    i = 0
    while i < len(flags):
        value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
        wanted.append((flags[i], value, True))
        if flags[i] == "--attention-backend" and value is not None:
            wanted += [(o, value, False) for o in ATTENTION_OVERRIDES]
        i += 1 if value is None else 2
    changes: dict[str, Any] = {}
    extra, notes = list(spec.extra_args), []
    for name, value, add in wanted:
        field = name[2:].replace("-", "_")
        typed = getattr(spec, field) if field in fields else None
        kept, old = drop_option(extra, name, value is not None)  # its last value (a switch: set or not)
        if old is None and typed not in (None, False):  # the extras come after the typed flags: theirs wins
            old = str(typed)
        kept_old = old is not None and (value is None or old == value or old in BUNDLE_ALSO_RUNS.get(name, ()))
        if kept_old or (old is None and not add):
            continue
        extra = kept
        if field in fields:
            changes[field] = True if value is None else value
        else:
            extra += [name] if value is None else [name, value]
        shown = name if value is None else f"{name} {value}"
        how = "added" if old is None else f"replaces the launch's {old}"
        notes.append(f"{shown}: {how}, {BUNDLE_REASON}")
    if extra != list(spec.extra_args):
        changes["extra_args"] = extra
    return changes, notes


class SGLang(Engine):
    name = "sglang"
    description = "real SGLang (`sglang serve` or `python -m sglang.launch_server`), on a GPU host"
    passes_extra_args = True  # every SGLang flag, typed or not, reaches SGLang
    accepts_hub_ids = True
    rehearses = True
    captures = True
    device_share = SHARED_GPU_MEMORY

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
        return visible_gpus() > 0 and importlib.util.find_spec("sglang") is not None

    def command(self, spec) -> list[str]:
        from kit.sglang.flags import server_command

        return server_command(spec.python, self.version)

    def flag(self, name: str) -> str | None:
        return "--" + name.replace("_", "-")  # LaunchSpec fields are SGLang's argument names

    def localize(self, spec, target: str) -> dict[str, Any]:
        from kit.models import resolve_target

        # 'embedded' is the SmolLM2 directory the kit converts from its GGUF (what SGLang loads)
        changes: dict[str, Any] = {"model_path": str(resolve_target(target)) if target == "embedded" else target}
        if importlib.util.find_spec("sglang") is not None:  # the seed's /root/ml-env python is not here
            changes["python"] = sys.executable
        return changes

    def required_changes(self, spec, bundle: str | None = None) -> tuple[dict[str, Any], list[str]]:
        """An SGLang from the kit's bundle starts only with the bundle's launch flags (one attention and one sampling
        backend): those of the bundle the importable SGLang came from, else, with `bundle`, that release's bundle's."""
        return bundle_changes(spec, bundle_launch_flags(bundle))

    def share_device(self, spec, servers: int, kv_tokens: int | None = None):
        """Each of `servers` SGLang servers on one GPU caps its KV pool (`--max-total-tokens`: `kv_tokens`, else
        SHARED_KV_TOKENS): left to itself the first sizes its pool from the memory free as it starts, and the next
        finds none left. Its `--mem-fraction-static` stays SHARED_GPU_MEMORY, not a share of it: SGLang's KV budget
        is the memory free after its load less (1 - fraction) x the memory free before it
        (`KVCacheConfigurator._profile_available_bytes`), and servers started side by side load at once, so each
        one's budget is charged with the weights and pools of the others: a fraction of 0.75 / 3 leaves a 7B target
        no KV cache ("Loaded weights leave no GPU memory for the KV cache", seen on an H100). Together they stay
        inside it: `Engine.servers_that_fit` counts each one's weights, pool and reserve."""
        if servers <= 1 or self.device_share is None:
            return spec
        extra = list(spec.extra_args)
        if "--max-total-tokens" not in extra:
            extra += ["--max-total-tokens", str(kv_tokens or SHARED_KV_TOKENS)]
        return spec.replace(
            mem_fraction_static=min(spec.mem_fraction_static or 1.0, self.device_share), extra_args=extra
        )

    parse_log_line = staticmethod(log_format.parse_line)

    def startup_failure(self, line: str, tail: list[str]) -> str | None:
        return (exception_line(tail) or line.strip()) if log_format.STARTUP_FAILED.search(line) else None

    def generate_request(
        self,
        text: str | list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = False,
        stream: bool = False,
    ) -> tuple[str, dict]:
        sp: dict[str, Any] = {"max_new_tokens": max_new_tokens, "temperature": temperature}
        if ignore_eos:
            sp["ignore_eos"] = True
        prompt = {"input_ids": list(text)} if isinstance(text, list) else {"text": text}
        return self.api.generate_path, {**prompt, "sampling_params": sp, "stream": stream}

    def read_native(self, obj: dict) -> Reply:
        return Reply(*self.api.generate_answer(obj))

    def request_extra(self, api: str) -> dict | None:
        # the OpenAI endpoints answer with `sglext.spec_tokens_details` only when asked (releases that have it)
        return {"return_spec_tokens_details": True} if api != "sglang" and self.api.openai_spec_details else None

    def spec_fields(self, obj: dict, api: str) -> dict[str, Any]:
        if api == "sglang":  # /generate: meta_info, per request
            return self.api.spec_fields(obj.get("meta_info"))
        det = (obj.get("sglext") or {}).get("spec_tokens_details")
        return self.api.spec_fields((det or [None])[0] if isinstance(det, list) else det)

    def accept_counters(self, metrics: dict[str, float] | None) -> tuple[float, float] | None:
        if not metrics:
            return None
        names = (self.api.generation_tokens_metric, self.api.verify_calls_metric)
        gen, ver = (metrics.get(m + "_total", metrics.get(m)) for m in names)
        return None if gen is None or ver is None else (gen, ver)

    def server_info_accept_length(self, info: dict | None) -> float | None:
        """Lifetime accept length of /server_info (accumulated at decode-log intervals; 0 until the first)."""
        key = self.api.server_info_accept_length
        vals = [v for s in (info or {}).get("internal_states") or [] if isinstance(s, dict) and (v := s.get(key))]
        return sum(vals) / len(vals) if vals else None
