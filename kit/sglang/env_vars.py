"""SGLANG_* environment variables explained, and checked against the SGLang release that will read them.

SGLang reads ~800 `SGLANG_*` switches (`EnvBool(...)`, `EnvInt(...)`, ... in `srt/environ.py` since 0.5.x). A
misspelt or retired name is silently ignored; an EnvBool given `on` warns and falls back to its default. A short
table (`EXPLAIN`) explains the variables that matter for EAGLE-3 serving, and each variable is looked up in what
that release reads: its declared type in `srt/environ.py`, or "referenced" for a mention elsewhere.
`env_vars.json` records them for every listed release, each name with the spans of releases that read it (`derive`
scans a wheel as text; `python -m kit.derive.env_vars_scan --write V...` rewrites the table; kit/tests/sglang/
test_env_vars_table.py re-derives it), so a laptop judges as a GPU host does. A release the table lacks is read from
`--derive`'s local rows, else from its source at hand. `attention_backend_findings` judges `--attention-backend`
against the GPU family (`default_backend`). `kit env` and `kit doctor` report them:

    sglang_findings({"SGLANG_ENABLE_SPEC_V2": "1"}, "0.5.17")
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from kit.findings import Code, Finding, KitInputError, finding_list
from kit.hf import HFConfig
from kit.sglang.flags import flag_value
from kit.sglang.versions import tables_dir

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "env: notebook 01"
SGLANG_VAR = Code(
    "env.sglang_var",
    SECTION,
    "warning / info",
    "what an `SGLANG_*` variable does (seed: `SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`); warning when that SGLang "
    "release (its recorded variables, kit/sglang/env_vars.json) does not read it or an EnvBool gets an invalid value",
    "drop or fix the variable",
)
ATTN_BACKEND = Code(
    "env.attn_backend",
    SECTION,
    "error / warning / info",
    "attention backend SGLang picks for this GPU and model (MHA vs Kimi/DeepSeek MLA); error when a forced backend "
    "cannot run on the arch (`trtllm_*` sm_100 only, `fa3` sm_90 only) or `trtllm_mha` with topk > 1; warning `fa4` "
    "with speculation",
    "drop the override (flashinfer/triton on sm_120)",
)
DEEPGEMM = Code(
    "env.deepgemm",
    SECTION,
    "warning",
    "block-FP8 target on sm_12x with DeepGEMM on (`SGLANG_ENABLE_JIT_DEEPGEMM` not 0): DeepGEMM needs WGMMA/tcgen05",
    "`SGLANG_ENABLE_JIT_DEEPGEMM=0`, `--fp8-gemm-backend triton`",
)

EXPLAIN = {
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": (
        "lets a context length above the model's derived one through (warning instead of ValueError). An EAGLE "
        "draft is built with the *target's* context_len, so a draft whose max_position_embeddings is smaller "
        "(a speculators/SpecForge config trained at 2k-8k) needs it; SGLang then overrides the draft's "
        "max_position_embeddings. Positions beyond what the draft saw in training get extrapolated RoPE, so "
        "acceptance can fall on long prompts",
        "prefer writing the target's context length into the draft's config.json; keep the variable only as a "
        "conscious override",
    ),
    "SGLANG_ENABLE_SPEC_V2": (
        "the overlap-scheduled speculative worker (spec v2): 0.5.5-0.5.10 fail with it and topk > 1, "
        "0.5.11-0.5.12 run topk > 1 on the v1 worker instead, 0.5.13+ run every EAGLE launch on v2",
        "with 0.5.5-0.5.10 use it with topk 1; releases that no longer read it make it a no-op",
    ),
    "SGLANG_ENABLE_JIT_DEEPGEMM": (
        "DeepGEMM JIT kernels for FP8 GEMMs; DeepGEMM needs WGMMA (sm_90) or tcgen05 (sm_100/103), not sm_120",
        "set 0 on sm_120 with block-FP8 models (use the triton or flashinfer_cutlass FP8 backend)",
    ),
    "SGLANG_SKIP_P2P_CHECK": (
        "custom all-reduce trusts torch.cuda.can_device_access_peer instead of running its own P2P test",
        "only where the P2P test itself is the problem",
    ),
    "SGLANG_RECORD_STEP_TIME": ("records per-step times (bench_speculative sets it)", ""),
    "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": (
        "no CUDA graph for the draft-extend step (memory kill switch, e.g. B200 DeepSeek-V4 OOM)",
        "",
    ),
    "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": (
        "skips SGLang's sgl-kernel version check, hiding a kernel/sglang mismatch",
        "install the matching sgl-kernel",
    ),
}
BOOL_WORDS = {"true", "1", "yes", "y", "false", "0", "no", "n"}  # EnvBool.parse, srt/environ.py


TABLE_PATH = Path(__file__).with_name("env_vars.json")


def derive(version: str, download: bool = True) -> dict[str, str]:
    """{name: declared type or 'referenced'} for every SGLANG_* token in that release's source (read as text)."""
    from kit.sglang.source import source_root

    root = source_root(version, download)
    text = "\n".join(p.read_text(errors="ignore") for p in sorted((root / "sglang").rglob("*.py")))
    names = dict.fromkeys(re.findall(r"SGLANG_[A-Z0-9_]+", text), "referenced")
    env_py = root / "sglang" / "srt" / "environ.py"
    if env_py.exists():
        for name, typ in re.findall(r"^\s+(SGLANG_[A-Z0-9_]+)\s*=\s*(Env[A-Za-z]+)\(", env_py.read_text(), re.M):
            names[name] = typ
    return dict(sorted(names.items()))


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(TABLE_PATH.read_text())


