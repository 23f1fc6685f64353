"""llama.cpp's OpenAI-compatible server (llama-cpp-python, `requirements-peers.txt`) on a GGUF file.

A peer, not a serving engine of the kit's: the real third-party server the client tests and the engine benchmark run
against, started without weight repacking (see `_NO_REPACK_SERVER`). Test and bench machinery, beside the package: only
bench scripts and tests import it.

    argv = llama_cpp_server_argv("model.gguf", port=8000)
    llamacpp_timings(log_lines)     # the timings its log prints per generation, what a client's are checked against
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

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
    """The argv that starts llama-cpp-python's server on `model` (no weight repacking)."""
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


_LLAMA_TOTAL = re.compile(r"llama_perf_context_print:\s+total time =\s+([\d.]+) ms /\s+(\d+) tokens")
_LLAMA_EVAL = re.compile(r"llama_perf_context_print:\s+eval time =\s+([\d.]+) ms /\s+(\d+) runs")


def llamacpp_timings(lines: Iterable[str]) -> list[dict]:
    """Per-generation timings llama.cpp prints (`llama_perf_context_print` blocks, in order):
    [{"total_s", "total_tokens", "eval_s", "eval_runs"}], what a client's timings are checked against."""
    out: list[dict] = []
    cur: dict = {}
    for line in lines:
        if m := _LLAMA_EVAL.search(line):
            cur = {"eval_s": float(m[1]) / 1000, "eval_runs": int(m[2])}
        elif m := _LLAMA_TOTAL.search(line):
            out.append({**cur, "total_s": float(m[1]) / 1000, "total_tokens": int(m[2])})
            cur = {}
    return out
