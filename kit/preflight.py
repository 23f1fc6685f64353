"""The one gathering of the static checks: what `kit doctor` reports and what `kit launch` checks before it starts.

    from kit.preflight import DoctorConfig, diagnose, launch_report
    diagnose(DoctorConfig(target=T, draft=D, launch=CMD))          # kit doctor
    launch_report(spec, engine="sglang")                            # kit launch (and --dry-run)

Each stage's check module exposes `doctor_checks(ctx: DoctorContext) -> list[Finding]` and is listed in
`PROVIDERS`; a provider looks at what the context holds and returns nothing when its inputs are absent.
The target and the draft are `--target`/`--draft` when given, else the launch's own `--model-path` and
`--speculative-draft-model-path` (`launch_model`: `embedded` resolved as the notebooks resolve it); a path or a
Hugging Face id is read through `kit.checkpoint.hub.resolve` (the local cache first, else config.json and the
safetensors headers over the network), `ckpt.source` saying where the files came from and `launch.path` naming a
launch's model that cannot be read here. `launch_report` judges a `LaunchSpec` through the same gathering. The module
sits in the serving layer, the lowest one that sees every provider, so the `kit doctor` and `kit launch`
verbs both call it and neither holds a copy of the checks.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.checkpoint.hub import resolve
from kit.findings import Code, KitInputError, Report, fill_placeholders
from kit.hf import HFConfig

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "launch/process/logs: notebook 04"
LAUNCH_PATH = Code(
    "launch.path",
    SECTION,
    "error / warning",
    (
        "a model the launch names (`--model-path`, `--speculative-draft-model-path`; `kit launch`, and `kit "
        "doctor` when `--target`/`--draft` are not given) cannot be read here: a local path that does not "
        "exist (error), or a hub id that is not in the Hugging Face cache while offline, gated, unknown, or "
        "at a revision that does not exist (error for the draft, which every EAGLE-3 check needs; warning for"
        " the target); the checks that need its files did not run"
    ),
    "a path that exists here; `hf download ID [--revision R]` into the cache, or log in for a gated repository",
)

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
        metadata={
            "help": "target model: a local dir, its config.json, or a Hugging Face id (the cache first, else "
            "config.json and safetensors headers over the network); default: the launch's --model-path"
        },
    )
    draft: str | None = field(
        default=None,
        metadata={
            "help": "draft: a local dir (headers only, no weights loaded), its config.json, or a Hugging Face id; "
            "default: the launch's --speculative-draft-model-path"
        },
    )
    revision: str | None = field(
        default=None, metadata={"help": "the target's hub revision (branch, tag, commit); default: the launch's"}
    )
    draft_revision: str | None = field(
        default=None,
        metadata={"help": "the draft's hub revision; default: the launch's --speculative-draft-model-revision"},
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
    def models(self) -> dict[str, Any]:
        """{"target": ModelFiles | None, "draft": ModelFiles | None, "findings": [...]}: each model from its flag,
        else from the launch (`kit.checkpoint.hub.resolve`: a local path, the Hugging Face cache, or headers over
        the network). A model named on the command line that cannot be read is an error (KitInputError); one
        named by the launch is a `launch.path` finding; `ckpt.source` says where a hub id's files came from."""
        spec = self.launch_spec[0] if self.launch_command is not None else None
        out: dict[str, Any] = {"target": None, "draft": None, "findings": []}
        for role, given, revision, flag, what in (
            ("target", self.cfg.target, self.cfg.revision, "--target", "a model directory or a config.json"),
            ("draft", self.cfg.draft, self.cfg.draft_revision, "--draft", "a draft directory or its config.json"),
        ):
            if given:
                m = resolve(given, revision, flag, what)
                out[role] = m
                out["findings"] += [m.finding(flag)] if m.repo_id else []
            elif spec is not None:
                out[role], found = launch_model(spec, role, self.lint_options.get("engine", "sglang"), revision)
                out["findings"] += found
        return out

    @property
    def target_path(self) -> str | None:
        """The target as the checks read it: a local folder or config.json (a hub id resolved), or None."""
        m = self.models["target"]
        return str(m.path) if m is not None else None

    @property
    def draft_path(self) -> str | None:
        m = self.models["draft"]
        return str(m.path) if m is not None else None

    @cached_property
    def target_config(self) -> HFConfig | None:
        from kit.checkpoint.hf_config import read_config

        return read_config(self.target_path)[0] if self.target_path else None

    @cached_property
    def draft_config(self) -> HFConfig | None:
        from kit.checkpoint.hf_config import read_config

        return read_config(self.draft_path)[0] if self.draft_path else None

    @property
    def draft_dir(self) -> Path | None:
        p = Path(self.draft_path) if self.draft_path else None
        return p if p is not None and p.is_dir() else None

    @property
    def target_dir(self) -> Path | None:
        """The target's folder (around a lone config.json), None without a target."""
        p = Path(self.target_path) if self.target_path else None
        return None if p is None else p if p.is_dir() else p.parent


def validate(cfg: DoctorConfig) -> None:
    """One-line errors before any check runs: something to check, and the launch file exists (the models are
    resolved, or refused in one line, by `DoctorContext.models`)."""
    if not (cfg.target or cfg.draft or cfg.launch or cfg.launch_file or cfg.probe_env):
        raise KitInputError(
            "nothing to check: give --target, --draft, --launch or --launch-file (and --probe-env for this machine)"
        )
    if cfg.launch_file:  # --target/--draft may be hub ids: resolved (or refused) by DoctorContext.models
        kconfig.local_path(cfg.launch_file, "--launch-file", "a file holding the launch command")


