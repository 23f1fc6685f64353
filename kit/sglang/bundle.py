"""Offline engine bundle: one tar.xz that carries a trimmed SGLang (or vLLM) release to a GPU host without network.

Air-gapped GPU hosts cannot `pip install sglang` (or vllm): the wheels are ~1.6 GB, most of it
kernels for other GPUs and optional backends. This module downloads the wheels of one engine release for one GPU
arch and Python, keeps and drops members by a declarative table (`RELEASES`: one row per wheel, per release, with
the reason for every drop), applies the source patches the trimmed stack needs (`SourcePatch`: SGLang and
sgl_kernel kept off flashinfer's JIT kernels, whose sources are dropped), adds a stub for
`IPython.display`, and writes `<name>.tar.xz` plus `<name>.manifest.json` (every file with size and sha256, every
dropped member and why). The tarball is an unpacked site-packages tree: on the GPU host, untar it into a folder and
put that folder on PYTHONPATH ahead of the image's packages (torch, triton and numpy come from the image).

    python -m kit.sglang.bundle build --sglang-version 0.5.17 --arch sm90 --python 3.12 --out DIR
    python -m kit.sglang.bundle build --vllm-version 0.24.0 --arch sm90 --python 3.12 --out DIR   # vLLM's
    python -m kit.sglang.bundle build ... --wheels DIR      # wheels already downloaded: no network
    python -m kit.sglang.bundle install DIR/sglang-0.5.17-sm90-cp312.tar.xz --target /opt/sglang-site

The selection (`select_members`) and the patches (`patch_source`) are pure functions over member names and text,
tested on CPU with a synthetic wheel.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import lzma
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from kit import config as kconfig
from kit.findings import EXIT_CANNOT_RUN, KitInputError
from kit.sglang.bundle_site import LAUNCH_FLAGS, MANIFEST_MEMBER, SCRIPTS_DIR

HELP = "build an offline SGLang bundle (tar.xz + manifest) for a release, GPU arch and Python; install it"

ARCHES = ("sm90", "sm100")
# platforms pip may pick a binary wheel for (pip matches manylinux_2_N exactly, so list the ones releases use)
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    *(f"manylinux_2_{n}_x86_64" for n in (24, 26, 27, 28, 31, 34, 35)),
    "manylinux1_x86_64",
    "any",
)
PATCH_LINE = "_has_flashinfer = False  # kit bundle: flashinfer's JIT sources are not carried"


@dataclass(frozen=True)
class SourcePatch:
    """One edit of one member's text: `pattern` (a regex, multiline) must match exactly once, or the build stops
    (a new release needs its rule looked at again); `replacement` (re.sub syntax) takes its place."""

    pattern: str
    replacement: str
    why: str


# sgl_kernel routes bf16 rmsnorm and top-k/top-p renorm to flashinfer's JIT kernels when flashinfer imports; the
# bundle drops flashinfer's JIT sources (flashinfer/data), so every request would fail with "ninja: error:
# .../flashinfer/data/csrc/norm.cu missing". Forcing the flag off keeps sgl_kernel's own kernels.
NO_FLASHINFER_ROUTING = SourcePatch(
    r"^(?P<indent>[ \t]*)_has_flashinfer\s*=\s*True\s*$",
    r"\g<indent>" + PATCH_LINE,
    "bf16 rmsnorm and top-k/top-p renorm use sgl_kernel's precompiled kernels, not flashinfer's JIT",
)
# SGLang's grouped top-k (DeepSeek-V3/R1 routing: power-of-two experts, groups) calls flashinfer's
# fused_topk_deepseek, a JIT kernel (fused_moe/noAuxTcKernels.cu) whose source the bundle does not carry: CUDA-graph
# capture of such a target stopped with "Ninja build failed". The import sits in a try/except ImportError, so
# raising there leaves fused_topk_deepseek None and SGLang takes its own Triton router (moe_fused_gate).
NO_FLASHINFER_TOPK = SourcePatch(
    r"^(?P<indent>[ \t]*)from flashinfer\.fused_moe import fused_topk_deepseek as _fused_topk_deepseek[ \t]*$",
    r'\g<indent>raise ImportError("kit bundle: flashinfer\'s JIT sources are not carried")',
    "grouped top-k routing (DeepSeek-V3 style) uses SGLang's Triton router, not flashinfer's JIT noaux_tc kernel",
)
# sglang/utils.py imports `from IPython.display import HTML, display` at import time; these two names suffice
IPYTHON_STUB = {
    # matplotlib reads `IPython.version_info` whenever IPython is imported (a GUI-backend shim it skips for
    # IPython >= 8.24): the stub answers so that a process that imported sglang can still draw figures
    "IPython/__init__.py": (
        '"""Stub carried by the kit\'s SGLang bundle: only IPython.display is imported."""\n\n'
        "version_info = (8, 24, 0, '')\n"
    ),
    "IPython/display.py": (
        '"""Stub: the two names sglang/utils.py imports."""\n\n\n'
        "class HTML:\n    def __init__(self, data=None, *args, **kwargs):\n"
        "        self.data = data\n\n\n"
        "def display(*objs, **kwargs):\n    for o in objs:\n        print(getattr(o, 'data', o))\n"
    ),
}


