"""How each SGLang release reads a checkpoint's quantization config, the draft's included, from its real source.

SGLang builds the draft's `ModelConfig` from the draft directory like any model, so a quantization config
shipped beside a draft head decides whether the draft is set up quantized. ModelOpt exports write
`hf_quant_config.json`; for a BF16 head with only an FP8 KV cache it holds `"quant_algo": null`. Old releases
read *any* `hf_quant_config.json` as `{"quant_method": "modelopt"}`, which `QUANTIZATION_METHODS` maps to
`ModelOptFp8Config` (srt/configs/model_config.py `_parse_quant_hf_config`); newer ones parse `quant_algo` and
leave an unnamed algorithm unquantized. The rule per release is derived, not typed:

1. `derive(version)` executes the release's own `_parse_quant_hf_config` (with its
   `_parse_modelopt_quant_config` and module helpers) on a stand-in `self` whose `model_path` is a temporary
   directory holding one probe `hf_quant_config.json`, for each probe in `PROBES`;
2. maps the returned `quant_method` through the release's `QUANTIZATION_METHODS` table
   (srt/layers/quantization/__init__.py) to the class SGLang builds.

`python -m kit.sglang.quant --write [VERSION ...]` regenerates kit/sglang/quant_rules.json;
kit/tests/sglang/test_quant.py re-derives releases from their wheels and compares.

    draft_quantization("0.4.10", {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}})
    # -> {"quant_method": "modelopt", "class": "ModelOptFp8Config", ...}
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tempfile
import textwrap
import types
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit.sglang.versions import RecordedRelease, pick_recorded, sort_versions, stored_rows

TABLE_PATH = Path(__file__).with_name("quant_rules.json")
FILE = "hf_quant_config.json"
# ModelOpt's hf_quant_config.json shapes: a BF16 head exported with an FP8 KV cache only, and real FP8 / NVFP4
PROBES = {
    "no_algo": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}},
    "fp8": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}},
    "nvfp4": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}},
}
SRC = "srt/configs/model_config.py"
METHODS_SRC = "srt/layers/quantization/__init__.py"


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    doc = json.loads(TABLE_PATH.read_text())
    doc["versions"] = stored_rows(doc["versions"], "quant")
    return doc


def known_versions() -> list[str]:
    return sort_versions(table()["versions"])


def recorded_release(version: str | None) -> RecordedRelease:
    return pick_recorded(version, sort_versions(table()["versions"]))


# -- derivation from a release's source -------------------------------------------------------------------
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
        "logger": logging.getLogger("kit.sglang.quant.probe"),
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


def method_classes(text: str) -> dict[str, str]:
    """quant_method -> class name, from the release's QUANTIZATION_METHODS dict literals."""
    return dict(re.findall(r'^\s*"(\w+)":\s*(\w+),', text, re.M))


def derive(version: str, download: bool = True) -> dict[str, Any]:
    from kit.sglang.source import source_text

    text = source_text(version, SRC, download) or ""
    classes = method_classes(source_text(version, METHODS_SRC, download) or "")
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


def build_table(versions: list[str]) -> dict[str, Any]:
    return {
        "_doc": "generated by `python -m kit.sglang.quant --write` from real sglang wheels (ModelConfig."
        "_parse_quant_hf_config executed on probe hf_quant_config.json files); checked by kit/tests/sglang/test_quant.py",
        "probes": PROBES,
        "versions": {v: derive(v) for v in sort_versions(versions)},
    }


# -- the rule, for a draft directory ------------------------------------------------------------------------
def probe_name(quant_doc: dict) -> str | None:
    """Which recorded probe a parsed ModelOpt hf_quant_config.json is (None: a shape the table does not cover)."""
    q = quant_doc.get("quantization", quant_doc)
    if not isinstance(q, dict):
        return None
    algo = q.get("quant_algo")
    if algo is None:
        return "no_algo"
    algo = str(algo).upper()
    return "nvfp4" if "FP4" in algo else "fp8" if algo == "FP8" else None


def draft_quantization(version: str | None, quant_doc: dict) -> dict[str, Any] | None:
    """What SGLang `version` sets a draft up as, given the hf_quant_config.json beside it (no quantization_config in
    config.json): {"quant_method", "class", "probe", "version", "exact"}; None for a file shape not recorded."""
    name = probe_name(quant_doc)
    if name is None:
        return None
    rel = recorded_release(version)
    row = table()["versions"][rel.checked]
    return {
        **row[name],
        "probe": name,
        "requested": rel.requested,
        "version": rel.checked,
        "exact": rel.exact,
        "evidence": row.get("evidence"),
    }


def misread_releases() -> list[str]:
    """Recorded releases that set up a head whose hf_quant_config.json names no algorithm as quantized."""
    return [v for v, r in table()["versions"].items() if r["no_algo"]["quant_method"]]


# -- the loader's path for a head whose file names no algorithm -----------------------------------------------
# The parse above decides `model_config.quantization`; the loader then builds the quant config from the file
# (srt/model_loader/weight_utils.py get_quant_config). From 0.4.9 on it has a branch for a ModelOpt file whose
# quant_algo is null: `return None` (the head loads unquantized; loader.py's _get_quantization_config passes the
# None on) when `architectures[0]` is one class, ValueError("Invalid quant_config") for any other. The branch is
# the workaround for nvidia/Llama-4-Maverick-17B-128E-Eagle3 (sglang PR 6985). The fact below is what
# `scan_no_algo_loader` reads from each release's source; kit/tests/sglang/test_quant.py re-scans every cached
# release and checks it (no table file: one class and one first release).
LOADER_SRC = "srt/model_loader/weight_utils.py"
NO_ALGO_LOADER = {
    "architecture": "LlamaForCausalLMEagle3",
    "since": "0.4.9",
    "evidence": f"{LOADER_SRC} get_quant_config: quant_algo None -> return None when architectures[0] is "
    "LlamaForCausalLMEagle3, else ValueError (workaround for nvidia/Llama-4-Maverick-17B-128E-Eagle3, sglang PR 6985)",
}


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


def no_algo_loader(version: str | None, architecture: str | None) -> dict[str, Any] | None:
    """What release `version`'s loader does with a draft of `architecture` whose ModelOpt file names no algorithm,
    once the parse has called it quantized: {"outcome": "unquantized" | "raises", "evidence"}; None where the
    release has no such branch (the parse's class is built)."""
    from kit.sglang.versions import Version

    requested = recorded_release(version).requested
    if Version.parse(requested) < Version.parse(NO_ALGO_LOADER["since"]):
        return None
    keep = architecture == NO_ALGO_LOADER["architecture"]
    return {"outcome": "unquantized" if keep else "raises", "evidence": NO_ALGO_LOADER["evidence"]}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--write"]
    if "--write" in sys.argv:
        from kit.sglang.loader import known_versions
        from kit.sglang.source import write_table

        write_table(TABLE_PATH, build_table(args or known_versions()))
    else:
        for v in args or ["0.4.10", "0.5.17"]:
            print(v, json.dumps(derive(v)))
