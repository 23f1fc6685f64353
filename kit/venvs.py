"""Side environments for the real third-party programs the kit checks itself against.

SGLang pins a CUDA torch and GPU kernels; speculators pins transformers<=5.19 and pulls CUDA
torchvision. Neither belongs in the notebook environment. Their *pure-Python* parts still run
on a CPU, so we build small virtual environments that see this interpreter's packages
(`--system-site-packages`: the CPU torch is shared, nothing CUDA is installed) and add the
third-party package with `--no-deps` plus the light packages it really imports:

    sglang-0.5.23   SGLang's own argument parser (ServerArgs.add_cli_args) and sources
    speculators     speculators 0.9.0 + SpecForge 0.2.0 draft classes (genuine checkpoints)

    from kit.venvs import ensure_venv
    py = ensure_venv("sglang-0.5.23")      # path of that venv's python; built once, cached
    subprocess.run([py, "-c", "import sglang"])

Root: $KIT_VENV_DIR (default $KIT_CACHE_DIR/venvs). `python -m kit.venvs NAME` builds one.
A point of care: a venv is marked complete only after every install step succeeded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kit.findings import KitInputError
from kit.models import cache_dir

# name -> list of pip install steps (each a list of args after `pip install`)
SPECS: dict[str, list[list[str]]] = {
    "sglang-0.5.23": [
        ["--no-deps", "sglang==0.5.23"],
        [
            "transformers==5.19.0",
            "msgspec",
            "pydantic",
            "fastapi",
            "orjson",
            "requests",
            "psutil",
            "pybase64",
            "pillow",
            "pyzmq",
            "IPython",
            "aiohttp",
            "uvloop",
            "setproctitle",
            "numpy",
            "einops",
            "packaging",
            "triton==3.9.0",
        ],
    ],
    "speculators": [
        ["--no-deps", "speculators==0.9.0", "specforge==0.2.0", "hs-connectors==0.9.0"],
        [
            "transformers==5.19.0",
            "datasets>=4.0.0,<=5.1.0",
            "pydantic",
            "pydantic-settings",
            "loguru",
            "pyyaml",
            "safetensors",
            "huggingface-hub",
            "typer",
            "rich",
            "tqdm",
        ],
    ],
}


def venv_root() -> Path:
    return Path(os.environ.get("KIT_VENV_DIR", cache_dir() / "venvs"))


def venv_python(name: str) -> Path:
    return venv_root() / name / "bin" / "python"


def ensure_venv(name: str, quiet: bool = True) -> Path:
    if name not in SPECS:
        raise KitInputError(f"unknown side environment {name!r}; known: {', '.join(SPECS)}")
    d = venv_root() / name
    done = d / ".kit-complete"
    if done.exists():
        return venv_python(name)
    if d.exists():
        shutil.rmtree(d)
    d.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(d)], check=True)
    py = venv_python(name)
    for step in SPECS[name]:
        cmd = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
        cmd += (["--quiet"] if quiet else []) + step
        r = subprocess.run(cmd, capture_output=quiet, text=True)
        if r.returncode != 0:
            tail = (r.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise KitInputError(f"side environment {name}: `pip install {' '.join(step)}` failed {tail}")
    done.write_text(" ; ".join(" ".join(s) for s in SPECS[name]))
    return py


if __name__ == "__main__":
    for n in sys.argv[1:] or list(SPECS):
        print(n, ensure_venv(n, quiet=False))
