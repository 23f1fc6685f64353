"""`python -m kit env`: is this machine (and this launch command's environment) fit to serve EAGLE-3 with SGLang?

Facts come from `kit.env.machine` (live, or `--facts FILE` recorded elsewhere); the rules are pure functions
facts -> findings: GPUs and their family, torch's arch list and CUDA build, driver, NCCL version and variables
(kit.env.nccl), packages, P2P/topology/custom all-reduce/IOMMU (kit.env.multigpu), /dev/shm, SGLANG_* variables
and the attention backend (kit.sglang.env_vars). Without a GPU it says so (info) and still checks the rest.

    python -m kit env [--json] [--launch "NCCL_PROTO=LL ... python -m sglang.launch_server ..."]
    python -m kit env --record facts.json         # keep what was read, judge it elsewhere
    python -m kit env --facts facts.json          # judge recorded facts
    python -m kit env --allreduce --launch "..."  # also run the NCCL all-reduce smoke test (>= 2 GPUs)

Also the environment provider of `kit doctor` (doctor_checks).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.config import opt
from kit.env.gpu_arch import (
    CUDA_NATIVE_FLOOR_SEVERITY,
    DRIVER_FLOOR,
    FLASH_ATTN_BLACKWELL,
    TRITON_BLACKWELL,
    arch_cover,
    family,
    is_blackwell,
    vtuple,
)
from kit.env.machine import driver_version, gpu_list, nccl_version
from kit.findings import Code, Finding, KitInputError, Report, emit
from kit.hf import HFConfig
from kit.sglang.flags import flag_value
from kit.sglang.versions import LAST_CUDA12_RELEASE

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "env: notebook 01"
NO_GPU = Code(
    "env.no_gpu",
    SECTION,
    "info",
    "no NVIDIA GPU visible (NVML/nvidia-smi/torch); GPU rules skipped, packages and variables still checked",
    "— (run on the GPU host, or `kit env --facts` on its recording)",
)
ENV_GPU = Code(
    "env.gpu",
    SECTION,
    "info",
    "one line per GPU model: count, compute capability, family (Hopper sm_90, Blackwell datacenter "
    "sm_100/103, Thor sm_110, Blackwell workstation/consumer sm_120/121), memory, power limit",
    "—",
)
GPU_MIXED = Code(
    "env.gpu_mixed",
    SECTION,
    "warning",
    "different GPU models / capabilities on one host",
    "identical GPUs per TP group (`CUDA_VISIBLE_DEVICES`)",
)
GPU_COUNT = Code(
    "env.gpu_count",
    SECTION,
    "error",
    "fewer GPUs than `--tp-size`; warning when more and `CUDA_VISIBLE_DEVICES` is unset",
    "lower `--tp-size` / pin the GPUs",
)
POWER = Code(
    "env.power",
    SECTION,
    "info",
    "RTX PRO 6000 power-limited below 450 W (Max-Q edition or capped)",
    "record it with benchmarks",
)
TORCH = Code(
    "env.torch",
    SECTION,
    "error / warning / info",
    "torch version and CUDA build; error when a CPU-only build sits on a GPU machine; warning when torch "
    "is not importable",
    "install a cu128/cu130 build",
)
TORCH_ARCH = Code(
    "env.torch_arch",
    SECTION,
    "error / warning / info",
    (
        "`torch.cuda.get_arch_list()` has the device's `sm_XY`; warning when only a same-major lower-minor "
        'cubin or PTX covers it; error when nothing does ("no kernel image is available")'
    ),
    "torch >= 2.7 from the cu128/cu130 index",
)
TORCH_CUDA = Code(
    "env.torch_cuda",
    SECTION,
    "error",
    "torch's CUDA runtime predates the arch (12.8 for sm_100/sm_120, 13.0 for sm_110; warning for 12.9 on"
    " sm_103/sm_121); warning when sglang > 0.5.19 (CUDA 13 only) meets a CUDA 12 torch",
    "cu130 torch + matching sgl-kernel",
)
CUDA_SMOKE = Code(
    "env.cuda_smoke",
    SECTION,
    "error",
    "a one-element CUDA op failed on a GPU (child process)",
    "torch whose arch list covers the GPU; check the driver",
)
DRIVER = Code(
    "env.driver",
    SECTION,
    "error / warning / info",
    "driver version vs torch's CUDA: error when the driver's CUDA major is older or below the floor (R580"
    " for 13.x, 570.26 for 12.8); warning for an older minor",
    "update the NVIDIA driver",
)
NCCL_VERSION = Code(
    "env.nccl_version",
    SECTION,
    "error / warning / info",
    "NCCL version vs the arch floor: error below 2.25.1 on sm_100/103 or below 2.26.2 on sm_120/121 "
    "(2.25.1 shared-memory bug); warning when the version cannot be read",
    "upgrade torch / `nvidia-nccl-cu1x`",
)
PACKAGE = Code(
    "env.package",
    SECTION,
    "info",
    "installed version of sglang, sgl-kernel/sglang-kernel, flashinfer, flash-attn (2/3/4), triton, "
    "transformers, safetensors, and what it means on this arch",
    "—",
)
SGL_KERNEL_LANE = Code(
    "env.sgl_kernel_lane",
    SECTION,
    "warning",
    "sgl-kernel's `+cuXYZ` tag differs from torch's CUDA",
    "install the matching `+cu` wheel",
)
TRITON = Code(
    "env.triton",
    SECTION,
    "error",
    "Triton < 3.3 on Blackwell (\"ptxas fatal : Value 'sm_120' is not defined\")",
    "the Triton pinned by torch >= 2.7",
)
FLASH_ATTN = Code(
    "env.flash_attn",
    SECTION,
    "error / warning / info",
    "flash-attn < 2.7.3 on Blackwell (no sm_100/120 gencode) or FA3 installed on non-sm_90; info when FA2"
    " is present on Blackwell; error when flash-attn is installed and a tiny call fails on the GPU",
    "rebuild with `FLASH_ATTN_CUDA_ARCHS`, or rely on flashinfer/triton",
)
SGLANG_REQUIRES = Code(
    "env.sglang_requires",
    SECTION,
    "warning",
    "an installed package does not satisfy sglang's declared requirement",
    "install the pinned version in the serving env",
)
ENV_SHM = Code(
    "env.shm",
    SECTION,
    "warning",
    "`/dev/shm` < 1 GiB (guessed floor) on a multi-GPU host: NCCL's SHM transport may fail",
    "`--shm-size=16g` or `--ipc=host`",
)
PROBE = Code(
    "env.probe",
    SECTION,
    "warning",
    "a probe child timed out or crashed; its facts are unknown",
    "rerun on the host; a wedged GPU may need a reset",
)

HELP = "check GPUs, driver, CUDA, torch, NCCL, packages and NCCL/SGLANG variables (optionally of a launch command)"
SHM_MIN = 1 << 30  # a guess, not a documented floor; NCCL's SHM transport needs room in containers
# how torch's arch list covers a GPU (kit.env.gpu_arch.arch_cover) -> (severity, what the title says)
ARCH_COVER = {
    "exact": ("info", "has {}"),
    "same_major": ("warning", "runs {} cubins (same major, lower minor)"),
    "ptx": ("warning", "has only PTX {}: JIT-compiled at first use (slow start, no arch-specific kernels)"),
    "none": ("error", "has no kernel for it: 'no kernel image is available for execution on the device'"),
}


@dataclass
class EnvConfig:
    launch: str | None = opt("an SGLang launch command; its NCCL_*/SGLANG_* variables and flags are checked too")
    facts: str | None = opt("judge these recorded facts (JSON from --record) instead of probing")
    record: str | None = opt("write the probed facts to this JSON file")
    allreduce: bool = opt("also run the NCCL all-reduce smoke test (needs >= 2 GPUs)", False)
    timeout: float = opt("seconds allowed for each probe / the smoke test (a hang is killed)", 120.0)
    sglang_version: str | None = opt("SGLang release whose SGLANG_* variables to check against (default: installed)")
    json: bool = opt("print one JSON document as the last line", False)


def gpu_findings(facts: dict, tp: int | None) -> list[Finding]:
    gpus = gpu_list(facts)
    if not gpus:
        errs = facts.get("errors") or {}
        ev = {"torch": (facts.get("torch") or {}).get("version"), "nvml": errs.get("nvml")}
        ev["nvidia-smi"] = errs.get("nvidia-smi query")
        return [NO_GPU("no NVIDIA GPU visible: GPU checks skipped; packages and variables still checked", evidence=ev)]
    out = []
    groups: dict[tuple, list[dict]] = {}
    for g in gpus:
        groups.setdefault((g["name"], g["cc"]), []).append(g)
    for (name, cc), gs in groups.items():
        fam, mem, pw = family(cc), gs[0]["memory_mib"], gs[0]["power_limit_w"]
        ev = {"indices": [g["index"] for g in gs], "cc": f"{cc[0]}.{cc[1]}" if cc else None}
        ev.update(family=fam["family"], memory_mib=mem, power_limit_w=pw)
        watts = f", {pw:.0f} W" if pw else ""
        out.append(ENV_GPU(f"{len(gs)}x {name}: {fam['sm']} ({fam['family']}), {mem} MiB{watts}", evidence=ev))
        if pw and "RTX PRO 6000" in (name or "") and pw < 450:
            title = f"{name} limited to {pw:.0f} W (Max-Q edition or power-capped; 600 W parts run ~30% faster at high concurrency)"
            fix = "record it with every benchmark; do not compare 300 W and 600 W runs"
            out.append(POWER(title, evidence={"power_limit_w": pw}, fix=fix))
    if len(groups) > 1:
        models = {"models": [f"{n} ({c})" for n, c in groups]}
        fix = "use identical GPUs per TP group (CUDA_VISIBLE_DEVICES)"
        out.append(GPU_MIXED("different GPU models/capabilities on one host", evidence=models, fix=fix))
    n, pinned = len(gpus), "CUDA_VISIBLE_DEVICES" in (facts.get("env") or {})
    ev = {"tp": tp, "gpus": n}
    if tp and n < tp:
        out.append(
            GPU_COUNT(f"--tp-size {tp} but {n} GPU(s) visible", evidence=ev, fix="lower --tp-size or expose more GPUs")
        )
    elif tp and n > tp and not pinned:
        title = f"--tp-size {tp} on a host with {n} GPUs and no CUDA_VISIBLE_DEVICES"
        out.append(GPU_COUNT(title, evidence=ev, severity="warning", fix="pin the GPUs with CUDA_VISIBLE_DEVICES"))
    return out


def torch_findings(facts: dict) -> list[Finding]:
    t, gpus = facts.get("torch") or {}, gpu_list(facts)
    if not t.get("version"):
        err = t.get("error") or (facts.get("errors") or {}).get("torch")
        return [TORCH(f"torch not importable: {err}", severity="warning", fix="install torch")]
    cuda = t.get("cuda")
    cpu_only = bool(gpus) and not cuda
    on_gpu = " on a GPU machine" if cpu_only else ""
    ev = {"arch_list": t.get("arch_list"), "nccl": t.get("nccl")}
    fix = "install a CUDA build (cu128/cu130 wheel index)" if cpu_only else ""
    title = f"torch {t['version']}, CUDA build {cuda or 'none (CPU-only build)'}{on_gpu}"
    out = [TORCH(title, evidence=ev, severity="error" if cpu_only else "info", fix=fix)]
    if not gpus or not cuda:
        return out
    warn = [w for w in t.get("warnings") or [] if "not compatible" in w or "Found GPU" in w]
    for cc in sorted({g["cc"] for g in gpus if g["cc"]}):
        fam = family(cc)
        how, entry = arch_cover(cc, t.get("arch_list") or [])
        sev, text = ARCH_COVER[how]
        ev = {"arch_list": t.get("arch_list"), "torch_warnings": warn[:2]}
        fix = f"install torch >= 2.7 from the cu128 or cu130 index (arch list must include {fam['sm']})"
        title = f"torch arch list vs {fam['sm']}: {text.format(entry)}"
        out.append(TORCH_ARCH(title, evidence=ev, severity=sev, fix="" if how == "exact" else fix))
        need, have = fam["min_cuda"], vtuple(cuda, 2)
        if need and have and have < need:
            title = f"torch CUDA {cuda} < {need[0]}.{need[1]}, the first toolkit targeting {fam['sm']}"
            sev = CUDA_NATIVE_FLOOR_SEVERITY.get(cc, "error")
            ev = {"torch_cuda": cuda, "cc": list(cc)}
            out.append(TORCH_CUDA(title, evidence=ev, severity=sev, fix="move to a cu128/cu130 torch"))
    fix = "install a torch whose arch list covers the GPU; check the driver"
    out += [
        CUDA_SMOKE(f"GPU {s['index']}: a one-element CUDA op failed", evidence={"error": s.get("error")}, fix=fix)
        for s in t.get("smoke") or []
        if not s.get("ok")
    ]
    sg = vtuple((facts.get("packages") or {}).get("sglang"))
    if sg and sg > vtuple(LAST_CUDA12_RELEASE) and vtuple(cuda, 1) == (12,):
        title = (
            f"sglang {'.'.join(map(str, sg))} ships for CUDA 13 only ({LAST_CUDA12_RELEASE} was the last CUDA 12 lane)"
        )
        fix = "cu130 torch + matching sgl-kernel, or lmsysorg/sglang image"
        out.append(
            TORCH_CUDA(f"{title}, torch is CUDA {cuda}", evidence={"torch_cuda": cuda}, severity="warning", fix=fix)
        )
    return out


def driver_findings(facts: dict) -> list[Finding]:
    drv = driver_version(facts)
    if not gpu_list(facts):
        return []
    ev = {
        "driver": drv,
        "driver_cuda": (facts.get("nvml") or {}).get("cuda_driver"),
        "torch_cuda": (facts.get("torch") or {}).get("cuda"),
    }
    cuda, dcuda = vtuple(ev["torch_cuda"], 2), vtuple(ev["driver_cuda"], 2)
    floors = [(k, f) for k, f in DRIVER_FLOOR.items() if drv and cuda and cuda[0] == k[0] and cuda >= k]
    low = next(((k, f) for k, f in floors if vtuple(drv, 2) < f), None)  # the CUDA runtime's driver floor, unmet
    if drv is None:
        title, sev, fix = "driver version unknown (NVML and nvidia-smi unreadable)", "warning", "check nvidia-smi"
    elif cuda and dcuda and cuda[0] > dcuda[0]:
        title = f"driver {drv} supports CUDA {dcuda[0]}.{dcuda[1]}, torch needs CUDA {cuda[0]}.{cuda[1]}"
        sev, fix = "error", "update the NVIDIA driver (R580+ for CUDA 13)"
    elif low:
        title = f"driver {drv} < {low[1][0]}.{low[1][1]:02d}, the floor for CUDA {low[0][0]}.{low[0][1]}"
        sev, fix = "error", "update the NVIDIA driver"
    elif cuda and dcuda and cuda > dcuda:
        title = (
            f"driver CUDA {dcuda[0]}.{dcuda[1]} older than torch's {cuda[0]}.{cuda[1]}: runs by minor-version "
            "compatibility, PTX JIT of newer PTX fails"
        )
        sev, fix = "warning", "update the driver"
    else:
        title, sev, fix = f"driver {drv} (CUDA {ev['driver_cuda']}) fits torch CUDA {ev['torch_cuda']}", "info", ""
    return [DRIVER(title, evidence=ev, severity=sev, fix=fix)]


def nccl_version_findings(facts: dict) -> list[Finding]:
    gpus, v = gpu_list(facts), nccl_version(facts)
    if not gpus:
        return []
    if v is None:
        return [NCCL_VERSION("NCCL version unknown", severity="warning", fix="check torch.cuda.nccl.version()")]
    ccs = {g["cc"] for g in gpus if g["cc"]}
    floors = [(family(cc)["min_nccl"], family(cc)["sm"]) for cc in ccs if family(cc)["min_nccl"]]
    for floor, sm in sorted(floors, reverse=True):
        if vtuple(v) < floor:
            why = " (2.25.1 overflows sm_120 shared memory; fixed in 2.26.2)" if sm.startswith("sm_12") else ""
            title = f"NCCL {v} < {'.'.join(map(str, floor))} needed on {sm}{why}"
            return [NCCL_VERSION(title, evidence={"nccl": v}, fix="upgrade torch / nvidia-nccl-cu1x")]
    sms = ", ".join(sorted(family(c)["sm"] for c in ccs)) or "these GPUs"
    return [NCCL_VERSION(f"NCCL {v}: new enough for {sms}", evidence={"nccl": v}, severity="info")]


def package_findings(facts: dict) -> list[Finding]:
    pk = facts.get("packages") or {}
    ccs = sorted({g["cc"] for g in gpu_list(facts) if g["cc"]})
    bw, sm120 = any(is_blackwell(c) for c in ccs), any(c[0] == 12 for c in ccs)
    cuda = (facts.get("torch") or {}).get("cuda")
    out = []
    notes = {  # in the order the findings come
        "sglang": "serving engine; on sm_120 it defaults attention to flashinfer (MHA) or triton (MLA)"
        if sm120
        else "serving engine",
        "sgl-kernel": "SGLang's CUDA kernels; its +cuXYZ wheel lane must match torch's CUDA",
        "sglang-kernel": "SGLang's CUDA kernels (newer name of sgl-kernel); lane must match torch's CUDA",
        "flashinfer-python": "SGLang's default attention on sm_120/sm_100 (MHA)"
        + ("; NVFP4 mm_fp4 broken on sm_120 up to 0.6.3" if sm120 else ""),
        "flash-attn": "FA2: Ampere/Ada/Hopper per its README; Blackwell only when built for it (>= 2.7.3)",
        "flash_attn_3": "FA3: sm_90a only",
        "flash-attn-4": "FA4 (CuTe DSL): 8.x-12.x; sm_120 forward path uses SM80-era MMA; SGLang uses it for prefill only",
        "triton": (
            "Blackwell needs >= 3.3" if bw else "JIT kernels (SGLang's triton backends); Blackwell would need >= 3.3"
        ),
        "transformers": "pure Python, arch-independent (SGLang pins its own version)",
        "safetensors": "arch-independent",
    }
    for name, note in notes.items():
        v = pk.get(name)
        if v is None:
            continue
        out.append(PACKAGE(f"{name} {v}: {note}", evidence={"package": name, "version": v}))
        lane, want = v.split("+cu")[1][:3] if "+cu" in v else None, (cuda or "").replace(".", "")
        if name in ("sgl-kernel", "sglang-kernel") and lane is not None and cuda and lane != want[:3]:
            title, ev = f"{name} {v} is built for cu{lane}, torch is CUDA {cuda}", {"package": v, "torch_cuda": cuda}
            out.append(SGL_KERNEL_LANE(title, evidence=ev, fix=f"install the {name} wheel tagged +cu{want}"))
        if name == "triton" and bw and vtuple(v, 2) < TRITON_BLACKWELL:
            title = f"triton {v} < 3.3 on Blackwell: 'ptxas fatal : Value sm_120 is not defined'"
            out.append(TRITON(title, evidence={"triton": v}, fix="use the triton pinned by torch >= 2.7"))
    fa = pk.get("flash-attn")
    if fa and bw and vtuple(fa) < FLASH_ATTN_BLACKWELL:
        fix = 'rebuild with FLASH_ATTN_CUDA_ARCHS="120" (or "100"), nvcc >= 12.8, or skip FA2 (SGLang uses flashinfer/triton on sm_120)'
        title = f"flash-attn {fa} predates Blackwell gencode (v2.7.3)"
        out.append(FLASH_ATTN(title, evidence={"flash-attn": fa}, severity="warning", fix=fix))
    elif fa and bw:
        title = f"flash-attn {fa} on Blackwell: FA2 only runs if built with FLASH_ATTN_CUDA_ARCHS covering the arch"
        fix = "SGLang does not need FA2 on sm_100/sm_120"
        out.append(
            FLASH_ATTN(
                f"{title} (its README lists Ampere/Ada/Hopper)", evidence={"flash-attn": fa}, severity="info", fix=fix
            )
        )
    fa_run = (facts.get("torch") or {}).get("flash_attn")
    if fa_run and not fa_run.get("ok"):
        title = "flash-attn is installed but a tiny call fails on GPU 0 (not built for this arch?)"
        fix = "rebuild with FLASH_ATTN_CUDA_ARCHS set to this arch (nvcc >= 12.8 for Blackwell, MAX_JOBS sized to RAM, "
        fix += "~5 GB per nvcc thread), or uninstall it"
        out.append(FLASH_ATTN(title, evidence={"error": fa_run.get("error")}, fix=fix))
    fa3 = pk.get("flash_attn_3") or pk.get("flash-attn-3")
    if fa3 and ccs and any(c != (9, 0) for c in ccs):
        title = "FlashAttention-3 installed on a non-sm_90 GPU (FA3 is sm_90a only)"
        out.append(
            FLASH_ATTN(
                title, evidence={"flash_attn_3": fa3}, severity="warning", fix="do not force --attention-backend fa3"
            )
        )
    return out + _requirement_findings((facts.get("requires") or {}).get("sglang") or [], pk)


def _requirement_findings(req: list[str], pk: dict) -> list[Finding]:
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return []
    out = []
    for r in req:
        try:
            q = Requirement(r)
        except Exception:
            continue
        have = pk.get(q.name) or pk.get(q.name.replace("_", "-"))
        if have and q.specifier and not q.specifier.contains(have.split("+")[0], prereleases=True):
            title, ev = f"sglang requires {r}, installed {q.name} {have}", {"requirement": r, "installed": have}
            out.append(SGLANG_REQUIRES(title, evidence=ev, fix=f"pip install '{r}' in the serving environment"))
    return out


def shm_findings(facts: dict) -> list[Finding]:
    b = (facts.get("system") or {}).get("shm_bytes")
    if b is None or len(gpu_list(facts)) < 2 or b >= SHM_MIN:
        return []
    title = f"/dev/shm is {b / 2**20:.0f} MiB (< 1 GiB, a guessed floor): NCCL's SHM transport may fail in a container"
    return [ENV_SHM(title, evidence={"shm_bytes": b}, fix="docker run --shm-size=16g or --ipc=host")]


def probe_error_findings(facts: dict) -> list[Finding]:
    fix = "its facts are unknown; run the probe again on the host"
    return [
        PROBE(f"{part} probe failed: {msg[:160]}", evidence={"part": part}, fix=fix)
        for part, msg in (facts.get("errors") or {}).items()
        if "timed out" in msg or "child exited" in msg
    ]


def check(
    facts: dict,
    env: dict[str, str] | None = None,
    argv: list[str] | None = None,
    source: str = "launch",
    target_config: HFConfig | None = None,
    sglang_version: str | None = None,
    allreduce: dict | None = None,
) -> Report:
    """All environment rules on one set of facts. `env`/`argv`: a launch command's variables and flags;
    variables of the probed environment (facts['env']) are judged too, the launch's win on overlap."""
    from kit.env.multigpu import allreduce_findings, multi_gpu_findings
    from kit.env.nccl import nccl_findings
    from kit.sglang.env_vars import attention_backend_findings, fp8_findings, sglang_findings

    argv = argv or []
    tp = flag_value(argv, "--tp-size")  # resolves the prefixes SGLang accepts (--tp, --tp-s, ...)
    tp = int(tp) if tp and tp.isdigit() else None
    rep = Report(facts=facts)
    if "torch" in facts or "nvml" in facts:  # probed (live or recorded); else judge only env and argv
        rep.extend(probe_error_findings(facts) + gpu_findings(facts, tp) + torch_findings(facts))
        rep.extend(driver_findings(facts) + nccl_version_findings(facts) + package_findings(facts))
        rep.extend(multi_gpu_findings(facts, tp, argv) + shm_findings(facts))
    here, launch_env = facts.get("env") or {}, env or {}
    sg_version = sglang_version or (facts.get("packages") or {}).get("sglang")
    judges = {
        "NCCL_": lambda e, s: nccl_findings(e, facts, source=s),
        "SGLANG_": lambda e, s: sglang_findings(e, sg_version, source=s),
    }
    for prefix, judge in judges.items():
        mine = {k: v for k, v in here.items() if k.startswith(prefix) and k not in launch_env}
        theirs = {k: v for k, v in launch_env.items() if k.startswith(prefix)}
        if theirs:
            rep.extend(judge({**mine, **theirs}, source))  # one verdict per variable, launch's value wins
        elif mine:
            rep.extend(judge(mine, "environment"))
    cc = next((g["cc"] for g in gpu_list(facts) if g["cc"]), None)
    rep.extend(attention_backend_findings(cc, argv, target_config))
    rep.extend(fp8_findings(cc, {**here, **launch_env}, target_config))
    if allreduce is not None:
        rep.extend(allreduce_findings(allreduce))
    return rep


