"""`python -m kit tune`: the speculative parameters that pay, per batch size, predicted first and then measured.

A blind grid (`kit sweep`) measures every point at every batch size; `kit tune` ranks them first:
1. the grid as SGLang resolves it (`kit.measure.sweep.grid`; what a release refuses is left out, its reason kept);
2. each point's expected accept length, from one source for the whole grid: the draft's recorded oracle
   (`training.json`) when it has every point, else the oracle run here for every point (`kit.reference.oracle`,
   cached), while the calibration's servers start (on a quarter of the cores until they are up: `lengths_beside`);
3. per batch size a calibration (the baseline and two points, interleaved), then every point's predicted speedup
   (`kit.tune.predict`: the model and its assumptions);
4. per batch size the `--top` best predicted points and the baseline, interleaved (`kit bench --interleave`: the
   same prompts, the order rotating); servers start in two waves, each side by side on the shared device (the
   calibration's three, then every batch size's points), since a start, not a measurement, is most of a point's
   cost on a GPU; as many servers as the GPU holds copies of the target and draft with a KV pool for the largest
   batch (`servers_alive`, `pool_tokens`, `Engine.servers_that_fit`): a 135M target fits every point at once, a 7B
   one on one 80 GB card three servers at batch 64 of the built-in prompts (one bench's arms, one wave at a time),
   and a target that fits fewer than one bench's arms is a one-line error before anything starts;
5. per batch size the best point with its paired speedup and interval (`kit.measure.metrics.launch_speedup`), or
   "no speculation", and the launch line to paste; a point measured outside ±`--miss` of its prediction is a
   `bench.prediction_miss` finding, and the next `--top` points of that batch size's ranking are measured too
   (`predict.second_look`, once per batch size).

`--out-dir`: tune.json (accept lengths, calibration, predictions, every measured arm, the answer), tune.png/.svg
(speedup vs batch size: predicted dashed, measured solid), the bench folders. `--budget-s` is checked before each
bench; `--resume` continues a stopped run. In a notebook: `panel(cfg, launcher, expected, base)`.

    python -m kit tune --engine reference --launch "python -m sglang.launch_server --model-path embedded \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path kit/assets/demo_draft" --batch-size 1 4
    python -m kit tune --launch "$(cat launch.sh)" --batch-size 1 4 16 64 --speculative-eagle-topk 1 2 4
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib.util
import json
import math
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kit import config as kconfig
from kit.findings import Finding, KitInputError, Report, emit
from kit.measure.bench import jsonable, run_bench
from kit.measure.sweep import Point, SpecGrid, bench_config, grid, launch_all, point_label, point_spec, url_of
from kit.serving.engines import ENGINES, get_engine
from kit.sglang.params import SpecParams
from kit.tune import predict

HELP = "the speculative parameters that pay per batch size: predicted from a calibration, the best ones measured"


@dataclass
class TuneConfig:
    launch: str | None = field(default=None, metadata={"help": "launch command (its spec flags are set per point)"})
    engine: str = field(default="sglang", metadata={"help": "serving engine", "choices": list(ENGINES)})
    batch_size: list[int] = field(default_factory=lambda: [1, 4, 16], metadata={"help": "requests in flight"})
    spec: SpecGrid = field(default_factory=lambda: SpecGrid([1, 2, 3], [1, 2], [0]))  # the grid's three flags
    top: int = field(default=2, metadata={"help": "points measured per batch size beside the baseline"})
    miss: float = field(default=0.35, metadata={"help": "measured/predicted - 1 beyond this is a finding"})
    api: str = field(default="sglang", metadata={"help": "endpoint for kit.measure.bench"})
    prompts: str = field(default="builtin", metadata={"help": "builtin, builtin:<kind> or a JSONL file"})
    chat_template: str | None = field(default=None, metadata={"help": "tokenizer dir (or 'embedded') for prompts"})
    num_prompts: int = field(default=8, metadata={"help": "measured requests per arm (at least the batch size)"})
    calibration_prompts: int = field(default=4, metadata={"help": "calibration requests per arm"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens per request"})
    ignore_eos: bool = kconfig.opt("ask the server to ignore EOS (every request its full length: dummy weights)", False)
    accept_length: float | None = kconfig.opt(
        "every point's expected accept length, instead of the draft's oracle (1: dummy weights accept nothing, "
        "which leaves the step costs alone to check)"
    )
    warmup: int = field(default=1, metadata={"help": "warmup requests per arm (0: none; else at least one full batch)"})
    budget_s: float = field(default=3600.0, metadata={"help": "no bench starts after this many seconds"})
    ready_timeout: float = field(default=900.0, metadata={"help": "seconds to wait for each launch"})
    out_dir: str = field(default="runs/tune", metadata={"help": "tune.json, tune.png, bench folders, logs"})
    resume: bool = field(default=False, metadata={"help": "continue the run in --out-dir"})
    json: bool = field(default=False, metadata={"help": "print one JSON document as the last line"})

    def __post_init__(self):
        lists = {"batch_size": self.batch_size, **asdict(self.spec)}
        for name, values in lists.items():
            if not values or min(values) < (0 if name == "speculative_num_draft_tokens" else 1):
                raise KitInputError(f"--{name.replace('_', '-')} {values}: give integers >= 1 (draft tokens: >= 0)")
        for name in ("top", "num_prompts", "calibration_prompts", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise KitInputError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.accept_length is not None and self.accept_length < 1:
            raise KitInputError(f"--accept-length {self.accept_length}: an accept length is >= 1")
        if not (self.miss > 0 and self.budget_s > 0):
            raise KitInputError(f"--miss {self.miss} and --budget-s {self.budget_s} must be > 0")


def plan(cfg: TuneConfig) -> tuple[list[SpecParams], dict[str, str]]:
    """The grid's points SGLang runs that the engine runs too (`Engine.refuses`: vLLM runs chains), and
    {label: why} for each refused; no point is a KitInputError."""
    refused: dict[str, str] = {}
    points = grid(**asdict(cfg.spec), baseline=False, refused=refused)
    engine = get_engine(cfg.engine)
    refused |= {p.label(): why for p in points if (why := engine.refuses(p))}
    points = [p for p in points if p.label() not in refused]
    if not points:
        why = "; ".join(f"{lab}: {w}" for lab, w in refused.items())
        raise KitInputError(f"the grid has no point the {cfg.engine} engine would run ({why[:300]})")
    return points, refused


def accept_lengths(target: str, draft: str, cfg: TuneConfig):
    """point -> (expected accept length, where it came from), from one source for the whole grid, so the ranking
    compares like with like: `--accept-length` when given; the draft's recorded oracle (`training.json`) when it has
    every point of `cfg`'s grid; else the oracle run here for every point (`kit.measure.verdict.oracle_expected`, cached per point)."""
    from kit.measure.verdict import oracle_expected
    from kit.reference.chain import recorded_accept_lengths

    if cfg.accept_length is not None:
        return lambda p: (cfg.accept_length, "--accept-length")
    recorded = recorded_accept_lengths(draft) if Path(draft).is_dir() else {}
    if all(p.label() in recorded for p in plan(cfg)[0]):
        return lambda p: (recorded[p.label()], "the draft's recorded oracle (training.json)")
    oracle = oracle_expected(target, draft, quick=True)

    def expected(p: SpecParams) -> tuple[float, str]:
        return oracle(p), oracle.source

    return expected


