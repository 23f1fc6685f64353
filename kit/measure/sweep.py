"""`python -m kit sweep`: a grid over speculative parameters and concurrency, one results table.

For every (steps, topk, draft tokens) point — plus a no-speculation baseline — the
server is relaunched through a *launcher* (a callable: point -> context manager yielding the
server; `spec_launcher` wraps kit.serving.launch + kit.serving.process for SGLang or the CPU reference
server), then `kit.measure.bench` runs each concurrency against it. A row per (point, concurrency)
is appended to `results.jsonl` as soon as it is measured; rerunning skips measured rows (and
inside a half-measured point, kit.measure.bench skips measured requests). `results.csv` is rewritten
at the end with the speedup against the baseline at the same concurrency.

Points are resolved the way SGLang resolves them (`kit.sglang.params.resolve`): a chain's draft
tokens become steps + 1, and a tree point SGLang would refuse is skipped.

    python -m kit sweep --launch "python -m sglang.launch_server --model-path T \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path D" \\
        --speculative-num-steps 1 3 5 --speculative-eagle-topk 1 4 --speculative-num-draft-tokens 4 8 --concurrency 1 8 --out-dir runs/sweep
    python -m kit sweep --engine reference --launch "python -m kit serve --speculative-draft-model-path D ..."

In a notebook, `panel(launcher, out_dir)` shows an ipywidgets grid picker with a Run button,
live progress and plots redrawn after each point (inert until clicked).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.findings import KitInputError, Report, emit
from kit.measure.bench import BenchConfig, RecordLog, jsonable, resumable, run_bench
from kit.serving.engines import ENGINES
from kit.sglang.params import SpecParams, max_draft_tokens, resolve

HELP = "sweep steps x topk x draft tokens x concurrency, relaunching the server per point"


# a sweep point: the speculative parameters of one launch; None = the baseline (no speculation)
Point = SpecParams | None


def point_label(point: Point) -> str:
    return "baseline" if point is None else point.label()


def point_fields(point: Point) -> dict[str, int]:
    """The point as row columns (0 for the baseline)."""
    return (point or SpecParams(0, 0, 0)).given()


@dataclass
class SweepConfig:
    launch: str | None = field(
        default=None,
        metadata={"help": "launch command of the speculative server (its spec flags are replaced per point)"},
    )
    engine: str = field(
        default="sglang",
        metadata={"help": "sglang, or the kit's CPU reference server", "choices": list(ENGINES)},
    )
    speculative_num_steps: list[int] = field(default_factory=lambda: [1, 3], metadata={"help": "speculative num steps"})
    speculative_eagle_topk: list[int] = field(default_factory=lambda: [1], metadata={"help": "eagle topk"})
    speculative_num_draft_tokens: list[int] = field(
        default_factory=lambda: [0], metadata={"help": "draft tokens (0: as many as the tree has)"}
    )
    concurrency: list[int] = field(default_factory=lambda: [1], metadata={"help": "concurrency levels"})
    baseline: bool = field(default=True, metadata={"help": "also measure a no-speculation launch"})
    api: str = field(default="sglang", metadata={"help": "endpoint for kit.measure.bench"})
    prompts: str = field(default="builtin", metadata={"help": "builtin, builtin:<kind> or a JSONL file"})
    chat_template: str | None = field(
        default=None, metadata={"help": "tokenizer dir (or 'embedded') to render prompts with its chat template"}
    )
    num_prompts: int = field(default=8, metadata={"help": "measured requests per run"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens per request"})
    warmup: int = field(default=1, metadata={"help": "warmup requests per run"})
    repeats: int = field(default=1, metadata={"help": "runs per point (>= 2 for speedup intervals)"})
    ready_timeout: float = field(default=900.0, metadata={"help": "seconds to wait for each launch"})
    out_dir: str = field(default="runs/sweep", metadata={"help": "results.jsonl/.csv, per-point bench dirs, logs"})
    progress: bool = field(default=True, metadata={"help": "progress bars"})
    json: bool = field(default=False, metadata={"help": "print one JSON document as the last line"})


def grid(
    speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens, baseline: bool = True
) -> list[Point]:
    """Points SGLang would run, resolved as SGLang resolves them, de-duplicated, baseline first.

    A draft-token count of 0 means "as many as the tree has" (`max_draft_tokens`)."""
    pts: list[Point] = [None] if baseline else []
    for s in speculative_num_steps:
        for k in speculative_eagle_topk:
            for n in speculative_num_draft_tokens:
                if s < 1 or k < 1:
                    continue
                res = resolve(SpecParams(s, k, n or max_draft_tokens(s, k)))
                if res.params is not None and res.params not in pts:
                    pts.append(res.params)
    return pts


def row_key(row: dict) -> tuple:
    return (
        row["speculative_num_steps"],
        row["speculative_eagle_topk"],
        row["speculative_num_draft_tokens"],
        row["concurrency"],
    )


# ---------------------------------------------------------------------------------------------
# launchers
# ---------------------------------------------------------------------------------------------


@dataclass
class Launched:
    url: str
    log_file: str | None = None


Launcher = Callable[[Point], AbstractContextManager[Any]]


def spec_launcher(base, engine: str = "sglang", log_dir: str | None = None, ready_timeout: float = 900.0) -> Launcher:
    """Launcher from a kit.serving.launch.LaunchSpec: per point, replace the speculative fields (all
    cleared for the baseline), pick a free port, enable /metrics, start through
    kit.serving.process.ServerProcess (no orphans) and wait for readiness."""
    from kit.serving.process import ServerProcess, free_port

    @contextlib.contextmanager
    def launch(point: Point) -> Iterator[Launched]:
        spec_fields = (
            dict(speculative_algorithm=None, speculative_draft_model_path=None, **SpecParams().given())
            if point is None
            else dict(speculative_algorithm=base.speculative_algorithm or "EAGLE3", **point.given())
        )
        log = str(Path(log_dir) / f"{point_label(point)}.log") if log_dir else None
        spec = base.replace(port=free_port(), enable_metrics=True, log_file=log, **spec_fields)
        with ServerProcess.from_spec(spec, engine=engine) as srv:
            srv.wait_ready(ready_timeout)
            yield Launched(srv.base_url, log)

    return launch


def url_of(server: Any) -> tuple[str, str | None]:
    if isinstance(server, str):
        return server, None
    return server.url, getattr(server, "log_file", None)


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


def _row(point: Point, conc: int, res, expected: float | None) -> dict:
    agg = res.summary["labels"].get(point_label(point), {})
    keep = (
        "requests",
        "failed",
        "output_tokens",
        "output_tok_s",
        "req_s",
        "ttft_p50_s",
        "itl_p50_s",
        "itl_p90_s",
        "itl_p99_s",
        "e2e_p50_s",
        "e2e_p90_s",
        "accept_length",
        "accept_length_decode",
        "accept_rate",
        "output_tok_s_runs",
    )
    return {
        **point_fields(point),
        "label": point_label(point),
        "concurrency": conc,
        **{k: agg.get(k) for k in keep},
        "accept_sources": agg.get("accept_sources"),
        "expected_accept_length": expected,
        "findings": [f.code for f in res.report.findings],
    }


def run_sweep(
    cfg: SweepConfig,
    launcher: Launcher,
    expected: Callable[[Point], float] | None = None,
    prompts: list[dict] | None = None,
    on_row: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Measure every not-yet-measured (point, concurrency); returns all rows of results.jsonl.

    `expected(point)` (e.g. the oracle) adds the expected accept length to each row;
    `on_row(done, total, row)` is called after each row (progress bars, widget redraws)."""
    out = Path(cfg.out_dir)
    results = RecordLog(out / "results.jsonl")
    done = {row_key(r) for r in results.read()}
    points = grid(cfg.speculative_num_steps, cfg.speculative_eagle_topk, cfg.speculative_num_draft_tokens, cfg.baseline)
    if not points:
        raise KitInputError(
            "sweep grid is empty: check --speculative-num-steps/--speculative-eagle-topk/--speculative-num-draft-tokens"
        )
    plan = [(p, c) for p in points for c in cfg.concurrency]
    total, n_done = len(plan), sum(row_key({**point_fields(p), "concurrency": c}) in done for p, c in plan)
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=n_done, desc="sweep", disable=not cfg.progress)
    try:
        for point in points:
            todo = [c for c in cfg.concurrency if row_key({**point_fields(point), "concurrency": c}) not in done]
            if not todo:
                continue
            with launcher(point) as server:
                url, log_file = url_of(server)
                for conc in todo:
                    bcfg = BenchConfig(
                        url=url,
                        label=point_label(point),
                        api=cfg.api,
                        prompts=cfg.prompts,
                        num_prompts=cfg.num_prompts,
                        max_new_tokens=cfg.max_new_tokens,
                        concurrency=conc,
                        warmup=cfg.warmup,
                        repeats=cfg.repeats,
                        log_path=log_file,
                        progress=False,
                        chat_template=cfg.chat_template,
                        # a point cut short by a crash resumes in its own directory
                        **resumable(out / "points" / f"{point_label(point)}_c{conc}"),
                    )
                    res = run_bench(bcfg, prompts=prompts)
                    exp = expected(point) if expected and point is not None else None
                    row = _row(point, conc, res, exp)
                    results.append(jsonable(row))
                    n_done += 1
                    bar.update(1)
                    if on_row:
                        on_row(n_done, total, row)
    finally:
        bar.close()
    rows = results.read()
    write_table(rows, out)
    return rows


