"""What each NVIDIA architecture needs: family names, minimum CUDA / NCCL / Triton, binary compatibility.

Knowledge only (tables + two pure functions), used by the environment rules in `kit.env.checks`. Sources: NVIDIA's
CUDA GPU list and Blackwell compatibility guide, the CUDA 12.9/13.0 feature notes, PyTorch's `torch/cuda/__init__.py`
(`_check_cubins` same-major rule), NCCL release notes (2.25.1 Blackwell, 2.26.2 sm_120 shared-memory fix).

    >>> family((12, 0))["family"]
    'Blackwell workstation/consumer'
    >>> arch_cover((10, 3), ["sm_90", "sm_100"])[0]
    'same_major'
"""

from __future__ import annotations

import re

# (major, minor) -> family facts. min_cuda: first toolkit that targets the arch natively.
FAMILIES = {
    (9, 0): dict(family="Hopper", sm="sm_90", min_cuda=(11, 8), min_nccl=None),  # H100, H200, GH200
    (10, 0): dict(family="Blackwell datacenter", sm="sm_100", min_cuda=(12, 8), min_nccl=(2, 25, 1)),  # B200, GB200
    (10, 3): dict(family="Blackwell datacenter", sm="sm_103", min_cuda=(12, 9), min_nccl=(2, 25, 1)),  # B300, GB300
    # Jetson T5000/T4000 (Thor; sm_101 before CUDA 13)
    (11, 0): dict(family="Blackwell Thor", sm="sm_110", min_cuda=(13, 0), min_nccl=None),
    # RTX PRO 6000/5000/4500/4000/2000 Blackwell, GeForce RTX 50xx
    (12, 0): dict(family="Blackwell workstation/consumer", sm="sm_120", min_cuda=(12, 8), min_nccl=(2, 26, 2)),
    (12, 1): dict(family="Blackwell workstation/consumer", sm="sm_121", min_cuda=(12, 9), min_nccl=(2, 26, 2)),  # GB10
}
# a binary built for the lower minor of the same major still runs (cubin forward compat within a major)
CUDA_NATIVE_FLOOR_SEVERITY = {(10, 3): "warning", (12, 1): "warning"}
# driver floors per CUDA runtime major.minor (Linux); 12.8 figure is second-hand (not from NVIDIA's table)
DRIVER_FLOOR = {(13, 0): (580, 0), (12, 8): (570, 26)}
TRITON_BLACKWELL = (3, 3)  # PyTorch 2.7 blog: Triton 3.3 adds Blackwell
FLASH_ATTN_BLACKWELL = (2, 7, 3)  # first tag with sm_100/sm_120 gencode (PR #1436)


def vtuple(v: str | None, n: int = 3) -> tuple[int, ...] | None:
    """'2.9.1+cu128' -> (2, 9, 1); '12.8' -> (12, 8); None/garbage -> None."""
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(v)) if v else None
    return None if m is None else tuple(int(x) for x in m.groups()[:n] if x is not None)


def family(cc: tuple[int, int] | None) -> dict:
    """Family facts for a compute capability; unknown ones get a generic entry."""
    if cc is None:
        return dict(family="unknown", sm=None, min_cuda=None, min_nccl=None)
    cc = tuple(cc)
    if cc in FAMILIES:
        return {"cc": cc, **FAMILIES[cc]}
    fam = {8: "Ampere/Ada", 7: "Volta/Turing"}.get(cc[0], "other")
    return dict(cc=cc, family=fam, sm=f"sm_{cc[0]}{cc[1]}", min_cuda=None, min_nccl=None)


def is_blackwell(cc) -> bool:
    return cc is not None and cc[0] in (10, 11, 12)


def _parse_arch(entry: str) -> tuple[str, int, int] | None:
    """'sm_120' -> ('sm', 12, 0); 'compute_90' -> ('compute', 9, 0); 'sm_90a' -> ('sm', 9, 0)."""
    m = re.fullmatch(r"(sm|compute)_(\d+?)(\d)[af]?", entry.strip())
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def arch_cover(cc: tuple[int, int], arch_list: list[str]) -> tuple[str, str | None]:
    """How a torch arch list covers a device: ('exact'|'same_major'|'ptx'|'none', the entry used).

    same_major: a cubin of the same major, lower minor (runs: CUDA's forward compat, torch's `_check_cubins`);
    ptx: only PTX of a lower-or-equal arch (JIT at first use); none: 'no kernel image is available'."""
    parsed = [(e, p) for e in arch_list if (p := _parse_arch(e))]
    if exact := next((e for e, (kind, ma, mi) in parsed if kind == "sm" and (ma, mi) == tuple(cc)), None):
        return "exact", exact
    if same := [(mi, e) for e, (kind, ma, mi) in parsed if kind == "sm" and ma == cc[0] and mi <= cc[1]]:
        return "same_major", max(same)[1]
    if ptx := [((ma, mi), e) for e, (kind, ma, mi) in parsed if kind == "compute" and (ma, mi) <= tuple(cc)]:
        return "ptx", max(ptx)[1]
    return "none", None
