"""What the kit asks of a serving engine: one protocol object per engine, subclassing `Engine`.

A launch spec (`kit.serving.launch.LaunchSpec`) is engine-neutral (SGLang's argument names); an `Engine` owns
everything engine-specific, so the launcher, the process lifecycle, the client, the metrics and the benchmark never
branch on an engine's name:

    argv         `command(spec)` + the spec's fields under `flag(name)`; `required_changes(spec)`: what its
                 install here needs (SGLang's bundle: its flags)
    readiness    `ready_path`, `startup_failure(line)`, `starts_together` (several servers may start at once)
    server info  `server_info_paths` (tried in order), `models_path`, `metrics_path`, `flush_path`
    logs         `parse_log_line(line)`: one line -> a row of `kit.serving.logs.COLUMNS`, or None
    answers      `read_response(obj, api)` -> `Reply` (OpenAI APIs read here, the native one by `read_native`)
    acceptance   `spec_fields(obj, api)`, `request_extra(api)`, `accept_counters(metrics)`,
                 `server_info_accept_length(info)`
    stop         `stop_signal`, `stop_grace_s`

How to add one: docs/architecture.md; `kit/tests/serving/toy_engine.py` is nothing like SGLang. Methods marked
`@required` have no default, and `kit.serving.engines.register` refuses an engine that lacks one.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from kit.findings import KitInputError

# the per-request fields `spec_fields` returns (any subset): verify steps, the server's accept length
# and rate, accepted / proposed draft tokens, the accepted-drafts histogram
SPEC_KEYS = ("verify_ct", "accept_length", "accept_rate", "num_correct", "num_proposed", "histogram")

# a Python exception line, as a traceback ends: `RuntimeError: ...`, `torch.OutOfMemoryError: ...`
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\] )?(?P<line>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt): .*)$")


@dataclass
class Reply:
    """What one answer (or one stream chunk) of a server says; None where it does not say it."""

    completion_tokens: int | None = None  # tokens generated so far (a native stream: cumulative)
    prompt_tokens: int | None = None
    finish_reason: str | None = None  # "stop", "length", ...
    text: str | None = None  # the generated text (a stream chunk: its piece)
    spec: dict[str, Any] = field(default_factory=dict)  # speculative fields, SPEC_KEYS-named (`spec_fields`)


def required(method):
    """Mark a protocol method that has no default: every engine must define it."""
    method.__required__ = True
    return method


def exception_line(lines: list[str]) -> str | None:
    """The last Python exception line (`SomeError: message`) in `lines`, prefix stripped; None if none."""
    return next((m["line"] for line in reversed(lines) if (m := _EXCEPTION.match(line.strip()))), None)


def visible_gpus() -> int:
    """CUDA GPUs a server started from here would see: CUDA_VISIBLE_DEVICES when set, else NVML's count
    (0 without a driver). No torch import: the notebook's torch may be a CPU build beside SGLang's."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return sum(1 for d in cvd.split(",") if d.strip() and not d.strip().startswith("-"))
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: no GPU to serve on
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


# what a GPU server holds beyond its weights and KV pool: its CUDA context, CUDA graphs, activations
SERVER_RESERVE_BYTES = 2 * 2**30


