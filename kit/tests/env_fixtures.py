"""Shared by the environment tests: the recorded machines and the seed's launch command."""

import json
from pathlib import Path

from kit.sglang.cmdline import SEED_LAUNCH  # noqa: F401  (the seed's launch, imported by the env tests)

FACTS_DIR = Path(__file__).parent / "facts"
MACHINES = ("rtxpro6000_8x_pcie", "b200_8x_nvlink", "h200_1x", "cpu_only")

SEED_NCCL_VARS = ("NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS", "NCCL_NTHREADS", "NCCL_P2P_LEVEL", "NCCL_PROTO")


def facts(name: str) -> dict:
    """A fresh copy of a recorded machine (tests may mutate it)."""
    return json.loads((FACTS_DIR / f"{name}.json").read_text())


def seed_env_argv():
    from kit.sglang.cmdline import split_command

    return split_command(SEED_LAUNCH)