def facts_rows(facts: dict) -> list[tuple[str, Any]]:
    """The facts as (name, value) rows for a table (notebook 01, `kit env` text output)."""
    t, pk, s = facts.get("torch") or {}, facts.get("packages") or {}, facts.get("system") or {}
    rows: list[tuple[str, Any]] = [("machine", facts.get("label")), ("cpu", (facts.get("host") or {}).get("cpu_model"))]
    for g in gpu_list(facts):
        fam = family(g["cc"])
        desc = f"{g['name']} | {fam['sm']} {fam['family']} | {g['memory_mib']} MiB | {g['power_limit_w'] or '?'} W"
        rows.append((f"GPU {g['index']}", desc))
    rows += [
        ("driver", driver_version(facts)),
        ("driver CUDA", (facts.get("nvml") or {}).get("cuda_driver")),
        ("torch", t.get("version")),
        ("torch CUDA", t.get("cuda")),
        ("torch arch list", " ".join(t.get("arch_list") or []) or None),
        ("NCCL", nccl_version(facts)),
    ]
    topo = (facts.get("smi") or {}).get("topo")
    if topo:
        rows.append(("topology", "; ".join(f"{g}: {' '.join(r)}" for g, r in zip(topo["gpus"], topo["matrix"]))))
    return (
        rows
        + [(k, v) for k, v in pk.items() if v is not None and k != "torch"]
        + [
            ("/dev/shm", f"{s['shm_bytes'] / 2**30:.1f} GiB" if s.get("shm_bytes") else None),
            ("iommu groups", s.get("iommu_groups")),
            ("unknown (probe errors)", "; ".join(facts.get("errors") or {}) or None),
        ]
    )


