"""The one gathering of the static checks: what `kit doctor` reports and what `kit launch` checks before it starts.

    diagnose(DoctorConfig(target=T, draft=D, launch=CMD))          # kit doctor
    launch_report(spec, engine="sglang")                            # kit launch (and --dry-run)

The deployment is built once (`Deployment.build`: target, draft, launch, release, where each came from); each
check module in `PROVIDERS` exposes `doctor_checks(dep) -> list[Finding]` and returns nothing when its inputs are
absent. The target and draft are `--target`/`--draft`, else the launch's own `--model-path` and
`--speculative-draft-model-path` (`launch_model`); a path or a hub id is read through `kit.checkpoint.hub.resolve`,
`ckpt.source` saying where the files came from and `launch.path` naming a launch's model that cannot be read here.
It sits in the lowest layer that sees every provider, so neither verb holds a copy of the checks.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.checkpoint import hf_config
from kit.checkpoint.hub import ModelFiles, resolve
from kit.config import opt
from kit.findings import Code, Finding, KitInputError, Report, fill_placeholders
from kit.hf import HFConfig
from kit.serving.launch import LaunchSpec, launch_from_text, parse_launch
from kit.sglang.cmdline import sglang_launch_test

SECTION = "launch/process/logs: notebook 04"
LAUNCH_PATH = Code(
    "launch.path",
    SECTION,
    "error / warning",
    "a model the launch names (`--model-path`, `--speculative-draft-model-path`; `kit launch`, and `kit doctor` when "
    "`--target`/`--draft` are not given) cannot be read here: a local path that does not exist (error), or a hub id "
    "that is not in the Hugging Face cache while offline, gated, unknown, or at a revision that does not exist (error "
    "for the draft, which every EAGLE-3 check needs; warning for the target); the checks that need its files did not "
    "run",
    "a path that exists here; `hf download ID [--revision R]` into the cache, or log in for a gated repository",
)

# check modules, in report order; each exposes doctor_checks(dep: Deployment)
PROVIDERS: list[str] = [
    "kit.env.checks",
    "kit.checkpoint.inspect",
    "kit.serving.checks",
    "kit.wiring.checks",
    "kit.vllm.checks",
]


@dataclass
class DoctorConfig:
    target: str | None = opt(
        "target model: a local dir, its config.json, or a Hugging Face id (the cache first, else "
        "config.json and safetensors headers over the network); default: the launch's --model-path"
    )
    draft: str | None = opt(
        "draft: a local dir (headers only, no weights loaded), its config.json, or a Hugging Face id; "
        "default: the launch's --speculative-draft-model-path"
    )
    revision: str | None = opt("the target's hub revision (branch, tag, commit); default: the launch's")
    draft_revision: str | None = opt("the draft's hub revision; default: --speculative-draft-model-revision")
    launch: str | None = opt("an SGLang or vLLM launch command line (env assignments allowed)")
    launch_file: str | None = opt("file holding the launch command")
    sglang_version: str | None = opt("SGLang version to judge against (default: installed, else newest known)")
    vllm_version: str | None = opt(
        "vLLM version to judge a `vllm serve` launch against (default: installed, else newest known)"
    )
    trained_with: str | None = opt("training stack of the draft: speculators, specforge, eagle, sglang")
    probe_env: bool = opt(
        "also probe this machine's GPUs, driver, torch, NCCL (the launch runs here; imports torch)", False
    )
    verbose: bool = opt("show info findings too (folded under a count otherwise)", False)
    json: bool = opt("print one JSON document as the last line", False)


@dataclass(frozen=True)
class Model:
    """A model the deployment names, read once: where its files came from (`files`) and its config.json."""

    files: ModelFiles
    config: HFConfig

    @property
    def path(self) -> Path:  # what the checks read: a folder, or a lone config.json
        return self.files.path

    @property
    def dir(self) -> Path:  # the model's folder (around a lone config.json)
        return self.path if self.path.is_dir() else self.path.parent

    @property
    def folder(self) -> Path | None:  # None for a lone config.json: no weights to read
        return self.path if self.path.is_dir() else None


@dataclass(frozen=True)
class Launch:
    """The launch command, parsed once: SGLang's arguments (`spec`), the findings on the shell text around them
    (`shell`), every variable the text meant for the server (`env`), the ones it sees (`server_env`), the argv."""

    spec: LaunchSpec
    shell: tuple[Finding, ...]
    env: dict[str, str]
    server_env: dict[str, str]
    argv: list[str]


@dataclass(frozen=True)
class Deployment:
    """One deployment as every check sees it, built once per `kit doctor` / `kit launch` / `kit rehearse` run:
    target, draft, launch, the release to judge against (None = installed, else the newest known), the draft's
    training stack, whether to probe this machine, the findings on where the models came from, and
    `lint_options`: what `kit launch` adds to the launch lint (engine, sglang_python, gpu_memory_gib)."""

    target: Model | None
    draft: Model | None
    launch: Launch | None
    sglang_version: str | None = None
    trained_with: str | None = None
    probe_env: bool = False
    lint_options: dict[str, Any] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    vllm_version: str | None = None  # a vLLM launch's release (kit.vllm.checks)

    @classmethod
    def build(cls, cfg: DoctorConfig, lint_options: dict[str, Any] | None = None) -> Deployment:
        """Read every input `cfg` names, once; an unreadable file fails here, before any check runs."""
        opts = dict(lint_options or {})
        launch = read_launch(cfg)
        if launch is not None and sglang_launch_test(cfg.sglang_version)(launch.argv) is None:
            # another engine's line (vLLM): SGLang's parser judges SGLang's; that engine's rules apply
            opts.setdefault("parse_flags", False)
            opts.setdefault("engine", "vllm")
        found: list[Finding] = []
        models: list[Model | None] = []
        for role, given, revision, flag, what in (
            ("target", cfg.target, cfg.revision, "--target", "a model directory or a config.json"),
            ("draft", cfg.draft, cfg.draft_revision, "--draft", "a draft directory or its config.json"),
        ):
            files = None
            if given:
                files = resolve(given, revision, flag, what)
                found += [files.finding(flag)] if files.repo_id else []
            elif launch is not None:
                files, said = launch_model(launch.spec, role, opts.get("engine", "sglang"), revision)
                found += said
            models.append(Model(files, hf_config.read_config(files.path)[0]) if files is not None else None)
        return cls(
            *models, launch, cfg.sglang_version, cfg.trained_with, cfg.probe_env, opts, tuple(found), cfg.vllm_version
        )

    @property
    def target_config(self) -> HFConfig | None:
        return self.target.config if self.target is not None else None


def read_launch(cfg: DoctorConfig) -> Launch | None:
    """The launch `--launch`/`--launch-file` hold, parsed (None without one); KitInputError when unreadable."""
    if cfg.launch and cfg.launch_file:
        raise KitInputError("give --launch or --launch-file, not both")
    text = cfg.launch
    try:
        text = Path(cfg.launch_file).read_text() if cfg.launch_file else text
    except OSError as e:
        raise KitInputError(f"{Path(cfg.launch_file)}: cannot read launch file ({e.strerror})")
    if text is None:
        return None
    found, spec, shell = parse_launch(text, cfg.sglang_version, cfg.launch_file or "--launch", cfg.vllm_version)
    return Launch(spec, tuple(shell), dict(found.env), found.server_env, list(found.argv))


def validate(cfg: DoctorConfig) -> None:
    """One-line errors before any check runs: something to check, and the launch file exists."""
    if not (cfg.target or cfg.draft or cfg.launch or cfg.launch_file or cfg.probe_env):
        raise KitInputError(
            "nothing to check: give --target, --draft, --launch or --launch-file (and --probe-env for this machine)"
        )
    if cfg.launch_file:  # --target/--draft may be hub ids: resolved (or refused) by Deployment.build
        kconfig.local_path(cfg.launch_file, "--launch-file", "a file holding the launch command")


def fix_values(dep: Deployment) -> dict[str, str | None]:
    """The user's names (paths or hub ids, as given) for the placeholders in fixes: SRC, DST, DRAFT_DIR, TARGET_DIR."""
    target = dep.target.files.name if dep.target is not None else None
    dm = dep.draft.files if dep.draft is not None else None
    d = None
    if dm is not None:
        draft = Path(dm.name)
        # a lone config.json: the draft is the directory around it
        d = str(draft.parent if dm.repo_id is None and draft.is_file() else draft).rstrip("/")
    dst = f"{d.rsplit('/', 1)[-1] if dm is not None and dm.repo_id else d}-sglang" if d else None
    return {"SRC": d, "DRAFT_DIR": d, "DST": dst, "TARGET_DIR": target, "PATH": target}