@dataclass(frozen=True)
class WheelRule:
    """One wheel of a release and what of it travels. Globs match member paths (`*` crosses '/').

    A member is dropped when it matches a `drop` glob and no `keep` glob (keep wins); `{arch}` in a glob is the
    target arch. `patch` pairs members with the `SourcePatch` each gets. dist-info always travels (version checks
    read it).
    """

    project: str
    version: str
    drop: tuple[tuple[str, str], ...] = ()  # (glob, why)
    keep: tuple[str, ...] = ()
    patch: tuple[tuple[str, SourcePatch], ...] = ()
    arch_dir: str | None = None  # glob that must match a member for the chosen arch (else: arch not built)


@dataclass(frozen=True)
class Release:
    version: str
    python: str
    wheels: tuple[WheelRule, ...]
    launch_flags: tuple[str, ...]
    not_carried: tuple[tuple[str, str], ...]  # (package, what that costs)
    ipython_stub: bool = True
    # wheels only `python -m sglang.bench_serving` needs (it imports HF `datasets` at start); --bench-serving
    bench_wheels: tuple[WheelRule, ...] = ()
    project: str = "sglang"  # the engine's wheel: its pins are checked against the table, it names the bundle
    image: tuple[str, ...] = ()  # top-level modules the GPU image supplies (bench/bundle_imports.py reads them)


def _small(specs: str) -> tuple[WheelRule, ...]:
    """Wheels carried whole, from "project==version" words."""
    return tuple(WheelRule(*s.split("==")) for s in specs.split())


