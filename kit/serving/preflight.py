"""The one gathering of the static checks: what `kit doctor` reports and what `kit launch` checks before it starts.

    from kit.serving.preflight import DoctorConfig, diagnose, launch_report
    diagnose(DoctorConfig(target=T, draft=D, launch=CMD))          # kit doctor
    launch_report(spec, engine="sglang")                            # kit launch (and --dry-run)

Each stage's check module exposes `doctor_checks(ctx: DoctorContext) -> list[Finding]` and is listed in
`PROVIDERS`; a provider looks at what the context holds and returns nothing when its inputs are absent.
`launch_report` judges a `LaunchSpec` through the same providers: the target is the spec's model path
(`embedded` resolved as the notebooks resolve it), the draft its draft path, the launch its own command;
it adds only what a launch on this machine needs besides (`launch.path`: the paths exist here). The module
sits in the serving layer, the lowest one that sees every provider, so the `kit doctor` and `kit launch`
verbs both call it and neither holds a copy of the checks.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.findings import Finding, KitInputError, Report, fill_placeholders
from kit.hf import HFConfig

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
    """What a check may look at; parsed lazily and cached so each file is read once.

    `lint_options`: what `kit launch` adds to the launch lint (engine, sglang_python, gpu_memory_gib)."""

    cfg: DoctorConfig
    lint_options: dict[str, Any] = field(default_factory=dict)

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
    def launch_spec(self):
        """(LaunchSpec, the findings on the shell text around it) of the launch command; None without one."""
        from kit.serving.launch import launch_from_text

        if self.launch_command is None:
            return None
        return launch_from_text(self.launch_command, self.cfg.sglang_version, source=self.cfg.launch_file or "--launch")

    @cached_property
    def target_config(self) -> HFConfig | None:
        from kit.checkpoint.hf_config import read_config

        return read_config(self.cfg.target)[0] if self.cfg.target else None

    @cached_property
    def draft_config(self) -> HFConfig | None:
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


def diagnose(cfg: DoctorConfig, lint_options: dict[str, Any] | None = None) -> Report:
    """Every provider's findings for what `cfg` names, each identical finding once."""
    validate(cfg)
    ctx = DoctorContext(cfg, dict(lint_options or {}))
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


def diagnose_each(cfgs: list[DoctorConfig], lint_options: dict[str, Any] | None = None) -> list[Report]:
    """`diagnose` of each config, SGLang's parser started once for all of their launches: importing SGLang
    is most of a launch lint's time, so the launches' flags are parsed together first (`parse_argvs` keeps
    each result) and every lint then reads its own. A parser that cannot run is left for each lint to report."""
    from kit.sglang.parser import parse_argvs
    from kit.sglang.versions import default_release

    opts = dict(lint_options or {})
    by_version: dict[str, list[list[str]]] = {}
    for cfg in cfgs:
        ctx = DoctorContext(cfg, opts)
        if ctx.launch_env_argv is not None:
            by_version.setdefault(cfg.sglang_version or default_release(), []).append(ctx.launch_spec[0].flags())
    for version, flags in by_version.items():
        try:
            parse_argvs(flags, python=opts.get("sglang_python"), build=opts.get("build_venv"), version=version)
        except KitInputError:
            pass
    return [diagnose(cfg, opts) for cfg in cfgs]


# -- kit launch ---------------------------------------------------------------------------------
def _path_finding(flag: str, value: str, engine: str, what: str) -> Finding | None:
    """`launch.path`: the path a launch names, as this machine sees it (None: it exists)."""
    if Path(value).expanduser().exists():
        return None
    from kit.serving.engines import get_engine

    if kconfig.is_hub_id(value) and get_engine(engine).accepts_hub_ids:
        return Finding(
            code="launch.path",
            severity="info",
            title=f"{flag} {value}: a hub id, passed to SGLang as given (it downloads it); the kit checks "
            "only local files, so what needs that model's files was not checked",
            evidence={"flag": flag, "path": value},
            fix=f"download it and pass {flag} DIR to have it checked",
        )
    return Finding(
        code="launch.path",
        severity="error",
        title=kconfig.missing_path(value, flag, what),
        evidence={"flag": flag, "path": value, "engine": engine},
        fix=f"{flag} with a path that exists on this machine",
    )


def launch_report(
    spec,
    engine: str = "sglang",
    sglang_version: str | None = None,
    sglang_python: str | None = None,
    gpu_memory_gib: float | None = None,
    from_command: str | None = None,
    probe_env: bool = False,
) -> Report:
    """`kit doctor --target MODEL --draft DRAFT --launch COMMAND [--probe-env]` for the launch `spec` describes,
    plus its paths (`launch.path`) and, with `from_command`, what the `--from` text holds besides the launch."""
    from kit.models import DEFAULT_TARGET, resolve_target
    from kit.serving.launch import launch_from_text

    paths = [
        f
        for flag, value, what in (
            ("--model-path", spec.model_path, "a model directory or 'embedded'"),
            ("--speculative-draft-model-path", spec.speculative_draft_model_path, "a draft directory"),
        )
        if value and value != DEFAULT_TARGET
        for f in [_path_finding(flag, value, engine, what)]
        if f is not None
    ]
    unread = {f.evidence["path"] for f in paths}
    target = spec.model_path if spec.model_path not in unread else None
    target = str(resolve_target(target)) if target == DEFAULT_TARGET else target
    draft = spec.speculative_draft_model_path if spec.speculative_draft_model_path not in unread else None
    cfg = DoctorConfig(
        target=target, draft=draft, launch=spec.command("sglang"), sglang_version=sglang_version, probe_env=probe_env
    )
    report = diagnose(cfg, dict(engine=engine, sglang_python=sglang_python, gpu_memory_gib=gpu_memory_gib))
    report.findings = paths + report.findings
    if from_command:  # what the shell text holds besides the launch (launch.unparsed, launch.env_scope)
        report.extend(launch_from_text(from_command, sglang_version, source="--from")[1])
    return report