def with_speedup(rows: list[dict]) -> list[dict]:
    """Add speedup (+ t-interval when repeats allow) vs the baseline row at the same concurrency."""
    from kit.measure.metrics import speedup_ci

    base = {r["concurrency"]: r for r in rows if r["speculative_num_steps"] == 0}
    out = []
    for r in rows:
        b = base.get(r["concurrency"])
        r = dict(r)
        if b and r["speculative_num_steps"] and b.get("output_tok_s_runs") and r.get("output_tok_s_runs"):
            ci = speedup_ci(b["output_tok_s_runs"], r["output_tok_s_runs"])
            r.update(speedup=ci["speedup"], speedup_low=ci["t_low"], speedup_high=ci["t_high"])
        out.append(r)
    return out


def write_table(rows: list[dict], out: Path) -> Path:
    """results.csv (atomic), one row per (point, concurrency), with speedups."""
    import pandas as pd

    df = pd.DataFrame(with_speedup(rows)).drop(
        columns=["accept_sources", "findings", "output_tok_s_runs"], errors="ignore"
    )
    tmp = out / ".results.csv.tmp"
    df.to_csv(tmp, index=False)
    tmp.replace(out / "results.csv")
    return out / "results.csv"


def load_rows(out_dir) -> list[dict]:
    return with_speedup(RecordLog(Path(out_dir) / "results.jsonl").read())


