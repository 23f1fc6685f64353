"""Shared by the environment tests: the recorded machines and the seed's launch command."""

import json
from pathlib import Path

FACTS_DIR = Path(__file__).parent / "facts"
MACHINES = ("rtxpro6000_8x_pcie", "b200_8x_nvlink", "h200_1x", "cpu_only")

# the seed's launch line (message 3511): six NCCL variables, one SGLANG variable, TP=8 on 8x RTX PRO 6000
SEED_LAUNCH = (
    "NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS NCCL_MAX_NCHANNELS=16 NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512 "
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 /root/ml-env/bin/python3 -m sglang.launch_server "
    "--model-path /shared/kimi-k2.5-int4 --trust-remote-code --tp-size 8 --mem-fraction-static 0.85 "
    "--host 0.0.0.0 --port 8000 --num-continuous-decode-steps 4 --disable-custom-all-reduce --log-level info "
    "--speculative-algorithm EAGLE --speculative-draft-model-path /data/eagle3/output_10k_sglang/4 "
    "--speculative-num-draft-tokens 5 --speculative-eagle-topk 4 --speculative-num-steps 3"
)
SEED_NCCL_VARS = ("NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS", "NCCL_NTHREADS", "NCCL_P2P_LEVEL", "NCCL_PROTO")


def facts(name: str) -> dict:
    """A fresh copy of a recorded machine (tests may mutate it)."""
    return json.loads((FACTS_DIR / f"{name}.json").read_text())


def seed_env_argv():
    from kit.sglang.cmdline import split_command

    return split_command(SEED_LAUNCH)