def fix_values(ctx: DoctorContext) -> dict[str, str | None]:
    """The user's names for the placeholders in fixes (SRC, DST, DRAFT_DIR, TARGET_DIR, PATH): paths as given,
    hub ids as given (the kit's verbs take them too)."""
    t, dm = ctx.models["target"], ctx.models["draft"]
    target = t.name if t is not None else None
    d = None
    if dm is not None:
        draft = Path(dm.name)
        if dm.repo_id is None and draft.is_file():
            draft = draft.parent  # a lone config.json: the draft is the directory around it
        d = str(draft).rstrip("/")
    dst = f"{d.rsplit('/', 1)[-1] if dm is not None and dm.repo_id else d}-sglang" if d else None
    return {"SRC": d, "DRAFT_DIR": d, "DST": dst, "TARGET_DIR": target, "PATH": target}


def diagnose(cfg: DoctorConfig, lint_options: dict[str, Any] | None = None) -> Report:
    """Every provider's findings for what `cfg` names."""
    validate(cfg)
    ctx = DoctorContext(cfg, dict(lint_options or {}))
    # touch the inputs first so an unreadable file fails before any check runs
    _ = ctx.launch_env_argv, ctx.target_config, ctx.draft_config
    report = Report(list(ctx.models["findings"]))
    for name in PROVIDERS:  # each fact has one owning provider (kit.serving.checks.shared_with_doctor)
        report.extend(importlib.import_module(name).doctor_checks(ctx))
    report.findings = fill_placeholders(report.findings, fix_values(ctx))
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


# -- the models a launch names ------------------------------------------------------------------
# the launch's flag for each model, and for its revision (SGLang's names)
LAUNCH_MODELS = {
    "target": ("--model-path", "model_path", "revision", "a model directory or 'embedded'"),
    "draft": (
        "--speculative-draft-model-path",
        "speculative_draft_model_path",
        "speculative_draft_model_revision",
        "a draft directory",
    ),
}


def launch_model(spec, role: str, engine: str = "sglang", revision: str | None = None):
    """(ModelFiles | None, findings) of the model the launch `spec` names for `role` ("target" or "draft"), as
    this machine reads it: `embedded` resolved as the notebooks resolve it; a hub id (at `revision`, else the
    launch's own revision flag) resolved as SGLang resolves it, for an engine that takes hub ids. A model that
    cannot be read is a `launch.path` finding naming it (the draft's an error: every EAGLE-3 check needs it;
    a hub target's a warning); `ckpt.source` says where a hub id's files came from."""
    from kit.models import DEFAULT_TARGET, resolve_target
    from kit.serving.engines import get_engine

    flag, field_name, rev_field, what = LAUNCH_MODELS[role]
    value = getattr(spec, field_name)
    revision = revision or getattr(spec, rev_field)
    if not value or "$" in value:  # a shell expansion: launch.unparsed names it, there is no path to read
        return None, []
    if role == "target" and value == DEFAULT_TARGET:
        return resolve(str(resolve_target(value)), None, flag, what), []
    hub = kconfig.is_hub_id(value) and not Path(value).expanduser().exists()
    if hub and not get_engine(engine).accepts_hub_ids:
        hub = False  # this engine reads local paths only
    elif hub:
        try:
            m = resolve(value, revision, flag, what)
        except KitInputError as e:
            return None, [
                LAUNCH_PATH(
                    f"{e} — the checks that need this model's files did not run",
                    evidence={"flag": flag, "path": value, "revision": revision, "engine": engine},
                    severity="error" if role == "draft" else "warning",
                    fix=f"hf download {value}{' --revision ' + revision if revision else ''} (into the Hugging Face "
                    f"cache, where the kit and SGLang look first), or {flag} DIR with a local copy",
                )
            ]
        return m, [m.finding(flag)]
    if Path(value).expanduser().exists():
        return resolve(value, None, flag, what), []
    return None, [
        LAUNCH_PATH(
            kconfig.missing_path(value, flag, what),
            evidence={"flag": flag, "path": value, "engine": engine},
            fix=f"{flag} with a path that exists on this machine",
        )
    ]


# -- kit launch ---------------------------------------------------------------------------------
def launch_report(
    spec,
    engine: str = "sglang",
    sglang_version: str | None = None,
    sglang_python: str | None = None,
    gpu_memory_gib: float | None = None,
    from_command: str | None = None,
    probe_env: bool = False,
) -> Report:
    """`kit doctor --launch COMMAND [--probe-env]` for the launch `spec` describes: its target and draft are the
    launch's own (`launch_model`: `launch.path` when one cannot be read here) and, with `from_command`, what the
    `--from` text holds besides the launch."""
    from kit.serving.launch import launch_from_text

    cfg = DoctorConfig(launch=spec.command("sglang"), sglang_version=sglang_version, probe_env=probe_env)
    report = diagnose(cfg, dict(engine=engine, sglang_python=sglang_python, gpu_memory_gib=gpu_memory_gib))
    if from_command:  # what the shell text holds besides the launch (launch.unparsed, launch.env_scope)
        report.extend(launch_from_text(from_command, sglang_version, source="--from")[1])
    return report
