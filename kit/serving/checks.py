"""Launch-spec findings: SGLang's real parser plus the semantic rules of the SGLang release it judges.

    report = lint(spec_from_command(cmd), target_config=cfg_or_None, draft_config=cfg_or_None)

Codes (docs/findings.md): `launch.flag` / `launch.parser` (SGLang's parser rejects a flag, or could not run),
`launch.spec_params` / `launch.spec_verify` (steps/topk/draft tokens: refused, changed, or crashing at startup;
`kit.sglang.params`), `aux.algorithm` (EAGLE with an EAGLE-3 draft), `launch.bind`, `launch.trust_remote_code`,
`launch.remote_code_needed`, `launch.mem` (weights vs mem-fraction-static), `launch.shard` (`kit.sglang.sharding`),
`launch.backend` (attention backend vs topk/page size), `launch.engine` (flags the serving engine ignores),
`env.nccl_var` (kit.env.nccl). Target/draft configs are read from the launch's local paths when not given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kit.checkpoint.safetensors_io import weights_bytes
from kit.env.machine import device_memory_gib
from kit.findings import CODES, Code, Finding, KitInputError, Report, finding_list
from kit.hf import HFConfig
from kit.sglang.params import (
    EAGLE_FAMILY,
    SPEC_PARAMS,
    SPEC_V2_RUNS_TREES,
    SPEC_V2_TOPK_REFUSED,
    SPEC_V2_TOPK_STARTUP_ERROR,
    resolve,
    spec_v2_refuses_tree,
)
from kit.sglang.sharding import shard_findings
from kit.sglang.versions import Version, default_release
from kit.wiring.aux import ALGORITHM

SECTION = "launch/process/logs: notebook 04"
BIND = Code(
    "launch.bind",
    SECTION,
    "warning",
    "`--host 0.0.0.0` (or `::`) without `--api-key`: the server is open to the network",
    "`--host 127.0.0.1` plus an SSH tunnel, or `--api-key`",
)
TRUST_REMOTE_CODE = Code(
    "launch.trust_remote_code",
    SECTION,
    "warning",
    "`--trust-remote-code` runs Python from the model repository",
    "keep it only for a repository you have read; pin the revision",
)
REMOTE_CODE_NEEDED = Code(
    "launch.remote_code_needed",
    SECTION,
    "error",
    "SGLang loads a multimodal target's HF processor while it starts (`--skip-tokenizer-init` or not); that processor "
    "is remote code (an `auto_map` in the target's processor/tokenizer files, or the vendor ships it so: Kimi-K2.5) "
    "and the launch has no `--trust-remote-code`: Transformers refuses it (`contains custom code which must be "
    "executed`) and the server never starts",
    "add `--trust-remote-code` after reading the repository's Python files; pin `--revision`",
)
MEM = Code(
    "launch.mem",
    SECTION,
    "error",
    "target+draft weight bytes (safetensors headers) per GPU exceed `--mem-fraction-static` × GPU memory; warning: "
    "less than 10% of the static pool left for the KV cache; info: the bytes per GPU when GPU memory or the fraction "
    "is unknown",
    "raise `--mem-fraction-static`, add GPUs (`--tp-size`), or quantize",
)
BACKEND = Code(
    "launch.backend",
    SECTION,
    "error",
    "attention backend / env incompatible with the resolved topk: `trtllm_mha` with topk > 1, `SGLANG_ENABLE_SPEC_V2` "
    "with topk > 1 in 0.5.5-0.5.10 (0.5.5-0.5.6 fail at the first decode, 0.5.7-0.5.10 raise `ValueError` at startup; "
    "0.5.11-0.5.12 fall back to the v1 worker, 0.5.13+ run trees on v2, 0.5.17+ no longer read it), page size > 1 with "
    "topk > 1 outside flashinfer/fa3/triton; warning: `fa4` with speculative decoding",
    "`--speculative-eagle-topk 1` or `--attention-backend flashinfer`",
)
ENGINE = Code(
    "launch.engine",
    SECTION,
    "info",
    "the serving engine (`--engine`) ignores these SGLang flags (the CPU reference server: tp size, memory, backends, "
    "extras)",
    "none: they matter only on a GPU host",
)

# targets whose MTP draft defaults to the target path (no --speculative-draft-model-path needed)
MTP_TARGETS = set(
    "DeepseekV32ForCausalLM DeepseekV3ForCausalLM DeepseekV4ForCausalLM Glm4MoeForCausalLM Glm4MoeLiteForCausalLM "
    "GlmMoeDsaForCausalLM BailingMoeForCausalLM BailingMoeV2ForCausalLM BailingMoeV2_5ForCausalLM "
    "MistralLarge3ForCausalLM PixtralForConditionalGeneration HYV3ForCausalLM HYV4ForCausalLM "
    "Qwen4ExpForConditionalGeneration".split()
)
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


def _local_config(path: str | None) -> HFConfig | None:
    if not path or not (Path(path) / "config.json").is_file():
        return None
    from kit.checkpoint.hf_config import read_config

    try:
        return read_config(path)[0]
    except KitInputError:
        return None


def _arch(cfg: dict | None) -> str | None:
    return ((cfg or {}).get("architectures") or [None])[0]


def flag_findings(
    spec, python: str | None = None, build: bool | None = None, sglang_version: str | None = None
) -> list[Finding]:
    """`launch.flag` / `launch.parser`: the flags judged by that release's parser (`kit.sglang.parser`)."""
    from kit.sglang.parser import flag_findings as parser_flag_findings

    return parser_flag_findings(spec.flags(), sglang_version, python, build)