def known_versions() -> list[str]:
    return list(_table()["releases"])


def recorded_vars(version: str) -> dict[str, str] | None:
    """The variables the table records for exactly that release (None: not in the table)."""
    t = _table()
    at = {v: i for i, v in enumerate(t["releases"])}
    if (i := at.get(version)) is None:
        return None
    return {name: typ for name, spans in t["vars"].items() for typ, a, b in spans if at[a] <= i <= at[b]}


@lru_cache(maxsize=8)
def release_vars(version: str) -> dict[str, str] | None:
    """{name: declared type or 'referenced'} that release reads: the table's row, else the row `--derive V` wrote on
    this machine, else its source at hand (never downloaded here); None when none of these has it."""
    rec = recorded_vars(version)
    if rec is not None:
        return rec
    local = tables_dir(version) / "env_vars.json"
    if local.exists():
        return json.loads(local.read_text())
    try:
        return derive(version, download=False)
    except KitInputError:
        return None


@finding_list
def sglang_findings(env: dict[str, str], version: str | None = None, source: str = "environment") -> Iterator[Finding]:
    """One `env.sglang_var` finding per SGLANG_* variable: what it does, and whether that release reads it."""
    known = release_vars(version) if version else None
    for name in sorted(k for k in env if k.startswith("SGLANG_")):
        value, (meaning, fix) = env[name], EXPLAIN.get(name, ("", ""))
        ev = {"var": name, "value": value, "source": source, "sglang": version}
        sev, title = "info", f"{name}={value}: {meaning.split(';')[0].split('. ')[0] if meaning else 'set'}"
        if known is not None:
            typ = ev["declared"] = known.get(name)
            if typ is None:
                sev, title = "warning", f"{name}: not read anywhere in SGLang {version}, so it has no effect"
                fix = "drop it, or check the name against srt/environ.py of that release"
            elif typ.startswith("EnvBool") and value.strip().lower() not in BOOL_WORDS:
                sev, title = "warning", f"{name}={value}: not a boolean SGLang accepts; it warns and uses the default"
                fix = f"write {name}=1 (or 0)"
        if meaning:
            ev["meaning"] = meaning
        yield SGLANG_VAR(title, ev, sev, fix)


# ---------------------------------------------------------------------------------------------
MLA_MODEL_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25", "kimi_vl", "glm_moe_dsa"}
ONLY_ON = {"trtllm_mha": (10,), "trtllm_mla": (10,), "fa3": (9,), "flashmla": (9, 10)}