def sweep_findings(rows: list[dict], static_findings=(), training=None) -> Report:
    """Verdicts for every point with an expected accept length (the oracle's, else from `training` accuracies)."""
    from kit.measure.verdict import verdict_table

    joined = [
        {**r, "observed_accept_length": r.get("accept_length")}
        for r in rows
        if r["speculative_num_steps"] and (r.get("expected_accept_length") is not None or training is not None)
    ]
    return Report().extend(verdict_table(joined, static_findings, training=training))


# ---------------------------------------------------------------------------------------------
# ipywidgets panel
# ---------------------------------------------------------------------------------------------


def panel(
    launcher: Launcher,
    out_dir,
    base: SweepConfig | None = None,
    expected: Callable[[Point], float] | None = None,
    prompts: list[dict] | None = None,
):
    """Grid picker + Run button + live progress + plots redrawn after every point.

    Building the panel runs nothing (safe in headless notebook runs); the sweep starts only
    when the button is clicked."""
    import ipywidgets as w
    from IPython.display import display

    from kit.measure import plots

    base = base or SweepConfig(out_dir=str(out_dir))
    ints = lambda s: [int(x) for x in s.replace(",", " ").split()]  # noqa: E731
    boxes = {
        name: w.Text(
            value=" ".join(map(str, getattr(base, name))), description=name, style={"description_width": "130px"}
        )
        for name in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "concurrency")
    }
    prog = w.IntProgress(value=0, min=0, max=1, description="points")
    status = w.Label("set the grid, then Run")
    btn = w.Button(description="Run sweep", button_style="primary")
    figs = w.Output()

    def redraw(rows):
        figs.clear_output(wait=True)
        with figs:
            display(plots.sweep_heatmaps(rows, out_dir))
            display(
                plots.expected_vs_observed(
                    [
                        {**r, "observed_accept_length": r.get("accept_length")}
                        for r in rows
                        if r["speculative_num_steps"]
                    ],
                    out_dir,
                )
            )

    def on_row(n, total, row):
        prog.max, prog.value = total, n
        status.value = (
            f"{row['label']} c={row['concurrency']}: {row.get('output_tok_s') or 0:.1f} tok/s, "
            f"AL {row.get('accept_length') or float('nan'):.2f}"
        )
        redraw(load_rows(out_dir))

    def on_click(_):
        btn.disabled = True
        try:
            cfg = dataclasses.replace(
                base, out_dir=str(out_dir), progress=False, **{k: ints(b.value) for k, b in boxes.items()}
            )
            rows = run_sweep(cfg, launcher, expected, prompts, on_row)
            status.value = f"done: {len(rows)} rows in {Path(out_dir) / 'results.csv'}"
            redraw(load_rows(out_dir))
        except Exception as e:  # shown in the panel; the kernel stays usable
            status.value = f"failed: {type(e).__name__}: {e}"
        finally:
            btn.disabled = False

    btn.on_click(on_click)
    return w.VBox([w.HBox([w.VBox(list(boxes.values())), w.VBox([btn, prog, status])]), figs])


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(parser, SweepConfig)


def run(args: argparse.Namespace) -> int:
    from kit.serving.launch import spec_from_command

    cfg = kconfig.from_namespace(SweepConfig, args)
    if not cfg.launch:
        raise KitInputError("--launch is required: the command that starts the speculative server")
    spec = spec_from_command(cfg.launch)
    launcher = spec_launcher(spec, cfg.engine, os.path.join(cfg.out_dir, "logs"), cfg.ready_timeout)
    rows = with_speedup(run_sweep(cfg, launcher))
    from kit.measure import plots

    plots.sweep_heatmaps(rows, cfg.out_dir)
    report = sweep_findings(rows)
    report.facts = jsonable(
        {
            "sweep": [
                {k: r.get(k) for k in ("label", "concurrency", "output_tok_s", "accept_length", "speedup")}
                for r in rows
            ]
        }
    )
    if not cfg.json:
        print(json.dumps(report.facts["sweep"], indent=1))
    return emit(report, cfg.json)