@finding_list
def spec_param_findings(spec, target_arch: str | None, sglang_version: str | None = None) -> Iterator[Finding]:
    """`launch.spec_params` / `launch.spec_verify`: what `kit.sglang.params.resolve` says that release does
    with the three values (refuses, changes, or accepts and then crashes on while it starts)."""
    alg = (spec.speculative_algorithm or "").upper()
    given = spec.spec_params()
    if not alg and (not given.is_unset() or spec.speculative_draft_model_path):
        yield SPEC_PARAMS(
            "speculative flags given without --speculative-algorithm: speculation is off",
            evidence=given.given(),
            severity="warning",
            fix="add --speculative-algorithm EAGLE3 (EAGLE-3 draft)",
        )
    elif alg in EAGLE_FAMILY:
        for i in resolve(given, alg, target_arch, sglang_version).issues:
            yield CODES[i.code](i.title, evidence=i.evidence, severity=i.severity, fix=i.fix)


@finding_list
def aux_findings(spec, draft_config: HFConfig | None, target_config: HFConfig | None = None) -> Iterator[Finding]:
    alg = (spec.speculative_algorithm or "").upper()
    if draft_config is not None:  # the wiring rules decide (one rule for doctor, notebook 03 and here)
        from kit.wiring.checks import wiring_checks

        yield from (f for f in wiring_checks(target_config, draft_config, spec.argv()) if f.code == ALGORITHM.code)
        return
    path = spec.speculative_draft_model_path or ""
    if alg in ("EAGLE", "NEXTN") and "eagle3" in path.lower().replace("-", "").replace("_", ""):
        yield ALGORITHM(
            f"--speculative-algorithm {alg} with a draft whose path says EAGLE-3: if it is one, "
            "aux capture is off and accept length drops to ~1.0",
            evidence={"algorithm": alg, "draft_path": path, "draft_config": "not readable here"},
            severity="warning",
            fix="--speculative-algorithm EAGLE3 (check the draft's config.json architectures)",
        )


@finding_list
def bind_findings(spec) -> Iterator[Finding]:
    if spec.host in ("0.0.0.0", "::", "[::]") and not spec.api_key:
        yield BIND(
            f"binds {spec.host} without --api-key: anyone on the network can use the server",
            evidence={"host": spec.host, "port": spec.port},
            fix="--host 127.0.0.1 (and an SSH tunnel), or add --api-key",
        )


