"""`python -m kit doctor`: every static check its inputs allow, in one report.

    kit doctor [--target PATH] [--draft PATH] [--launch "COMMAND" | --launch-file FILE]
               [--probe-env] [--sglang-version X] [--verbose] [--json]

`--target`/`--draft` take a model directory or a lone config.json: no weights are needed,
so a Kimi-K2.5-sized target is checked on a laptop (a hub id is refused: the kit is offline).
This machine's GPUs, driver, torch and NCCL are probed only with `--probe-env` (the launch will
run here; a few seconds, imports torch); without it, the launch command's own variables and flags
are still judged. Info findings are folded under a count unless `--verbose`; every fix is written
with the paths given here, ready to paste. Each check module exposes
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
from kit.findings import KitInputError, Report, emit, fill_placeholders

HELP = "run every static check (environment, checkpoint, wiring, launch command)"

# check modules, in report order; each exposes doctor_checks(ctx)
PROVIDERS: list[str] = [
    "kit.env.checks",
    "kit.checkpoint.inspect",
    "kit.serving.checks",
    "kit.wiring.checks",
]


@dataclass
class DoctorConfig:
    target: str | None = field(
        default=None,
        metadata={"help": "target model: a local dir or its config.json (hub ids cannot be resolved offline)"},
    )
    draft: str | None = field(
        default=None, metadata={"help": "draft: a local dir (headers only, no weights loaded) or its config.json"}
    )
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
        default=False,
        metadata={
            "help": "also probe this machine's GPUs, driver, torch, NCCL (the launch will run here; imports torch)"
        },
    )
    verbose: bool = field(default=False, metadata={"help": "show info findings too (folded under a count otherwise)"})
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
        return split_command(cmd, source=self.cfg.launch_file or "--launch", version=self.cfg.sglang_version)

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


def validate(cfg: DoctorConfig) -> None:
    """One-line errors before any check runs: something to check, and every named path exists."""
    if not (cfg.target or cfg.draft or cfg.launch or cfg.launch_file or cfg.probe_env):
        raise KitInputError(
            "nothing to check: give --target, --draft, --launch or --launch-file (and --probe-env for this machine)"
        )
    for flag, value, what in (
        ("--target", cfg.target, "a model directory or a config.json"),
        ("--draft", cfg.draft, "a draft directory or its config.json"),
        ("--launch-file", cfg.launch_file, "a file holding the launch command"),
    ):
        if value:
            kconfig.local_path(value, flag, what)


def fix_values(cfg: DoctorConfig) -> dict[str, str | None]:
    """The user's paths for the placeholders in fixes (SRC, DST, DRAFT_DIR, TARGET_DIR, PATH)."""
    draft = Path(cfg.draft) if cfg.draft else None
    if draft is not None and draft.is_file():
        draft = draft.parent  # a lone config.json: the draft is the directory around it
    d = str(draft).rstrip("/") if draft is not None else None
    return {"SRC": d, "DRAFT_DIR": d, "DST": f"{d}-sglang" if d else None, "TARGET_DIR": cfg.target, "PATH": cfg.target}


def diagnose(cfg: DoctorConfig) -> Report:
    validate(cfg)
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
    report.findings = fill_placeholders(report.findings, fix_values(cfg))
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, DoctorConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(DoctorConfig, args)
    return emit(diagnose(cfg), cfg.json, verbose=cfg.verbose)
