"""`python -m kit rehearse`: the user's deployment in miniature on real SGLang, checked against `kit doctor`.

    kit rehearse --target T --draft D --launch-file launch.sh [--out DIR] [--dry-run] [--sglang-version X]

T and D may be Hugging Face ids (`--revision`, `--draft-revision`), resolved as `kit doctor` resolves them. It
builds a miniature of the target (config.json only, dummy-loaded) and of the draft (the user's tensor names and
dtypes, random values, its config.json with shrunk widths), rewrites the launch (each change with its reason;
kit.rehearsal.runner) and, unless `--dry-run` (the plan only), starts real SGLang on it with the kit's recorder
(kit.rehearsal.hooks), sends a few requests, stops it and checks GPU memory went back. What it saw is mapped to
doctor's codes, each marked confirmed / refuted / new against doctor's verdict on the *original* files. Writes
DIR/plan.json, DIR/record.jsonl and DIR/report.json.

Exit status: 0 it ran as doctor said, 1 a refuted or new error (or a failed rehearsal where doctor saw no fault),
2 the kit could not run.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from kit import config as kconfig
from kit.findings import KitInputError
from kit.rehearsal.runner import (
    RehearsalConfig,
    compare,
    observed_facts,
    observed_findings,
    plan_rehearsal,
    run_rehearsal,
)

END_CHECKS = {
    "gpu": "every GPU's memory back to its starting level",
    "own": "its own server processes gone and holding no GPU memory",
}
HELP = "run the deployment in miniature on real SGLang (one GPU, minutes) and check doctor's verdict by execution"


def rehearse(cfg: RehearsalConfig, on_line=None) -> dict:
    """Plan, (run), compare; the report as a dict (also written to OUT/report.json). Doctor's verdict and the
    rehearsal read the one `kit.preflight.Deployment` (a hub id resolved to the cache, else its headers)."""
    from kit.preflight import Deployment, DoctorConfig, check

    for name in ("target", "draft", "launch_file"):
        if not getattr(cfg, name):
            raise KitInputError(f"--{name.replace('_', '-')} is required")
    kconfig.local_path(cfg.launch_file, "--launch-file")
    if not cfg.sglang_version:  # doctor judges by the release the rehearsal runs
        from kit.sglang.versions import importable_version

        cfg = replace(cfg, sglang_version=importable_version())
    given = ("target", "draft", "revision", "draft_revision", "launch_file", "sglang_version")
    dep = Deployment.build(DoctorConfig(**{k: getattr(cfg, k) for k in given}))
    models = (("target", dep.target.files), ("draft", dep.draft.files))
    sources = {role: m.source for role, m in models if m.repo_id}
    cfg = replace(cfg, target=str(dep.target.path), draft=str(dep.draft.path), revision=None, draft_revision=None)
    plan = plan_rehearsal(cfg)
    report: dict = {"sources": sources, "plan": plan.to_dict(), "rendered_plan": plan.render()}
    static = check(dep).findings
    report["doctor"] = [
        {"code": f.code, "severity": f.severity, "title": f.title} for f in static if f.severity != "info"
    ]
    if not cfg.dry_run:
        result = run_rehearsal(plan, on_line=on_line)
        observed = observed_findings(result)
        report.update(
            result={k: v for k, v in result.items() if k != "record"},
            facts=observed_facts(result),
            observed=[{"code": f.code, "severity": f.severity, "title": f.title} for f in observed],
            table=compare(static, observed, started=bool(result.get("started"))),
        )
    Path(cfg.out, "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


_rehearse = rehearse  # rehearse_launch's parameter `rehearse` (the notebook's name) shadows the function there


def rehearse_launch(target: str, draft: str, launch: str, out_dir: str, rehearse: str = "auto") -> dict | None:
    """Notebook 04's dress rehearsal of `launch` (shell text) over target and draft; the report, None when off.
    rehearse: "auto" runs real SGLang where this machine serves with it, else shows the dry-run plan; "run",
    "dry-run" or "off" force one."""
    from kit.models import resolve_target
    from kit.serving.engines import get_engine, resolve_engine

    if rehearse not in ("auto", "run", "dry-run", "off"):
        raise KitInputError(f"rehearse={rehearse!r}: one of auto, run, dry-run, off")
    if rehearse == "off":
        return None
    run = rehearse == "run" or (rehearse == "auto" and get_engine(resolve_engine("auto")).rehearses)
    out = Path(out_dir) / "rehearsal"
    out.mkdir(parents=True, exist_ok=True)
    launch_file = Path(out_dir) / "rehearsal_launch.sh"
    launch_file.write_text(launch)
    cfg = RehearsalConfig(
        target=str(resolve_target(target)),
        draft=str(draft),
        launch_file=str(launch_file),
        out=str(out),
        dry_run=not run,
    )
    return _rehearse(cfg)


def render(report: dict) -> str:
    lines = [f"{role}: {src}" for role, src in report.get("sources", {}).items()]
    lines += [report["rendered_plan"], "", "doctor (static):"]
    lines += [f"  {d['severity']:<7} {d['code']}: {d['title'][:140]}" for d in report["doctor"]] or ["  no fault"]
    if "table" in report:
        f = report["facts"]
        lines += [
            "",
            f"rehearsal: started={f['started']} in {f['startup_s']} s; captured {f['captured']} "
            f"(marked {f['marked']}); draft input width {f['draft_input_width']}; "
            f"spec_verify_ct {f['spec_verify_ct']}",
            f"  after the stop ({END_CHECKS[f['end_check'] or 'gpu']}): processes left {f['own_processes_left']}, "
            f"memory returned {f['gpu_memory_returned']}",
            f"  speculative {f['speculative']}; dtypes {f['dtypes']}; quantization {f['quantization']}",
            "  (random weights: acceptance is not measured)",
            "doctor vs rehearsal:",
        ]
        lines += [
            f"  {r['verdict']:<13} {r['code']:<22} doctor={r['doctor']}  saw={r['rehearsal']}" for r in report["table"]
        ]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, RehearsalConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(RehearsalConfig, args)
    report = rehearse(cfg)
    print(render(report))
    if cfg.json:
        print(json.dumps(report, default=str))
    bad = [r for r in report.get("table", []) if r["verdict"] in ("refuted", "new")]
    failed = (
        "facts" in report
        and not report["facts"]["started"]
        and not any(r["verdict"] == "confirmed" for r in report["table"])
    )
    return 1 if bad or failed else 0
