"""The dtype rule of each SGLang release (`kit.sglang.dtype.DTYPE_RULES`), checked against its wheel's source.

`derive(version)` runs the release's own `_get_and_verify_dtype` (its text, `kit.sglang.source`) on a grid of probe
configs, `predict(version)` gives that grid from the recorded rule, and `derive_forced(version)` finds the bfloat16
overrides (`FORCED_BF16`) in its ServerArgs; kit/tests/sglang/test_dtype.py compares them with the record.

    python -m kit.derive.dtype_scan [VERSION ...]      # the derived grid vs the recorded rule
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
import types
from typing import Any

from kit.hf import HFConfig
from kit.sglang.dtype import FORCED_BF16, SRC, dtype_rule, resolve_model_dtype
from kit.sglang.source import source_files, source_text

FUNCTION = "_get_and_verify_dtype"
# the probe grid `derive` runs: requested dtype x config dtype (None: the config names none) x model_type
REQUESTS = ("auto", "bfloat16", "float16", "half", "float32", "float")
CONFIG_DTYPES = (None, "float32", "float16", "bfloat16")
MODEL_TYPES = ("llama", "gemma", "gemma2", "gemma3")


def predict(version: str) -> dict[str, str]:
    """The probe grid from the recorded rule: "requested|config dtype|model_type" -> dtype run."""
    out = {}
    for req in REQUESTS:
        for cd in CONFIG_DTYPES:
            for mt in MODEL_TYPES:
                cfg = HFConfig.of({"model_type": mt, **({"torch_dtype": cd, "dtype": cd} if cd else {})})
                r = resolve_model_dtype(cfg, req, version)
                out[f"{req}|{cd}|{mt}"] = r.dtype if r else "error"
    return out


def _pieces(text: str) -> tuple[str | None, str | None]:
    """(the `_STR_DTYPE_TO_TORCH_DTYPE = {...}` statement, the `_get_and_verify_dtype` def) of model_config.py."""
    tree = ast.parse(text)
    table = func = None
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "_STR_DTYPE_TO_TORCH_DTYPE" for t in n.targets):
            table = ast.get_source_segment(text, n)
        if isinstance(n, ast.FunctionDef) and n.name == FUNCTION:
            func = ast.get_source_segment(text, n)
    return table, func


def load_function(text: str):
    """The release's `_get_and_verify_dtype`, compiled from its text with torch and a logger around it."""
    import logging
    import typing

    import torch

    table, func = _pieces(text)
    if func is None:
        raise ValueError(f"{SRC}: no {FUNCTION}")
    logger = logging.getLogger("kit.derive.dtype_scan.probe")
    logger.disabled = True  # the function logs "Casting ..." for every cross-dtype probe
    g: dict[str, Any] = {
        "torch": torch,
        "logger": logger,
        "Union": typing.Union,
        "Optional": typing.Optional,
        "PretrainedConfig": object,
    }
    for src in (table, func):
        if src:
            exec(compile(textwrap.dedent(src), SRC, "exec"), g)
    return g[FUNCTION]


def _probe_config(model_type: str, **attrs):
    # a loaded transformers config: the dtype is a torch.dtype (transformers converts the config.json string)
    return types.SimpleNamespace(model_type=model_type, **attrs)


def derive(version: str, download: bool = True) -> dict[str, Any]:
    """Run the release's own function on the probe grid: {"grid": {...}, "reads": attribute, "gemma_bf16": ...}."""
    import torch

    fn = load_function(source_text(version, SRC, download) or "")

    def run(req, cfg) -> str:
        try:
            return str(fn(cfg, req)).removeprefix("torch.")
        except ValueError:
            return "error"

    grid = {}
    for req in REQUESTS:
        for cd in CONFIG_DTYPES:
            for mt in MODEL_TYPES:
                d = getattr(torch, cd) if cd else None
                grid[f"{req}|{cd}|{mt}"] = run(req, _probe_config(mt, dtype=d, torch_dtype=d))
    # which attribute it reads: a config carrying bfloat16 under one name only
    reads = [
        a for a in ("torch_dtype", "dtype") if run("auto", _probe_config("llama", **{a: torch.bfloat16})) == "bfloat16"
    ]
    return {"grid": grid, "reads": reads[0] if len(reads) == 1 else reads}


def derive_forced(version: str, download: bool = True) -> tuple[str, ...]:
    """The FORCED_BF16 overrides whose code that release's ServerArgs has (srt/server_args.py, srt/arg_groups/)."""
    texts = [source_text(version, "srt/server_args.py", download) or ""]
    texts += list(source_files(version, "srt/arg_groups", download).values())
    return tuple(n for n, (_, _, rx) in FORCED_BF16.items() if any(re.search(rx, t) for t in texts))


def check(version: str) -> dict[str, Any]:
    """The derived grid against the recorded rule: what it reads, the grid cells that differ, the bf16 overrides."""
    got, rule = derive(version), dtype_rule(version)
    diff = {k: (g, p) for (k, g), p in zip(got["grid"].items(), predict(version).values()) if g != p}
    forced = {"derived": derive_forced(version), "recorded": rule.forced_bf16}
    return {"reads": got["reads"], "recorded": rule.reads, "differs": diff, "forced": forced}


def compare(version: str) -> str | None:
    """None when the release's source gives what the recorded rule says; else what differs."""
    c = check(version)
    if c["reads"] == c["recorded"] and not c["differs"] and tuple(c["forced"]["derived"]) == c["forced"]["recorded"]:
        return None
    return json.dumps(c)


if __name__ == "__main__":
    for v in sys.argv[1:] or ["0.5.17"]:
        print(v, json.dumps(check(v)))