class Engine:
    """A serving engine's protocol. Subclasses set the attributes and override the methods they differ in."""

    name: str = ""
    description: str = ""
    start_despite_errors: bool = False  # True: error findings do not stop `kit launch` (the engine ignores them)
    runs_here: bool = False  # the kit starts it on this machine: its model/draft paths must exist here
    passes_extra_args: bool = False  # unparsed SGLang flags (LaunchSpec.extra_args) go on its command line
    resolves_kit_names: bool = False  # it reads the kit's `--model-path embedded` itself (else: a directory)
    accepts_hub_ids: bool = False  # a model path that is a hub id is downloaded by the engine itself
    rehearses: bool = False  # `kit rehearse` runs launches on it (real SGLang: the miniature, the recorder)
    captures: bool = False  # `kit launch --capture-hidden` runs on it (kit.serving.capture_hook on its PYTHONPATH)
    # several servers may start at once on one machine (each loads on its own); False where they share a device
    # whose memory each sizes its pool from at start (SGLang on one GPU), so they start one after another
    starts_together: bool = False
    # the part of one GPU's memory the servers sharing it fill together (weights, KV pools); None: no GPU shared
    device_share: float | None = None
    # HTTP
    bench_api: str = "sglang"  # `kit bench`'s endpoint when --api is not given: /generate, else an OpenAI one
    ready_path: str = "/health"
    server_info_paths: tuple[str, ...] = ()
    models_path: str = "/v1/models"
    metrics_path: str | None = "/metrics"
    flush_path: str | None = None
    # stop: this signal to the process group, SIGKILL after the grace
    stop_signal: int = signal.SIGTERM
    stop_grace_s: float = 10.0

    def pinned(self) -> Engine:
        """This engine with what it would look up on every call resolved once (SGLang: its release), for hot paths."""
        return self

    def serves_here(self) -> bool:
        """Whether it can serve on this machine now (`engine="auto"` takes the first registered one that can)."""
        return False

    def chain_for(self, target: str, draft: str):
        """(SpecParams, why): the chain to serve `draft` with when the user names none."""
        from kit.reference.chain import DEFAULT

        return DEFAULT, f"the kit's default chain {DEFAULT.label()}"

    @required
    def command(self, spec) -> list[str]:
        """The program argv before the flags."""
        raise NotImplementedError

    @required
    def flag(self, name: str) -> str | None:
        """This engine's flag for a LaunchSpec field (SGLang's argument name); None: not taken."""
        raise NotImplementedError

    def argv(self, spec) -> list[str]:
        return self.command(spec) + spec.flags(self.flag) + (list(spec.extra_args) if self.passes_extra_args else [])

    def ignored_flags(self, spec) -> list[str]:
        """The SGLang flags of `spec` this engine drops (set fields it takes no flag for, unpassed extras)."""
        out = ["--" + name.replace("_", "-") for name, _ in spec.items() if self.flag(name) is None]
        if not self.passes_extra_args:
            out += [a for a in spec.extra_args if a.startswith("--")]
        return out

    def localize(self, spec, target: str) -> dict[str, Any]:
        """Changes that run `spec` on this machine with the kit's `target` ('embedded' or a local dir)."""
        return {} if target == "embedded" else {"model_path": target}

    def required_changes(self, spec, bundle: str | None = None) -> tuple[dict[str, Any], list[str]]:
        """Changes without which the engine installed here cannot start `spec`, one line per change saying why.
        `bundle`: the SGLang release of the kit's bundle to assume when none is installed."""
        return {}, []

    def share_device(self, spec, servers: int, kv_tokens: int | None = None):
        """`spec` for one of `servers` servers that run at once on this machine's one device (its memory rule), each
        with a KV pool of `kv_tokens` where the engine takes a cap (None: the engine's own for a small target)."""
        return spec

    def refuses(self, params) -> str | None:
        """Why this engine cannot run the speculative parameters `params` (a `SpecParams`), or None."""
        return None

    def servers_that_fit(self, weights_bytes: float, kv_bytes: float, device_bytes: float) -> int | None:
        """How many servers fit at once in `device_share` of a device of `device_bytes`, each holding
        `weights_bytes` of weights, a KV pool of `kv_bytes` and `SERVER_RESERVE_BYTES`. None where servers share
        no GPU."""
        if self.device_share is None:
            return None
        return int(self.device_share * device_bytes // (weights_bytes + kv_bytes + SERVER_RESERVE_BYTES))

    def parse_log_line(self, line: str) -> dict | None:
        return None

    def startup_failure(self, line: str, tail: list[str]) -> str | None:
        """When `line` says the server will not come up: the reason (its exception line); else None."""
        return None

    def generate_request(
        self,
        text: str | list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = False,
        stream: bool = False,
    ) -> tuple[str, dict]:
        """(path, body) of one request on the native API (`api="sglang"` of `kit.measure.client`), whose answer carries
        per-request acceptance; `text` a list: the prompt as token ids."""
        raise KitInputError(f"serving engine {self.name!r} has no native generate API; use an OpenAI api")

    def read_response(self, obj: dict, api: str) -> Reply:
        """One answer (or stream chunk) on `api`: "sglang" the native API (`read_native`), else OpenAI's, read here."""
        if api == "sglang":
            reply = self.read_native(obj)
        else:
            usage = obj.get("usage") or {}
            ch = (obj.get("choices") or [{}])[0] or {}
            text = (ch.get("delta") or ch.get("message") or {}).get("content") if api == "chat" else ch.get("text")
            reply = Reply(usage.get("completion_tokens"), usage.get("prompt_tokens"), ch.get("finish_reason"), text)
        reply.spec = self.spec_fields(obj, api)
        return reply

    def read_native(self, obj: dict) -> Reply:
        """One answer of the native generate API (`spec` is filled by `read_response`)."""
        raise KitInputError(f"serving engine {self.name!r} has no native generate API; use an OpenAI api")

    def request_extra(self, api: str) -> dict | None:
        """Fields a request on `api` adds to be answered with its speculative fields."""
        return None

    def spec_fields(self, obj: dict, api: str) -> dict[str, Any]:
        """The per-request speculative fields of one response object (or stream chunk), SPEC_KEYS-named."""
        return {}

    def accept_counters(self, metrics: dict[str, float] | None) -> tuple[float, float] | None:
        """(generated tokens, verify steps) from one /metrics snapshot; None when it has no such counters."""
        return None

    def server_info_accept_length(self, info: dict | None) -> float | None:
        return None


def required_interface(protocol: type = Engine) -> tuple[str, ...]:
    """The protocol's methods without a default (marked `@required`), derived from the class itself."""
    return tuple(n for n in dir(protocol) if getattr(getattr(protocol, n), "__required__", False))


def missing_interface(engine: Engine) -> list[str]:
    """The required methods `engine`'s class leaves to the protocol (which has no default for them)."""
    return [n for n in required_interface() if getattr(type(engine), n) is getattr(Engine, n)]