@finding_list
def remote_processor_findings(
    spec, target_config: HFConfig | None, target_dir: str | None, sglang_version: str | None
) -> Iterator[Finding]:
    """`launch.remote_code_needed`: SGLang loads a multimodal target's HF processor while it starts; one that is remote
    code (an `auto_map` in the target's processor files, or a vendor that ships it so) needs --trust-remote-code."""
    if spec.trust_remote_code or target_config is None:
        return
    from kit.checkpoint.processors import PROCESSOR_FILES, STAND_IN_PROCESSORS
    from kit.sglang.loader import processor_archs

    version = sglang_version or default_release()
    archs = sorted(set(target_config.get("architectures") or ()) & (processor_archs(version) or set()))
    if not archs:
        return
    folder = Path(target_dir) if target_dir and Path(target_dir).is_dir() else None
    files = [folder / f for f in PROCESSOR_FILES if folder is not None and (folder / f).is_file()]
    if files:
        remote = [f.name for f in files if _names_remote_processor(f)]
        why = f"auto_map in {', '.join(remote)}"
    else:
        remote = [a for a in archs if STAND_IN_PROCESSORS.get(a, {}).get("vendor_remote_code")]
        why = "its vendor ships the processor and tokenizer as remote code"
    if remote:
        yield REMOTE_CODE_NEEDED(
            f"SGLang {version} loads the HF processor of {', '.join(archs)} while it starts, and that processor "
            f"is remote code ({why}): without --trust-remote-code Transformers refuses it and the server never "
            "starts",
            evidence={"architectures": archs, "remote": remote, "sglang": version},
            fix="add --trust-remote-code (after reading the repository's Python files; pin --revision)",
        )


def _names_remote_processor(f: Path) -> bool:
    """Does a processor/tokenizer file's `auto_map` name AutoProcessor or AutoTokenizer (False: unreadable)?"""
    try:
        auto_map = json.loads(f.read_text()).get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return "AutoProcessor" in auto_map or "AutoTokenizer" in auto_map


@finding_list
def trust_findings(spec) -> Iterator[Finding]:
    if spec.trust_remote_code:
        yield TRUST_REMOTE_CODE(
            "--trust-remote-code runs Python shipped with the model repository",
            evidence={"model_path": spec.model_path},
            fix="keep it only for a model you have read (Kimi-K2.5 needs it); pin the revision",
        )


@finding_list
def mem_findings(
    spec, gpu_memory_gib: float | None, target_dir: str | None = None, draft_dir: str | None = None
) -> Iterator[Finding]:
    model = spec.model_path
    if model == "embedded":
        from kit.models import EMBEDDED_NAME, cache_dir

        model = str(cache_dir() / EMBEDDED_NAME)
    # a hub id's files are where kit.checkpoint.hub resolved them (target_dir, draft_dir)
    tb = weights_bytes(model) or weights_bytes(target_dir)
    db = weights_bytes(spec.speculative_draft_model_path) or weights_bytes(draft_dir)
    if tb is None:
        return
    tp = spec.tp_size or 1
    per_gpu = (tb + (db or 0)) / tp
    ev: dict[str, Any] = dict(
        target_bytes=tb, draft_bytes=db, tp_size=tp, weights_per_gpu_gib=round(per_gpu / 2**30, 3)
    )
    gpu = gpu_memory_gib if gpu_memory_gib is not None else device_memory_gib()
    frac = spec.mem_fraction_static
    if gpu is None or frac is None:
        yield MEM(
            f"weights need {per_gpu / 2**30:.2f} GiB per GPU (target+draft over tp={tp})",
            evidence={**ev, "gpu_memory_gib": gpu, "mem_fraction_static": frac},
            severity="info",
            fix="mem-fraction-static x GPU memory must exceed this, with room for the KV cache",
        )
        return
    pool = frac * gpu * 2**30
    ev.update(gpu_memory_gib=round(gpu, 2), mem_fraction_static=frac, static_pool_gib=round(pool / 2**30, 2))
    if per_gpu >= pool:
        yield MEM(
            "weights alone exceed mem-fraction-static x GPU memory: no room for a KV cache",
            evidence=ev,
            fix="raise --mem-fraction-static, use more GPUs (--tp-size) or a smaller quant",
        )
    elif per_gpu > 0.9 * pool:
        yield MEM(
            f"KV cache gets only {(pool - per_gpu) / 2**30:.2f} GiB per GPU after the weights",
            evidence=ev,
            severity="warning",
            fix="raise --mem-fraction-static a little or add GPUs",
        )


