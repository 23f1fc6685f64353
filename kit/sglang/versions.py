"""SGLang releases: one version type, one ordering, one default release.

Every rule table in `kit.sglang` is keyed by the releases whose source we read. A user names any
release (`--sglang-version 0.5.17`, or none: the installed SGLang, else `DEFAULT_RELEASE`);
`pick_recorded(requested, recorded)` answers with the newest recorded release not after it, and says
whether that was exact, so a caller can warn that another release's rules were used. `listed()` is every
release on the package index from 0.4.4 (releases.json), each with its own row in every table.

    >>> Version.parse("0.5.10") > Version.parse("0.5.9")
    True
    >>> pick_recorded("0.5.18", ["0.5.12", "0.5.17", "0.5.23"])
    RecordedRelease(requested='0.5.18', checked='0.5.17', exact=False)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# the newest release whose source every table in kit/sglang/ was derived from
DEFAULT_RELEASE = "0.5.23"
# the release `kit bundle` has a wheel table for (kit.sglang.bundle.RELEASES), the one measured on an H200
BUNDLE_EXAMPLE_RELEASE = "0.5.17"
# the releases on the package index from EAGLE-3's first (kit.sglang.releases refreshes the list)
RELEASES_PATH = Path(__file__).with_name("releases.json")
FIRST_RELEASE = "0.4.4"
TABLES = ("flags", "capture", "loader", "quant", "env_vars")  # the per-release tables; `--derive V` writes each
_WARNED: set[str] = set()
# SGLang releases after this one ship for CUDA 13 only (its sgl-kernel wheels); this was the last CUDA 12 lane
LAST_CUDA12_RELEASE = "0.5.19"
# pre-releases sort before the release they precede; post-releases after it
_PRE = ("a", "b", "rc", "dev")


@dataclass(frozen=True, order=True)
class Version:
    text: str = field(compare=False)
    key: tuple  # what equality, order and hash read

    @classmethod
    def parse(cls, text: str) -> Version:
        parts = re.findall(r"\d+|[a-z]+", text.lower().lstrip("v"))
        if not parts or not parts[0].isdigit():
            raise ValueError(f"not a version: {text!r}")
        key = tuple((0, int(p)) if p.isdigit() else (-1, p) if p in _PRE else (1, p) for p in parts)
        # "0.5.9" == "0.5.9.0": trailing zero components do not change the order
        while len(key) > 1 and key[-1] == (0, 0):
            key = key[:-1]
        return cls(text, key)

    def __str__(self) -> str:
        return self.text


def sort_versions(versions: Iterable[str]) -> list[str]:
    return sorted(versions, key=Version.parse)


def is_version(text: str) -> bool:
    try:
        Version.parse(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class RecordedRelease:
    requested: str  # what the user asked about (or the default)
    checked: str  # the recorded release whose rules answer for it
    exact: bool  # True when `requested` itself was recorded

    def note(self) -> str | None:
        """A one-line warning when another release's rules stand in for the requested one."""
        if self.exact:
            return None
        return f"SGLang {self.requested} is not in the kit's recorded releases; using the rules of {self.checked}"


def pick_recorded(requested: str | None, recorded: Iterable[str]) -> RecordedRelease:
    """The newest recorded release not after `requested` (the oldest one for a release before them all)."""
    vs = sort_versions(recorded)
    requested = requested or default_release()
    want = Version.parse(requested)
    older = [v for v in vs if Version.parse(v) <= want]
    checked = older[-1] if older else vs[0]
    return RecordedRelease(requested, checked, Version.parse(checked) == want)


def installed_version(distribution: str = "sglang") -> str | None:
    """Version of a distribution (sglang, vllm) installed in this interpreter, without importing it."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def importable_root(package: str = "sglang") -> Path | None:
    """The folder holding the `sglang/` (or `vllm/`) package this interpreter would import, found without importing
    it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent.parent


def importable_version() -> str | None:
    """The version of the SGLang this interpreter would import, without importing it: its distribution's metadata,
    else (a bundle on PYTHONPATH) its sglang/_version.py or version.py."""
    root = importable_root()
    if (v := installed_version()) or root is None:
        return v
    for name in ("_version.py", "version.py"):  # setuptools-scm writes _version.py; version.py re-exports it
        f = root / "sglang" / name
        m = re.search(r"__version__[^=\n]*=\s*(?:version\s*=\s*)?[\"']([^\"']+)", f.read_text()) if f.exists() else None
        if m:
            return m.group(1)
    return None


@lru_cache(maxsize=1)
def listed() -> list[str]:
    """Every release on the package index from FIRST_RELEASE on, oldest first."""
    return list(json.loads(RELEASES_PATH.read_text())["releases"])


def is_listed(version: str) -> bool:
    want = Version.parse(version)
    return any(Version.parse(v) == want for v in listed())


def derive_command(version: str) -> str:
    return f"python -m kit.sglang.releases --derive {version}"


def unlisted_note(version: str) -> str | None:
    """One warning line, the first time it is asked about a release newer than the list; None otherwise."""
    if is_listed(version) or Version.parse(version) <= Version.parse(listed()[-1]) or version in _WARNED:
        return None
    if all((tables_dir(version) / f"{t}.json").exists() for t in TABLES):  # derived here
        return None
    _WARNED.add(version)
    return (
        f"SGLang {version} is newer than the releases the kit has read (up to {listed()[-1]}) and is judged by "
        f"{listed()[-1]}'s rules; derive its own tables here with: {derive_command(version)}"
    )


def default_release() -> str:
    """The installed SGLang's version, else DEFAULT_RELEASE."""
    return installed_version() or DEFAULT_RELEASE


# -- stored tables: a row equal to an earlier release's is stored as {"same_as": it} (kit.derive.dedupe_rows)
def tables_dir(version: str | None = None) -> Path:
    """Where `python -m kit.sglang.releases --derive V` writes V's tables on this machine (all of them: no V)."""
    from kit.models import cache_dir

    root = cache_dir() / "sglang-tables"
    return root if version is None else root / version


def stored_rows(rows: dict[str, dict], table: str) -> dict[str, dict]:
    """The rows of a stored table with `same_as` resolved, plus the rows derived on this machine for releases
    the table lacks (`python -m kit.sglang.releases --derive V` writes $KIT_CACHE_DIR/sglang-tables/V/)."""
    out = {v: rows[r["same_as"]] if "same_as" in r else r for v, r in rows.items()}
    for f in sorted(tables_dir().glob(f"*/{table}.json")):
        out.setdefault(f.parent.name, json.loads(f.read_text()))
    return out
