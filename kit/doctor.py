"""`python -m kit doctor`: every static check its inputs allow, in one report.

    python -m kit doctor [--target PATH] [--draft PATH] [--launch "COMMAND" | --launch-file FILE]
                         [--sglang-version X] [--trained-with STACK] [--json]

`--target`/`--draft` take a model directory or a lone config.json: no weights are needed,
so a Kimi-K2.5-sized target is checked on a laptop. Each check module exposes
`doctor_checks(ctx: DoctorContext) -> list[Finding]` and is listed in `PROVIDERS`; a provider
looks at what the context holds and returns nothing when its inputs are absent.

Exit status: 0 no error findings, 1 at least one, 2 the kit could not run.
"""

from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.findings import KitInputError, Report, emit

HELP = "run every static check (environment, checkpoint, wiring, launch command)"

# check modules, in report order; each exposes doctor_checks(ctx)
PROVIDERS: list[str] = [
    "kit.env.check",
    "kit.checkpoint.inspect",
    "kit.serving.checks",
    "kit.wiring.checks",
]


@dataclass
class DoctorConfig:
    target: str | None = field(default=None, metadata={"help": "target model dir or config.json"})
    draft: str | None = field(default=None, metadata={"help": "draft model dir or config.json"})
    launch: str | None = field(
        default=None, metadata={"help": "an SGLang launch command line (env assignments allowed)"}
    )
    launch_file: str | None = field(default=None, metadata={"help": "file holding the launch command"})
    sglang_version: str | None = field(
        default=None, metadata={"help": "SGLang version to judge against (default: installed, else newest known)"}
    )
    trained_with: str | None = field(
        default=None, metadata={"help": "training stack of the draft: speculators, specforge, eagle, sglang"}
    )
    probe_env: bool = field(
        default=True,
        metadata={"help": "probe this machine's GPUs/packages (--no-probe-env to judge only the given files)"},
    )
    json: bool = field(default=False, metadata={"help": "print one JSON document as the last line"})


@dataclass
class DoctorContext:
    """What a check may look at; parsed lazily and cached so each file is read once."""

    cfg: DoctorConfig

    @cached_property
    def launch_command(self) -> str | None:
        if self.cfg.launch and self.cfg.launch_file:
            raise KitInputError("give --launch or --launch-file, not both")
        if self.cfg.launch_file:
            p = Path(self.cfg.launch_file)
            try:
                return p.read_text()
            except OSError as e:
                raise KitInputError(f"{p}: cannot read launch file ({e.strerror})")
        return self.cfg.launch

    @cached_property
    def launch_env_argv(self) -> tuple[dict[str, str], list[str]] | None:
        from kit.sglang.cmdline import split_command

        cmd = self.launch_command
        if cmd is None:
            return None
        return split_command(cmd, source=self.cfg.launch_file or "--launch")

    @cached_property
    def target_config(self) -> dict[str, Any] | None:
        from kit.checkpoint.hf_config import read_config

        return read_config(self.cfg.target)[0] if self.cfg.target else None

    @cached_property
    def draft_config(self) -> dict[str, Any] | None:
        from kit.checkpoint.hf_config import read_config

        return read_config(self.cfg.draft)[0] if self.cfg.draft else None

    @property
    def draft_dir(self) -> Path | None:
        p = Path(self.cfg.draft) if self.cfg.draft else None
        return p if p is not None and p.is_dir() else None


def diagnose(cfg: DoctorConfig) -> Report:
    ctx = DoctorContext(cfg)
    # touch the inputs first so an unreadable file fails before any check runs
    _ = ctx.launch_env_argv, ctx.target_config, ctx.draft_config
    report, seen = Report(), set()
    for name in PROVIDERS:
        for f in importlib.import_module(name).doctor_checks(ctx):
            # two providers may judge the same fact (the launch command's NCCL variables are
            # both environment and launch facts): report each identical finding once
            key = json.dumps(f.to_dict(), sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                report.add(f)
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, DoctorConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(DoctorConfig, args)
    return emit(diagnose(cfg), cfg.json)