def most_alive(cfg: TuneConfig, points: int) -> int:
    """The most servers alive at once over a plan of `points`: the calibration's three, then beside them every batch
    size's `--top` points."""
    return 1 + min(points, 2 + cfg.top * len(set(cfg.batch_size)))


def launch_footprint(spec) -> tuple[int, int] | None:
    """(weights bytes, KV cache bytes per token) of the target and the draft on one GPU: weights from their
    safetensors (local, or a hub id's headers as `kit.checkpoint.hub` resolves it), for a target of config.json only
    (`--load-format dummy`) its Llama-shaped parameter count at two bytes each; the KV cache in bf16 from each
    config. None where the target's size is not known here."""
    from kit.checkpoint.safetensors_io import weights_bytes
    from kit.hf import HFConfig
    from kit.measure.breakeven import kv_bytes_per_token, llama_params

    def config(folder: Path | None) -> HFConfig | None:
        with contextlib.suppress(TypeError, ValueError, OSError):
            return HFConfig.of(json.loads((folder / "config.json").read_text())) if folder else None
        return None

    def kv(cfg: HFConfig | None) -> int:
        with contextlib.suppress(KeyError, TypeError, ZeroDivisionError):
            return kv_bytes_per_token(cfg.text) if cfg else 0
        return 0

    target = model_folder(spec.model_path or "embedded", spec.revision)
    draft = model_folder(spec.speculative_draft_model_path, spec.speculative_draft_model_revision)
    tcfg = config(target)
    size = weights_bytes(target)
    if size is None and tcfg is not None:
        with contextlib.suppress(KeyError, TypeError):
            size = 2 * llama_params(tcfg.text)
    if size is None:
        return None
    tp = spec.tp_size or 1
    return (size + (weights_bytes(draft) or 0)) // tp, (kv(tcfg) + kv(config(draft))) // tp


