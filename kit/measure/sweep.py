"""`python -m kit sweep`: a grid over speculative parameters and concurrency, one results table.

For every (steps, topk, draft tokens) point, plus a no-speculation baseline, the server is relaunched through
a *launcher* (point -> context manager yielding the server; `spec_launcher` wraps kit.serving.launch +
kit.serving.process), then `kit.measure.bench` runs each concurrency against it. A row per (point, concurrency)
is appended to `results.jsonl` as soon as it is measured; a rerun skips measured rows (and, inside a
half-measured point, measured requests). `results.csv` is rewritten at the end with the speedup against the
baseline at the same concurrency. Points are resolved as SGLang resolves them (`kit.sglang.params.resolve`):
a chain's draft tokens become steps + 1, and a tree point SGLang would refuse is skipped.

    python -m kit sweep --launch "python -m sglang.launch_server --model-path T \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path D" \\
        --speculative-num-steps 1 3 5 --speculative-eagle-topk 1 4 --speculative-num-draft-tokens 4 8 --concurrency 1 8 --out-dir runs/sweep
    python -m kit sweep --engine reference --launch "python -m kit serve --speculative-draft-model-path D ..."

In a notebook, `panel(launcher, out_dir)` shows an ipywidgets grid picker with Run and Stop buttons (`SweepPanel`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import html
import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.config import opt
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
class SpecGrid:
    """The values a sweep tries for each speculative parameter (`grid` crosses them)."""

    speculative_num_steps: list[int] = field(default_factory=lambda: [1, 3], metadata={"help": "speculative num steps"})
    speculative_eagle_topk: list[int] = field(default_factory=lambda: [1], metadata={"help": "eagle topk"})
    speculative_num_draft_tokens: list[int] = field(
        default_factory=lambda: [0], metadata={"help": "draft tokens (0: as many as the tree has)"}
    )


@dataclass
class SweepConfig:
    launch: str | None = opt("launch command of the speculative server (its spec flags are replaced per point)")
    engine: str = opt("sglang, or the kit's CPU reference server", "sglang", choices=list(ENGINES))
    spec: SpecGrid = field(default_factory=SpecGrid)
    concurrency: list[int] = field(default_factory=lambda: [1], metadata={"help": "concurrency levels"})
    baseline: bool = opt("also measure a no-speculation launch", True)
    api: str = opt("endpoint for kit.measure.bench", "sglang")
    prompts: str = opt("builtin, builtin:<kind> or a JSONL file", "builtin")
    chat_template: str | None = opt("tokenizer dir (or 'embedded') to render prompts with its chat template")
    num_prompts: int = opt("measured requests per run", 8)
    max_new_tokens: int = opt("tokens per request", 64)
    warmup: int = opt("warmup requests per run (0: none; else at least one full batch)", 1)
    repeats: int = opt("runs per point (>= 2 for speedup intervals)", 1)
    ready_timeout: float = opt("seconds to wait for each launch", 900.0)
    out_dir: str = opt("results.jsonl/.csv, per-point bench dirs, logs", "runs/sweep")
    progress: bool = opt("progress bars", True)
    json: bool = opt("print one JSON document as the last line", False)


def grid(
    speculative_num_steps,
    speculative_eagle_topk,
    speculative_num_draft_tokens,
    baseline: bool = True,
    refused: dict[str, str] | None = None,
) -> list[Point]:
    """Points SGLang would run, resolved as SGLang resolves them, de-duplicated, baseline first; `refused` gets
    {label: SGLang's reason} for each combination it would not run. 0 draft tokens: as many as the tree has."""
    pts: list[Point] = [None] if baseline else []
    for s in speculative_num_steps:
        for k in speculative_eagle_topk:
            for n in speculative_num_draft_tokens:
                if s < 1 or k < 1:
                    continue
                res = resolve(SpecParams(s, k, n or max_draft_tokens(s, k)))
                if res.params is not None and res.params not in pts:
                    pts.append(res.params)
                elif res.params is None and refused is not None:
                    refused[SpecParams(s, k, n).label()] = res.errors()[0].title
    return pts


def row_key(row: dict) -> tuple:
    return tuple(row[k] for k in (*point_fields(None), "concurrency"))


def missing(out_dir, points: list[Point], concurrency: list[int]) -> dict[Point, list[int]]:
    """{point: its concurrencies not yet in out_dir's results.jsonl}, the points with none left out."""
    done = {row_key(r) for r in RecordLog(Path(out_dir) / "results.jsonl").read()}
    todo = {p: [c for c in concurrency if row_key({**point_fields(p), "concurrency": c}) not in done] for p in points}
    return {p: cs for p, cs in todo.items() if cs}


# --- launchers ---


@dataclass
class Launched:
    url: str
    log_file: str | None = None


Launcher = Callable[[Point], AbstractContextManager[Any]]


def point_spec(base, point: Point):
    """`base` (a kit.serving.launch.LaunchSpec) with the point's speculative parameters, or without speculation
    for the baseline (`.command(engine)` is the launch line to paste)."""
    if point is None:  # every speculative flag goes, with its values
        from kit.sglang.flags import drop_flags

        extra = drop_flags(list(base.extra_args), "--speculative-")
        return base.replace(speculative_algorithm=None, speculative_draft_model_path=None,
                            speculative_draft_model_revision=None, extra_args=extra, **SpecParams().given())  # fmt: skip
    return base.replace(speculative_algorithm=base.speculative_algorithm or "EAGLE3", **point.given())


def spec_launcher(base, engine: str = "sglang", log_dir: str | None = None, ready_timeout: float = 900.0) -> Launcher:
    """Launcher from a kit.serving.launch.LaunchSpec, resolved once for this machine's engine
    (`kit.serving.launch.resolve_local`, said on stderr); per point: its speculative fields (`point_spec`), a free
    port, /metrics on, started through kit.serving.process.ServerProcess (no orphans), waited for."""
    import sys

    from kit.serving.launch import resolve_local
    from kit.serving.process import ServerProcess, free_port

    base = resolve_local(base, engine, log=lambda line: print(f"kit: {line}", file=sys.stderr))

    @contextlib.contextmanager
    def launch(point: Point) -> Iterator[Launched]:
        log = str(Path(log_dir) / f"{point_label(point)}.log") if log_dir else None
        spec = point_spec(base, point).replace(port=free_port(), enable_metrics=True, log_file=log)
        with ServerProcess.from_spec(spec, engine=engine) as srv:
            srv.wait_ready(ready_timeout)
            yield Launched(srv.base_url, log)

    return launch


def launch_all(stack: contextlib.ExitStack, launches: list, engine: str = "sglang", shared: bool = False) -> list[Any]:
    """Enter every launch (a `Launcher`'s context for one point; None passes through as None), its stop
    registered on `stack`: at once where the engine's servers may start together (`Engine.starts_together`: the
    CPU reference server) or the launches were sized to share the device (`shared`: `Engine.share_device`), else
    one after another (SGLang left to itself sizes its memory pool from what is free as it starts; after a failure
    the rest are not started). If one fails, those already up are stopped and its error raised. Servers started
    together are stopped together."""
    from concurrent.futures import ThreadPoolExecutor

    from kit.serving.process import start_together

    live = [cm for cm in launches if cm is not None]
    entered, error = [], None
    together = start_together(engine, len(live), shared)
    if together:
        with ThreadPoolExecutor(len(live)) as pool:
            futures = [(cm, pool.submit(cm.__enter__)) for cm in live]
        entered = [(cm, f.result()) for cm, f in futures if f.exception() is None]
        error = next((f.exception() for _, f in futures if f.exception() is not None), None)
    else:
        for cm in live:  # one after another; after a failure the rest are not started
            try:
                entered.append((cm, cm.__enter__()))
            except BaseException as e:  # noqa: BLE001  (re-raised below, after the others are stopped)
                error = e
                break
    stops = [cm for cm, _ in entered]
    if error is not None:
        for cm in stops:
            cm.__exit__(None, None, None)
        raise error
    if together:  # and stopped together: each stop waits out its server's exit

        def stop_all(*exc) -> None:
            with ThreadPoolExecutor(len(stops)) as pool:
                list(pool.map(lambda cm: cm.__exit__(None, None, None), stops))

        stack.push(stop_all)
    else:
        for cm in stops:
            stack.push(cm.__exit__)
    got = iter(server for _, server in entered)
    return [next(got) if cm is not None else None for cm in launches]


def url_of(server: Any) -> tuple[str, str | None]:
    if isinstance(server, str):
        return server, None
    return server.url, getattr(server, "log_file", None)


# --- running ---


def _row(point: Point, conc: int, res, expected: float | None, expected_from: str | None = None) -> dict:
    agg = res.summary["labels"].get(point_label(point), {})
    keep = (
        "requests failed output_tokens output_tok_s req_s ttft_p50_s itl_p50_s itl_p90_s itl_p99_s e2e_p50_s e2e_p90_s "
        "accept_length accept_length_decode accept_rate output_tok_s_runs"
    ).split()
    return {
        **point_fields(point),
        "label": point_label(point),
        "concurrency": conc,
        **{k: agg.get(k) for k in keep},
        "accept_sources": agg.get("accept_sources"),
        "expected_accept_length": expected,
        "expected_from": expected_from if expected is not None else None,
        "findings": [f.code for f in res.report.findings],
    }


def bench_config(cfg, out_dir, **given) -> BenchConfig:
    """The `kit bench` of one measurement of a sweep or a tune (`cfg`: its request settings), resumable in
    out_dir; `given`: the arms, concurrency and the rest. A warm-up sends at least one full batch of full-length
    requests: a server compiles or captures the kernels of a shape the first time it runs one (SGLang's Triton
    attention under `--skip-server-warmup`, for the batch and for the longer sequences past a short request's
    end), and a measured batch that pays for that is not the launch's speed."""
    warmup = max(cfg.warmup, given.get("concurrency", 1)) if cfg.warmup else 0
    return BenchConfig(api=cfg.api, prompts=cfg.prompts, max_new_tokens=cfg.max_new_tokens, warmup=warmup,
                       chat_template=cfg.chat_template, progress=False, **resumable(out_dir), **given)  # fmt: skip


def run_sweep(
    cfg: SweepConfig,
    launcher: Launcher,
    expected: Callable[[Point], float] | None = None,
    prompts: list[dict] | None = None,
    on_row: Callable[[int, int, dict], None] | None = None,
    on_error: Callable[[Point, Exception], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[dict]:
    """Measure every not-yet-measured (point, concurrency); returns all rows of results.jsonl.

    `expected(point)` (e.g. the oracle) adds the expected accept length to each row; `on_row(done, total, row)`
    hears each row; a point whose launch or measurement raises goes to `on_error(point, exc)` and the sweep
    goes on (without `on_error` it propagates); `stop()` is asked before each launch and measurement."""
    out = Path(cfg.out_dir)
    results = RecordLog(out / "results.jsonl")
    points = grid(**dataclasses.asdict(cfg.spec), baseline=cfg.baseline)
    if not points:
        raise KitInputError(
            "sweep grid is empty: check --speculative-num-steps/--speculative-eagle-topk/--speculative-num-draft-tokens"
        )
    todo = missing(out, points, cfg.concurrency)
    total = len(points) * len(cfg.concurrency)
    n_done = total - sum(map(len, todo.values()))
    from tqdm import tqdm

    bar = tqdm(total=total, initial=n_done, desc="sweep", disable=not cfg.progress)

    def measure(point: Point, todo: list[int]) -> None:
        nonlocal n_done
        with launcher(point) as server:
            url, log_file = url_of(server)
            for conc in todo:
                if stop and stop():
                    return
                # a point cut short by a crash resumes in its own directory
                at = out / "points" / f"{point_label(point)}_c{conc}"
                given = dict(num_prompts=cfg.num_prompts, concurrency=conc, repeats=cfg.repeats, log_path=log_file)
                res = run_bench(bench_config(cfg, at, url=url, label=point_label(point), **given), prompts=prompts)
                exp = expected(point) if expected and point is not None else None
                row = _row(point, conc, res, exp, getattr(expected, "source", None))
                results.append(jsonable(row))
                n_done += 1
                bar.update(1)
                if on_row:
                    on_row(n_done, total, row)

    try:
        for point, concs in todo.items():
            if stop and stop():
                continue
            try:
                measure(point, concs)
            except Exception as e:  # one point's launch or benchmark failed: say so, go on with the next
                if on_error is None:
                    raise
                on_error(point, e)
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

    dropped = ["accept_sources", "findings", "output_tok_s_runs"]
    tmp = out / ".results.csv.tmp"
    pd.DataFrame(with_speedup(rows)).drop(columns=dropped, errors="ignore").to_csv(tmp, index=False)
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


# --- ipywidgets panel ---


RESTORE_HINT = "Sweep panel: run this cell to restore the panel (its controls live in the notebook's running kernel)."
DRAFT_TOKENS_HINT = (
    "draft tokens <b>0</b> = let SGLang choose: steps + 1 for a chain (topk 1), every token the tree holds otherwise"
)
TABLE_COLUMNS = ("label", "concurrency", "output_tok_s", "accept_length", "expected_accept_length", "speedup", "failed")


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"


class SweepPanel:
    """The notebook's sweep panel: grid boxes, **Run sweep** / **Stop**, progress per point (elapsed, ETA), a
    results table and heatmaps redrawn after each point, one message line per event. The sweep runs in a
    background thread, so **Stop** ends it before its next measurement and stops the current point's server
    (checked to no longer answer). A new panel on the same folder measures only the missing rows. Displayed: a
    one-line hint (what a notebook reopened without its kernel shows; the live widget hides it), then the widget."""

    def __init__(
        self,
        launcher: Launcher,
        out_dir,
        base: SweepConfig | None = None,
        expected: Callable[[Point], float] | None = None,
        prompts: list[dict] | None = None,
    ):
        import uuid

        import ipywidgets as w

        self.launcher, self.out_dir, self.expected, self.prompts = launcher, Path(out_dir), expected, prompts
        self.base = dataclasses.replace(base or SweepConfig(), out_dir=str(out_dir), progress=False)
        self._thread, self._stop_requested, self._messages = None, False, []
        self._hint_id = f"kit-sweep-hint-{uuid.uuid4().hex[:12]}"
        label = {"style": {"description_width": "190px"}, "layout": w.Layout(width="400px")}
        values = {**dataclasses.asdict(self.base.spec), "concurrency": self.base.concurrency}
        self.boxes = {
            name: w.Text(value=" ".join(map(str, v)), description=name, **label) for name, v in values.items()
        }
        self.boxes["speculative_num_draft_tokens"].description = "draft tokens (0 = auto)"
        self.boxes["speculative_num_draft_tokens"].tooltip = "0: let SGLang choose"
        self.run_button = w.Button(description="Run sweep", button_style="primary", icon="play")
        self.stop_button = w.Button(description="Stop", button_style="warning", icon="stop", disabled=True)
        self.progress = w.IntProgress(value=0, min=0, max=1, description="rows")
        self.status = w.HTML("set the grid, then press <b>Run sweep</b>")
        self.log = w.HTML("")
        self.table = w.HTML("")
        self.heatmap = w.Image(format="png", layout=w.Layout(display="none", max_width="100%"))
        self.scatter = w.Image(format="png", layout=w.Layout(display="none", max_width="100%"))
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.request_stop())
        hide_hint = w.HTML(f"<style>#{self._hint_id} {{display: none}}</style>")
        grid = w.VBox([*self.boxes.values(), w.HTML(f"<small>{DRAFT_TOKENS_HINT}</small>")])
        buttons = w.VBox([w.HBox([self.run_button, self.stop_button]), self.progress, self.status])
        self.widget = w.VBox([hide_hint, w.HBox([grid, buttons]), self.log, self.table, self.heatmap, self.scatter])
        if rows := load_rows(self.out_dir):
            self._say(
                f"resuming: {len(rows)} rows already in {self.out_dir / 'results.csv'}; Run sweep measures the rest"
            )
            self._redraw(rows)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        html = f'<div id="{self._hint_id}"><i>{RESTORE_HINT}</i></div>'
        display({"text/html": html, "text/plain": RESTORE_HINT}, raw=True)
        display(self.widget)

    def _say(self, html: str) -> None:
        self._messages.append(html)
        self.log.value = "<br>".join(self._messages[-12:])

    def _redraw(self, rows: list[dict]) -> None:
        import pandas as pd

        from kit.measure import plots

        cell = lambda v: "" if v is None or v != v else f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
        table = pd.DataFrame([{c: cell(r.get(c)) for c in TABLE_COLUMNS} for r in rows])
        self.table.value = table.to_html(index=False, border=0)
        spec = [{**r, "observed_accept_length": r.get("accept_length")} for r in rows if r["speculative_num_steps"]]
        self.heatmap.value = plots.png_bytes(plots.sweep_heatmaps(rows, self.out_dir))
        self.scatter.value = plots.png_bytes(plots.expected_vs_observed(spec, self.out_dir))
        self.heatmap.layout.display = self.scatter.layout.display = None

    def config(self) -> SweepConfig:
        """The grid in the boxes as a SweepConfig; a box that is not a list of integers is a KitInputError."""
        values = {}
        for name, box in self.boxes.items():
            try:
                values[name] = [int(x) for x in box.value.replace(",", " ").split()]
            except ValueError:
                raise KitInputError(f"{name}: {box.value!r} is not a list of integers")
            if not values[name]:
                raise KitInputError(f"{name}: give at least one value")
        concurrency = values.pop("concurrency")
        return dataclasses.replace(self.base, spec=SpecGrid(**values), concurrency=concurrency)

    def start(self) -> None:
        """What **Run sweep** does: check the grid, then measure the missing rows in a background thread."""
        import threading

        if self._thread is not None and self._thread.is_alive():
            return
        try:
            cfg = self.config()
            points = grid(**dataclasses.asdict(cfg.spec), baseline=cfg.baseline)
            if not points:
                raise KitInputError("the grid has no point SGLang would run; check steps and topk")
        except KitInputError as e:
            self.status.value = f"<b style='color:#b00'>{e}</b>"
            return
        self._stop_requested = False
        self.run_button.disabled, self.stop_button.disabled = True, False
        self._thread = threading.Thread(target=self._run, args=(cfg, points), name="kit-sweep", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """What **Stop** does: no new measurement starts; the current point's server is stopped."""
        self._stop_requested = True
        self.stop_button.disabled = True
        self.status.value = "stopping after the current measurement ..."

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, cfg: SweepConfig, points: list[Point]) -> None:
        import time

        from kit.serving.process import http_json

        todo = missing(self.out_dir, points, cfg.concurrency)
        rows_todo = sum(map(len, todo.values()))
        t0, measured, failed = time.monotonic(), [0], []
        state = {"index": 0, "point": None, "last_url": None}
        self.progress.max, self.progress.value = max(rows_todo, 1), 0

        def show(phase: str) -> None:
            elapsed = time.monotonic() - t0
            left = rows_todo - measured[0]
            eta = f"ETA {_clock(elapsed / measured[0] * left)}" if measured[0] else "ETA after the first point"
            self.status.value = (
                f"point {state['index']}/{len(todo)} <b>{point_label(state['point'])}</b>: {phase}"
                f" &middot; elapsed {_clock(elapsed)} &middot; {eta}"
            )

        @contextlib.contextmanager
        def watched(point: Point):
            state.update(index=state["index"] + 1, point=point)
            show("starting the server")
            with self.launcher(point) as server:
                state["last_url"] = url_of(server)[0]
                show(f"measuring on {state['last_url']}")
                yield server

        def on_row(n: int, total: int, row: dict) -> None:
            measured[0] += 1
            self.progress.value = measured[0]
            al = row.get("accept_length")
            self._say(
                f"&#10003; {row['label']} c={row['concurrency']}: {row.get('output_tok_s') or 0:.1f} tok/s, "
                + (f"accept length {al:.2f}" if al is not None else "no speculation")
            )
            self._redraw(load_rows(self.out_dir))
            show("measured")

        def on_error(point: Point, exc: Exception) -> None:
            lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [""]
            first = lines[0].split("; last log lines")[0]
            last = html.escape(lines[-1][-160:]) if len(lines) > 1 else ""
            failed.append(point_label(point))
            self._say(
                f"<b style='color:#b00'>&#10007; {point_label(point)} failed: {type(exc).__name__}:"
                f" {html.escape(first)}</b> &mdash; going on with the next point"
                + (f"<br><small style='color:#666'>&nbsp;&nbsp;its log ends: {last}</small>" if last else "")
            )

        try:
            run_sweep(cfg, watched, self.expected, self.prompts, on_row, on_error, lambda: self._stop_requested)
            rows = load_rows(self.out_dir)
            if rows:
                self._redraw(rows)
            took = _clock(time.monotonic() - t0)
            if self._stop_requested:
                url = state["last_url"]
                gone = url is None or http_json(url + "/health", timeout=2.0)[0] == 0
                self._say(
                    f"stopped after {measured[0]} of {rows_todo} rows ({took});"
                    + (f" no server left running ({url} no longer answers)" if gone else f" {url} still answers!")
                )
                self.status.value = "stopped: press <b>Run sweep</b> to measure the remaining rows"
            else:
                self.status.value = f"done in {took}: {len(rows)} rows in {self.out_dir / 'results.csv'}" + (
                    f"; failed: {', '.join(failed)} (press Run sweep to retry them)" if failed else ""
                )
        except Exception as e:  # the panel shows it; the kernel stays usable
            self.status.value = f"<b style='color:#b00'>sweep failed: {type(e).__name__}: {e}</b>"
        finally:
            self.run_button.disabled, self.stop_button.disabled = False, True


def panel(
    launcher: Launcher,
    out_dir,
    base: SweepConfig | None = None,
    expected: Callable[[Point], float] | None = None,
    prompts: list[dict] | None = None,
) -> SweepPanel | str:
    """The sweep panel for a notebook (inert until **Run sweep** is pressed, so headless runs skip it); where
    ipywidgets is not installed (a GPU host with SGLang alone), a line saying so and naming the shell twin."""
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is None:
        return "no sweep panel: ipywidgets is not installed here (pip install ipywidgets); the same sweep: kit sweep"
    return SweepPanel(launcher, out_dir, base, expected, prompts)


# --- CLI ---


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(parser, SweepConfig)


def launch_spec(launch: str | None):
    """The `--launch` of a verb that starts the speculative server per point (sweep, tune), parsed."""
    from kit.serving.launch import spec_from_command

    if not launch:
        raise KitInputError("--launch is required: the command that starts the speculative server")
    return spec_from_command(launch)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(SweepConfig, args)
    spec = launch_spec(cfg.launch)
    launcher = spec_launcher(spec, cfg.engine, os.path.join(cfg.out_dir, "logs"), cfg.ready_timeout)
    rows = with_speedup(run_sweep(cfg, launcher))
    from kit.measure import plots

    plots.sweep_heatmaps(rows, cfg.out_dir)
    report = sweep_findings(rows)
    keys = ("label", "concurrency", "output_tok_s", "accept_length", "speedup")
    report.facts = jsonable({"sweep": [{k: r.get(k) for k in keys} for r in rows]})
    if not cfg.json:
        print(json.dumps(report.facts["sweep"], indent=1))
    return emit(report, cfg.json)
