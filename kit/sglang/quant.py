"""How each SGLang release reads a checkpoint's quantization config, the draft's included, from its recorded rules.

SGLang builds the draft's `ModelConfig` from the draft directory like any model, so a quantization config beside a
draft head decides whether it is set up quantized. ModelOpt exports write `hf_quant_config.json` (a BF16 head with
only an FP8 KV cache: `"quant_algo": null`). Old releases read *any* such file as `{"quant_method": "modelopt"}`
(`ModelOptFp8Config`, `_parse_quant_hf_config`); newer ones leave an unnamed algorithm unquantized.
`kit.derive.quant_scan` runs each release's own parse on probe files into quant_rules.json, read here; `kit doctor`
reports it as `draft.quant`.

    draft_quantization("0.4.10", {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}})
    # -> {"quant_method": "modelopt", "class": "ModelOptFp8Config", ...}
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit.sglang.versions import RecordedRelease, Version, pick_recorded, sort_versions, stored_rows

TABLE_PATH = Path(__file__).with_name("quant_rules.json")
FILE = "hf_quant_config.json"


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    doc = json.loads(TABLE_PATH.read_text())
    doc["versions"] = stored_rows(doc["versions"], "quant")
    return doc


def known_versions() -> list[str]:
    return sort_versions(table()["versions"])


def recorded_release(version: str | None) -> RecordedRelease:
    return pick_recorded(version, known_versions())


# -- the rule, for a draft directory ------------------------------------------------------------------------
def probe_name(quant_doc: dict) -> str | None:
    """Which recorded probe a parsed ModelOpt hf_quant_config.json is (None: a shape the table does not cover)."""
    q = quant_doc.get("quantization", quant_doc)
    if not isinstance(q, dict):
        return None
    if (algo := q.get("quant_algo")) is None:
        return "no_algo"
    algo = str(algo).upper()
    return "nvfp4" if "FP4" in algo else "fp8" if algo == "FP8" else None


def draft_quantization(version: str | None, quant_doc: dict) -> dict[str, Any] | None:
    """What SGLang `version` sets a draft up as, given the hf_quant_config.json beside it (no quantization_config in
    config.json): {"quant_method", "class", "probe", "version", "exact"}; None for a file shape not recorded."""
    if (name := probe_name(quant_doc)) is None:
        return None
    rel = recorded_release(version)
    row = table()["versions"][rel.checked]
    extra = {"probe": name, "requested": rel.requested, "version": rel.checked, "exact": rel.exact}
    return {**row[name], **extra, "evidence": row.get("evidence")}


def misread_releases() -> list[str]:
    """Recorded releases that set up a head whose hf_quant_config.json names no algorithm as quantized."""
    return [v for v, r in table()["versions"].items() if r["no_algo"]["quant_method"]]


# -- the loader's path for a head whose file names no algorithm -----------------------------------------------
# The parse above decides `model_config.quantization`; the loader's get_quant_config then has, from 0.4.9, a branch
# for a ModelOpt file whose quant_algo is null: `return None` (unquantized) for one class, ValueError("Invalid
# quant_config") for any other. `kit.derive.quant_scan.scan_no_algo_loader` reads it from each release's source;
# kit/tests/sglang/test_quant.py re-scans every cached release (no table file: one class, one first release).
LOADER_SRC = "srt/model_loader/weight_utils.py"
NO_ALGO_LOADER = {
    "architecture": "LlamaForCausalLMEagle3",
    "since": "0.4.9",
    "evidence": f"{LOADER_SRC} get_quant_config: quant_algo None -> return None when architectures[0] is "
    "LlamaForCausalLMEagle3, else ValueError (workaround for nvidia/Llama-4-Maverick-17B-128E-Eagle3, sglang PR 6985)",
}


def no_algo_loader(version: str | None, architecture: str | None) -> dict[str, Any] | None:
    """{"outcome": "unquantized" | "raises", "evidence"}: what the release's loader does with a draft of
    `architecture` whose ModelOpt file names no algorithm; None where it has no such branch (the parse's class)."""
    if Version.parse(recorded_release(version).requested) < Version.parse(NO_ALGO_LOADER["since"]):
        return None
    keep = architecture == NO_ALGO_LOADER["architecture"]
    return {"outcome": "unquantized" if keep else "raises", "evidence": NO_ALGO_LOADER["evidence"]}
