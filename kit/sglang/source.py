"""Real SGLang source, per version, read as text — never imported.

The kit's per-version rules are *derived from* SGLang's own source by the scanners of `kit.derive`, and tests
re-derive them, so a change in SGLang breaks our test rather than our users; at runtime a release the tables lack
is read here too (`kit.sglang.loader.processor_archs`, `kit.sglang.env_vars.release_vars`). A release's text comes
from the SGLang this interpreter would import when it is that release (an installed package or the kit's bundle:
no network), else from $KIT_CACHE_DIR/sglang-src/<version>/, where `pip download --no-deps sglang==X` (a few MB of
pure Python) is unpacked once.

    from kit.sglang.source import source_text
    text = source_text("0.5.23", "srt/models/llama_eagle3.py")
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kit.findings import KitInputError
from kit.models import cache_dir, cache_lock


def source_root(version: str, download: bool = True) -> Path:
    """Directory holding `sglang/` of that release: the importable SGLang's site folder when it is that release,
    else the cache (downloaded on first use)."""
    from kit.sglang.versions import Version, importable_root, importable_version

    here = importable_version()
    if here and Version.parse(here) == Version.parse(version) and (site := importable_root()) is not None:
        return site
    root = cache_dir() / "sglang-src" / version
    if (root / "sglang" / "__init__.py").exists():
        return root
    if not download:
        raise KitInputError(f"sglang {version}: source not cached under {root} and download disabled")
    with cache_lock(root):  # a second process asking for the same release waits, then finds it cached
        if not (root / "sglang" / "__init__.py").exists():
            download_wheel(version, root)
    return root


def download_wheel(version: str, root: Path) -> None:
    """`sglang/**/*.py` and the METADATA/entry_points.txt of that release's wheel into `root`, renamed into place."""
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{version}-"))
    try:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}", "-d"]
        r = subprocess.run([*pip, str(tmp / "whl")], capture_output=True, text=True)
        wheels = list((tmp / "whl").glob("sglang-*.whl")) if r.returncode == 0 else []
        if not wheels:
            last = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise KitInputError(f"sglang=={version}: cannot download the wheel ({last})")
        with zipfile.ZipFile(wheels[0]) as z:
            keep = [n for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py") or _is_metadata(n)]
            z.extractall(tmp / "src", keep)
        if root.exists():
            shutil.rmtree(root)
        (tmp / "src").rename(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _is_metadata(name: str) -> bool:
    """The wheel's own metadata (version, console scripts), so `importlib.metadata` reads it from the folder."""
    parts = name.split("/")
    return len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] in ("METADATA", "entry_points.txt")


def source_text(version: str, relpath: str, download: bool = True) -> str | None:
    """Text of `sglang/<relpath>` in that release, or None if the file does not exist there."""
    p = source_root(version, download) / "sglang" / relpath
    return p.read_text() if p.exists() else None


def source_files(version: str, subdir: str, download: bool = True) -> dict[str, str]:
    """All `.py` files under `sglang/<subdir>` as {relative path: text}."""
    base = source_root(version, download) / "sglang"
    return {str(p.relative_to(base)): p.read_text() for p in sorted((base / subdir).rglob("*.py"))}
