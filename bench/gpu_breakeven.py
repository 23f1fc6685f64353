"""Where SGLang's EAGLE-3 chain pays on this GPU: per-iteration costs at several target sizes -> break-even.

`kit demo --gpu` measures SGLang's speedup on the 135M SmolLM2 target; this measures why it is what it is.
Per target size it starts a baseline server and an EAGLE3 2-1-3 server, launched as `kit demo --gpu`
launches its own (`kit.demo_gpu.one_gpu`: the seed's line adapted to one GPU, CUDA graphs for batch 1..4,
the bundle's flags), plus a 1-1-2 chain at `--probe-sizes` (one draft step's cost: the slope over num_steps):

    135m          the demo's own target (the embedded SmolLM2) and draft (the shipped one)
    360m .. 7b    the SmolLM2 architecture wider and deeper, `--load-format dummy` (the same kernels as real
                  weights, no checkpoint), each with a random-weight one-layer EAGLE-3 draft of its width
                  (the shipped draft's 12000-token vocabulary and d2t map: SGLang's same hot-token path)

All servers start together on the one GPU (each `--mem-fraction-static 0.85` with a small KV pool: SGLang
keeps 15% of what was free at its start as headroom and takes only what the pool needs), idle ones sleep
(`--sleep-on-idle`), one short request each compiles first-use kernels in parallel, then each server is
measured alone: batch-1 greedy streamed requests of 128 new tokens with ignore_eos, a few passes.

    baseline  t_decode    = decode time / (completion tokens - the prefill's first)
    EAGLE3    t_iteration = decode time / spec_verify_ct      (a chain's iteration runs the same kernels
                                                               whatever is accepted: random drafts are fine)

`kit.measure.breakeven` turns these into each size's break-even accept length and predicted speedup, the
smallest target at which `--accept-length` (default: the recorded demo's SGLang figure) pays, and at 135M
the predicted speedup beside `--measured-speedup` (default: the recorded demo's paired median) and beside
this run's own 135M tok/s ratio.

    PYTHONPATH=$SITE:$PWD KIT_CACHE_DIR=$W/cache HF_HUB_OFFLINE=1 \
        python3 bench/gpu_breakeven.py --work $W --out OUT [--timeout-s 300] [--measured-speedup 0.93]
    python bench/gpu_breakeven.py --work $W --out OUT --dry-run   # build the dirs, print the lines, start nothing

The random drafts (~1.7 GB) are written once under WORK/breakeven/drafts: a `--dry-run` first keeps their
writing out of the timed run. OUT/breakeven.json is written after every phase and at the end, with every
error recorded; per-request records go to OUT/records.jsonl and the server logs to WORK/breakeven/logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _run import Record, emit  # noqa: E402

from kit.sglang.params import SpecParams  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECORDED_DEMO = REPO / "docs" / "results" / "h200_gpu_demo_20261203" / "summary.json"
DEMO_SIZE = "135m"
# seconds of the run kept, once every server was started, for the warm-up, the measurements and the stops
RESERVE_S = 110.0

# the SmolLM2 architecture at larger widths and depths (head_dim = hidden / heads); 135m is the embedded
# target's own config, 360m and 1.7b are SmolLM2's, 3b and 7b the usual Llama shapes
SIZES: dict[str, dict[str, int]] = {
    "135m": {},
    "360m": {"hidden_size": 960, "num_hidden_layers": 32, "num_attention_heads": 15, "num_key_value_heads": 5,
             "intermediate_size": 2560},
    "1.7b": {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 32,
             "intermediate_size": 8192},
    "3b": {"hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
           "intermediate_size": 8192},
    "7b": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
           "intermediate_size": 11008},
}  # fmt: skip
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json",
                   "special_tokens_map.json")  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    sizes: tuple[str, ...] = ("135m", "360m", "1.7b", "7b")
    probe_sizes: tuple[str, ...] = ("135m",)  # a 1-1-2 chain beside the 2-1-3 one: one draft step's cost
    num_prompts: int = 3
    repeats: int = 2
    max_new_tokens: int = 128
    spec: SpecParams = field(default_factory=lambda: SpecParams(2, 1, 3))
    cuda_graph_max_bs: int = 4
    # every server fills at most this share (weights + its capped KV pool; SGLang keeps 1 - share of the memory
    # free at its start as headroom), so servers starting together all find room
    mem_fraction_static: float = 0.85
    max_total_tokens: int = 8192
    # idle servers wait on their sockets instead of polling in a loop, so the one measured has the CPU
    sleep_on_idle: bool = True
    timeout_s: float = 300.0


@dataclass(frozen=True)
class Server:
    """One server of the run: a size, its arm (baseline / eagle3 / eagle3_probe) and its chain."""

    size: str
    arm: str
    steps: int | None = None  # num_steps of the chain (None: no speculation)

    @property
    def name(self) -> str:
        return f"{self.size}_{self.arm}"


def servers_of(plan: Plan) -> list[Server]:
    out = []
    for s in plan.sizes:
        out += [Server(s, "baseline"), Server(s, "eagle3", plan.spec.speculative_num_steps)]
        if s in plan.probe_sizes and plan.spec.speculative_num_steps > 1:
            out.append(Server(s, "eagle3_probe", plan.spec.speculative_num_steps - 1))
    return out


# ---------------------------------------------------------------------------------------------
# model dirs: the demo's own target and draft at 135M; above it config-only targets (the embedded tokenizer
# copied) loaded with dummy weights, and random-weight drafts of the target's width (with the shipped draft's
# reduced vocabulary and its d2t map, so SGLang takes the same hot-token path as with the shipped draft)
# ---------------------------------------------------------------------------------------------
def target_config(base: dict, size: str) -> dict:
    cfg = {**base, **SIZES[size]}
    cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    cfg.pop("_model_name_or_path", None)
    return cfg


def aux_ids(layers: int) -> list[int]:
    """Capture points placed like the shipped draft's (1, 14, 26 of 30 layers)."""
    return [1, layers // 2 - 1, layers - 4]


def write_draft(out: Path, target: dict, draft_vocab_size: int) -> Path:
    """A random one-layer EAGLE-3 draft (SGLang layout, bf16) for `target`, written once."""
    from kit.checkpoint.random_draft import write_random_draft
    from kit.hf import HFConfig

    want = {"hidden_size": target["hidden_size"], "intermediate_size": target["intermediate_size"]}
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        have = json.loads((out / "config.json").read_text())
        if all(have.get(k) == v for k, v in want.items()) and have.get("draft_vocab_size") == draft_vocab_size:
            return out
    return write_random_draft(out, layout="sglang", target_config=HFConfig.of(target), draft_vocab_size=draft_vocab_size,
                              aux_layer_ids=aux_ids(target["num_hidden_layers"]), dtype="bfloat16")  # fmt: skip


def build_dirs(plan: Plan, root: Path) -> dict[str, dict[str, Any]]:
    """Each size's target and draft dir: 135M is the embedded target and the shipped draft as they are;
    the others WORK/breakeven/{targets,drafts}/<size>/."""
    from kit.hf import HFConfig
    from kit.measure.breakeven import llama_params
    from kit.models import embedded_dir, shipped_draft

    emb, shipped = embedded_dir(), shipped_draft()
    base = json.loads((emb / "config.json").read_text())
    draft_vocab = json.loads((shipped / "config.json").read_text())["draft_vocab_size"]
    out = {}
    for size in plan.sizes:
        tcfg = target_config(base, size)
        if size == DEMO_SIZE:
            t, d, dummy = emb, shipped, False
        else:
            t, dummy = root / "targets" / size, True
            t.mkdir(parents=True, exist_ok=True)
            (t / "config.json").write_text(json.dumps(tcfg, indent=1))
            for f in TOKENIZER_FILES:
                if (emb / f).exists():
                    shutil.copy(emb / f, t / f)
            d = write_draft(root / "drafts" / size, tcfg, draft_vocab)
        out[size] = {
            "target": str(t),
            "draft": str(d),
            "dummy_weights": dummy,
            "params": llama_params(HFConfig.of(tcfg)),
            "hidden": tcfg["hidden_size"],
            "layers": tcfg["num_hidden_layers"],
        }
    return out


def make_specs(plan: Plan, dirs: dict, logs: Path, version: str | None) -> dict[Server, Any]:
    """Each server's LaunchSpec, as `kit demo --gpu` builds its own (`one_gpu`), with its own HTTP and NCCL
    ports, the plan's memory share, and dummy target weights where the size has no checkpoint (the draft's
    own weights are loaded)."""
    from kit.demo_gpu import GpuPlan, one_gpu
    from kit.serving import launch as kl
    from kit.serving.process import free_port
    from kit.sglang.cmdline import SEED_LAUNCH

    gp = GpuPlan(
        spec=plan.spec,
        servers=1,  # the memory share is set here, for servers of different sizes
        cuda_graph_max_bs=plan.cuda_graph_max_bs,
    )
    seed = kl.spec_from_command(SEED_LAUNCH)
    used: set[int] = set()

    def port() -> int:
        while (p := free_port()) in used:
            pass
        used.add(p)
        return p

    specs = {}
    for srv in servers_of(plan):
        d = dirs[srv.size]
        spec = one_gpu(seed, gp, d["target"], d["draft"], port(), logs / f"{srv.name}.log", version)
        extra = list(spec.extra_args) + ["--nccl-port", str(port()), "--max-total-tokens", str(plan.max_total_tokens)]
        if plan.sleep_on_idle:
            extra.append("--sleep-on-idle")
        if d["dummy_weights"]:
            extra += ["--load-format", "dummy"]
        change: dict[str, Any] = {"mem_fraction_static": plan.mem_fraction_static}
        if srv.steps is None:
            change.update(speculative_algorithm=None, speculative_draft_model_path=None, **SpecParams().given())
        else:
            chain = SpecParams(srv.steps, plan.spec.speculative_eagle_topk, srv.steps + 1)
            change.update(speculative_algorithm="EAGLE3", **chain.given())
            if d["dummy_weights"]:  # the draft's load format follows the target's unless told
                extra += ["--speculative-draft-load-format", "auto"]
        specs[srv] = spec.replace(extra_args=extra, **change)
    return specs


# ---------------------------------------------------------------------------------------------
# requests: the kit's client, streamed /generate, ignore_eos
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Opts:
    max_new_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    stream: bool = True


def _transport(timeout_s: float):
    """The transport `kit bench` streams over (`kit.measure.client.stream_session`: aiohttp), else httpx."""
    import httpx

    from kit.measure.client import stream_session

    return stream_session(4, timeout_s) or httpx.AsyncClient(timeout=timeout_s)


async def _requests(base: str, texts: list[str], opts: Opts, timeout_s: float) -> list:
    from kit.measure.client import send_one

    out = []
    async with _transport(timeout_s) as c:
        for t in texts:  # one at a time: batch 1
            out.append(await send_one(c, base, "sglang", t, opts, None, engine="sglang"))
    return out


def run_requests(base: str, texts: list[str], opts: Opts, timeout_s: float) -> list:
    t = max(timeout_s, 1.0)
    return asyncio.run(asyncio.wait_for(_requests(base, texts, opts, t), t))


def warm_all(bases: dict[str, str], text: str, timeout_s: float) -> dict[str, Any]:
    """One short request to every ready server at once: first-use kernel compilation happens here, in
    parallel, outside the measurement."""
    from kit.measure.client import send_one

    t = max(timeout_s, 1.0)

    async def go():
        async with _transport(t) as c:
            return await asyncio.gather(
                *(send_one(c, b, "sglang", text, Opts(16), None, engine="sglang") for b in bases.values())
            )

    recs = asyncio.run(asyncio.wait_for(go(), t))
    return {n: {"ok": r.ok, "error": r.error, "e2e_s": round(r.e2e, 2)} for n, r in zip(bases, recs)}


def request_costs(rec) -> dict[str, Any]:
    """One streamed request's prefill (TTFT), decode time, and per-token or per-iteration cost in ms."""
    if not rec.ok or len(rec.chunk_t) < 2:
        return {"ok": False, "error": rec.error or "fewer than two streamed chunks"}
    decode_s = rec.chunk_t[-1] - rec.chunk_t[0]
    tokens = rec.output_tokens
    decode_tokens = tokens - rec.chunk_tok[0]
    verify = rec.verify_ct
    row = {
        "ok": True,
        "ttft_ms": rec.ttft * 1e3,
        "decode_ms": decode_s * 1e3,
        "tokens": tokens,
        "decode_tokens": decode_tokens,
        "chunks": len(rec.chunk_t),
        "verify_ct": verify,
        "ms_per_token": decode_s * 1e3 / max(decode_tokens, 1),
        "tok_s": tokens / rec.e2e if rec.e2e else None,
    }
    if verify:
        # iterations between the first chunk and the last: one chunk each when the server streams every
        # iteration (then the first chunk, the prefill's token, is surely outside), else the verify count
        iters = len(rec.chunk_t) - 1 if abs(len(rec.chunk_t) - 1 - verify) <= 1 else verify
        row["iterations"] = iters
        row["ms_per_iteration"] = decode_s * 1e3 / iters
        row["accept_length"] = tokens / verify
    return row


def summarize(rows: list[dict]) -> dict[str, Any]:
    ok = [r for r in rows if r.get("ok")]
    med = lambda k: round(median(v), 4) if (v := [r[k] for r in ok if r.get(k) is not None]) else None  # noqa: E731
    return {
        "n": len(ok),
        "failed": len(rows) - len(ok),
        "t_decode_ms": med("ms_per_token"),
        "t_iteration_ms": med("ms_per_iteration"),
        "accept_length_observed": med("accept_length"),
        "ttft_ms": med("ttft_ms"),
        "tok_s": med("tok_s"),
    }


def prompts(n: int) -> list[str]:
    from kit.measure.bench import load_prompts
    from kit.models import chat_renderer, embedded_dir

    render = chat_renderer(str(embedded_dir()))
    return [render(p["text"]) for p in load_prompts("builtin")[:n]]


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
def recorded_defaults(accept_length: float | None, measured_speedup: float | None) -> dict[str, Any]:
    """--accept-length / --measured-speedup, else the recorded demo's (SGLang's observed fixed-launch accept
    length and its paired speedup), else the shipped draft's oracle accept length at 2-1-3."""
    out: dict[str, Any] = {"accept_length": accept_length, "measured_speedup": measured_speedup}
    out["accept_length_source"] = "--accept-length" if accept_length is not None else None
    out["measured_speedup_source"] = "--measured-speedup" if measured_speedup is not None else None
    if RECORDED_DEMO.exists():
        demo = json.loads(RECORDED_DEMO.read_text())
        if out["accept_length"] is None and (a := (demo.get("accept_length") or {}).get("fixed_launch")):
            out["accept_length"], out["accept_length_source"] = a, f"{RECORDED_DEMO.relative_to(REPO)} (fixed launch)"
        sp = ((demo.get("speedup") or {}).get("fixed_launch") or {}).get("median")
        if out["measured_speedup"] is None and sp is not None:
            out["measured_speedup"] = sp
            out["measured_speedup_source"] = f"{RECORDED_DEMO.relative_to(REPO)} (fixed launch, paired median)"
    if out["accept_length"] is None:
        from kit.models import shipped_draft

        tr = json.loads((shipped_draft() / "training.json").read_text())
        out["accept_length"] = tr["oracle"]["2-1-3@128"]["meta_accept_length"]
        out["accept_length_source"] = "shipped draft training.json (oracle 2-1-3@128)"
    return out


def analysis(doc: dict, plan: Plan, dirs: dict) -> dict[str, Any]:
    """The measured sizes (both arms measured) -> `kit.measure.breakeven.analyze`, and each probed size's
    draft step cost."""
    from kit.measure.breakeven import IterationCosts, SizePoint, analyze, draft_step_ms

    meas = doc["measured"]
    points, steps = [], {}
    for size in plan.sizes:
        b, e = meas.get(f"{size}_baseline") or {}, meas.get(f"{size}_eagle3") or {}
        if not (b.get("t_decode_ms") and e.get("t_iteration_ms")):
            continue
        d = dirs[size]
        points.append(SizePoint(size, d["params"], d["hidden"], d["layers"],
                                IterationCosts(b["t_decode_ms"], e["t_iteration_ms"])))  # fmt: skip
        p = meas.get(f"{size}_eagle3_probe") or {}
        if p.get("t_iteration_ms"):
            s = plan.spec.speculative_num_steps
            ds = draft_step_ms(e["t_iteration_ms"], s, p["t_iteration_ms"], s - 1)
            steps[size] = {
                "draft_step_ms": round(ds, 4),
                "rest_of_iteration_ms": round(e["t_iteration_ms"] - s * ds, 4),
                "t_decode_ms": b["t_decode_ms"],
            }
    if not points:
        raise RuntimeError("no size has both its baseline and its EAGLE3 server measured")
    demo_b, demo_e = meas.get(f"{DEMO_SIZE}_baseline") or {}, meas.get(f"{DEMO_SIZE}_eagle3") or {}
    prefill = {"baseline": demo_b.get("ttft_ms") or 0.0, "eagle3": demo_e.get("ttft_ms") or 0.0}
    inp = doc["inputs"]
    res = analyze(points, inp["accept_length"], at=DEMO_SIZE, measured_speedup=inp["measured_speedup"],
                  new_tokens=plan.max_new_tokens, prefill_ms=prefill)  # fmt: skip
    res["iteration_split"] = steps
    a_here = demo_e.get("accept_length_observed")
    if "at_demo_target" in res and a_here and demo_b.get("tok_s") and demo_e.get("tok_s"):
        # the 135M point runs the demo's own target and draft: its accept length and tok/s ratio here check
        # the model on this run's requests (128 tokens each, ignore_eos)
        c = IterationCosts(demo_b["t_decode_ms"], demo_e["t_iteration_ms"])
        res["at_demo_target"]["this_run"] = {
            "accept_length": a_here,
            "measured_speedup": round(demo_e["tok_s"] / demo_b["tok_s"], 4),
            "predicted_speedup": round(c.predicted_speedup(a_here), 4),
            "predicted_request_speedup": round(
                c.request_speedup(a_here, plan.max_new_tokens, prefill["baseline"], prefill["eagle3"]), 4
            ),
        }
    return res


def _stop_all(procs: dict) -> dict[str, Any]:
    res: dict[str, Any] = {}

    def one(n, p):
        try:
            res[n] = p.stop()
        except Exception as e:  # a server that will not stop is recorded, the others still stop
            res[n] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=one, args=(n, p)) for n, p in procs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return res


