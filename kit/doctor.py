"""`python -m kit doctor`: every static check its inputs allow, in one report.

    kit doctor [--target PATH|ID] [--draft PATH|ID] [--launch "COMMAND" | --launch-file FILE]
               [--probe-env] [--sglang-version X] [--verbose] [--json]

`--target`/`--draft` take a model directory, a lone config.json or a Hugging Face id: no weights are needed,
so a Kimi-K2.5-sized target is checked on a laptop. A hub id (`--revision`, `--draft-revision`) is resolved as
SGLang resolves it, the local cache first, else its config.json and safetensors headers over the network
(kit.checkpoint.hub; an info finding `ckpt.source` says where the files came from). Without `--target`/`--draft`
the launch's own `--model-path` and `--speculative-draft-model-path` are checked, as `kit launch` does; one
that cannot be read here is a `launch.path` finding.
This machine's GPUs, driver, torch and NCCL are probed only with `--probe-env` (the launch will
run here; a few seconds, imports torch); without it, the launch command's own variables and flags
are still judged. Info findings are folded under a count unless `--verbose`; every fix is written
with the paths given here, ready to paste. The checks are gathered by `kit.preflight`
(each stage's `doctor_checks(ctx)`, listed in its `PROVIDERS`), the same gathering `kit launch`
runs before it starts a server.

Exit status: 0 no error findings, 1 at least one, 2 the kit could not run.
"""

from __future__ import annotations

import argparse

from kit import config as kconfig
from kit.findings import emit
from kit.preflight import PROVIDERS, Deployment, DoctorConfig, diagnose, diagnose_each

__all__ = ["PROVIDERS", "Deployment", "DoctorConfig", "diagnose", "diagnose_each", "add_arguments", "run"]

HELP = "run every static check (environment, checkpoint, wiring, launch command)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, DoctorConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(DoctorConfig, args)
    return emit(diagnose(cfg), cfg.json, verbose=cfg.verbose)
