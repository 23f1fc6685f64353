"""Side environments for the real third-party programs the kit checks itself against.

SGLang pins a CUDA torch and GPU kernels; speculators pins transformers<=5.19 and pulls CUDA torchvision. Neither
belongs in the notebook environment, but their pure-Python parts run on a CPU, so each gets a small venv that sees
the kit interpreter's packages (the CPU torch is shared, nothing CUDA installed) plus the package `--no-deps` and the
light packages it really imports:

    sglang-<version>  the release's argument parser and sources: with a recorded flag table, exactly the distributions
                      its parser imported when the table was derived (`closure` in kit/sglang/server_flags.json),
                      `--no-deps`; else the requirements its wheel declares minus the GPU/kernel/media stacks. Plus
                      stand-ins for modules with no CPU build (kit/sglang/stand_ins.py: torchvision)
    speculators       speculators 0.9.0 + SpecForge 0.2.0 draft classes (genuine checkpoints)

A venv sees the kit's packages through a `kit-parent.pth` that runs `site.addsitedir(...)` for every site-packages
directory of the current interpreter (venv, conda or system Python); its own packages come first. Each is built once
per (recipe, parent interpreter) under `<name>-<hash>`, checked by importing what it is for and only then marked
complete; a failed build is remembered for an hour; concurrent builds are serialised by a file lock. A build first
removes the side environments whose parent interpreter is gone (every site directory its stamp names deleted: a
removed venv or checkout), so a cache shared by many short-lived installs does not grow without end. Builds took
180-233 s per SGLang release, 222 s for speculators, on a shared 2-core machine under load.

    py = ensure_venv("sglang-" + DEFAULT_RELEASE)   # path of that venv's python; built once, cached

Root: $KIT_VENV_DIR (default $KIT_CACHE_DIR/venvs). `python -m kit.venvs speculators` builds that one;
`python -m kit.sglang.releases --side-env V` builds SGLang V's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from kit.findings import KitInputError
from kit.models import cache_dir, cache_lock

# Without recorded pins, an SGLang side environment gets the requirements its wheel declares except the
# GPU/kernel/media stacks (SGLANG_SKIP), at the release's own pins; compiled helpers whose requirements would pull a
# CUDA torch go in `--no-deps`. triton is imported by SGLang's kernels (the CPU torch does not bring it), dill by
# its sampling code (a dependency of a skipped package).
SGLANG_SKIP = re.compile(
    r"^(torch|torchvision|torchaudio|torchao|torchcodec|torch[-_]memory[-_]saver|triton|flashinfer|cuda|nvidia|sgl|"
    r"sglang|tilelang|flash[-_]attn|flash[-_]mla|quack|humming|numba|decord|av|soundfile|timm|kernels|llguidance|"
    r"outlines|tokenspeed|helion|smg|py[-_]spy|ninja|build|scipy|datasets|modelscope|mistral[-_]common|gguf|"
    r"compressed[-_]tensors|deepseek|tml|nvshmem|deep[-_]ep|deep[-_]gemm)",
    re.I,
)
SGLANG_NO_DEPS = {"xgrammar", "apache-tvm-ffi"}
SGLANG_EXTRA = ["triton==3.9.0", "dill"]
# modules SGLang imports on the way to its parser that no CPU build exists for (see kit/sglang/stand_ins.py)
STAND_INS_FILE = Path(__file__).parent / "sglang" / "stand_ins.py"
# openai: speculators.models imports its training data helpers, which import the OpenAI client
_SPECULATORS_LIGHT = "pydantic pydantic-settings loguru pyyaml safetensors huggingface-hub typer rich tqdm openai"
SPECULATORS = [
    ["--no-deps", "speculators==0.9.0", "specforge==0.2.0", "hs-connectors==0.9.0"],
    ["transformers==5.19.0", "datasets>=4.0.0,<=5.1.0", *_SPECULATORS_LIGHT.split()],
]
_SGLANG = re.compile(r"^sglang-(\d+(?:\.\d+)+(?:\.post\d+|rc\d+)?)$")
FAILED_TTL_S = 3600


def recipe(name: str, pins: dict[str, str] | None = None) -> tuple[list[list[str]], str]:
    """(pip install steps, import check) of a side environment. `pins` ({distribution: version}): for `sglang-V`,
    what that release's parser imported when its table was derived, installed without a resolver run."""
    if m := _SGLANG.match(name):
        rest = [["@requires:sglang", *SGLANG_EXTRA], ["--no-deps", "@requires-no-deps:sglang"]]
        if pins:
            rest = [["--no-deps", *(f"{d}=={v}" for d, v in sorted(pins.items()))]]
        return [["--no-deps", f"sglang=={m.group(1)}"], *rest], "import sglang.srt.server_args"
    if name == "speculators":
        return SPECULATORS, "import speculators.models.eagle3, specforge.modeling.auto"
    raise KitInputError(f"unknown side environment {name!r}; known: sglang-<version>, speculators")