def first_line(e: BaseException) -> str:
    return next(iter(str(e).splitlines()), "") or type(e).__name__


def log_tail(path: str | None, n: int = 8) -> list[str]:
    if not path or not Path(path).exists():
        return []
    return Path(path).read_text(errors="replace").splitlines()[-n:]


def run(args) -> int:
    t_start = time.monotonic()
    deadline = t_start + args.timeout_s
    left = lambda: deadline - time.monotonic()  # noqa: E731
    out, work = Path(args.out), Path(args.work)
    plan = Plan(
        sizes=tuple(args.sizes.split(",")),
        probe_sizes=tuple(s for s in args.probe_sizes.split(",") if s),
        repeats=args.repeats,
        timeout_s=args.timeout_s,
    )
    bad = [s for s in plan.sizes + plan.probe_sizes if s not in SIZES]
    if bad or DEMO_SIZE not in plan.sizes:
        raise SystemExit(f"gpu_breakeven: --sizes: unknown {bad} or {DEMO_SIZE} missing (known: {', '.join(SIZES)})")
    out.mkdir(parents=True, exist_ok=True)
    run_ = Record(
        out, "breakeven.json", {"plan": asdict(plan), "dry_run": args.dry_run, "measured": {}}, echo="gpu_breakeven"
    )
    run_.doc["inputs"] = recorded_defaults(args.accept_length, args.measured_speedup)
    root = work / "breakeven"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs: dict[str, Any] = {}
    try:
        from kit.sglang.versions import installed_version

        version = installed_version()
        run_.doc["machine"] = {"sglang": version, "python": sys.version.split()[0]}
        dirs = build_dirs(plan, root)
        run_.doc["sizes"] = dirs
        specs = make_specs(plan, dirs, logs, version or "0.5.17")
        run_.doc["commands"] = {s.name: specs[s].command() for s in specs}
        for s in specs:
            print(f"{s.name}: {specs[s].command()}", flush=True)
        run_.save()
        if args.dry_run:
            print(f"gpu_breakeven: dry run: {len(specs)} servers, dirs under {root}; {out / 'breakeven.json'}")
            return 0

        from kit.demo_gpu import preflight
        from kit.serving.process import ServerProcess

        run_.doc["machine"] = preflight()  # SGLang importable and a GPU visible, else one line saying why
        texts = prompts(plan.num_prompts)
        # phase 1: every server starts at once
        t0 = time.monotonic()
        for s, spec in specs.items():
            Path(spec.log_file).unlink(missing_ok=True)  # the kit appends to a server's log: this run's alone
            try:
                procs[s.name] = ServerProcess.from_spec(spec, engine="sglang", grace=10).start()
            except Exception as e:  # this one is recorded; the others start
                run_.error(f"start {s.name}", e)
        ready: dict[str, str] = {}
        started: dict[str, Any] = {}
        for s in specs:
            if s.name not in procs:
                started[s.name] = {"ok": False, "error": "did not start"}
                continue
            try:
                procs[s.name].wait_ready(max(5.0, left() - RESERVE_S))
                ready[s.name] = procs[s.name].base_url
                started[s.name] = {"ok": True, "ready_s": round(time.monotonic() - t0, 1)}
            except Exception as e:  # ServerExited, ServerNotReady (one of them), or the probe failing
                started[s.name] = {
                    "ok": False,
                    "error": first_line(e)[:600],
                    "log_tail": log_tail(specs[s].log_file),
                }
                run_.error(f"start {s.name}", first_line(e))
        run_.doc["started"] = started
        run_.save()
        # phase 2: first-use compilation on all of them at once
        try:
            run_.doc["warmup"] = warm_all(ready, texts[0], min(90.0, left() - 60.0))
        except Exception as e:
            run_.error("warmup", e)
        run_.save()
        # phase 3: each server alone, passes interleaved over the servers
        rows: dict[str, list[dict]] = {n: [] for n in ready}
        with open(out / "records.jsonl", "w") as rec_file:
            for rep in range(plan.repeats):
                for name, base in ready.items():
                    budget = min(60.0, left() - 20.0)  # the stops (parallel, SIGKILL after 10 s) fit in the rest
                    if budget < 3:
                        run_.error(f"measure {name} repeat {rep}", "out of time")
                        continue
                    try:
                        recs = run_requests(base, texts, Opts(plan.max_new_tokens), budget)
                    except Exception as e:
                        run_.error(f"measure {name} repeat {rep}", e)
                        continue
                    for r in recs:
                        rec_file.write(json.dumps({"server": name, "repeat": rep, **r.to_dict()}) + "\n")
                        rows[name].append(request_costs(r))
                run_.doc["measured"] = {n: summarize(v) for n, v in rows.items()}
                run_.save()
        try:
            run_.doc["analysis"] = analysis(run_.doc, plan, dirs)
            print("gpu_breakeven:", run_.doc["analysis"]["sentence"], flush=True)
        except Exception as e:
            run_.error("analysis", e)
    except BaseException as e:  # a failure anywhere still leaves the document, with the error in it
        run_.error("run", "".join(traceback.format_exception_only(type(e), e)).strip())
        if not isinstance(e, Exception):
            raise
    finally:
        if procs:
            run_.doc["stopped"] = _stop_all(procs)
        run_.doc["wall_s"] = round(time.monotonic() - t_start, 1)
        run_.save()
    emit({k: run_.doc.get(k) for k in ("measured", "errors", "wall_s")})
    return 0 if not run_.doc["errors"] else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_breakeven.py", description=__doc__.split("\n")[0])
    p.add_argument("--work", required=True, help="work folder (model dirs and server logs go under WORK/breakeven)")
    p.add_argument("--out", required=True, help="output folder: breakeven.json, records.jsonl")
    p.add_argument("--timeout-s", type=float, default=300.0, help="the whole run's wall-clock limit (s)")
    p.add_argument("--sizes", default=",".join(Plan.sizes), help=f"target sizes, from {', '.join(SIZES)}")
    p.add_argument("--probe-sizes", default=",".join(Plan.probe_sizes), help="sizes with a 1-1-2 chain too")
    p.add_argument("--repeats", type=int, default=Plan.repeats, help="passes over all servers")
    p.add_argument("--accept-length", type=float, default=None,
                   help="the draft's accept length at 2-1-3 (default: the recorded demo's fixed launch)")  # fmt: skip
    p.add_argument("--measured-speedup", type=float, default=None,
                   help="SGLang's measured speedup at the demo target (default: the recorded demo's)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="build the dirs and print the launch lines; start nothing")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
