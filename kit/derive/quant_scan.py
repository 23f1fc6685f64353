"""The quantization rules of each SGLang release (`kit/sglang/quant_rules.json`, read by `kit.sglang.quant`), derived.

`derive(version)` executes the release's own `_parse_quant_hf_config` (with `_parse_modelopt_quant_config` and its
module helpers) on a stand-in `self` whose `model_path` holds one probe `hf_quant_config.json`, for each of `PROBES`,
and maps the returned `quant_method` through the release's `QUANTIZATION_METHODS` (srt/layers/quantization) to the
class SGLang builds. `scan_no_algo_loader(text)` reads the loader's branch for a ModelOpt file naming no algorithm
(`kit.sglang.quant.NO_ALGO_LOADER`). kit/tests/sglang/test_quant.py re-derives releases and compares.

    python -m kit.derive.quant_scan --write [VERSION ...]   # rewrite the table (default: the loader table's releases)
    python -m kit.derive.quant_scan [VERSION ...]           # print the derived rows
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tempfile
import textwrap
import types
from pathlib import Path
from typing import Any

from kit.derive import read_rows, write_table
from kit.sglang.quant import FILE, TABLE_PATH
from kit.sglang.source import source_text

# ModelOpt's hf_quant_config.json shapes: a BF16 head exported with an FP8 KV cache only, and real FP8 / NVFP4
PROBES = {
    "no_algo": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}},
    "fp8": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}},
    "nvfp4": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}},
}
SRC = "srt/configs/model_config.py"
METHODS_SRC = "srt/layers/quantization/__init__.py"


class _Any:
    """Stand-in for any module-level name the method reaches that the probe does not need (envs, logger...)."""

    def __getattr__(self, name):
        return _Any()

    def __call__(self, *a, **k):
        return _Any()

    def __bool__(self):
        return False


def _functions(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(module-level function sources, ModelConfig method sources) of model_config.py."""
    tree = ast.parse(text)
    top = {n.name: ast.get_source_segment(text, n) for n in tree.body if isinstance(n, ast.FunctionDef)}
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig"), None)
    meths = {}
    if cls is not None:
        meths = {n.name: ast.get_source_segment(text, n) for n in cls.body if isinstance(n, ast.FunctionDef)}
    return top, meths


def run_parse(text: str, quant_doc: dict | None) -> dict | None:
    """Execute the release's `_parse_quant_hf_config` for a local draft directory holding `quant_doc` (the
    parsed hf_quant_config.json; None: no such file)."""
    import copy
    import logging
    import math
    import os
    import typing

    top, meths = _functions(text)
    if "_parse_quant_hf_config" not in meths:
        return {"error": "no _parse_quant_hf_config"}
    g: dict[str, Any] = {
        "json": json,
        "os": os,
        "copy": copy,
        "math": math,
        "logging": logging,
        "logger": logging.getLogger("kit.derive.quant_scan.probe"),
        "Path": Path,
        "Optional": typing.Optional,
        "List": list,
        "Dict": dict,
        "Any": Any,
        "Union": typing.Union,
        "Callable": typing.Callable,
    }
    for src in top.values():  # helpers such as unwrap_modelopt_quantization_config
        try:
            exec(compile(textwrap.dedent(src), SRC, "exec"), g)
        except Exception:  # noqa: BLE001 — a helper the probe never calls may need what we do not provide
            continue
    ns: dict[str, Any] = {}
    for name in ("_parse_quant_hf_config", "_parse_modelopt_quant_config"):
        if name in meths:
            exec(compile(textwrap.dedent(meths[name]), SRC, "exec"), g, ns)
    probe_cls = type("ModelConfigProbe", (), ns)
    with tempfile.TemporaryDirectory(prefix="kit-quant-probe-") as d:
        if quant_doc is not None:
            (Path(d) / FILE).write_text(json.dumps(quant_doc))
        me = probe_cls()
        me.hf_config = types.SimpleNamespace()  # config.json without quantization_config
        me.model_path, me.revision, me.is_draft_model = d, None, True
        for _ in range(30):  # unknown module-level names become stand-ins
            try:
                out = me._parse_quant_hf_config()
                return dict(out) if out is not None else None
            except NameError as e:
                m = re.search(r"name '(\w+)' is not defined", str(e))
                if not m:
                    return {"error": f"NameError: {e}"}
                g[m.group(1)] = _Any()
            except Exception as e:  # noqa: BLE001 — record, never crash the scan
                return {"error": f"{type(e).__name__}: {e}"}
    return {"error": "too many unknown names"}


def derive(version: str, download: bool = True) -> dict[str, Any]:
    text = source_text(version, SRC, download) or ""
    # quant_method -> class name, from the release's QUANTIZATION_METHODS dict literals
    classes = dict(re.findall(r'^\s*"(\w+)":\s*(\w+),', source_text(version, METHODS_SRC, download) or "", re.M))
    out: dict[str, Any] = {}
    for name, probe in PROBES.items():
        res = run_parse(text, probe)
        method = (res or {}).get("quant_method") if isinstance(res, dict) else None
        out[name] = {
            "quant_method": method,
            "class": classes.get(method) if method else None,
            **({"error": res["error"]} if isinstance(res, dict) and "error" in res else {}),
        }
    line = next((i + 1 for i, t in enumerate(text.splitlines()) if "def _parse_quant_hf_config" in t), None)
    out["evidence"] = f"{SRC}:{line} _parse_quant_hf_config" if line else None
    return out


def _table_doc(rows: dict[str, dict]) -> dict[str, Any]:
    return {
        "_doc": "generated by `python -m kit.derive.quant_scan --write` from real sglang wheels (ModelConfig."
        "_parse_quant_hf_config executed on probe hf_quant_config.json files); checked by kit/tests/sglang/test_quant.py",
        "probes": PROBES,
        "versions": rows,
    }


def stored(path: Path = TABLE_PATH) -> dict[str, dict]:
    """The repository's rows (without rows derived on this machine)."""
    return read_rows(path)


def add_rows(rows: dict[str, dict], path: Path = TABLE_PATH) -> bool:
    """Store these releases' rows (`derive`) in quant_rules.json, every other row as it was; True when it changed."""
    return write_table(path, _table_doc({**stored(path), **rows}))


def scan_no_algo_loader(text: str) -> str | None:
    """The architecture a release's get_quant_config loads unquantized for a file whose quant_algo is null (None:
    the release has no such branch). Read from the AST: an `if ... quant_algo ... is None:` whose body compares
    `architectures[0] != "<class>"` and returns None."""
    tree = ast.parse(text)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_quant_config"), None)
    for node in ast.walk(fn) if fn else ():
        if not isinstance(node, ast.If):
            continue
        test = ast.unparse(node.test)
        if "quant_algo" not in test or "is None" not in test:
            continue
        returns_none = any(
            isinstance(b, ast.Return) and isinstance(b.value, ast.Constant) and b.value.value is None for b in node.body
        )
        for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            if (
                returns_none
                and isinstance(sub, ast.Compare)
                and isinstance(sub.ops[0], ast.NotEq)
                and "architectures" in ast.unparse(sub.left)
                and isinstance(sub.comparators[0], ast.Constant)
            ):
                return str(sub.comparators[0].value)
    return None


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--write"]
    if "--write" in sys.argv:
        from kit.sglang.loader import known_versions

        add_rows({v: derive(v) for v in args or known_versions()})
    else:
        for v in args or ["0.4.10", "0.5.17"]:
            print(v, json.dumps(derive(v)))