# One row per wheel of SGLang 0.5.17 (pins read from its METADATA; `check_pins` verifies them at build time).
# The image on the GPU host supplies torch 2.11.0 (the pin of 0.5.12-0.5.17), triton, numpy, safetensors,
# aiohttp, requests, psutil, einops, sentencepiece, tiktoken, huggingface_hub, uvloop, prometheus-client.
RELEASE_0_5_17 = Release(
    version="0.5.17",
    python="3.12",
    wheels=(
        WheelRule(
            "sglang",
            "0.5.17",
            drop=(
                ("sglang/srt/server/_core*.so", "opt-in compiled server path (13 MB); the Python server is used"),
                ("sglang/srt/grpc/_core*.so", "opt-in compiled gRPC path"),
                ("sglang/srt/multimodal/_core*.so", "opt-in compiled multimodal path"),
                ("sglang/multimodal_gen/*", "diffusion/video generation runtime, not used to serve LLMs"),
            ),
            patch=(("sglang/srt/layers/moe/topk.py", NO_FLASHINFER_TOPK),),
        ),
        WheelRule(
            "sglang-kernel",
            "0.4.5",
            drop=(
                (
                    "sgl_kernel/flash_ops*.so",
                    "FlashAttention-3 (1.1 GB unpacked): launch with --attention-backend triton",
                ),
                ("sgl_kernel/flashmla_ops*.so", "FlashMLA kernels (MLA models only)"),
                ("sgl_kernel/infllm_ops*.so", "InfLLM sparse attention kernels"),
                ("sgl_kernel/sm*/*", "common_ops built for another GPU arch"),
            ),
            keep=("sgl_kernel/{arch}/*",),
            patch=(
                ("sgl_kernel/elementwise.py", NO_FLASHINFER_ROUTING),
                ("sgl_kernel/sampling.py", NO_FLASHINFER_ROUTING),
            ),
            arch_dir="sgl_kernel/{arch}/common_ops*.so",
        ),
        WheelRule(
            "flashinfer-python",
            "0.6.15.post1",
            drop=(
                (
                    "flashinfer/data/*",
                    "JIT build sources (67 MB): sgl_kernel and SGLang's grouped top-k are patched not to reach them",
                ),
            ),
        ),
        WheelRule(
            "xgrammar",
            "0.2.1",
            drop=(("xgrammar/lib/*.a", "static library (65 MB) for C++ linking, not loaded by Python"),),
        ),
        WheelRule("sgl-deep-gemm", "0.1.5.post1"),  # EAGLE3 CUDA-graph capture imports deep_gemm
        WheelRule("transformers", "5.12.1"),  # 0.5.17's pin; the image's 5.17 rejects a config sglang registers
        *_small(
            "tokenizers==0.22.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 "
            "typing-inspection==0.4.5 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 "
            "openai==2.6.1 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 orjson==3.13.0 pybase64==1.5.1 msgspec==0.23.0 "
            "pyzmq==27.3.0 setproctitle==1.3.8 dill==0.4.1 gguf==0.19.0 partial-json-parser==0.2.1.1.post7 "
            "jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 "
            "soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 compressed-tensors==0.20.1 loguru==0.7.3 "
            "opentelemetry-api==1.45.2 apache-tvm-ffi==0.1.11"
        ),
    ),
    bench_wheels=_small("datasets==5.2.0 multiprocess==0.70.19"),
    launch_flags=LAUNCH_FLAGS["0.5.17"],
    not_carried=(
        ("helion", "logged as ignored"),
        ("openai-harmony", "logged as ignored"),
        ("flash-attn (FA3)", "--attention-backend fa3 is unavailable; use triton"),
        ("flashinfer JIT sources", "--attention-backend flashinfer and flashinfer sampling unavailable"),
    ),
)
RELEASES = {r.version: r for r in (RELEASE_0_5_17,)}

