"""The kit's SGLang bundle as a launch on this machine sees it: whether the importable SGLang came from one, and
the launch flags it needs.

A bundle (`kit.sglang.bundle`, the side room that builds and installs it) carries one attention and one sampling
backend; SGLang's defaults reach for kernels it leaves out (FA3, FlashInfer's JIT, xgrammar), so a launch on a
bundle-installed SGLang adds the bundle's flags. Those flags are written here, per release (`LAUNCH_FLAGS`), and
into each bundle's manifest at build time; a launch reads the installed bundle's manifest, else the table when
asked (`--bundle`). Nothing here builds or unpacks anything, and SGLang is never imported.

    from kit.sglang.bundle_site import bundle_launch_flags
    bundle_launch_flags("0.5.17")   # the installed bundle's flags, else the kit's 0.5.17 bundle's
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.findings import KitInputError

MANIFEST_MEMBER = "kit_bundle_manifest.json"  # the manifest's name inside a bundle, beside `sglang/` once installed
SCRIPTS_DIR = "bin"  # the console scripts `kit bundle install` writes, beside the unpacked packages

# the launch flags each release's bundle needs (the release rows of `kit.sglang.bundle.RELEASES` carry them)
LAUNCH_FLAGS: dict[str, tuple[str, ...]] = {
    "0.5.17": (
        "--attention-backend",
        "triton",
        "--sampling-backend",
        "pytorch",
        "--grammar-backend",
        "none",
        "--skip-server-warmup",
        "--dtype",
        "bfloat16",
    ),
}


def installed_bundle_site() -> Path | None:
    """The site folder a kit bundle was installed into, when the importable SGLang came from one (the bundle's
    manifest lies beside `sglang/`); None for any other install. Found without importing SGLang."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        return None
    site = Path(spec.origin).parent.parent
    return site if (site / MANIFEST_MEMBER).is_file() else None


def installed_bundle_flags() -> list[str]:
    """The launch flags of the kit bundle the importable SGLang was installed from (its manifest's
    `launch_flags`), [] for any other install: the trimmed bundle lacks kernels (FA3, FlashInfer's JIT,
    xgrammar) that SGLang's defaults reach for."""
    site = installed_bundle_site()
    if site is None:
        return []
    return list(json.loads((site / MANIFEST_MEMBER).read_text()).get("launch_flags") or [])


def bundle_launch_flags(version: str | None = None) -> list[str]:
    """The bundle flags a launch here gets: the installed bundle's (its manifest), else, with `version` (`--bundle`),
    those of the kit's bundle of that release; [] for any other install."""
    flags = installed_bundle_flags()
    if flags or not version:
        return flags
    if version not in LAUNCH_FLAGS:
        raise KitInputError(
            f"--bundle: the kit has no bundle of SGLang {version} (known: {', '.join(LAUNCH_FLAGS)}); "
            "name one with --sglang-version"
        )
    return list(LAUNCH_FLAGS[version])
