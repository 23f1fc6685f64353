"""The kit's SGLang bundle as a launch here sees it: whether the importable SGLang came from one, and its flags.

A bundle (built and installed by the side room `kit.sglang.bundle`) carries one attention and one sampling backend;
SGLang's defaults reach for kernels it leaves out (FA3, FlashInfer's JIT, xgrammar), so a launch on it adds the
bundle's flags: the installed bundle's manifest, else this table per release when asked (`--bundle`).

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
    "0.5.17": tuple(
        "--attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-server-warmup --dtype bfloat16".split()
    ),
}


# the help of the `--bundle` flag of every verb that launches SGLang
BUNDLE_FLAG_HELP = (
    "add the launch flags of the kit's bundle of that release even when the importable SGLang is not "
    "bundle-installed (a bundle-installed SGLang gets them always, from its manifest; kit.sglang.bundle)"
)


def installed_bundle_site(package: str = "sglang") -> Path | None:
    """The site folder a kit bundle was installed into (its manifest beside `sglang/`, or `vllm/`), when the
    importable engine came from one; None for any other install."""
    from kit.sglang.versions import importable_root

    site = importable_root(package)
    return site if site is not None and (site / MANIFEST_MEMBER).is_file() else None


def installed_bundle_flags(package: str = "sglang") -> list[str]:
    """The launch flags (manifest `launch_flags`) of the kit bundle the importable SGLang (or vLLM) came from; []
    otherwise."""
    site = installed_bundle_site(package)
    return list(json.loads((site / MANIFEST_MEMBER).read_text()).get("launch_flags") or []) if site else []


def bundle_launch_flags(version: str | None = None) -> list[str]:
    """The installed bundle's flags, else with `version` (`--bundle`) those of the kit's bundle of that release."""
    flags = installed_bundle_flags()
    if flags or not version:
        return flags
    if version not in LAUNCH_FLAGS:
        raise KitInputError(
            f"--bundle: the kit has no bundle of SGLang {version} (known: {', '.join(LAUNCH_FLAGS)}); "
            "name one with --sglang-version"
        )
    return list(LAUNCH_FLAGS[version])