def diagnose(cfg: DoctorConfig, lint_options: dict[str, Any] | None = None) -> Report:
    """Every provider's findings for what `cfg` names: the deployment built once, each provider run once on it."""
    validate(cfg)
    return check(Deployment.build(cfg, lint_options))


def check(dep: Deployment) -> Report:
    """Every provider's findings for a built deployment, the fixes' placeholders filled with the user's names."""
    report = Report(list(dep.findings))
    providers = [importlib.import_module(name) for name in PROVIDERS]
    # a provider's `not_judged(dep)`: codes whose rule the others apply that do not hold for this deployment's
    # engine (kit.vllm.checks: SGLang's own rules, on a vLLM line), left out of the others' findings
    off = {p: set(getattr(p, "not_judged", lambda dep: ())(dep)) for p in providers}
    for p in providers:  # each fact has one owning provider (kit.serving.checks.shared_with_doctor)
        drop = set().union(*(codes for q, codes in off.items() if q is not p))
        report.extend([f for f in p.doctor_checks(dep) if f.code not in drop])
    report.findings = fill_placeholders(report.findings, fix_values(dep))
    return report


def diagnose_each(cfgs: list[DoctorConfig], lint_options: dict[str, Any] | None = None) -> list[Report]:
    """`diagnose` of each config, SGLang's parser started once for all their launches (importing SGLang is most of a
    lint's time): the flags are parsed together first, each lint then reads its own result (`parse_argvs`)."""
    from kit.sglang.parser import parse_argvs
    from kit.sglang.versions import default_release

    opts = dict(lint_options or {})
    for cfg in cfgs:
        validate(cfg)
    deps = [Deployment.build(cfg, opts) for cfg in cfgs]
    by_version: dict[str, list[list[str]]] = {}
    for dep in deps:
        if dep.launch is not None and dep.lint_options.get("parse_flags", True):
            by_version.setdefault(dep.sglang_version or default_release(), []).append(dep.launch.spec.flags())
    for version, flags in by_version.items():
        with contextlib.suppress(KitInputError):  # each lint reports its own parser failure
            parse_argvs(flags, python=opts.get("sglang_python"), build=opts.get("build_venv"), version=version)
    return [check(dep) for dep in deps]