def default_backend(cc: tuple[int, int], mla: bool, spec: bool, topk: int | None) -> str:
    """SGLang's default attention-backend choice (`get_default_attn_backend`, recent releases)."""
    if mla:
        return {9: "fa3", 10: "flashinfer"}.get(cc[0], "triton")
    return {9: "fa3", 10: "trtllm_mha"}.get(cc[0], "flashinfer") if not spec or topk == 1 else "flashinfer"


def attention_backend_findings(
    cc: tuple[int, int] | None, argv: list[str], target_config: HFConfig | None = None
) -> list[Finding]:
    """`env.attn_backend`: a forced backend the GPU cannot run (error), FA4 with speculation, or the default."""
    if cc is None or not argv:
        return []
    mtype = (target_config or {}).get("model_type") or ""
    text_type = ((target_config or {}).get("text_config") or {}).get("model_type") or ""
    path = (flag_value(argv, "--model-path") or flag_value(argv, "--model") or "").lower()
    # no config given: a Kimi/DeepSeek model path means an MLA target
    guessed = target_config is None and any(k in path for k in ("kimi", "deepseek"))
    mla = bool({mtype, text_type} & MLA_MODEL_TYPES) or "kimi" in mtype or guessed
    spec = flag_value(argv, "--speculative-algorithm") is not None
    topk = int(t) if (t := flag_value(argv, "--speculative-eagle-topk")) and t.isdigit() else None
    forced = flag_value(argv, "--attention-backend") or flag_value(argv, "--decode-attention-backend")
    ev = {"cc": f"{cc[0]}.{cc[1]}", "model_type": mtype or None, "mla": mla, "mla_guessed_from_path": guessed}
    ev.update(forced=forced, topk=topk)
    sm = f"sm_{cc[0]}{cc[1]}"
    if forced in ONLY_ON and cc[0] not in ONLY_ON[forced]:
        built = "/".join(str(m) + "0" for m in ONLY_ON[forced])
        title = f"--attention-backend {forced} does not run on {sm} (built for sm_{built} only)"
        return [ATTN_BACKEND(title, ev, fix="drop the override; on sm_120 use flashinfer (MHA) or triton (MLA)")]
    if forced == "trtllm_mha" and spec and (topk or 1) > 1:
        title = "trtllm_mha supports speculative decoding with --speculative-eagle-topk 1 only"
        return [ATTN_BACKEND(title, ev, fix="topk 1 or flashinfer")]
    if forced == "fa4" and spec:
        title = "fa4 is prefill-only in SGLang and has no speculative-decoding support"
        return [ATTN_BACKEND(title, ev, "warning", "use flashinfer for decode")]
    d = default_backend(cc, mla, spec, topk)
    note = " (Kimi/DeepSeek MLA target)" if mla else ""
    title = f"attention backend: {forced or 'default'} -> SGLang would pick {d} on {sm}{note}"
    return [ATTN_BACKEND(title, {**ev, "default": d}, "info")]


def fp8_findings(cc: tuple[int, int] | None, env: dict[str, str], target_config: HFConfig | None) -> list[Finding]:
    """`env.deepgemm`: a block-FP8 target on sm_12x with DeepGEMM left on (DeepGEMM needs WGMMA/tcgen05)."""
    q = (target_config or {}).get("quantization_config") or {}
    if cc is None or cc[0] != 12 or q.get("quant_method") != "fp8":
        return []
    defaults = {"SGLANG_ENABLE_JIT_DEEPGEMM": "1", "SGLANG_ENABLE_DEEP_GEMM": "0"}  # JIT DeepGEMM defaults on
    on = [k for k, default in defaults.items() if env.get(k, default).strip().lower() not in ("0", "false", "no", "n")]
    if not on:
        return []
    title = f"FP8 target on sm_{cc[0]}{cc[1]} with DeepGEMM enabled: DeepGEMM needs sm_90/sm_100 "
    title += "('Assertion error (kernel_runtime.hpp:45)')"
    fix = "SGLANG_ENABLE_JIT_DEEPGEMM=0 and --fp8-gemm-backend triton (or flashinfer_cutlass)"
    return [DEEPGEMM(title, {"on": on, "quantization": q.get("quant_method")}, fix=fix)]