# vLLM 0.24.0, the release that pins the image's torch 2.11.0 (0.27-0.30 pin torch 2.13, 0.33 torch 2.14). The image
# supplies `image`; what it lacks and vLLM imports on the path of `vllm serve` (dense target, EAGLE-3, Triton
# attention) and of `vllm bench serve` is carried whole.
RELEASE_VLLM_0_24_0 = Release(
    project="vllm",
    version="0.24.0",
    python="3.12",
    wheels=(
        WheelRule(
            "vllm",
            "0.24.0",
            drop=(
                # on CUDA every model's import reaches vllm_flash_attn (v1/attention/backends/fa_utils.py), which
                # raises ImportError unless FA2 or FA3 loads: FA3 (153 MB) travels, FA2 does not
                ("vllm/vllm_flash_attn/_vllm_fa2_C*.so", "FlashAttention 2 (191 MB unpacked): FA3 is carried"),
                ("vllm/third_party/deep_gemm/*", "DeepGEMM (FP8 GEMM kernels and their sources)"),
                ("vllm/third_party/fmha_sm100/*", "Blackwell FMHA sources"),
                ("vllm/vllm-rs", "the Rust frontend binary, opt-in (VLLM_USE_RUST_FRONTEND=1)"),
                ("vllm/_moe_C*.so", "fused-MoE kernels (45 MB): MoE targets are not served from this bundle"),
                ("vllm/_flashmla*.so", "FlashMLA kernels (MLA models only)"),
                ("vllm/_qutlass_C*.so", "FP4 (QuTLASS) kernels"),
            ),
        ),
        *_small(
            "pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 "
            "fastapi==0.136.3 starlette==1.10.0 uvicorn==0.55.0 python-multipart==0.0.34 openai==3.63.0 jiter==0.19.0 "
            "distro==1.9.0 sniffio==1.3.1 cachetools==8.0.3 cbor2==6.3.0 msgspec==0.23.0 pyzmq==27.3.0 "
            "pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 watchfiles==1.3.0 model-hosting-container-standards==0.1.16 "
            "jmespath==1.1.0 supervisor==4.3.0 openai-harmony==0.0.8 prometheus-fastapi-instrumentator==8.1.0 "
            "setproctitle==1.3.8 blake3==1.0.11 python-json-logger==4.2.0 diskcache==5.6.3 lark==1.2.2 depyf==0.20.0 "
            "astor==0.8.1 dill==0.4.1 ijson==3.6.0 llguidance==1.7.6 outlines-core==0.2.14 apache-tvm-ffi==0.1.9 "
            # openai 3.x imports httpx2; the kit itself needs orjson (checkpoint headers) and gguf (the embedded model)
            "httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5 h11==0.16.0 orjson==3.13.0 gguf==0.19.0 "
            "annotated-doc==0.0.7 click==8.5.1"  # fastapi's and uvicorn's
        ),
        # the structured-output backends are imported when the scheduler is (vllm/v1/structured_output)
        WheelRule(
            "xgrammar",
            "0.2.1",
            drop=(("xgrammar/lib/*.a", "static library (65 MB) for C++ linking, not loaded by Python"),),
        ),
    ),
    launch_flags=("--attention-backend", "TRITON_ATTN"),
    not_carried=(
        ("FlashAttention 2", "--attention-backend FLASH_ATTN runs FA3 (Hopper) only; the kit launches TRITON_ATTN"),
        ("flashinfer", "FlashInfer attention and its top-k/top-p sampler; vLLM samples with PyTorch"),
        ("lm-format-enforcer", "structured output through that backend"),
        ("DeepGEMM, FlashMLA, fused-MoE kernels", "FP8 block GEMMs, MLA and MoE targets"),
    ),
    ipython_stub=False,
    image=tuple(
        "torch triton numpy transformers tokenizers safetensors huggingface_hub sentencepiece tiktoken aiohttp requests "
        "urllib3 idna anyio psutil prometheus_client PIL cv2 einops cloudpickle cpuinfo regex yaml uvloop tqdm "
        "typing_extensions filelock packaging".split()
    ),
)
VLLM_RELEASES = {r.version: r for r in (RELEASE_VLLM_0_24_0,)}


@dataclass
class BuildConfig:
    sglang_version: str = field(default="0.5.17", metadata={"help": "SGLang release (one of RELEASES)"})
    vllm_version: str | None = field(
        default=None, metadata={"help": "bundle this vLLM release instead of SGLang (one of VLLM_RELEASES)"}
    )
    arch: str = field(
        default="sm90", metadata={"help": "GPU arch: sm90 (H100/H200) or sm100 (B200/GB200)", "choices": list(ARCHES)}
    )
    python: str = field(default="3.12", metadata={"help": "Python version of the GPU host (major.minor)"})
    out: str = field(default=".", metadata={"help": "folder for the .tar.xz and .manifest.json"})
    wheels: str | None = field(
        default=None,
        metadata={"help": "folder of already-downloaded wheels (no network); default: pip download into OUT/wheels"},
    )
    deep_gemm: bool = field(default=True, metadata={"help": "carry sgl-deep-gemm (needed for EAGLE3 + CUDA graphs)"})
    bench_serving: bool = field(
        default=False, metadata={"help": "also carry what `python -m sglang.bench_serving` imports (HF datasets)"}
    )
    xz_preset: int = field(default=6, metadata={"help": "xz compression preset 0-9"})


@dataclass
class InstallConfig:
    bundle: str = field(default="", metadata={"help": "the .tar.xz built by `build`", "positional": True})
    target: str = field(default="sglang-site", metadata={"help": "folder to unpack into (then PYTHONPATH=it)"})


def normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def _subst(glob: str, arch: str) -> str:
    return glob.replace("{arch}", arch)


def install_path(member: str) -> str | None:
    """Where a wheel member lands in site-packages: `X.data/purelib|platlib/p` -> p; other .data parts -> None."""
    parts = member.split("/")
    if parts[0].endswith(".data") and len(parts) > 2:
        return "/".join(parts[2:]) if parts[1] in ("purelib", "platlib") else None
    return member