def summary_line(report: Report) -> str:
    """One line for the run summary: counts and the GPUs judged."""
    s = report.summary()
    gpus = [f.title.split(":")[0] for f in report.by_code("env.gpu")] or ["no GPU"]
    return f"{s['error']} error(s), {s['warning']} warning(s) on {', '.join(gpus)}"


def facts_frame(facts: dict):
    import pandas as pd

    return pd.DataFrame(facts_rows(facts), columns=["fact", "value"])


def load_facts(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise KitInputError(f"{path}: cannot read recorded facts ({e})")
    if not isinstance(data, dict) or data.get("schema") != "kit.env.facts/1":
        raise KitInputError(f"{path}: not a kit facts file (schema kit.env.facts/1)")
    return data


def read_facts(path: str | None = None, timeout: float = 60.0) -> dict:
    """Recorded facts from `path`, or a live probe of this machine when no path is given."""
    from kit.env.machine import probe_machine

    return load_facts(path) if path else probe_machine(timeout=timeout)


def launch_parts(launch: str | None) -> tuple[dict[str, str], list[str]]:
    """(env, argv) of a launch command line; empty when there is none."""
    from kit.sglang.cmdline import split_command

    return split_command(launch, source="launch") if launch else ({}, [])


def doctor_checks(dep) -> list[Finding]:
    """Doctor provider (`dep`: a `kit.preflight.Deployment`): probe this machine when asked (`probe_env`), then
    judge it with the launch command's env and flags."""
    from kit.env.machine import probe_machine

    env, argv = (dep.launch.env, dep.launch.argv) if dep.launch is not None else ({}, [])
    facts = probe_machine() if dep.probe_env else {"schema": "kit.env.facts/1", "label": "not probed"}
    return check(facts, env, argv, target_config=dep.target_config, sglang_version=dep.sglang_version).findings


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, EnvConfig)


def run(args: argparse.Namespace) -> int:
    from kit.env.machine import write_facts
    from kit.env.multigpu import smoke_if_possible

    cfg = kconfig.from_namespace(EnvConfig, args)
    env, argv = launch_parts(cfg.launch)
    facts = read_facts(cfg.facts, cfg.timeout)
    if cfg.record:
        write_facts(facts, cfg.record)
    ar = smoke_if_possible(facts, env, live=not cfg.facts, timeout_s=cfg.timeout) if cfg.allreduce else None
    rep = check(facts, env, argv, sglang_version=cfg.sglang_version, allreduce=ar)
    if not cfg.json:
        print("\n".join(f"{k:<24} {v}" for k, v in facts_rows(rep.facts) if v is not None))
        print()
    return emit(rep, cfg.json)
