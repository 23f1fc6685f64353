"""Launch-spec findings: SGLang's real parser plus the semantic rules of SGLang 0.5.23.

    from kit.launch import spec_from_command
    from kit.launch_checks import lint
    report = lint(spec_from_command(cmd), target_config=cfg_or_None, draft_config=cfg_or_None)

Codes (docs/findings.md): `launch.flag` (SGLang's parser rejects a flag or value),
`launch.parser` (the parser could not be run), `launch.spec_params` (steps/topk/draft tokens,
`_handle_eagle_family` in `srt/arg_groups/speculative_hook.py`), `aux.algorithm` (EAGLE with an
EAGLE-3 draft), `launch.bind`, `launch.trust_remote_code`, `launch.mem` (weights vs
mem-fraction-static), `launch.backend` (attention backend vs topk/page size, blackwell.md §6
rows 18-19), `launch.engine` (flags the reference server ignores), `env.nccl_var` (kit.nccl).
Target/draft configs are read from local `model_path` / draft paths when not given.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from kit.findings import Finding, KitInputError, Report

# (steps, topk, draft tokens) SGLang 0.5.23 picks when all three are unset
# (`_auto_choose_speculative_params`, speculative_hook.py L1430-1461)
AUTO_BIG = {"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"}
EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
# targets whose MTP draft defaults to the target path (no --speculative-draft-model-path needed)
MTP_TARGETS = {"DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM",
               "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
               "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
               "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
               "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration"}
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


def _local_config(path: Optional[str]) -> Optional[dict]:
    if not path or not (Path(path) / "config.json").is_file():
        return None
    from kit.hf_config import read_config

    try:
        return read_config(path)[0]
    except KitInputError:
        return None


def _arch(cfg: Optional[dict]) -> Optional[str]:
    archs = (cfg or {}).get("architectures") or []
    return archs[0] if archs else None


def auto_params(algorithm: Optional[str], target_arch: Optional[str]) -> tuple[int, int, int]:
    if (algorithm or "").upper() == "STANDALONE":
        return (3, 1, 4)
    return (5, 4, 8) if target_arch in AUTO_BIG else (3, 1, 4)


def effective_params(spec, target_arch: Optional[str] = None) -> Optional[tuple[int, int, int]]:
    """(steps, topk, draft tokens) as SGLang resolves them; None when they cannot be resolved."""
    s, k, n = spec.speculative_num_steps, spec.speculative_eagle_topk, spec.speculative_num_draft_tokens
    if s is None and k is None and n is None:
        return auto_params(spec.speculative_algorithm, target_arch)
    if s is None or k is None:
        return None
    if k == 1:
        return (s, 1, s + 1)
    return None if n is None else (s, k, n)


# -- the rules ------------------------------------------------------------------------------------
def flag_findings(spec, python: Optional[str] = None, build: Optional[bool] = None) -> list[Finding]:
    from kit.sglang_parser import parse_argvs

    try:
        [res] = parse_argvs([spec.flags()], python=python, build=build)
    except KitInputError as e:
        return [Finding(code="launch.parser", severity="info",
                        title="SGLang's argument parser could not be run; flags were not checked",
                        evidence={"reason": str(e)},
                        fix="install sglang, set $KIT_SGLANG_PYTHON, or allow the side venv build")]
    out = []
    for flag in [u for u in res["unknown"] if u.startswith("-")] or res["unknown"][:1]:
        out.append(Finding(code="launch.flag", severity="error",
                           title=f"SGLang does not accept {flag!r}: the server would exit at startup",
                           evidence={"unknown": res["unknown"]},
                           fix="remove the flag or fix its spelling (`python -m sglang.launch_server --help`)"))
    if res["error"]:
        out.append(Finding(code="launch.flag", severity="error",
                           title=f"SGLang's parser rejects the command: {res['error']}",
                           evidence={"error": res["error"]}, fix="fix the flag value"))
    return out


def spec_param_findings(spec, target_arch: Optional[str]) -> list[Finding]:
    alg = (spec.speculative_algorithm or "").upper()
    s, k, n = spec.speculative_num_steps, spec.speculative_eagle_topk, spec.speculative_num_draft_tokens
    given = {"num_steps": s, "eagle_topk": k, "num_draft_tokens": n}
    out = []
    if not alg:
        if any(v is not None for v in given.values()) or spec.speculative_draft_model_path:
            out.append(Finding(code="launch.spec_params", severity="warning",
                               title="speculative flags given without --speculative-algorithm: speculation is off",
                               evidence=given, fix="add --speculative-algorithm EAGLE3 (EAGLE-3 draft)"))
        return out
    if alg not in EAGLE_FAMILY:
        return out
    if s is None and k is None and n is None:
        a = auto_params(alg, target_arch)
        out.append(Finding(code="launch.spec_params", severity="info",
                           title=f"steps/topk/draft tokens unset: SGLang auto-chooses {a[0]}-{a[1]}-{a[2]}"
                                 + ("" if target_arch else " (3-1-4 unless the target is LlamaForCausalLM/Grok: 5-4-8)"),
                           evidence={"target_arch": target_arch, "auto": a},
                           fix="set all three explicitly to know what you benchmark"))
        return out
    if s is None:
        out.append(Finding(code="launch.spec_params", severity="error",
                           title="topk/draft tokens set but --speculative-num-steps unset: SGLang's assert fails at startup",
                           evidence=given, fix="set --speculative-num-steps too, or none of the three"))
        return out
    if k is None:
        out.append(Finding(code="launch.spec_params", severity="error",
                           title="--speculative-eagle-topk unset while steps are set: SGLang crashes comparing None > 1",
                           evidence=given, fix="set --speculative-eagle-topk (1 = chain)"))
        return out
    if s < 1 or k < 1:
        out.append(Finding(code="launch.spec_params", severity="error", title="steps and topk must be >= 1",
                           evidence=given, fix="use positive values"))
        return out
    if k == 1 and n is not None and n != s + 1:
        out.append(Finding(code="launch.spec_params", severity="warning",
                           title=f"topk 1: SGLang replaces num_draft_tokens={n} by steps+1={s + 1}",
                           evidence=given, fix=f"--speculative-num-draft-tokens {s + 1}"))
    if k > 1:
        cand = k + (s - 1) * k * k
        if n is None:
            out.append(Finding(code="launch.spec_params", severity="error",
                               title="topk > 1 needs --speculative-num-draft-tokens",
                               evidence=given, fix=f"set it between 2 and {cand + 1}"))
        elif n < 2 or n - 1 > cand:
            out.append(Finding(code="launch.spec_params", severity="error",
                               title=f"num_draft_tokens={n} outside 2..{cand + 1} for steps={s}, topk={k}: "
                                     "torch.topk fails in organize_draft_results",
                               evidence={**given, "max_draft_tokens": cand + 1},
                               fix=f"use at most {cand + 1} draft tokens, or more steps/topk"))
    return out


def aux_findings(spec, draft_config: Optional[dict], target_config: Optional[dict] = None) -> list[Finding]:
    alg = (spec.speculative_algorithm or "").upper()
    if draft_config is not None:  # helper C's wiring rules decide (one rule for doctor, notebook 03 and here)
        from kit.aux import wiring_checks

        return [f for f in wiring_checks(target_config, draft_config, spec.argv())
                if f.code == "aux.algorithm"]
    path = spec.speculative_draft_model_path or ""
    if alg in ("EAGLE", "NEXTN") and "eagle3" in path.lower().replace("-", "").replace("_", ""):
        return [Finding(code="aux.algorithm", severity="warning",
                        title=f"--speculative-algorithm {alg} with a draft whose path says EAGLE-3: if it is one, "
                              "aux capture is off and accept length drops to ~1.0",
                        evidence={"algorithm": alg, "draft_path": path, "draft_config": "not readable here"},
                        fix="--speculative-algorithm EAGLE3 (check the draft's config.json architectures)")]
    return []


def bind_findings(spec) -> list[Finding]:
    if spec.host in ("0.0.0.0", "::", "[::]") and not spec.api_key:
        return [Finding(code="launch.bind", severity="warning",
                        title=f"binds {spec.host} without --api-key: anyone on the network can use the server",
                        evidence={"host": spec.host, "port": spec.port},
                        fix="--host 127.0.0.1 (and an SSH tunnel), or add --api-key")]
    return []


def trust_findings(spec) -> list[Finding]:
    if spec.trust_remote_code:
        return [Finding(code="launch.trust_remote_code", severity="warning",
                        title="--trust-remote-code runs Python shipped with the model repository",
                        evidence={"model_path": spec.model_path},
                        fix="keep it only for a model you have read (Kimi-K2.5 needs it); pin the revision")]
    return []


def _weights_bytes(path: Optional[str]) -> Optional[int]:
    if not path or not Path(path).is_dir():
        return None
    from kit.safetensors_io import read_checkpoint

    try:
        ck = read_checkpoint(path)
    except KitInputError:
        return None
    return ck.total_bytes or None


def detect_gpu_memory_gib() -> Optional[float]:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30
    except Exception:  # no driver / no GPU: the check reports bytes only
        return None


def mem_findings(spec, gpu_memory_gib: Optional[float]) -> list[Finding]:
    model = spec.model_path
    if model == "embedded":
        from kit.models import embedded_dir, cache_dir, EMBEDDED_NAME

        model = str(cache_dir() / EMBEDDED_NAME)
    tb, db = _weights_bytes(model), _weights_bytes(spec.speculative_draft_model_path)
    if tb is None:
        return []
    tp = spec.tp_size or 1
    per_gpu = (tb + (db or 0)) / tp
    ev: dict[str, Any] = {"target_bytes": tb, "draft_bytes": db, "tp_size": tp,
                          "weights_per_gpu_gib": round(per_gpu / 2**30, 3)}
    gpu = gpu_memory_gib if gpu_memory_gib is not None else detect_gpu_memory_gib()
    frac = spec.mem_fraction_static
    if gpu is None or frac is None:
        return [Finding(code="launch.mem", severity="info",
                        title=f"weights need {per_gpu / 2**30:.2f} GiB per GPU (target+draft over tp={tp})",
                        evidence={**ev, "gpu_memory_gib": gpu, "mem_fraction_static": frac},
                        fix="mem-fraction-static x GPU memory must exceed this, with room for the KV cache")]
    pool = frac * gpu * 2**30
    ev.update(gpu_memory_gib=round(gpu, 2), mem_fraction_static=frac, static_pool_gib=round(pool / 2**30, 2))
    if per_gpu >= pool:
        return [Finding(code="launch.mem", severity="error",
                        title="weights alone exceed mem-fraction-static x GPU memory: no room for a KV cache",
                        evidence=ev, fix="raise --mem-fraction-static, use more GPUs (--tp-size) or a smaller quant")]
    if per_gpu > 0.9 * pool:
        return [Finding(code="launch.mem", severity="warning",
                        title=f"KV cache gets only {(pool - per_gpu) / 2**30:.2f} GiB per GPU after the weights",
                        evidence=ev, fix="raise --mem-fraction-static a little or add GPUs")]
    return []


def backend_findings(spec, params: Optional[tuple[int, int, int]]) -> list[Finding]:
    alg = (spec.speculative_algorithm or "").upper()
    if alg not in EAGLE_FAMILY or params is None:
        return []
    topk = params[1]
    backends = {b for b in (spec.attention_backend, spec.speculative_draft_attention_backend) if b}
    out = []
    v2 = str(spec.env.get("SGLANG_ENABLE_SPEC_V2", "")).lower() in ("1", "true", "yes", "on")
    if v2 and topk != 1:
        out.append(Finding(code="launch.backend", severity="error",
                           title=f"SGLANG_ENABLE_SPEC_V2 supports only topk 1 (topk resolves to {topk})",
                           evidence={"topk": topk}, fix="--speculative-eagle-topk 1 or unset SGLANG_ENABLE_SPEC_V2"))
    if "trtllm_mha" in backends and topk > 1:
        out.append(Finding(code="launch.backend", severity="error",
                           title=f"trtllm_mha supports only topk 1 for speculative decoding (topk {topk}): ValueError",
                           evidence={"backends": sorted(backends), "topk": topk},
                           fix="--speculative-eagle-topk 1, or --attention-backend flashinfer"))
    if (spec.page_size or 1) > 1 and topk > 1 and spec.attention_backend and spec.attention_backend not in PAGE_TREE_BACKENDS:
        out.append(Finding(code="launch.backend", severity="error",
                           title=f"topk > 1 with page size {spec.page_size} needs one of {PAGE_TREE_BACKENDS}",
                           evidence={"attention_backend": spec.attention_backend, "page_size": spec.page_size},
                           fix="--page-size 1 or --attention-backend flashinfer"))
    if "fa4" in backends:
        out.append(Finding(code="launch.backend", severity="warning",
                           title="fa4 has no speculative-decoding support",
                           evidence={"backends": sorted(backends)}, fix="use flashinfer (or fa3 on Hopper)"))
    return out


def engine_findings(spec, engine: str) -> list[Finding]:
    if engine != "reference":
        return []
    from kit.launch import REFERENCE_FIELDS

    dropped = [a for a in spec.flags() if a.startswith("--") and a[2:].replace("-", "_") not in REFERENCE_FIELDS]
    if not dropped:
        return []
    return [Finding(code="launch.engine", severity="info",
                    title=f"the CPU reference server ignores {len(dropped)} SGLang flag(s)",
                    evidence={"ignored": dropped}, fix="")]


def nccl_findings(env: dict[str, str]) -> list[Finding]:
    try:
        from kit.nccl import nccl_findings as rules  # helper A's environment rules
    except ImportError:
        return []
    return list(rules(env))


def lint(spec, target_config: Optional[dict] = None, draft_config: Optional[dict] = None,
         sglang_python: Optional[str] = None, parse_flags: bool = True, build_venv: Optional[bool] = None,
         gpu_memory_gib: Optional[float] = None, engine: str = "sglang") -> Report:
    target_config = target_config or _local_config(spec.model_path)
    draft_config = draft_config or _local_config(spec.speculative_draft_model_path)
    arch = _arch(target_config)
    r = Report()
    if parse_flags:
        r.extend(flag_findings(spec, sglang_python, build_venv))
    r.extend(spec_param_findings(spec, arch))
    r.extend(aux_findings(spec, draft_config, target_config))
    alg = (spec.speculative_algorithm or "").upper()
    if alg in ("EAGLE", "EAGLE3") and not spec.speculative_draft_model_path and arch not in MTP_TARGETS:
        r.add(Finding(code="launch.spec_params", severity="error",
                      title=f"{alg} without --speculative-draft-model-path: SGLang loads the target as the draft and fails",
                      evidence={"target_arch": arch}, fix="--speculative-draft-model-path DRAFT_DIR"))
    r.extend(bind_findings(spec))
    r.extend(trust_findings(spec))
    r.extend(mem_findings(spec, gpu_memory_gib))
    r.extend(backend_findings(spec, effective_params(spec, arch)))
    r.extend(engine_findings(spec, engine))
    r.extend(nccl_findings(spec.env))
    r.facts.update(effective_params=effective_params(spec, arch), target_arch=arch,
                   draft_arch=_arch(draft_config))
    return r