def select_members(members: list[str], rule: WheelRule, arch: str) -> tuple[list[str], list[dict]]:
    """Split a wheel's member names into (kept, dropped). dropped: [{"member", "why"}]. Pure; no I/O."""
    if rule.arch_dir and not any(fnmatch.fnmatchcase(m, _subst(rule.arch_dir, arch)) for m in members):
        raise KitInputError(
            f"{rule.project} {rule.version} has no {_subst(rule.arch_dir, arch)}: it was not built for {arch}"
        )
    keep = [_subst(g, arch) for g in rule.keep]
    kept, dropped = [], []
    for m in members:
        if m.endswith("/"):
            continue
        if install_path(m) is None:
            dropped.append({"member": m, "why": "wheel .data outside purelib/platlib (scripts, headers)"})
            continue
        why = next((w for g, w in rule.drop if fnmatch.fnmatchcase(m, _subst(g, arch))), None)
        if why is not None and not any(fnmatch.fnmatchcase(m, k) for k in keep):
            dropped.append({"member": m, "why": why})
        else:
            kept.append(m)
    return kept, dropped


def patch_source(text: str, member: str, patch: SourcePatch = NO_FLASHINFER_ROUTING) -> str:
    """`text` with `patch` applied; its pattern must match exactly once."""
    rx = re.compile(patch.pattern, re.M)
    hits = rx.findall(text)
    if len(hits) != 1:
        raise KitInputError(
            f"{member}: expected one match of /{patch.pattern}/, found {len(hits)}; this release needs a new patch rule"
        )
    return rx.sub(patch.replacement, text)


def parse_pins(metadata: str) -> dict[str, str]:
    """`Requires-Dist: name[extra]==ver` lines (no environment marker) -> {normalized name: ver}."""
    pins = {}
    for line in metadata.splitlines():
        m = re.match(r"Requires-Dist:\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*$", line)
        if m:
            pins[normalize(m.group(1))] = m.group(3)
    return pins


def check_pins(pins: dict[str, str], release: Release) -> list[str]:
    """Rows of the table whose version differs from the sglang wheel's own `==` pin (empty: consistent)."""
    return [
        f"{w.project}: table has {w.version}, {release.project} {release.version} pins {pins[normalize(w.project)]}"
        for w in release.wheels
        if normalize(w.project) in pins and pins[normalize(w.project)] != w.version
    ]


def release_for(version: str, vllm_version: str | None = None) -> Release:
    """The bundle table of that SGLang release, or of `vllm_version` where one is named."""
    flag, table, want = (
        ("--vllm-version", VLLM_RELEASES, vllm_version) if vllm_version else ("--sglang-version", RELEASES, version)
    )
    if want not in table:
        raise KitInputError(f"{flag} {want}: no bundle table for it (known: {', '.join(table)})")
    return table[want]


def wheel_rules(release: Release, deep_gemm: bool, bench_serving: bool = False) -> list[WheelRule]:
    rules = [w for w in release.wheels if deep_gemm or normalize(w.project) != "sgl-deep-gemm"]
    return rules + list(release.bench_wheels if bench_serving else ())


def find_wheel(wheel_dir: Path, rule: WheelRule) -> Path:
    stem = normalize(rule.project).replace("-", "_")
    hits = [
        p
        for p in wheel_dir.glob("*.whl")
        if normalize(p.name.split("-")[0]).replace("-", "_") == stem and p.name.split("-")[1] == rule.version
    ]
    if len(hits) != 1:
        raise KitInputError(f"{wheel_dir}: expected one wheel of {rule.project}=={rule.version}, found {len(hits)}")
    return hits[0]


def download(rules: list[WheelRule], python: str, dest: Path) -> None:
    """pip download each pinned wheel (binary only, no deps: the table is the whole list)."""
    dest.mkdir(parents=True, exist_ok=True)
    tag = python.replace(".", "")
    opts = f"--no-deps --only-binary=:all: --python-version {python} --implementation cp --abi cp{tag} --abi abi3"
    cmd = [sys.executable, "-m", "pip", "download", *opts.split(), "--abi", "none", "-d", str(dest)]
    cmd += [a for p in PLATFORMS for a in ("--platform", p)]
    todo = []
    for r in rules:
        try:
            find_wheel(dest, r)
        except KitInputError:
            todo.append(f"{r.project}=={r.version}")
    if todo:
        subprocess.run(cmd + todo, check=True)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, path: str, data: bytes, files: list[dict]) -> None:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))
    files.append({"path": path, "size": len(data), "sha256": _sha(data)})


