"""`python -m kit launch`: build a launch spec, lint it, then start and watch the server.

    python -m kit launch --from "python -m sglang.launch_server --model-path T ..." --dry-run
    python -m kit launch --engine reference --speculative-algorithm EAGLE3 --speculative-draft-model-path D
    python -m kit launch --speculative-draft-model-path D ... --capture-hidden runs/cap --dry-run  # kit.measure.capture

The spec is `kit.serving.launch.LaunchSpec` (`embedded` and the `demo` draft resolved as the notebooks resolve
them); the findings are `kit doctor`'s for that launch (`kit.preflight.launch_report`). An error finding stops the
start (exit 1) unless `--force`. The process is `kit.serving.process.ServerProcess` (its own group, no orphans).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass

from kit import config as kconfig
from kit.config import opt
from kit.findings import EXIT_CANNOT_RUN, KitInputError
from kit.preflight import judged_line, launch_report
from kit.serving.engines import ENGINES, get_engine
from kit.serving.launch import FIELDS, LaunchSpec, resolve_local, spec_from_command
from kit.sglang.bundle_site import BUNDLE_FLAG_HELP

HELP = "build, lint (SGLang's own parser), start and watch an SGLang or reference-server launch"


@dataclass
class LaunchConfig:
    engine: str = opt("sglang, or the kit's CPU reference server", "sglang", choices=list(ENGINES))
    dry_run: bool = opt("lint and print argv/env; start nothing", False)
    force: bool = opt("start even when the checks find errors (still printed)", False)
    probe_env: bool = opt(
        "also check this machine's GPUs, driver, torch, NCCL, as `kit doctor --probe-env` does", False
    )
    json: bool = opt("last line: one JSON document", False)
    sglang_python: str | None = opt(
        "interpreter with sglang for the flag lint (default: in-process, $KIT_SGLANG_PYTHON, or the kit's side venv)"
    )
    ready_timeout: float = opt("seconds to wait for /health", 900.0)
    gpu_memory_gib: float | None = opt("memory per GPU for launch.mem (default: detected)")
    sglang_version: str | None = opt(
        "SGLang release whose parser and flag table judge the flags (default: installed, else newest known)"
    )
    capture_hidden: str | None = opt(
        "instead of serving: run the launch once with the kit's recorder, send the prompts one at a "
        "time (greedy, speculation off) and write the target's hidden states at the draft's capture points to "
        "this folder (kit.measure.capture; read by `kit oracle --hidden-states`)"
    )
    prompts: str | None = opt(
        '--capture-hidden: JSONL prompt file, rows {"text": ...} (chat-templated) or {"input_ids": '
        "[...]} (sent as they are) (default: the oracle's eval prompts)"
    )
    num_prompts: int = opt("--capture-hidden: prompts sent (first N)", 8)
    max_new_tokens: int = opt("--capture-hidden: greedy tokens per prompt", 64)
    bundle: bool = opt(BUNDLE_FLAG_HELP, False)


def add_arguments(p: argparse.ArgumentParser) -> None:
    dropped_by = {n: [e.name for e in ENGINES.values() if e.flag(n) is None] for n in FIELDS}
    sglang_only = {n: f"SGLang only: dropped with --engine {'/'.join(es)}" for n, es in dropped_by.items() if es}
    kconfig.add_arguments(p, LaunchSpec, notes=sglang_only)
    # spec flags override `--from`: only the ones given on the command line may appear
    for a in p._actions:
        if a.dest in FIELDS or a.dest in ("python", "log_file"):
            a.default = argparse.SUPPRESS
    p.add_argument("--from", dest="from_command", default=None, help="an existing launch command to start from")
    p.add_argument(
        "--env",
        dest="env_assign",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the server (repeatable)",
    )
    p.add_argument("--extra-args", dest="extra_args_str", default=None, help="further SGLang flags, one shell string")
    kconfig.add_arguments(p, LaunchConfig)


def spec_from_namespace(ns: argparse.Namespace) -> LaunchSpec:
    spec = spec_from_command(ns.from_command, getattr(ns, "sglang_version", None)) if ns.from_command else LaunchSpec()
    given = {k: v for k, v in vars(ns).items() if k in FIELDS or k in ("python", "log_file")}
    env = dict(spec.env)
    for kv in ns.env_assign:
        if "=" not in kv:
            raise KitInputError(f"--env {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        env[k] = v
    extra = spec.extra_args + (shlex.split(ns.extra_args_str) if ns.extra_args_str else [])
    return spec.replace(env=env, extra_args=extra, **given)


def _note(*parts) -> None:
    print("kit launch:", *parts, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(LaunchConfig, args)
    from kit.sglang.versions import default_release

    bundle = (cfg.sglang_version or default_release()) if cfg.bundle else None
    spec = resolve_local(spec_from_namespace(args), cfg.engine, log=_note, bundle=bundle)
    if cfg.capture_hidden is not None:
        if not get_engine(cfg.engine).captures:
            raise KitInputError(
                f"--capture-hidden: --engine {cfg.engine} does not run the kit's recorder (SGLang does)"
            )
        from kit.measure.capture import main_capture

        return main_capture(spec, cfg, cfg.engine)
    if get_engine(cfg.engine).runs_here and not cfg.dry_run:
        from kit.refserver.server import check_paths

        check_paths(spec)  # the engine runs here: its paths must exist before it starts
    report = launch_report(
        spec, cfg.engine, cfg.sglang_version, cfg.sglang_python, cfg.gpu_memory_gib, args.from_command, cfg.probe_env
    )
    if judged_line(spec, cfg.engine, cfg.sglang_version) != spec.command("sglang"):
        from kit.serving.checks import engine_findings  # the engine's own line holds none of the flags it drops

        report.extend(engine_findings(spec, cfg.engine))
    argv = spec.argv(cfg.engine)
    if cfg.dry_run:
        if cfg.json:
            doc = {"argv": argv, "env": spec.env, "findings": report.to_dict()["findings"], "summary": report.summary()}
            print(json.dumps(doc, default=str, separators=(",", ":")))
        else:
            print(report.render_text())
            print("\n" + spec.command(cfg.engine))
        return report.exit_code()
    print(report.render_text(), file=sys.stderr)
    if report.errors and not (cfg.force or get_engine(cfg.engine).start_despite_errors):
        print(
            "kit launch: not starting: fix the errors above (--force starts anyway; --dry-run shows the command)",
            file=sys.stderr,
        )
        return report.exit_code()
    from kit.serving.process import ServerProcess

    server = ServerProcess.from_spec(spec, engine=cfg.engine, on_line=lambda line: print(line, flush=True))
    try:
        with server:
            info = server.wait_ready(cfg.ready_timeout)
            print(f"kit launch: ready at {server.base_url} ({info.get('model', '')}); Ctrl-C stops it", file=sys.stderr)
            server.wait()
    except KeyboardInterrupt:
        return 0
    return 0 if server.returncode in (0, None) else EXIT_CANNOT_RUN