def pool_tokens(cfg: TuneConfig, prompts=None) -> int:
    """The KV pool of each server tune starts, in tokens, in multiples of 1024: its largest batch at full length.
    That is the longest prompt it sends (in the `--chat-template` tokenizer's tokens; without one, in characters,
    which a tokenizer rarely exceeds), the new tokens, and the most draft tokens a point verifies. A pool too small
    for the batch still serves, but holds requests back, and the speedup measured is then not the batch's."""
    from kit.measure.bench import load_prompts, request_list
    from kit.models import chat_text, load_tokenizer, resolve_target

    sent = [
        r["text"] for r in request_list(prompts or load_prompts(cfg.prompts), max(cfg.num_prompts, *cfg.batch_size))
    ]
    longest = max(map(len, sent))
    if cfg.chat_template:
        tok = load_tokenizer(resolve_target(cfg.chat_template))
        longest = max(len(tok(chat_text(tok, t), add_special_tokens=False)["input_ids"]) for t in sent)
    draft = max((p.speculative_num_draft_tokens or 0 for p in plan(cfg)[0]), default=0)
    return math.ceil(max(cfg.batch_size) * (longest + cfg.max_new_tokens + draft) / 1024) * 1024


def model_folder(model: str | None, revision: str | None) -> Path | None:
    """The folder a launch's model path names: 'embedded' (the converted SmolLM2), a local directory, or a hub id
    as `kit.checkpoint.hub` resolves it (the cache, else its headers); None where it cannot be read here."""
    from kit.checkpoint import hub
    from kit.models import resolve_target

    if model == "embedded":
        return resolve_target(model)
    with contextlib.suppress(KitInputError):
        return Path(hub.resolve(model, revision, flag="--launch").path) if model else None
    return None


def servers_alive(cfg: TuneConfig, spec, engine, prompts=None) -> tuple[int, int | None]:
    """(how many servers tune keeps alive at once, each one's KV pool in tokens): `most_alive`, or as many as the GPU
    holds copies of the target and draft with their pools (`pool_tokens`; None for an engine that shares no GPU);
    a KitInputError when that is fewer than one interleaved bench's arms (the baseline and its points)."""
    from kit.env.machine import device_memory_gib

    points = len(plan(cfg)[0])
    most = most_alive(cfg, points)
    if engine.device_share is None:
        return most, None
    kv_tokens, gib = pool_tokens(cfg, prompts), device_memory_gib()
    footprint = launch_footprint(spec) if gib else None
    if footprint is None:
        return most, kv_tokens
    weights, pool = footprint[0], footprint[1] * kv_tokens
    fits = engine.servers_that_fit(weights, pool, gib * 2**30)
    if fits >= most:
        return most, kv_tokens
    need = 1 + max(2, min(cfg.top, points))  # the calibration's two points, or the --top measured
    if fits < need:
        hint = f"--top {fits - 1}, " if fits >= 3 else ""  # the calibration alone needs 3
        raise KitInputError(
            f"--launch: the target and draft ({weights / 2**30:.1f} GiB of weights per GPU, a KV pool of "
            f"{pool / 2**30:.1f} GiB for batch {max(cfg.batch_size)}) fit {fits} time(s) on this {gib:.0f} GiB GPU, "
            f"and kit tune runs {need} servers at once (one bench's baseline and points, interleaved): {hint}"
            "a GPU with more memory, a larger --tp-size or smaller batch sizes"
        )
    return fits, kv_tokens