def build_bundle(cfg: BuildConfig, release: Release | None = None, log=print) -> Path:
    """Write OUT/<name>.tar.xz and OUT/<name>.manifest.json; return the tarball's path."""
    release = release or release_for(cfg.sglang_version, cfg.vllm_version)
    if cfg.python != release.python:
        raise KitInputError(
            f"--python {cfg.python}: {release.project} {release.version} is bundled for "
            f"Python {release.python} (the GPU image's)"
        )
    if cfg.arch not in ARCHES:
        raise KitInputError(f"--arch {cfg.arch}: one of {', '.join(ARCHES)}")
    out = Path(cfg.out)
    rules = wheel_rules(release, cfg.deep_gemm, cfg.bench_serving)
    wheel_dir = Path(cfg.wheels) if cfg.wheels else out / "wheels"
    if not cfg.wheels:
        download(rules, cfg.python, wheel_dir)
    wheels = [(r, find_wheel(wheel_dir, r)) for r in rules]  # all present before anything is written
    sg = next(p for r, p in wheels if normalize(r.project) == release.project)
    with zipfile.ZipFile(sg) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    bad = check_pins(parse_pins(meta), release)
    if bad:
        raise KitInputError(f"{sg.name}: bundle table disagrees with its pins: {'; '.join(bad)}")

    name = f"{release.project}-{release.version}-{cfg.arch}-cp{cfg.python.replace('.', '')}"
    out.mkdir(parents=True, exist_ok=True)
    tar_path, man_path = out / f"{name}.tar.xz", out / f"{name}.manifest.json"
    tmp = out / f".{name}.tar.xz.part"
    files: list[dict] = []
    report = []
    t0 = time.time()
    try:
        with tarfile.open(tmp, "w:xz", preset=cfg.xz_preset) as tar:
            for rule, whl in wheels:
                with zipfile.ZipFile(whl) as z:
                    kept, dropped = select_members(z.namelist(), rule, cfg.arch)
                    sizes = {i.filename: i.file_size for i in z.infolist()}
                    patched = []
                    patches = dict(rule.patch)
                    for m in kept:
                        data = z.read(m)
                        if m in patches:
                            data = patch_source(data.decode(), m, patches[m]).encode()
                            patched.append(m)
                        _add(tar, install_path(m), data, files)
                    missing = set(patches) - set(patched)
                    if missing:
                        raise KitInputError(f"{whl.name}: has no {', '.join(sorted(missing))} to patch")
                report.append(
                    {
                        "project": rule.project,
                        "version": rule.version,
                        "wheel": whl.name,
                        "wheel_sha256": _sha(whl.read_bytes()),
                        "kept_files": len(kept),
                        "kept_bytes": sum(sizes[m] for m in kept),
                        "patched": patched,
                        "dropped_bytes": sum(sizes[d["member"]] for d in dropped),
                        "dropped": [dict(d, size=sizes[d["member"]]) for d in dropped],
                    }
                )
                log(
                    f"{whl.name}: kept {len(kept)} files, dropped {len(dropped)}"
                    f" ({report[-1]['dropped_bytes'] / 1e6:.1f} MB)"
                )
            if release.ipython_stub:
                for path, text in IPYTHON_STUB.items():
                    _add(tar, path, text.encode(), files)
            manifest = {
                "name": name,
                "project": release.project,
                "version": release.version,
                "arch": cfg.arch,
                "python": cfg.python,
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "ipython_stub": release.ipython_stub,
                "launch_flags": list(release.launch_flags),
                "not_carried": [{"package": p, "cost": c} for p, c in release.not_carried],
                "patches": [{"member": m, "why": p.why} for r in rules for m, p in r.patch],
                "wheels": report,
                "unpacked_bytes": sum(f["size"] for f in files),
                "files": files,
            }
            _add(tar, MANIFEST_MEMBER, json.dumps(manifest, indent=1).encode(), [])
        tmp.rename(tar_path)
    finally:
        tmp.unlink(missing_ok=True)
    manifest["bundle_bytes"] = tar_path.stat().st_size
    manifest["bundle_sha256"] = _sha(tar_path.read_bytes())
    man_path.write_text(json.dumps(manifest, indent=1))
    log(
        f"{tar_path}: {manifest['bundle_bytes'] / 2**20:.1f} MiB ({manifest['unpacked_bytes'] / 2**20:.0f} MiB "
        f"unpacked, {len(files)} files) in {time.time() - t0:.0f} s; manifest {man_path}"
    )
    return tar_path