@finding_list
def backend_findings(spec, params, sglang_version: str | None = None) -> Iterator[Finding]:
    alg = (spec.speculative_algorithm or "").upper()
    if alg not in EAGLE_FAMILY or params is None:
        return
    topk = params.speculative_eagle_topk
    backends = {b for b in (spec.attention_backend, spec.speculative_draft_attention_backend) if b}
    v2 = str(spec.env.get("SGLANG_ENABLE_SPEC_V2", "")).lower() in ("1", "true", "yes", "on")
    if v2 and spec_v2_refuses_tree(topk, sglang_version):
        version = sglang_version or default_release()
        how = (
            "refuses it at startup (ValueError: 'Spec v2 currently only supports topk = 1')"
            if Version.parse(version) >= Version.parse(SPEC_V2_TOPK_STARTUP_ERROR)
            else "starts, then fails on tensor sizes at the first decode (sglang #13352, #14077)"
        )
        yield BACKEND(
            f"SGLANG_ENABLE_SPEC_V2 with topk {topk}: SGLang {version} {how}",
            evidence={"topk": topk, "refused_in": "-".join(SPEC_V2_TOPK_REFUSED)},
            fix=f"--speculative-eagle-topk 1 or unset SGLANG_ENABLE_SPEC_V2 (SGLang >= {SPEC_V2_RUNS_TREES} runs trees on v2)",
        )
    if "trtllm_mha" in backends and topk > 1:
        yield BACKEND(
            f"trtllm_mha supports only topk 1 for speculative decoding (topk {topk}): ValueError",
            evidence={"backends": sorted(backends), "topk": topk},
            fix="--speculative-eagle-topk 1, or --attention-backend flashinfer",
        )
    backend = spec.attention_backend
    if (spec.page_size or 1) > 1 and topk > 1 and backend and backend not in PAGE_TREE_BACKENDS:
        yield BACKEND(
            f"topk > 1 with page size {spec.page_size} needs one of {PAGE_TREE_BACKENDS}",
            evidence={"attention_backend": backend, "page_size": spec.page_size},
            fix="--page-size 1 or --attention-backend flashinfer",
        )
    if "fa4" in backends:
        yield BACKEND(
            "fa4 has no speculative-decoding support",
            evidence={"backends": sorted(backends)},
            severity="warning",
            fix="use flashinfer (or fa3 on Hopper)",
        )


def engine_findings(spec, engine: str) -> list[Finding]:
    from kit.serving.engines import get_engine

    if dropped := get_engine(engine).ignored_flags(spec):
        return [ENGINE(f"the {engine} engine ignores {len(dropped)} SGLang flag(s)", evidence={"ignored": dropped})]
    return []


def _missing_draft_path(spec, alg: str, arch: str | None, sglang_version: str | None) -> Finding:
    """No draft path read: an error, unless a flag left unresolved by another release's table (no table is
    recorded for this release) is a prefix of --speculative-draft-model-path, which this release may accept."""
    from kit.sglang.flags import table_for

    flag = "--speculative-draft-model-path"
    table = table_for(sglang_version)
    maybe = [t for t in spec.extra_args if t.startswith("--") and flag.startswith(t.split("=", 1)[0])]
    if maybe and not table.exact:
        return SPEC_PARAMS(
            f"{alg}: the draft path is given as {maybe[0]!r}, which SGLang {table.checked}'s flag table cannot "
            f"resolve; no table is recorded for SGLang {table.version}, whose parser may read it as {flag}",
            evidence={"target_arch": arch, "unresolved": maybe, "table": table.checked},
            severity="warning",
            fix=f"spell the flag out: {flag} DRAFT_DIR",
        )
    return SPEC_PARAMS(
        f"{alg} without {flag}: SGLang loads the target as the draft and fails",
        evidence={"target_arch": arch},
        fix=f"{flag} DRAFT_DIR",
    )


