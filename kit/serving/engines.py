"""Serving engines behind one seam: real SGLang, and the kit's CPU reference server.

A launch spec (`kit.serving.launch.LaunchSpec`) is engine-neutral: SGLang's own flag names. An `Engine`
says how that spec becomes a process and what the engine does with each flag, so the launcher, the
checks, the sweeps and the process lifecycle never branch on an engine's name. Another engine (vLLM, a
remote SGLang behind a job scheduler) is one more `Engine` in `ENGINES`.

    engine = get_engine("reference")
    argv = engine.argv(spec)            # [python, -m, kit, serve, --speculative-..., ...]
    engine.ignored_flags(spec)          # SGLang flags this engine would drop
    resolve_engine("auto")              # "sglang" with a visible GPU and SGLang importable, else "reference"
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from kit.findings import KitInputError

SGLANG_MODULE = "sglang.launch_server"
# the LaunchSpec fields the CPU reference server implements; other SGLang flags are dropped for it
REFERENCE_FIELDS = frozenset(
    {
        "model_path",
        "speculative_algorithm",
        "speculative_draft_model_path",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "host",
        "port",
        "api_key",
        "served_model_name",
        "decode_log_interval",
        "enable_metrics",
        "max_running_requests",
        "log_level",
        "trust_remote_code",
        "context_length",
    }
)


@dataclass(frozen=True)
class Engine:
    name: str
    description: str
    command: Callable[[object], list[str]]  # spec -> program argv before the flags
    fields: frozenset[str] | None  # LaunchSpec fields it implements; None: every SGLang flag
    start_despite_errors: bool  # True: error findings do not stop `kit launch` (the engine ignores them)

    def argv(self, spec) -> list[str]:
        flags = spec.flags() if self.fields is None else spec.flags(set(self.fields))
        return self.command(spec) + flags

    def ignored_flags(self, spec) -> list[str]:
        if self.fields is None:
            return []
        return [a for a in spec.flags() if a.startswith("--") and a[2:].replace("-", "_") not in self.fields]


ENGINES: dict[str, Engine] = {
    "sglang": Engine(
        name="sglang",
        description="real SGLang (`python -m sglang.launch_server`), on a GPU host",
        command=lambda spec: [spec.python, "-m", SGLANG_MODULE],
        fields=None,
        start_despite_errors=False,
    ),
    "reference": Engine(
        name="reference",
        description="the kit's CPU reference server (`python -m kit serve`), SGLang's HTTP API and flag semantics",
        command=lambda spec: [sys.executable, "-m", "kit", "serve"],
        fields=REFERENCE_FIELDS,
        start_despite_errors=True,
    ),
}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise KitInputError(f"--engine {name!r}: unknown serving engine; choose from {', '.join(ENGINES)}")


def visible_gpus() -> int:
    """CUDA GPUs a server started from here would see: CUDA_VISIBLE_DEVICES when set, else NVML's count
    (0 without a driver). No torch import: the notebook's torch may be a CPU build beside SGLang's."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return len([d for d in cvd.split(",") if d.strip() and not d.strip().startswith("-")])
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: no GPU to serve on
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def resolve_engine(name: str) -> str:
    """`auto` becomes "sglang" when a GPU is visible and SGLang is importable, else "reference"; other names
    are checked and returned."""
    if name == "auto":
        return "sglang" if visible_gpus() and importlib.util.find_spec("sglang") is not None else "reference"
    return get_engine(name).name


def engine_of(argv: list[str]) -> str:
    """The engine a launch argv runs: the reference server's `-m kit serve`, else SGLang."""
    return "reference" if argv[1:4] == ["-m", "kit", "serve"] else "sglang"


# llama.cpp's CPU backend repacks Q4 weights into "extra buffer types" for AMX/AVX512 kernels; on some CPUs with
# AMX that path segfaults mid-completion (seen on a Xeon with amx_bf16/amx_int8). llama.cpp's own server has
# --no-repack for it; llama-cpp-python's does not, so the launcher clears the same model parameter
# (`use_extra_bufts`) before starting the unmodified server module.
_NO_REPACK_SERVER = """
import runpy
import llama_cpp.llama_cpp as c
default = c.llama_model_default_params
def no_repack():
    p = default()
    p.use_extra_bufts = False
    return p
c.llama_model_default_params = no_repack
runpy.run_module("llama_cpp.server", run_name="__main__")
"""


def llama_cpp_server_argv(model: str, port: int, n_threads: int = 2, n_ctx: int = 1024) -> list[str]:
    """llama.cpp's OpenAI-compatible server (llama-cpp-python, `requirements-peers.txt`) on a GGUF file: the
    real third-party peer the client tests and the engine benchmark run against (not a serving engine of ours),
    started without weight repacking (see `_NO_REPACK_SERVER`)."""
    return [
        sys.executable,
        "-c",
        _NO_REPACK_SERVER,
        "--model",
        str(model),
        "--n_threads",
        str(n_threads),
        "--n_ctx",
        str(n_ctx),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
