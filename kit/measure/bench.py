"""`python -m kit bench`: measure acceptance and throughput of a live server, baseline vs speculative.

The client (kit.measure.client, httpx/aiohttp) speaks SGLang's `/generate` and OpenAI's `/v1/completions` and
`/v1/chat/completions`, streaming by default. Each arm is a label + a server URL (typically `baseline`, no
speculation, and `spec`, EAGLE-3; same prompts, same concurrency); per arm and repeat it flushes the cache
(SGLang `/flush_cache`), sends `warmup` requests (recorded, excluded from every total), flushes again,
snapshots `/metrics` and `/server_info`, sends the measured requests with at most `concurrency` in flight and
snapshots again. Arms are interleaved per repeat so drift hits both alike; with `--interleave` they take turns
every `concurrency` requests, so a request and its twin run seconds apart (the paired speedup then holds on a
shared machine). `--also-url LABEL=URL` adds arms beside `--url`, each scored against the same baseline twins.

Every run gets a fresh directory: `--out-dir DIR` (new or empty), by default `runs/bench/<UTC time>-<labels>`.
`--resume DIR` continues one: its `config.json` settings are kept (a contradicting flag is refused), completed
requests are not sent again, and stderr says what was reused. Each server is checked first (one-line error,
exit 2). Every line is appended and flushed as soon as it exists, so a crash loses only requests in flight:

    config.json     the settings of the run (what --resume keeps)
    records.jsonl   one `kit.measure.records.RequestRecord` per request (`read_records` reads them back)
    runs.jsonl      one `kit.measure.records.RunRecord` per arm x repeat x session: server snapshots, log lines
    machine.jsonl   what else the host did meanwhile (`kit.measure.machine`)
    summary.json    per-arm summaries, acceptance sources, speedups with intervals, findings (written last)

    kit bench --url http://127.0.0.1:30000 --baseline-url http://127.0.0.1:30001 \\
        --repeats 3 --num-prompts 16 --concurrency 4
    kit bench --resume runs/bench/20261130-141500-baseline-vs-spec     # finish an interrupted run
    kit bench --url http://127.0.0.1:8000 --api completions   # any OpenAI server

The printed summary is one `python -m sglang.bench_serving`-shaped block per arm (its metric names, ms), each
with its acceptance sources, then the speedup. Python: `run_bench(BenchConfig(url=...))` -> `BenchResult`
(`.report`, `.table()`, `.block()`). Exit status: 0 ok, 1 error findings, 2 cannot run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.config import opt
from kit.findings import Code, KitInputError, Report, emit
from kit.measure import machine as kmach
from kit.measure import metrics as km
from kit.measure.client import (
    API_PATHS,
    check_server,
    flush_cache,
    log_accept_lengths,
    probe_server,
    run_sync,
    send_one,
    server_info,
    snapshot_metrics,
    stream_session,
)
from kit.measure.metrics import SPEEDUP_UNCERTAIN
from kit.measure.records import RequestRecord, RunRecord
from kit.models import chat_renderer
from kit.serving.engines import ENGINES, Engine, get_engine

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "bench/verdict: notebook 05"
REQUEST_ERRORS = Code(
    "bench.request_errors",
    SECTION,
    "error",
    "some measured requests failed (HTTP error, timeout)",
    "read the server log; rerun the same command to retry only those requests",
)
TOKEN_COUNT_MISMATCH = Code(
    "bench.token_count_mismatch",
    SECTION,
    "info",
    "streamed chunks counted by the client differ from the server's completion_tokens (several tokens per chunk)",
    "none needed: totals use the server count",
)
BASELINE_IS_SPECULATIVE = Code(
    "bench.baseline_is_speculative",
    SECTION,
    "warning",
    "the baseline server reports speculative fields",
    "launch the baseline without `--speculative-algorithm`",
)
NO_ACCEPTANCE = Code(
    "bench.no_acceptance",
    SECTION,
    "warning",
    "the speculative arm reported no acceptance (no spec_verify_ct)",
    "use `--api sglang`, or an SGLang with `return_spec_tokens_details`; check speculation is on",
)

HELP = "benchmark a live server: acceptance, throughput, latency; baseline vs speculative"
APIS = tuple(API_PATHS)


@dataclass
class BenchConfig:
    url: str | None = opt("speculative server base URL, e.g. http://127.0.0.1:30000")
    baseline_url: str | None = opt("baseline (no speculation) server base URL, same model")
    api: str | None = opt("endpoint: sglang (/generate), completions, chat; default: the engine's (vllm: completions)",
                          choices=APIS)  # fmt: skip
    engine: str = opt(
        "engine behind the URLs (its paths, speculative fields, metric names; the reference server's are SGLang's)",
        "sglang",
        choices=list(ENGINES),
    )
    prompts: str = opt("builtin, builtin:<kind> (chat/code/math) or a JSONL file", "builtin")
    num_prompts: int = opt("measured requests per run (prompts repeat if fewer); 0 = all prompts once", 8)
    max_new_tokens: int = opt("tokens to generate per request", 64)
    temperature: float = opt("sampling temperature (0 = greedy, as SGLang's EAGLE benchmarks)", 0.0)
    ignore_eos: bool = opt("ask the server to ignore EOS (fixed output length)", False)
    concurrency: int = opt("requests in flight at once", 4)
    warmup: int = opt("warmup requests before each run (excluded from totals)", 2)
    warmup_max_new_tokens: int | None = opt(
        "tokens per warmup request (default: --max-new-tokens); a few warm every path"
    )
    repeats: int = opt("runs per arm; >= 2 gives a speedup confidence interval", 1)
    stream: bool = opt("stream responses (needed for TTFT/ITL)", True)
    interleave: bool = opt(
        "arms take turns every `concurrency` requests instead of every run: a request and its twin "
        "on the other arm see the same machine load (paired speedups on a shared machine)",
        False,
    )
    flush_cache: bool = opt("POST /flush_cache before warmup and before each run (SGLang)", True)
    chat_template: str | None = opt(
        "tokenizer dir (or 'embedded') to render prompts with its chat template for /generate and /v1/completions"
    )
    model: str | None = opt("model name for OpenAI endpoints (default: first of /v1/models)")
    label: str = opt("label of the --url arm", "spec")
    baseline_label: str = opt("label of the --baseline-url arm", "baseline")
    also_url: list[str] | None = opt(
        "more arms beside --url, each LABEL=URL (another launch of the same model): with --interleave "
        "each of their requests runs beside its --url and baseline twins, the order rotating"
    )
    log_path: str | None = opt("server log file; decode lines written during each run become an acceptance source")
    expected_accept_length: float | None = opt(
        "oracle's expected accept length for this target/draft/params (a verdict)"
    )
    timeout_s: float = opt("per-request timeout", 600.0)
    quiet_check: bool = opt(
        "before measuring, wait up to 60 s for the machine to be quiet (no outside CPU load, "
        "steal, throttled GPU clocks or other GPU processes); stop with what was seen if it never is",
        False,
    )
    out_dir: str | None = opt("new or empty directory for this run (default: runs/bench/<time>-<labels>)")
    resume: str | None = opt("continue the run in this directory: its settings and completed requests are kept")
    progress: bool = opt("tqdm progress bars", True)
    json: bool = opt("print one JSON document as the last line", False)

    def __post_init__(self):
        self.api = self.api or get_engine(self.engine).bench_api
        if self.api not in APIS:
            raise KitInputError(f"--api {self.api!r}: choose one of {', '.join(APIS)}")
        get_engine(self.engine)  # an unknown engine is a one-line error naming --engine
        for name in ("concurrency", "max_new_tokens", "repeats"):
            if getattr(self, name) < 1:
                raise KitInputError(f"--{name.replace('_', '-')} must be >= 1")
        if self.num_prompts < 0 or self.warmup < 0:
            raise KitInputError("--num-prompts and --warmup must be >= 0")
        if self.warmup_max_new_tokens is not None and self.warmup_max_new_tokens < 1:
            raise KitInputError("--warmup-max-new-tokens must be >= 1")
        self.also_arms()  # a malformed LABEL=URL is a one-line error before anything runs

    def also_arms(self) -> list[tuple[str, str]]:
        """(label, url) of each --also-url arm."""
        out = []
        for item in self.also_url or []:
            label, sep, url = item.partition("=")
            if not sep or not label.strip() or not url.strip():
                raise KitInputError(f"--also-url {item!r}: give LABEL=URL, e.g. seed=http://127.0.0.1:30002")
            out.append((label.strip(), url.strip()))
        return out

    def arms(self) -> list[tuple[str, str]]:
        arms = [(self.baseline_label, self.baseline_url)] if self.baseline_url else []
        if self.url:
            arms.append((self.label, self.url))
        arms += self.also_arms()
        if not arms:
            raise KitInputError("give --url (and optionally --baseline-url)")
        labels = [lab for lab, _ in arms]
        if len(set(labels)) < len(labels):
            raise KitInputError(f"arm labels {labels}: each arm needs its own label (--label, --also-url LABEL=URL)")
        return [(lab, u.rstrip("/")) for lab, u in arms]


# --- the run directory: fresh per run, or resumed on request ---

RUNS_ROOT = Path("runs") / "bench"
RUN_CONFIG = "config.json"
# what a run measures: a resumed run keeps these (URLs, timeouts, the log file may change)
MEASURED_SETTINGS = (
    "api", "engine", "prompts", "num_prompts", "max_new_tokens", "temperature", "ignore_eos", "concurrency", "warmup",
    "warmup_max_new_tokens", "repeats", "stream", "interleave", "flush_cache", "chat_template", "model", "label", "baseline_label",
)  # fmt: skip
# not stored: where the run lives and how it is shown
_NOT_STORED = ("out_dir", "resume", "progress", "json")


def default_run_dir(cfg: BenchConfig, root: Path = RUNS_ROOT) -> Path:
    """runs/bench/<UTC time>-<labels>, e.g. runs/bench/20261130-141500-baseline-vs-spec (never an existing one)."""
    name = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + "-vs-".join(lab for lab, _ in cfg.arms())
    out, n = root / name, 2
    while out.exists():
        out, n = root / f"{name}-{n}", n + 1
    return out


def resumable(path: str | os.PathLike) -> dict[str, str | None]:
    """`out_dir`/`resume` for a directory the caller names itself (a sweep point, a notebook's folder):
    a fresh run the first time, resumed (and said so) once it holds a run. `BenchConfig(..., **resumable(p))`."""
    p = Path(path)
    return {"out_dir": None, "resume": str(p)} if (p / RUN_CONFIG).exists() else {"out_dir": str(p), "resume": None}


def open_run(cfg: BenchConfig) -> tuple[BenchConfig, Path, bool]:
    """(the settings to run with, the run directory, resumed?) — checked, nothing created yet."""
    if cfg.resume:
        d = Path(cfg.resume)
        if cfg.out_dir and Path(cfg.out_dir) != d:
            raise KitInputError(f"--out-dir {cfg.out_dir} and --resume {d}: give one of them")
        try:
            stored = json.loads((d / RUN_CONFIG).read_text())
        except (OSError, json.JSONDecodeError):
            raise KitInputError(f"--resume {d}: not a kit bench run directory (no readable {RUN_CONFIG})")
        return _resumed_config(cfg, stored, d), d, True
    if cfg.out_dir:
        d = Path(cfg.out_dir)
        if d.exists() and (not d.is_dir() or any(d.iterdir())):
            raise KitInputError(
                f"--out-dir {d}: exists and is not empty; choose a new directory, or --resume {d} to continue that run"
            )
        cfg.arms()  # no arm is a user error too, before anything is created
        return cfg, d, False
    return cfg, default_run_dir(cfg), False


def _resumed_config(cfg: BenchConfig, stored: dict[str, Any], d: Path) -> BenchConfig:
    """The stored settings, with the flags given now: a measured setting may not change."""
    defaults = BenchConfig()
    merged, conflicts = {}, []
    for f in fields(BenchConfig):
        if f.name in _NOT_STORED or f.name not in stored:
            continue
        now, then = getattr(cfg, f.name), stored[f.name]
        if now == getattr(defaults, f.name):
            merged[f.name] = then
        elif f.name in MEASURED_SETTINGS and now != then:
            conflicts.append(f"--{f.name.replace('_', '-')} {now} (the run used {then})")
    if conflicts:
        raise KitInputError(
            f"--resume {d}: " + "; ".join(conflicts) + ": a resumed run keeps its settings; start a new run instead"
        )
    return replace(cfg, **merged, out_dir=None, resume=str(d))


def resume_note(out: Path, reqs: list[dict], cfg: BenchConfig, done: dict[tuple[str, int], set[str]]) -> str:
    """What a resumed run reuses and what it still sends, in one line."""
    want = {r["rid"] for r in reqs}  # what each arm x repeat sends
    total = cfg.repeats * len(cfg.arms()) * len(want)
    reused = sum(len(ids & want) for ids in done.values())
    parts = [f"{lab}#{rep} {len(ids & want)}/{len(want)}" for (lab, rep), ids in done.items() if ids & want]
    head = f"resuming {out}: reusing {reused} of {total} completed request(s)"
    if parts:
        head += " (" + ", ".join(parts) + ")"
    return head + (f"; sending {total - reused}" if total > reused else "; nothing left to send, re-scoring")


# --- prompts ---


def load_prompts(spec: str) -> list[dict]:
    """[{"id", "kind", "text"}] from kit.prompts (built-in set or a user JSONL)."""
    from kit import prompts as kp

    if spec == "builtin" or spec.startswith("builtin:"):
        kind = spec.split(":", 1)[1] if ":" in spec else None
        items = kp.builtin_prompts(kind=kind)
        if kind is None:  # the first N mix chat/code/math
            items = kp.interleave_kinds(items)
    else:
        items = kp.load_prompts_jsonl(spec)
    out = [
        {
            "id": str(p.get("id") or f"p{i:03d}"),
            "kind": p.get("kind") or "user",
            "text": p.get("text") or p.get("prompt"),
        }
        for i, p in enumerate(items)
    ]
    if not out:
        raise KitInputError(f"prompts {spec!r}: no prompts")
    return out


def request_list(prompts: list[dict], n: int) -> list[dict]:
    """n requests cycling over the prompts; request ids stay stable across reruns (resume key)."""
    k = len(prompts)
    return [{**prompts[i % k], "rid": f"{prompts[i % k]['id']}#{i // k}"} for i in range(n or k)]


# --- records file (append-only, resumable) ---


class RecordLog:
    """Append-only JSONL; each line is flushed when written so a crash loses nothing written."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def read(self) -> list[dict]:
        out = []
        for line in self.path.read_text().splitlines() if self.path.exists() else ():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a crash mid-write: that request reruns
                continue
        return out

    def append(self, obj: dict) -> None:
        line = json.dumps(obj, default=str, separators=(",", ":"))
        with self._lock, open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()


def read_records(path: str | os.PathLike) -> list[RequestRecord]:
    """The request records of a records.jsonl file, typed (any kit version's lines; a cut last line is skipped)."""
    return [RequestRecord.from_dict(d) for d in RecordLog(Path(path)).read()]


def completed_ids(records: list[RequestRecord], label: str, repeat: int) -> set[str]:
    return {r.rid for r in records if r.label == label and r.repeat == repeat and r.ok and not r.warmup}


# --- running an arm ---


async def _run_requests(
    client, base, api, reqs, cfg, model, log: RecordLog, tags: dict, desc: str, render, extra: dict | None
) -> list[RequestRecord]:
    from tqdm import tqdm

    sem = asyncio.Semaphore(cfg.concurrency)
    out: list[RequestRecord] = []
    bar = tqdm(total=len(reqs), desc=desc, disable=not cfg.progress or not reqs, leave=False)
    # resolved once: every request builds its payload and reads its answer through the engine, and an
    # unpinned SGLang engine reads the installed release's metadata on each use (~1 ms on the event loop)
    engine = get_engine(cfg.engine).pinned()

    async def one(req):
        async with sem:
            text = render(req["text"]) if render else req["text"]
            rec = await send_one(client, base, api, text, cfg, model, extra, engine)
        # the slot just freed woke the next request; yielding once lets it go out before this one's record
        # is serialized and written (~0.3 ms), instead of after
        await asyncio.sleep(0)
        for k, v in tags.items():  # label, repeat, session, warmup: RequestRecord fields
            setattr(rec, k, v)
        rec.rid, rec.kind = req["rid"], req.get("kind")
        log.append(rec.to_dict())  # written as soon as it completes
        out.append(rec)
        bar.update(1)

    try:
        await asyncio.gather(*(one(r) for r in reqs))
    finally:
        bar.close()
    return out


@dataclass
class _Arm:
    """One arm between `open_arm` and `close_arm`: its run record so far, and what its requests need."""

    run: RunRecord
    engine: Engine
    extra: dict | None  # body fields every request adds (`Engine.request_extra`)
    log_off: int | None  # the server log's size when the measured requests began; None: no log is read
    via: Any  # what carries the requests: a `stream_session`, else the httpx client
    log: RecordLog
    render: Any

    async def send(self, reqs: list[dict], cfg: BenchConfig, warmup: bool = False) -> None:
        """Send `reqs` to this arm's server, each record tagged with its label, repeat and session."""
        run = self.run
        tags = {"label": run.label, "repeat": run.repeat, "session": run.session}
        if warmup:
            tags["warmup"] = True
        desc = f"{run.label}#{run.repeat}" + (" warmup" if warmup else "")
        await _run_requests(
            self.via, run.url, run.api, reqs, cfg, run.model, self.log, tags, desc, self.render, self.extra
        )


async def open_arm(client, label: str, base: str, repeat: int, reqs: list[dict], cfg: BenchConfig, log: RecordLog,
                   render=None, transport=None) -> _Arm:  # fmt: skip
    """Before an arm's measured requests: probe, flush, warm up, flush, snapshot. Returns the arm's state."""
    engine = get_engine(cfg.engine)
    probe = await probe_server(client, base, engine)
    run = RunRecord(label=label, repeat=repeat, session=uuid.uuid4().hex[:8], url=base, api=cfg.api,
                    model=cfg.model or probe.model, sglang=probe.sglang, engine=engine.name)  # fmt: skip
    extra = engine.request_extra(run.api) if run.sglang else None
    arm = _Arm(run, engine, extra, None, transport or client, log, render)
    if cfg.flush_cache:
        await flush_cache(client, base, engine)
    if cfg.warmup:
        warm = [{**reqs[i % len(reqs)], "rid": f"warmup{i}"} for i in range(cfg.warmup)]
        await arm.send(warm, replace(cfg, max_new_tokens=cfg.warmup_max_new_tokens or cfg.max_new_tokens), True)
    run.flushed = await flush_cache(client, base, engine) if cfg.flush_cache else False
    # the server log is the --url arm's: another arm's window would read that server's decode lines as its own
    if cfg.log_path and label == cfg.label and os.path.exists(cfg.log_path):
        arm.log_off = os.path.getsize(cfg.log_path)
    run.metrics_before = await snapshot_metrics(client, base, engine)
    run.t_start = time.time()
    return arm


async def close_arm(client, arm: _Arm, cfg: BenchConfig, runs: RecordLog, resumed: bool) -> RunRecord:
    """After an arm's measured requests: snapshot, read the log lines written meanwhile, record the run."""
    run, engine = arm.run, arm.engine
    run.t_end, run.resumed = time.time(), resumed
    run.metrics_after = await snapshot_metrics(client, run.url, engine)
    run.server_info_after = (await server_info(client, run.url, engine)) if run.sglang else None
    if arm.log_off is not None:
        with open(cfg.log_path, "rb") as f:
            f.seek(arm.log_off)
            run.log_accept_lengths = log_accept_lengths(f.read().decode("utf-8", "replace"), engine)
    runs.append(run.to_dict())
    return run


async def run_arms(client, arms: list[tuple[str, str]], repeat: int, reqs: list[dict], cfg: BenchConfig,
                   log: RecordLog, runs: RecordLog, done: dict, render=None, transport=None) -> None:  # fmt: skip
    """One repeat of the arms' not-yet-completed requests, one arm after another (`open_arm`, send, `close_arm`);
    with `cfg.interleave` every arm is opened, then the requests go in turns of `concurrency` to each arm, the
    order rotating, so a request and its twins run seconds apart under the same load (what paired ratios need).
    `transport` (`kit.measure.client.stream_session`) carries the requests when given; `client` the probes."""
    todo = {lab: [r for r in reqs if r["rid"] not in done[(lab, repeat)]] for lab, _ in arms}
    live = [(lab, base) for lab, base in arms if todo[lab]]
    step = cfg.concurrency if cfg.interleave else len(reqs)
    for group in [live] if cfg.interleave else [[arm] for arm in live]:
        if not group:
            continue
        state = {
            lab: await open_arm(client, lab, base, repeat, reqs, cfg, log, render, transport) for lab, base in group
        }
        for i in range(0, len(reqs), step):
            ids = {r["rid"] for r in reqs[i : i + step]}
            turn = (i // step + repeat) % len(group)  # the order rotates: no arm always runs first
            for lab, _ in group[turn:] + group[:turn]:
                if batch := [r for r in todo[lab] if r["rid"] in ids]:
                    await state[lab].send(batch, cfg)
                    state[lab].run.requests += len(batch)
        for lab, _ in group:
            await close_arm(client, state[lab], cfg, runs, bool(done[(lab, repeat)]))


async def _bench(cfg: BenchConfig, out: Path, reqs: list[dict], done: dict[tuple[str, int], set[str]]) -> None:
    import httpx

    render = chat_renderer(cfg.chat_template) if cfg.api != "chat" else None
    if render:  # rendered once before anything is in flight: a chat template costs the event loop ~1 ms
        render = {r["text"]: render(r["text"]) for r in reqs}.__getitem__
    log, runs = RecordLog(out / "records.jsonl"), RecordLog(out / "runs.jsonl")
    limits = httpx.Limits(max_connections=cfg.concurrency + 4, max_keepalive_connections=cfg.concurrency + 4)
    transport = stream_session(cfg.concurrency, cfg.timeout_s) if cfg.stream else None
    try:
        with kmach.Watch(out / "machine.jsonl"):  # what else the host does while the arms run (`kit.measure.machine`)
            async with httpx.AsyncClient(timeout=cfg.timeout_s, limits=limits, trust_env=False) as client:
                for repeat in range(cfg.repeats):
                    await run_arms(client, cfg.arms(), repeat, reqs, cfg, log, runs, done, render, transport)
    finally:
        if transport is not None:
            await transport.close()


# --- results ---


@dataclass
class BenchResult:
    out_dir: Path
    records: list[RequestRecord]
    runs: list[RunRecord]
    # summary.json's document, its keys the file's: "runs" (a row per arm x repeat), "labels" (per arm:
    # `km.ServingSummary.to_dict` + "output_tok_s_runs" + "accept_sources"), "accept_sources" (per arm, every
    # `km.AcceptSource` as a dict; typed: `accept_sources(label)`), "speedup" (unpaired), "paired_speedup" (per
    # request), "launch_speedup" (`km.launch_speedup`: the one the summary, the figures and notebook 05 show), "resumed"
    summary: dict[str, Any]
    report: Report
    config: dict[str, Any] = field(default_factory=dict)  # the run's stored settings (config.json)

    def table(self):
        """One row per label x repeat (pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame(self.summary["runs"])

    def block(self) -> str:
        """The printed summary: per arm, sglang.bench_serving's block (ms) and the acceptance sources;
        then the speedup of each arm over the baseline."""
        apis = {r.api for r in self.records if r.api}
        backend = ", ".join(f"{a} ({API_PATHS.get(a, a)})" for a in sorted(apis)) or "n/a"
        lines: list[str] = []
        for label, agg in self.summary["labels"].items():
            s = km.ServingSummary.from_dict(agg)
            lines += km.serving_block(s, label, backend, self.config.get("concurrency"), self.accept_sources(label))
            lines += [kmach.brief(agg["machine"]), ""] if agg.get("machine") else [""]
        base = self.config.get("baseline_label", "baseline")
        launch = self.summary.get("launch_speedup") or {}
        for lab, ci in (self.summary.get("speedup") or {}).items():
            sp = launch.get(lab)
            if sp and sp.get("inconclusive"):  # no headline: why, and what would settle it
                lines.append(f"Speedup {lab} vs {base}: inconclusive: {sp['inconclusive']}")
            elif sp:  # the one figure the run's summary, figures and notebook 05 show
                lo, hi = sp["ci95"]
                interval = f"95% interval [{lo:.3f}, {hi:.3f}]  " if lo == lo and hi == hi else ""
                lines.append(f"Speedup {lab} vs {base}: {sp['median']:.3f}x paired median  {interval}"
                             f"(n {sp['n']} {sp['pairing']}s)")  # fmt: skip
            else:
                lines.append(
                    f"Speedup {lab} vs {base}: {ci['speedup']:.3f}x  95% t-interval [{ci['t_low']:.3f}, {ci['t_high']:.3f}]  "
                    f"bootstrap [{ci['boot_low']:.3f}, {ci['boot_high']:.3f}]  ({ci['n_baseline']} vs {ci['n_spec']} runs)"
                )
        return "\n".join(lines).rstrip()

    def accept_sources(self, label: str) -> dict[str, km.AcceptSource]:
        """The acceptance sources of the arm `label` (its last session's), typed; `summary["accept_sources"]`
        holds them as summary.json does."""
        stored = (self.summary.get("accept_sources") or {}).get(label) or {}
        return {name: km.AcceptSource(**s) for name, s in stored.items()}

    def describe(self) -> str:
        """Which data, in one line (figure titles): model, prompts, settings."""
        c = self.config
        models = sorted({str(r.model) for r in self.runs if r.model})
        n = c.get("num_prompts")
        parts = (
            f"model {', '.join(models)}" if models else "",
            f"prompts {c['prompts']}" + (f" x{n}" if n else "") if c.get("prompts") else "",
            f"{c['max_new_tokens']} new tokens" if c.get("max_new_tokens") else "",
            f"temperature {c['temperature']}" if c.get("temperature") is not None else "",
            f"concurrency {c['concurrency']}" if c.get("concurrency") else "",
            f"{c['repeats']} repeat(s)" if c.get("repeats") else "",
            f"api {c['api']}" if c.get("api") else "",
            kmach.brief(self.summary["machine"]) if self.summary.get("machine") else "",
        )
        return ", ".join(p for p in parts if p)


def analyze(
    records: list[RequestRecord],
    runs: list[RunRecord],
    baseline_label: str = "baseline",
    expected_accept_length: float | None = None,
    static_findings=(),
    machine: list[dict] | None = None,
) -> tuple[dict, Report]:
    """Summaries per label x repeat and per label, acceptance sources, speedup CI, findings; `machine` (the
    run's `machine.jsonl` samples) gives each label what the host did while its requests ran."""
    report = Report()
    labels = list(dict.fromkeys(r.label for r in records if r.label is not None))
    watched = kmach.by_label(machine or [], records)
    rows, per_label, source_detail = [], {}, {}
    for label in labels:
        lrec = [r for r in records if r.label == label]
        for rep in sorted({r.repeat for r in lrec}):
            s = km.summarize([r for r in lrec if r.repeat == rep]).to_dict()
            rows.append({"label": label, "repeat": rep, **{k: v for k, v in s.items() if k != "accept_histogram"}})
        summ = km.summarize(lrec)
        agg = summ.to_dict()  # summary.json's entry: ServingSummary's fields, the runs' tok/s, the sources
        agg["output_tok_s_runs"] = [r["output_tok_s"] for r in rows if r["label"] == label]
        agg["machine"] = watched.get(label)
        sources: dict[str, km.AcceptSource] = {}
        for info in [x for x in runs if x.label == label]:
            srec = [r for r in lrec if r.session == info.session]
            src = km.acceptance_sources(srec, info)
            report.extend(km.reconcile_acceptance(src, f"{label}#{info.repeat}"))
            sources = src  # the last session's sources are shown; each one was reconciled
        agg["accept_sources"] = {k: v.value for k, v in sources.items()}
        source_detail[label] = {k: asdict(v) for k, v in sources.items()}
        per_label[label] = agg
        report.extend(_label_findings(label, lrec, summ, label == baseline_label))
    summary: dict[str, Any] = {"runs": rows, "labels": per_label, "accept_sources": source_detail,
                               "machine": kmach.summarize(machine or [])}  # fmt: skip
    if baseline_label in per_label:
        for label in labels:
            if label == baseline_label:
                continue
            ci = km.speedup_ci(per_label[baseline_label]["output_tok_s_runs"], per_label[label]["output_tok_s_runs"])
            summary.setdefault("speedup", {})[label] = ci
            ratios = km.paired_ratios(records, baseline_label, label)
            if ratios:  # the same request under both arms: per-request ratios, median + bootstrap interval
                summary.setdefault("paired_speedup", {})[label] = km.paired_speedup(ratios)
            busy = kmach.busy_reason(watched.get(baseline_label)) or kmach.busy_reason(watched.get(label))
            launch = km.launch_speedup(
                rows, records, baseline_label, label, per_label[label].get("accept_length"), busy
            )
            if launch:  # the one speedup every output of a run shows (per repeat, else per request)
                summary.setdefault("launch_speedup", {})[label] = launch
                if launch["inconclusive"]:
                    ev = {k: launch[k] for k in ("median", "ci95", "n", "tok_s_ratio")}
                    fix = "more prompts or repeats, `--quiet-check` (wait for a quiet machine), a machine of its own; "
                    fix += "the accept length does not depend on the clock and stands"
                    title = f"{label}: speedup inconclusive: {launch['inconclusive']}"
                    report.add(SPEEDUP_UNCERTAIN(title, evidence=ev, fix=fix))
            if len(ratios) < 2:  # with paired requests their interval is the evidence, not the runs'
                report.extend(km.speedup_findings(ci, label))
    spec_labels = [lab for lab in labels if lab != baseline_label and per_label[lab].get("accept_length")]
    if expected_accept_length is not None and spec_labels:
        from kit.measure.verdict import verdict

        for lab in spec_labels:
            report.extend(verdict(per_label[lab]["accept_length"], expected_accept_length, static_findings, label=lab))
    keys = ("output_tok_s", "req_s", "accept_length", "ttft_p50_s", "itl_p50_s", "e2e_p50_s")
    report.facts = jsonable({"bench": {lab: {k: per_label[lab].get(k) for k in keys} for lab in labels}})
    return summary, report


def _label_findings(label: str, lrec: list[RequestRecord], summ: km.ServingSummary, baseline: bool) -> list:
    """Failed requests, client/server token counts apart, speculation where it should (not) be, for one arm."""
    out, ok = [], km.measured(lrec)
    if failed := [r for r in lrec if not r.ok and not r.warmup]:
        ev = {"first_error": failed[0].error, "count": len(failed)}
        fix = "read the server log; rerun the same command to retry only the failed requests"
        out.append(REQUEST_ERRORS(f"{label}: {len(failed)} request(s) failed", evidence=ev, fix=fix))
    streamed = [r for r in ok if r.api != "sglang" and len(r.chunk_tok) > 1 and r.client_tokens]
    if mism := [r for r in streamed if r.completion_tokens not in (None, r.client_tokens)]:
        title = f"{label}: streamed chunks != server completion_tokens in {len(mism)} request(s)"
        ev = {"example_client": mism[0].client_tokens, "example_server": mism[0].completion_tokens}
        fix = "expected when the server packs several tokens per chunk (speculative decoding); totals use the server's"
        out.append(TOKEN_COUNT_MISMATCH(title, evidence=ev, fix=fix + " count, ITL spreads chunk gaps per token"))
    has_spec = summ.accept_requests_with_spec > 0
    if baseline and has_spec:
        fix = "launch the baseline without --speculative-algorithm; otherwise the speedup compares speculation with itself"
        title = f"{label}: the baseline server reports speculative fields"
        out.append(BASELINE_IS_SPECULATIVE(title, evidence={"accept_length": summ.accept_length}, fix=fix))
    if not baseline and not has_spec and ok:
        fix = "use --api sglang (/generate meta_info) or an SGLang with return_spec_tokens_details; check the server "
        title, ev = f"{label}: no request reported acceptance (spec_verify_ct)", {"api": ok[0].api, "requests": len(ok)}
        out.append(NO_ACCEPTANCE(title, evidence=ev, fix=fix + "runs with speculation"))
    return out


def run_bench(cfg: BenchConfig, static_findings=(), prompts: list[dict] | None = None, note=None) -> BenchResult:
    """Run every arm x repeat into a fresh run directory (or the one `cfg.resume` names) and score it.

    `prompts` ([{"id", "kind", "text"}]) overrides `cfg.prompts`; `static_findings` (kit doctor's) feed the
    verdict's probable causes; `note(line)` hears what a resumed run reused (default: stderr). Every input, and
    every server that still has requests to answer, is checked before anything is created or sent."""
    import sys

    note = note or (lambda line: print(f"kit bench: {line}", file=sys.stderr))
    cfg, out, resumed = open_run(cfg)
    reqs = request_list(prompts or load_prompts(cfg.prompts), cfg.num_prompts)
    existing = read_records(out / "records.jsonl") if resumed else []
    done = {(lab, rep): completed_ids(existing, lab, rep) for rep in range(cfg.repeats) for lab, _ in cfg.arms()}
    ids = {r["rid"] for r in reqs}
    flags = {cfg.baseline_label: "--baseline-url", cfg.label: "--url"}
    for lab, base in cfg.arms():
        if any(ids - done[(lab, rep)] for rep in range(cfg.repeats)):
            check_server(base, flags.get(lab, "--also-url"), engine=cfg.engine)
    if cfg.quiet_check:
        if busy := kmach.wait_quiet():
            raise KitInputError(f"--quiet-check: the machine stayed busy for 60 s ({busy}); measure when it is quiet")
    if resumed:
        note(resume_note(out, reqs, cfg, done))
    else:
        out.mkdir(parents=True, exist_ok=True)
        doc = {k: v for k, v in asdict(cfg).items() if k not in _NOT_STORED}
        (out / RUN_CONFIG).write_text(json.dumps(doc, indent=2))
    run_sync(_bench(cfg, out, reqs, done))
    res = load_result(out, cfg.baseline_label, cfg.expected_accept_length, static_findings)
    if resumed:
        res.summary["resumed"] = {"reused": sum(len(v & ids) for v in done.values())}
    return res


def payoff(result: BenchResult, labels: dict[str, str | None]) -> dict[str, dict | None]:
    """The launch speedup (`kit.measure.metrics.launch_speedup`, summary.json's `launch_speedup`) per named arm
    (`{name: its label}`); None for an arm without paired runs or requests."""
    sp = result.summary.get("launch_speedup") or {}
    return {name: sp.get(label) if label else None for name, label in labels.items()}


def load_result(
    out_dir, baseline_label: str = "baseline", expected_accept_length: float | None = None, static_findings=()
) -> BenchResult:
    """Re-score a bench directory from its JSONL files (no server needed)."""
    out = Path(out_dir)
    records = read_records(out / "records.jsonl")
    runs = [RunRecord.from_dict(d) for d in RecordLog(out / "runs.jsonl").read()]
    if not records:
        raise KitInputError(f"{out / 'records.jsonl'}: no records")
    machine = kmach.read_samples(out / "machine.jsonl")
    summary, report = analyze(records, runs, baseline_label, expected_accept_length, static_findings, machine)
    doc = {**summary, "findings": report.to_dict()}
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(jsonable(doc), indent=2, default=str))
    tmp.replace(out / "summary.json")
    stored = out / RUN_CONFIG
    config = json.loads(stored.read_text()) if stored.exists() else {}
    return BenchResult(out, records, runs, summary, report, config)


def jsonable(v: Any) -> Any:
    """NaN/inf -> None recursively (json.dumps would write the invalid token NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(parser, BenchConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(BenchConfig, args)
    res = run_bench(cfg)
    if not cfg.json:
        print(res.block())
        print(f"\nrun directory: {res.out_dir}  (records.jsonl, runs.jsonl, summary.json)\n")
    return emit(res.report, cfg.json)