def lint(
    spec,
    target_config: HFConfig | None = None,
    draft_config: HFConfig | None = None,
    sglang_python: str | None = None,
    parse_flags: bool = True,
    build_venv: bool | None = None,
    gpu_memory_gib: float | None = None,
    engine: str = "sglang",
    sglang_version: str | None = None,
    target_dir: str | None = None,
    draft_dir: str | None = None,
    judged_elsewhere: frozenset[str] = frozenset(),
) -> Report:
    """The launch's findings; `target_dir`/`draft_dir`: the models' folders when they are not the launch's paths
    (a hub id resolved by kit.checkpoint.hub, a --target given apart). `judged_elsewhere`: codes whose rules another
    check of the same run owns (`kit doctor`: `SHARED_WITH_DOCTOR`), so they are not run here at all."""
    target_config = target_config or _local_config(spec.model_path)
    draft_config = draft_config or _local_config(spec.speculative_draft_model_path)
    arch = _arch(target_config)
    r = Report()
    if parse_flags:
        r.extend(flag_findings(spec, sglang_python, build_venv, sglang_version))
    r.extend(spec_param_findings(spec, arch, sglang_version))
    if "aux.algorithm" not in judged_elsewhere:
        r.extend(aux_findings(spec, draft_config, target_config))
    alg = (spec.speculative_algorithm or "").upper()
    if alg in ("EAGLE", "EAGLE3") and not spec.speculative_draft_model_path and arch not in MTP_TARGETS:
        r.add(_missing_draft_path(spec, alg, arch, sglang_version))
    r.extend(bind_findings(spec) + trust_findings(spec))
    r.extend(remote_processor_findings(spec, target_config, target_dir or spec.model_path, sglang_version))
    r.extend(mem_findings(spec, gpu_memory_gib, target_dir, draft_dir))
    r.extend(shard_findings(target_config, draft_config if alg in EAGLE_FAMILY else None, spec.flags(), sglang_version))
    params = spec.resolved_params(arch, sglang_version)
    r.extend(backend_findings(spec, params, sglang_version) + engine_findings(spec, engine))
    if "env.nccl_var" not in judged_elsewhere:
        from kit.env.nccl import nccl_findings  # the environment rules of notebook 01

        r.extend(nccl_findings(spec.env))
    r.facts.update(
        effective_params=params.label() if params else None, target_arch=arch, draft_arch=_arch(draft_config)
    )
    return r


def shared_with_doctor(has_draft_config: bool) -> frozenset[str]:
    """The launch rules `kit doctor`'s other providers own: the launch's NCCL variables (`kit.env.checks`) and,
    with a draft config to read, the algorithm against the draft (`kit.wiring.checks`)."""
    return frozenset({"env.nccl_var"} | ({"aux.algorithm"} if has_draft_config else set()))


def doctor_checks(dep) -> list[Finding]:
    """`kit doctor --launch` (and `kit launch`, through `kit.preflight`; `dep`: its `Deployment`): the launch
    findings, with the deployment's target and draft and the launch verb's lint options (engine, parser, GPU
    memory); the rules another provider owns (`shared_with_doctor`) are not run."""
    if dep.launch is None:
        return []
    t, d = dep.target, dep.draft
    return (
        list(dep.launch.shell)
        + lint(
            dep.launch.spec,
            target_config=t.config if t else None,
            draft_config=d.config if d else None,
            sglang_version=dep.sglang_version,
            target_dir=str(t.dir) if t else None,
            draft_dir=str(d.folder) if d and d.folder else None,
            judged_elsewhere=shared_with_doctor(d is not None),
            **dep.lint_options,
        ).findings
    )