def write_console_scripts(site: Path, python: str) -> list[Path]:
    """The console scripts pip would write for the packages unpacked in `site` (each `*.dist-info/
    entry_points.txt`'s [console_scripts]: `sglang`, whose `sglang serve` is the release's own entry), in
    `site/bin`. Each runs under `python` (its first line), puts `site` first on sys.path and calls its entry under
    `__main__` only: SGLang starts its scheduler by spawn, which runs the script again in each child."""
    import configparser

    out = []
    for ep in sorted(site.glob("*.dist-info/entry_points.txt")):
        cp = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        cp.optionxform = str  # script names keep their case
        cp.read_string(ep.read_text())
        for name, target in cp["console_scripts"].items() if cp.has_section("console_scripts") else []:
            module, _, attr = target.partition(":")
            path = site / SCRIPTS_DIR / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(
                f"#!{python}\nimport importlib\nimport sys\n\nsys.path.insert(0, {str(site.resolve())!r})\n"
                f"entry = importlib.import_module({module.strip()!r})\n"
                f"for part in {attr.split('[')[0].strip()!r}.split('.'):\n    entry = getattr(entry, part)\n"
                f"if __name__ == '__main__':\n    sys.argv[0] = {name!r}\n    sys.exit(entry())\n"
            )
            path.chmod(0o755)
            out.append(path)
    return out


def install_bundle(cfg: InstallConfig, log=print) -> Path:
    """Unpack the bundle into TARGET, check every file against the manifest inside it, and write the packages'
    console scripts (`write_console_scripts`, for this interpreter) into TARGET/bin."""
    src, target = Path(cfg.bundle), Path(cfg.target)
    if not src.is_file():
        raise KitInputError(f"{src}: no such bundle file")
    if target.exists() and any(target.iterdir()):
        raise KitInputError(f"--target {target}: folder is not empty (install into a fresh folder)")
    try:
        with tarfile.open(src, "r:xz") as tar:
            tar.extractall(target, filter="data")
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise KitInputError(f"{src}: not a readable bundle ({e})") from None
    man = target / MANIFEST_MEMBER
    if not man.exists():
        raise KitInputError(f"{src}: no {MANIFEST_MEMBER} inside: not a kit bundle")
    manifest = json.loads(man.read_text())
    bad = [f["path"] for f in manifest["files"] if _sha((target / f["path"]).read_bytes()) != f["sha256"]]
    if bad:
        raise KitInputError(f"{src}: {len(bad)} files differ from the manifest (first: {bad[0]})")
    scripts = write_console_scripts(target, sys.executable)
    log(
        f"installed {manifest['name']} ({len(manifest['files'])} files, {len(scripts)} console scripts in "
        f"{target / SCRIPTS_DIR}) into {target}; "
        f"use: export PYTHONPATH={target.resolve()}:$PYTHONPATH"
    )
    return target


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bundle_cmd", required=True)
    kconfig.add_arguments(sub.add_parser("build", help="download, trim, patch and pack the wheels"), BuildConfig)
    kconfig.add_arguments(sub.add_parser("install", help="unpack a bundle on the GPU host"), InstallConfig)


def run(args: argparse.Namespace) -> int:
    try:
        if args.bundle_cmd == "build":
            build_bundle(kconfig.from_namespace(BuildConfig, args))
        else:
            install_bundle(kconfig.from_namespace(InstallConfig, args))
    except KitInputError as e:
        print(f"kit bundle: error: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kit.sglang.bundle", description=HELP)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