def parent_site_dirs() -> list[str]:
    """Every site-packages directory of the interpreter running the kit, in its sys.path order."""
    cands = list(site.getsitepackages()) + [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    cands += [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    return [p for p in dict.fromkeys(sys.path + cands) if p in cands and Path(p).is_dir()]


def venv_root() -> Path:
    return Path(os.environ.get("KIT_VENV_DIR", cache_dir() / "venvs"))


def venv_dir(name: str) -> Path:
    """`<root>/<name>-<tag>`: one per parent interpreter, so two kit installs never share one."""
    tag = hashlib.sha1(f"{sys.prefix}|{sys.version}".encode()).hexdigest()[:8]
    return venv_root() / f"{name}-{tag}"


def venv_python(name: str) -> Path:
    return venv_dir(name) / "bin" / "python"


def side_env() -> dict[str, str]:
    """The environment a side interpreter runs in: this one without PYTHON* variables (they would mix our
    site-packages into its own), offline for the hub."""
    return {"HF_HUB_OFFLINE": "1", **{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}}


def _stamp(name: str, pins: dict[str, str] | None = None) -> dict:
    steps, check = recipe(name, pins)
    return {"recipe": steps, "check": check, "parent": parent_site_dirs(), "python": sys.version.split()[0]}


def is_built(name: str, pins: dict[str, str] | None = None) -> bool:
    try:
        return json.loads((venv_dir(name) / ".kit-complete").read_text()) == _stamp(name, pins)
    except (OSError, ValueError):
        return False


def ensure_venv(name: str, quiet: bool = True, check=None, pins: dict[str, str] | None = None) -> Path:
    """Path of that side environment's python, built when missing or stale (KitInputError if it cannot be).
    `check(python)` checks a new build (raises KitInputError); default: the recipe's import, run there."""
    stamp, d = _stamp(name, pins), venv_dir(name)
    if is_built(name, pins):
        return venv_python(name)
    with cache_lock(d):  # a concurrent build of the same env waits, then reuses it
        if is_built(name, pins):
            return venv_python(name)
        prune_orphans()
        failed = d.parent / f".{d.name}.failed"
        if failed.exists() and time.time() - failed.stat().st_mtime < FAILED_TTL_S:
            rec = json.loads(failed.read_text())
            if rec.get("stamp") == stamp:
                raise KitInputError(rec["reason"] + f" (cached; delete {failed} to retry now)")
        try:
            _build(name, d, stamp, quiet, check)
        except KitInputError as e:
            failed.write_text(json.dumps({"stamp": stamp, "reason": str(e)}))
            raise
        failed.unlink(missing_ok=True)
    return venv_python(name)


def prune_orphans() -> list[Path]:
    """Delete the complete side environments whose parent interpreter no longer exists (none of the site
    directories in their stamp is left), with their lock and failure marks; the paths removed. A build in progress
    has no stamp yet and is never touched."""
    gone = []
    for stamp in venv_root().glob("*/.kit-complete"):
        try:
            parents = json.loads(stamp.read_text())["parent"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if parents and not any(Path(p).is_dir() for p in parents):
            d = stamp.parent
            shutil.rmtree(d, ignore_errors=True)
            for mark in (".lock", ".failed"):
                d.parent.joinpath(f".{d.name}{mark}").unlink(missing_ok=True)
            gone.append(d)
    return gone


def _build(name: str, d: Path, stamp: dict, quiet: bool, check=None) -> None:
    if d.exists():
        shutil.rmtree(d)
    _run(name, "`python -m venv` failed", [sys.executable, "-m", "venv", "--without-pip", str(d)])
    py = d / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    lines = [f"import site; site.addsitedir({p!r})" for p in stamp["parent"]]
    Path(purelib, "kit-parent.pth").write_text("\n".join(lines) + "\n")
    if _SGLANG.match(name):
        shutil.copy(STAND_INS_FILE, Path(purelib, "kit_stand_ins.py"))
        Path(purelib, "kit-stand-ins.pth").write_text("import kit_stand_ins; kit_stand_ins.install()\n")
    for step in stamp["recipe"]:
        step = _expand(step, py)
        if not [a for a in step if not a.startswith("-")]:
            continue
        # --no-compile: byte-compiling every installed file took ~17 s of a 60 s build; imports compile what they use
        cmd = [sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check"]
        cmd += ["--no-compile", *(["--quiet"] if quiet else []), *step]
        _run(name, f"`pip install {' '.join(step)}` failed", cmd, quiet)
    if check is not None:
        try:
            check(str(py))
        except KitInputError as e:
            raise KitInputError(f"side environment {name}: `{stamp['check']}` fails there ({e})") from None
    else:
        _run(name, f"`{stamp['check']}` fails there", [str(py), "-c", stamp["check"]], env=side_env(), cwd="/")
    (d / ".kit-complete").write_text(json.dumps(stamp))


def _expand(step: list[str], py: Path) -> list[str]:
    """`@requires:DIST` -> DIST's declared requirements minus SGLANG_SKIP and SGLANG_NO_DEPS (read in the side
    environment after DIST is installed); `@requires-no-deps:DIST` -> its SGLANG_NO_DEPS requirements."""
    out: list[str] = []
    for a in step:
        if not a.startswith("@requires"):
            out.append(a)
            continue
        kind, dist = a[1:].split(":", 1)
        code = f"import importlib.metadata as m, json; print(json.dumps(m.requires({dist!r}) or []))"
        reqs = json.loads(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout)
        from packaging.requirements import Requirement

        for r in map(Requirement, reqs):
            name = r.name.lower().replace("_", "-")
            no_deps = name in SGLANG_NO_DEPS
            wanted = no_deps if kind == "requires-no-deps" else not (no_deps or SGLANG_SKIP.match(name))
            if wanted and (r.marker is None or r.marker.evaluate({"extra": ""})):
                out.append(f"{r.name}{r.specifier}")
    return out


def _run(name: str, what: str, cmd: list[str], quiet: bool = True, **kw) -> None:
    """Run `cmd`; a KitInputError `side environment NAME: WHAT (its last stderr line)` when it fails."""
    r = subprocess.run(cmd, capture_output=quiet, text=True, **kw)
    if r.returncode != 0:
        last = (r.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise KitInputError(f"side environment {name}: {what} ({last[0] if quiet else 'see above'})")


if __name__ == "__main__":
    for n in sys.argv[1:] or ["speculators"]:
        if _SGLANG.match(n):  # built with the release's recorded pins, which kit.sglang knows
            sys.exit(f"python -m kit.venvs: {n}: build it with python -m kit.sglang.releases --side-env {n[7:]}")
        print(n, ensure_venv(n, quiet=False))