# the launch's field for each model (its flag: --model-path, ...) and for its revision (SGLang's names)
LAUNCH_MODELS = {
    "target": ("model_path", "revision", "a model directory or 'embedded'"),
    "draft": ("speculative_draft_model_path", "speculative_draft_model_revision", "a draft directory"),
}


def launch_model(spec, role: str, engine: str = "sglang", revision: str | None = None):
    """(ModelFiles | None, findings) of the model the launch `spec` names for `role` ("target" or "draft"):
    `embedded` resolved as the notebooks resolve it; a hub id (at `revision`, else the launch's) as SGLang resolves
    it, for an engine that takes hub ids. One that cannot be read is a `launch.path` finding (the draft's an error,
    a hub target's a warning); `ckpt.source` says where a hub id's files came from."""
    from kit.models import DEFAULT_TARGET, resolve_target
    from kit.serving.engines import get_engine

    field_name, rev_field, what = LAUNCH_MODELS[role]
    flag = get_engine(engine).flag(field_name) or "--" + field_name.replace("_", "-")  # as the engine spells it
    value = getattr(spec, field_name)
    revision = revision or getattr(spec, rev_field)
    if not value or "$" in value:  # a shell expansion: launch.unparsed names it, there is no path to read
        return None, []
    if role == "target" and value == DEFAULT_TARGET:
        return resolve(str(resolve_target(value)), None, flag, what), []
    local = Path(value).expanduser().exists()
    if kconfig.is_hub_id(value) and not local and get_engine(engine).accepts_hub_ids:
        try:
            m = resolve(value, revision, flag, what)
        except KitInputError as e:
            return None, [
                LAUNCH_PATH(
                    f"{e} — the checks that need this model's files did not run",
                    evidence={"flag": flag, "path": value, "revision": revision, "engine": engine},
                    severity="error" if role == "draft" else "warning",
                    fix=f"hf download {value}{' --revision ' + revision if revision else ''} (into the Hugging Face "
                    f"cache, where the kit and the engine look first), or {flag} DIR with a local copy",
                )
            ]
        return m, [m.finding(flag)]
    if local:
        return resolve(value, None, flag, what), []
    return None, [
        LAUNCH_PATH(
            kconfig.missing_path(value, flag, what),
            evidence={"flag": flag, "path": value, "engine": engine},
            fix=f"{flag} with a path that exists on this machine",
        )
    ]


def judged_line(spec, engine: str, sglang_version: str | None = None) -> str:
    """The line `kit launch` has doctor judge: the engine's own where the kit reads that engine's lines into the same
    deployment (`vllm serve ...`: kit.serving.launch.parse_launch), else SGLang's (the reference server's flags are)."""
    with contextlib.suppress(KitInputError):
        own = spec.command(engine)
        if sglang_launch_test(sglang_version)(spec.argv(engine)) is None and parse_launch(own, sglang_version):
            return own
    return spec.command("sglang")


def launch_report(
    spec,
    engine: str = "sglang",
    sglang_version: str | None = None,
    sglang_python: str | None = None,
    gpu_memory_gib: float | None = None,
    from_command: str | None = None,
    probe_env: bool = False,
) -> Report:
    """`kit doctor --launch COMMAND [--probe-env]` for the launch `spec` describes (target and draft the launch's
    own) and, with `from_command`, the findings on what the `--from` text holds besides the launch."""
    cfg = DoctorConfig(
        launch=judged_line(spec, engine, sglang_version), sglang_version=sglang_version, probe_env=probe_env
    )
    report = diagnose(cfg, dict(engine=engine, sglang_python=sglang_python, gpu_memory_gib=gpu_memory_gib))
    if from_command:
        report.extend(launch_from_text(from_command, sglang_version, source="--from")[1])
    return report