def lengths_beside(todo: list[SpecParams], expected, started: threading.Event) -> dict[str, dict]:
    """{label: {value, source}} of each point, computed while the first servers start: until `started` is set,
    torch's intra-op threads are a quarter of this machine's (a parallel region waits for its slowest thread, and
    threads on the cores the starting servers hold straggle), then all of them."""
    import torch

    threads, out = torch.get_num_threads(), {}
    try:
        for p in todo:
            torch.set_num_threads(threads if started.is_set() else max(1, threads // 4))
            out[p.label()] = dict(zip(("value", "source"), expected(p)))
    finally:
        torch.set_num_threads(threads)
    return out


class Servers:
    """The servers the arms need, each started once through the launcher and kept while wanted; servers that
    started together (`launch_all`) are stopped together, once none of them is wanted. At most `most` are alive:
    a wave that would pass it starts without `ahead`, or after every live one stops."""

    def __init__(self, launcher, engine: str, most: int | None = None):
        self.launcher, self.engine, self.most = launcher, engine, most or math.inf
        self.waves, self.ahead_failed = [], False

    def up(self, points: list[Point], ahead: list[Point] = ()) -> dict[str, str]:
        """The URLs of `points`, starting those not live. `ahead`: points a later call wants, started in the same
        wave (side by side, several servers start in about one's time); if that wave fails, `points` start alone."""
        want = {point_label(p) for p in (*points, *ahead)}
        for wave in [w for w in self.waves if not want & set(w[1])]:
            self.waves.remove(wave)
            wave[0].close()
        live = {lab: s for _, servers in self.waves for lab, s in servers.items()}
        missing = [p for p in points if point_label(p) not in live]
        if len(live) + len(missing) > self.most:  # no room beside the live ones: all stop, `points` start afresh
            self.close()
            live, missing = {}, list(points)
        early = [] if self.ahead_failed else [p for p in ahead if point_label(p) not in live and p not in missing]
        if early and len(live) + len(missing) + len(early) <= self.most:
            try:
                live.update(self.start([*missing, *early]))
                missing = []
            except Exception:  # the joint wave: `points` start alone below, and no later call tries one again
                self.ahead_failed = True
        if missing:
            live.update(self.start(missing))
        return {point_label(p): url_of(live[point_label(p)])[0] for p in points}

    def start(self, points: list[Point]) -> dict:
        """{label: server} of `points`, one wave: their launches share the device (`Engine.share_device`, sized in
        `run` for the most servers alive at once), so they start side by side on any engine."""
        stack = contextlib.ExitStack()
        servers = launch_all(stack, list(map(self.launcher, points)), self.engine, shared=True)
        wave = dict(zip(map(point_label, points), servers))
        self.waves.append((stack, wave))
        return wave

    def close(self) -> None:
        while self.waves:
            self.waves.pop()[0].close()


def bench_arms(cfg: TuneConfig, urls: dict[str, str], batch: int, requests: int, out: Path, prompts=None):
    """One interleaved `kit bench` of the arms (`{label: url}`, the baseline first) at `batch` requests in flight."""
    base, first, *more = urls
    bcfg = bench_config(cfg, out, url=urls[first], label=first, baseline_url=urls[base], baseline_label=base,
                        also_url=[f"{lab}={urls[lab]}" for lab in more] or None, engine=cfg.engine,
                        num_prompts=max(requests, batch), concurrency=batch, interleave=True,
                        ignore_eos=cfg.ignore_eos)  # fmt: skip
    return run_bench(bcfg, prompts=prompts)


def measured_row(summary: dict, label: str, predicted: float) -> dict:
    sp = (summary.get("launch_speedup") or {}).get(label) or {}
    agg = summary["labels"].get(label, {})
    return jsonable({"median": sp.get("median"), "ci95": sp.get("ci95"), "inconclusive": sp.get("inconclusive"),
                     "n": sp.get("n"), "accept_length": agg.get("accept_length"), "output_tok_s": agg.get("output_tok_s"),
                     "predicted": predicted})  # fmt: skip


def open_doc(cfg: TuneConfig) -> dict:
    """tune.json to continue (`--resume`), or {} for a fresh run in an empty --out-dir (checked, nothing written)."""
    out = Path(cfg.out_dir)
    if cfg.resume and (out / "tune.json").exists():  # written whole each time (`write_doc`)
        return json.loads((out / "tune.json").read_text())
    if not cfg.resume and out.exists() and any(out.iterdir()):
        raise KitInputError(f"--out-dir {out}: exists and is not empty; --resume continues it, or choose a new one")
    return {}


def write_doc(doc: dict, out: Path) -> None:
    (tmp := out / ".tune.json.tmp").write_text(json.dumps(jsonable(doc), indent=1))
    tmp.replace(out / "tune.json")  # whole or not at all


def run_tune(
    cfg: TuneConfig, launcher, expected, base=None, prompts=None, on_update=None, stop=None, alive=None
) -> dict:
    """Calibrate, predict, measure the best predicted points per batch size, answer; returns tune.json's
    document. `expected(point)` -> (accept length, source); `base` (the LaunchSpec) gives the launch lines;
    `alive`: the most servers alive at once (`servers_alive`; None: no limit);
    `on_update(doc, message)` hears each step; `stop()` true ends the run before its next bench."""
    t0, out = time.monotonic(), Path(cfg.out_dir)
    points, refused = plan(cfg)
    doc = open_doc(cfg)
    by_label = {p.label(): p for p in points}
    acc = doc.setdefault("accept_length", {})
    # the accept lengths (an oracle run per point, on this machine's CPU) come while the first servers start
    todo, started = [p for p in points if p.label() not in acc], threading.Event()
    pool = ThreadPoolExecutor(1, thread_name_prefix="kit-tune-oracle")
    lengths = pool.submit(lengths_beside, todo, expected, started)
    out.mkdir(parents=True, exist_ok=True)
    doc.update(config=asdict(cfg), refused=refused, status="running")
    cal, measured, doc["predicted"] = doc.setdefault("calibration", {}), doc.setdefault("measured", {}), {}
    batches, ends = sorted(set(cfg.batch_size)), predict.calibration_points(points)

    def step(message: str) -> bool:
        """Save, tell, and say whether the run must end here (stopped or out of budget)."""
        halt = "stopped" if stop and stop() else "budget spent" if time.monotonic() - t0 > cfg.budget_s else None
        doc["status"] = f"{halt}: --resume continues" if halt else doc["status"]
        write_doc(doc, out)
        if on_update:
            on_update(doc, doc["status"] if halt else message)
        return bool(halt)

    servers = Servers(launcher, cfg.engine, alive)
    try:
        for b in batches:
            if str(b) not in cal:
                if step(f"calibrating batch {b}: baseline, {', '.join(p.label() for p in ends)}"):
                    return finish(cfg, doc, out, base, t0, on_update)
                urls = servers.up([None, *ends])
                started.set()  # the oracle's rest runs on every core
                acc.update(lengths.result())  # before a bench: the oracle's CPU load stays out of its timing
                res = bench_arms(cfg, urls, b, cfg.calibration_prompts, out / "calibration" / f"b{b}", prompts)
                cal[str(b)] = predict.calibrated(b, res.summary["labels"], ends)
            started.set()  # calibrated before (--resume): no server starts beside the oracle
            acc.update(lengths.result())
            costs = predict.StepCosts(*(cal[str(b)][k] for k in ("t_decode_s", "t_draft_s", "growth")))
            doc["predicted"][str(b)] = {
                lab: round(costs.speedup(p, acc[lab]["value"]), 3) for lab, p in by_label.items()
            }
        looks = doc.setdefault("second_look", {})  # batch size -> the points measured after a miss
        chosen = {
            b: predict.select(doc["predicted"][str(b)], cfg.top, cfg.miss) + looks.get(str(b), []) for b in batches
        }
        todo = [(b, [lab for lab in chosen[b] if lab not in measured.get(str(b), {})]) for b in batches]
        todo = [(b, labs) for b, labs in todo if labs]
        ahead = [by_label[lab] for lab in dict.fromkeys(lab for _, labs in todo for lab in labs)]  # one wave
        while todo:
            b, labs = todo.pop(0)
            if step(f"measuring batch {b}: baseline, {', '.join(labs)}"):
                break
            try:
                urls = servers.up([None, *(by_label[lab] for lab in labs)], ahead)
            except Exception as e:  # a point whose server does not start: said, and the next batch size goes on
                doc.setdefault("failed", {})[str(b)] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                continue
            res = bench_arms(cfg, urls, b, cfg.num_prompts, out / "bench" / f"b{b}-{'_'.join(labs)}", prompts)
            rows = {lab: measured_row(res.summary, lab, doc["predicted"][str(b)][lab]) for lab in labs}
            measured[str(b)] = {**measured.get(str(b), {}), **rows}  # a resumed run's earlier points stay
            doc.get("failed", {}).pop(str(b), None)
            more = predict.second_look(rows, doc["predicted"][str(b)], set(measured[str(b)]), cfg.top, cfg.miss)
            if str(b) not in looks and more:  # once per batch size
                looks[str(b)] = more
                todo.append((b, more))
        else:
            doc["status"] = "done"
    finally:
        servers.close()
        pool.shutdown(cancel_futures=True)
    return finish(cfg, doc, out, base, t0, on_update)


def finish(cfg: TuneConfig, doc: dict, out: Path, base, t0: float, on_update=None) -> dict:
    """The answer per measured batch size, the findings, the figure; tune.json written."""
    findings, by_label = [], {p.label(): p for p in plan(cfg)[0]}
    for b, rows in doc.get("measured", {}).items():
        answer = predict.best(rows)
        point = by_label.get(answer["point"])
        answer["launch"] = point_spec(base, point).command(cfg.engine) if base is not None else None
        doc.setdefault("best", {})[b] = answer
        for lab, r in rows.items():
            if r["median"] is not None:
                findings.append(predict.miss_finding(int(b), lab, r["predicted"], r["median"], cfg.miss))
    doc["findings"] = [f.to_dict() for f in findings if f is not None]
    doc["wall_s"] = round(doc.get("wall_s", 0) + time.monotonic() - t0, 1)
    if doc.get("predicted"):
        figure(doc, out)
    write_doc(doc, out)
    if on_update:
        on_update(doc, doc["status"])
    return doc


def figure(doc: dict, out_dir):
    """Speedup vs batch size per configuration: predicted dashed, measured solid with its 95% interval."""
    from matplotlib.figure import Figure

    from kit.measure import plots

    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.add_subplot()
    pred, meas = doc["predicted"], doc.get("measured", {})
    batches = sorted(map(int, pred))
    first = pred[str(batches[0])]
    shown = sorted({lab for b in map(str, batches) for lab in meas.get(b, {})}) or [max(first, key=first.get)]
    for i, lab in enumerate(shown):
        ax.plot(batches, [pred[str(b)].get(lab, math.nan) for b in batches], "--x", color=f"C{i}", alpha=0.6)
        rows = [(b, meas[str(b)][lab]) for b in batches if meas.get(str(b), {}).get(lab, {}).get("median") is not None]
        xs, ys = [b for b, _ in rows], [r["median"] for _, r in rows]
        lo, hi = (
            [y - (r["ci95"][0] or y) for y, (_, r) in zip(ys, rows)],
            [(r["ci95"][1] or y) - y for y, (_, r) in zip(ys, rows)],
        )
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="-o", color=f"C{i}", capsize=3, label=lab)
    ax.axhline(1.0, color="gray", lw=1, ls=":")
    if len(batches) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set(xlabel="batch size (requests in flight)", ylabel="speedup over no speculation")
    ax.set_title("kit tune: predicted (dashed) vs measured (solid, 95% interval)", fontsize=10)
    ax.legend(fontsize=8, title="steps-topk-draft tokens", title_fontsize=8)
    plots.save(fig, out_dir, "tune")
    return fig


def table(doc: dict) -> list[dict]:
    """One row per batch size: the answer, its prediction, the launch line."""
    return [{"batch_size": int(b), "answer": a["verdict"], "predicted": doc["predicted"].get(b, {}).get(a["point"]),
             "launch": a["launch"]} for b, a in sorted(doc.get("best", {}).items(), key=lambda x: int(x[0]))]  # fmt: skip


def panel(cfg: TuneConfig, launcher, expected, base=None, prompts=None):
    """Run/Stop, the phase, the table and the figure as they fill in (inert until Run is pressed); where ipywidgets
    is not installed, a line naming the shell twin. With `base`, no more servers are alive than the GPU holds
    (`servers_alive`); the launcher's memory share is the caller's."""
    if importlib.util.find_spec("ipywidgets") is None:
        return "no tune panel: ipywidgets is not installed here (pip install ipywidgets); the same run: kit tune"
    import ipywidgets as w
    import pandas as pd

    from kit.measure import plots

    run_b, stop_b = w.Button(description="Run tune", button_style="primary"), w.Button(description="Stop")
    stop_b.disabled = True
    status, tab = w.HTML(f"grid {point_label(None)} + {len(plan(cfg)[0])} points; press <b>Run tune</b>"), w.HTML()
    img, halt = w.Image(format="png", layout=w.Layout(display="none")), threading.Event()

    def show(doc: dict, message: str) -> None:
        status.value = html.escape(message)
        tab.value = pd.DataFrame(table(doc)).to_html(index=False, border=0) if doc.get("best") else ""
        if doc.get("predicted"):
            img.value, img.layout.display = plots.png_bytes(figure(doc, cfg.out_dir)), None

    def work() -> None:
        try:
            # resumed: a press continues what the folder holds (a rerun cell, a second press after Stop)
            alive = servers_alive(cfg, base, get_engine(cfg.engine), prompts)[0] if base is not None else None
            run_tune(replace(cfg, resume=True), launcher, expected, base, prompts, show, halt.is_set, alive)
        except Exception as e:  # the panel shows it; the kernel stays usable
            status.value = f"<b style='color:#b00'>tune failed: {html.escape(f'{type(e).__name__}: {e}')}</b>"
        finally:
            run_b.disabled, stop_b.disabled = False, True

    def start(_) -> None:
        halt.clear()
        run_b.disabled, stop_b.disabled = True, False
        threading.Thread(target=work, name="kit-tune", daemon=True).start()

    run_b.on_click(start)
    stop_b.on_click(lambda _: (halt.set(), setattr(stop_b, "disabled", True)))
    return w.VBox([w.HBox([run_b, stop_b]), status, tab, img])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(parser, TuneConfig)


def run(args: argparse.Namespace) -> int:
    from kit.measure.sweep import launch_spec, spec_launcher

    cfg = kconfig.from_namespace(TuneConfig, args)
    spec = launch_spec(cfg.launch)
    if not spec.speculative_draft_model_path:
        raise KitInputError("--launch has no --speculative-draft-model-path: tune expects accept lengths of a draft")
    engine = get_engine(cfg.engine)
    alive, kv_tokens = servers_alive(cfg, spec, engine)
    shared = engine.share_device(spec, alive, kv_tokens)  # the launch lines to paste stay the user's
    launcher = spec_launcher(shared, cfg.engine, str(Path(cfg.out_dir) / "logs"), cfg.ready_timeout)
    expected = accept_lengths(spec.model_path or "embedded", spec.speculative_draft_model_path, cfg)
    note = None if cfg.json else (lambda doc, message: print(f"kit tune: {message}", file=sys.stderr))
    doc = run_tune(cfg, launcher, expected, base=spec, on_update=note, alive=alive)
    report = Report([Finding(**f) for f in doc["findings"]], facts={"tune": table(doc), "status": doc["status"]})
    if not cfg.json:
        for row in table(doc):
            print(f"batch {row['batch_size']}: {row['answer']}\n    {row['launch']}")
        print(f"{doc['status']} in {doc['wall_s']:.0f} s; {Path(cfg.out_dir) / 'tune.json'}, tune.png")
    return emit(report, cfg.json)
