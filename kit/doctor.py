"""`python -m kit doctor`: every static check its inputs allow, in one report.

    kit doctor [--target PATH|ID] [--draft PATH|ID] [--launch "COMMAND" | --launch-file FILE]
               [--probe-env] [--sglang-version X] [--verbose] [--json]

`--target`/`--draft` take a model directory, a lone config.json or a Hugging Face id (`--revision`,
`--draft-revision`; resolved as SGLang resolves it, the local cache first, else config.json and safetensors headers
over the network: kit.checkpoint.hub). No weights are needed, so a Kimi-K2.5-sized target is checked on a laptop.
Without them the launch's own `--model-path` and `--speculative-draft-model-path` are checked, as `kit launch`
does. `--probe-env` also probes this machine's GPUs, driver, torch and NCCL. Info findings are folded under a count
unless `--verbose`; every fix is written with the paths given here. The checks are gathered by `kit.preflight`,
the same gathering `kit launch` runs before it starts a server.

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
