"""`python -m kit demo --gpu`: the seed's story on real SGLang, on a GPU host with the offline bundle installed.

The CPU demo (`kit demo`) replays the seed on the kit's reference server; this one serves the same target and
draft with real SGLang and measures them the way `kit bench` does:

1. the target: the embedded SmolLM2, dequantized from its GGUF into an HF directory SGLang loads
   (`kit.models.embedded_dir`); the draft: the shipped demo draft (`kit.models.shipped_draft`; `--draft` for another);
2. three launches built from the seed's command line (`SEED_LAUNCH`, 8 GPUs) adapted to one GPU
   (`one_gpu`): the seed's own (`--speculative-algorithm EAGLE`), the kit's fix of it (`apply_fixes` of
   its lint: `EAGLE3`) and the same line without speculation (the baseline). They start together on the
   one GPU (startup dominates: ~1 min each);
3. the oracle (`kit oracle --compare`, CPU) computes the expected accept length of both launches while
   the servers start; one `kit bench` run measures the three (request by request, the order rotating, so
   outside load on the GPU hits every arm alike; repeats, batch 1, CUDA graphs), each speculative launch
   with every acceptance source and its speedup (or why the run cannot support one);
4. after the servers stop, the kit's own engine decodes the same prompts in CUDA graphs
   (`kit.reference.graphs`: greedy, the seed's wiring, the fixed wiring), for its figures beside SGLang's;
5. verdicts (`kit.measure.verdict`), figures and `runs/<time>/summary.json` + `summary.md`.

    kit bundle install sglang-<release>-<arch>-<python>.tar.xz --target /opt/sglang-site
    PYTHONPATH=/opt/sglang-site kit demo --gpu
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.findings import KitInputError, Report
from kit.sglang.cmdline import SEED_LAUNCH  # the seed's 8-GPU Kimi-K2.5 line, verbatim
from kit.sglang.params import SpecParams

LAUNCHES = ("baseline", "seed", "fixed")


@dataclass(frozen=True)
class GpuPlan:
    """What the GPU demo measures (`quick` shrinks it)."""

    num_prompts: int = 24
    max_new_tokens: int = 128
    repeats: int = 4
    concurrency: int = 1
    # the one-GPU point of both speculative launches: the demo draft's chain (the seed's 3-4-5 is a tree
    # sized for a 1T target on 8 GPUs; the kit's graphed engine runs chains only, so both engines share it)
    spec: SpecParams = field(default_factory=lambda: SpecParams(2, 1, 3))
    servers: int = 3  # baseline, seed and fixed share the GPU (memory: kit.serving.engines.sglang.share_device)
    cuda_graph_max_bs: int = 4
    ready_timeout_s: float = 480.0

    @classmethod
    def for_run(cls, quick: bool) -> GpuPlan:
        return cls(num_prompts=6, max_new_tokens=32, repeats=2) if quick else cls()


def preflight() -> dict[str, Any]:
    """SGLang importable and a CUDA GPU visible, else one line saying how to get there."""
    import importlib.util

    from kit.sglang.versions import installed_version

    if importlib.util.find_spec("sglang") is None:
        raise KitInputError(
            "kit demo --gpu: SGLang is not importable here; install the offline bundle "
            "(kit bundle install sglang-<ver>-<arch>-<py>.tar.xz --target DIR) and put DIR on PYTHONPATH"
        )
    import torch

    if not torch.cuda.is_available():
        raise KitInputError("kit demo --gpu: no CUDA GPU visible to torch (kit env says why)")
    return {
        "sglang": installed_version(),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }


def one_gpu(spec, plan: GpuPlan, target: str, draft: str, port: int, log_file: Path, version: str | None):
    """The seed's launch on this one GPU: local target and draft, loopback and a free port (`localize`),
    no tensor parallelism, a memory share and a capped KV pool so three servers fit, the demo's chain
    point, the bundle's flags (added by `localize`) and CUDA graphs for batch 1..max_bs (the release's own
    spelling of that cap).
    The seed's algorithm, NCCL variables and remaining flags stay."""
    from kit.serving import launch as kl
    from kit.sglang.flags import DECODE_GRAPH_CAP, current_option

    local = kl.localize(spec, "sglang", target, draft, port=port, decode_log_interval=20,
                        servers_per_device=plan.servers)  # fmt: skip
    extra = list(local.extra_args) + [current_option(DECODE_GRAPH_CAP, version), str(plan.cuda_graph_max_bs)]
    return local.replace(
        tp_size=None,
        **plan.spec.given(),
        python=sys.executable,
        log_file=str(log_file),
        extra_args=extra,
    )


def launches(plan: GpuPlan, target: str, draft: str, log_dir: Path, version: str | None) -> tuple[dict, dict]:
    """{name: LaunchSpec} for baseline, seed and fixed, and {name: Report}: the checks `kit launch` runs before a
    start (`kit.preflight.launch_report`: kit doctor's, SGLang's real parser among them)."""
    from kit.preflight import launch_report
    from kit.serving import launch as kl
    from kit.serving.process import free_port

    ports: list[int] = []
    while len(ports) < len(LAUNCHES):  # three distinct free ports
        p = free_port()
        ports += [p] if p not in ports else []
    port = dict(zip(LAUNCHES, ports))
    log = {n: log_dir / f"server_{n}.log" for n in LAUNCHES}
    seed = one_gpu(kl.spec_from_command(SEED_LAUNCH), plan, target, draft, port["seed"], log["seed"], version)
    seed_report = launch_report(seed, sglang_version=version)
    fixed = kl.apply_fixes(seed, seed_report).replace(port=port["fixed"], log_file=str(log["fixed"]))
    base = seed.replace(
        speculative_algorithm=None,
        speculative_draft_model_path=None,
        **SpecParams().given(),
        port=port["baseline"],
        log_file=str(log["baseline"]),
    )
    specs = {"baseline": base, "seed": seed, "fixed": fixed}
    reports = {"seed": seed_report, "fixed": launch_report(fixed, sglang_version=version)}
    return specs, reports


def start_oracle(plan: GpuPlan, target: str, draft: str, out: Path) -> subprocess.Popen:
    """`kit oracle --compare` on the CPU (fp32) in a subprocess: correct wiring and the seed's EAGLE path."""
    argv = [sys.executable, "-m", "kit", "oracle", "--compare", "--json", "--target", target, "--draft", draft]
    argv += ["--num-prompts", str(plan.num_prompts), "--max-new-tokens", str(plan.max_new_tokens)]
    argv += kconfig.to_argv(plan.spec)  # --speculative-num-steps 2 ...
    # CPU only, and few threads: the servers being benched share this host's cores
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "4"}
    return subprocess.Popen(argv, stdout=open(out, "w"), stderr=subprocess.STDOUT, env=env)


def oracle_result(out: Path, proc: subprocess.Popen | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """The oracle's expected accept lengths from its output file (waiting for its process when given)."""
    if proc is not None:
        proc.wait(timeout)
    text = out.read_text() if out.exists() else ""
    lines = [x for x in text.splitlines() if x.startswith("{")]
    if not lines:
        rc = proc.returncode if proc is not None else None
        return {"error": f"kit oracle exited {rc}: " + "".join(text.splitlines()[-1:])}
    doc = json.loads(lines[-1])
    res = doc["results"]
    return {
        "fixed_launch": res["correct"]["meta_accept_length"],
        "seed_launch": res["launched as EAGLE"]["meta_accept_length"],
        "params": doc["params"],
        "results": {k: {kk: v[kk] for kk in ("meta_accept_length", "accept_length", "wiring")} for k, v in res.items()},
    }


def startup_error(log_file: str | None) -> str | None:
    """SGLang's own exception line from a server log (the last line that names an Error)."""
    if not log_file or not Path(log_file).exists():
        return None
    hits = [ln.strip() for ln in Path(log_file).read_text(errors="replace").splitlines() if "Error" in ln]
    return hits[-1][:400] if hits else None


def bench_all(plan: GpuPlan, urls: dict[str, str], labels: dict[str, str], target: str, log_file: str, out: Path,
              quiet_check: bool = False):  # fmt: skip
    """One `kit bench` run over every launch that started (`urls`: baseline, fixed, seed), interleaved request
    by request with the order rotating, so outside load on the GPU lands on every arm alike; the fixed launch's
    log feeds the decode-log acceptance source."""
    from kit.measure.bench import BenchConfig, run_bench

    seed = [f"{labels['seed']}={urls['seed']}"] if "seed" in urls else None
    main = "fixed" if "fixed" in urls else "seed"
    cfg = BenchConfig(
        url=urls[main],
        baseline_url=urls["baseline"],
        label=labels[main],
        also_url=seed if main == "fixed" else None,
        num_prompts=plan.num_prompts,
        max_new_tokens=plan.max_new_tokens,
        concurrency=plan.concurrency,
        repeats=plan.repeats,
        interleave=True,
        quiet_check=quiet_check,
        warmup=2,
        chat_template=target,
        log_path=log_file if main == "fixed" else None,
        out_dir=str(out),
        progress=False,
    )
    return run_bench(cfg)


def paired(result, label: str) -> dict[str, Any]:
    """Speedup of `label` over the baseline as every output of the run shows it (summary.md, the throughput
    figure, notebook 05): the bench summary's `launch_speedup` (`kit.measure.metrics.launch_speedup`: the
    interleaved repeats' tok/s ratios, median and its 95% bootstrap interval), with its ratios and the unpaired
    figure beside it."""
    from kit.measure import metrics as km

    sp = (result.summary.get("launch_speedup") or {}).get(label)
    ci = (result.summary.get("speedup") or {}).get(label, {})
    return {
        **(km.brief(sp) or {"median": None, "ci95": [None, None], "n": 0}),
        "ratios": sp["ratios"] if sp else [],
        "unpaired": {k: ci.get(k) for k in ("speedup", "t_low", "t_high", "boot_low", "boot_high")},
    }


def reference_graphed(plan: GpuPlan, target: str, draft: str) -> dict[str, Any]:
    """The kit's engine on this GPU, bf16, batch 1, CUDA graphs (`kit.reference.graphs`): greedy, the seed's
    wiring (EAGLE: one final hidden state) and the fixed wiring (EAGLE3), on the same prompts and lengths."""
    import torch

    from kit.models import chat_ids, load_target
    from kit.prompts import builtin_prompts, interleave_kinds
    from kit.reference.draft_io import load_draft
    from kit.reference.graphs import GraphedChainDecoder, GraphedGreedy
    from kit.reference.speculate import Wiring

    model, tok = load_target(target, dtype="bfloat16", device="cuda")
    d = load_draft(draft, target_model=model, dtype=torch.bfloat16).to("cuda")
    if d.hot_token_id is not None:  # a plain attribute, not moved by .to()
        d.hot_token_id = d.hot_token_id.cuda()
    rows = [chat_ids(tok, r["prompt"]) for r in interleave_kinds(builtin_prompts())][: plan.num_prompts]
    eos = model.generation_config.eos_token_id
    cap = max(len(r) for r in rows) + plan.max_new_tokens + 16
    arms = {
        "greedy": GraphedGreedy(model, capacity=cap),
        "seed": GraphedChainDecoder(model, d, plan.spec, Wiring(algorithm="EAGLE"), capacity=cap),
        "fixed": GraphedChainDecoder(model, d, plan.spec, Wiring(), capacity=cap),
    }
    out: dict[str, Any] = {"dtype": "bfloat16", "params": plan.spec.resolved().label(), "prompts": len(rows)}
    for name, dec in arms.items():
        dec.generate(rows[0], 8, eos)  # first-use kernel selection outside the timing
        toks = steps = kept = 0
        wall = 0.0
        for r in rows:
            res = dec.generate(r, plan.max_new_tokens, eos)
            toks += len(res.tokens)  # new tokens, the prefill's first
            steps += res.verify_steps
            kept += sum(res.accept_lengths)
            wall += res.verify_time_s  # the request's wall time, prefill included
        out[name] = {
            "tok_s": round(toks / wall, 1),
            "accept_length": round(kept / steps, 4) if steps else None,
            "tokens": toks,
            "wall_s": round(wall, 2),
        }
    for name in ("seed", "fixed"):
        out[name]["speedup"] = round(out[name]["tok_s"] / out["greedy"]["tok_s"], 3)
    del arms, model, d
    torch.cuda.empty_cache()
    return out


def engine_rows(tok_s: dict, speedup: dict, reference: dict) -> list[dict]:
    """SGLang's and the kit engine's tok/s and speedups as rows for `kit.measure.plots.engine_comparison`."""
    rows = [{"engine": "SGLang", "launch": "no speculation", "tok_s": tok_s.get("baseline"), "speedup": 1.0}]
    for n in ("seed", "fixed"):
        sp = speedup.get(f"{n}_launch") or {}
        sp = None if sp.get("inconclusive") else sp.get("median")
        rows.append({"engine": "SGLang", "launch": n, "tok_s": tok_s.get(f"{n}_launch"), "speedup": sp})
    g = reference.get("greedy") or {}
    rows.append({"engine": "kit engine (graphs)", "launch": "no speculation", "tok_s": g.get("tok_s"), "speedup": 1.0})
    for n in ("seed", "fixed"):
        r = reference.get(n) or {}
        rows.append(
            {"engine": "kit engine (graphs)", "launch": n, "tok_s": r.get("tok_s"), "speedup": r.get("speedup")}
        )
    return rows


def _stop_all(servers: dict) -> None:
    threads = [threading.Thread(target=s.stop) for s in servers.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_gpu_demo(cfg) -> Path:
    """The GPU demo for a `kit.demo.DemoConfig` (its target, draft, runs_dir and quick); returns the run dir.
    Serving and benching write `serving.json` and the bench directories; `finish` scores them."""
    from kit.models import resolve_target, shipped_draft
    from kit.serving.process import ServerExited, ServerProcess
    from kit.summary import new_run_dir

    t_all = time.perf_counter()
    facts = preflight()
    if cfg.launch:
        raise KitInputError("kit demo --gpu: --launch is not used on the GPU demo (it serves the seed's launch)")
    plan = GpuPlan.for_run(cfg.quick)
    run_dir = new_run_dir(cfg.runs_dir, exist_ok=False)
    timings: dict[str, float] = {}

    def step(name: str, t0: float) -> None:
        timings[name] = round(time.perf_counter() - t0, 1)
        print(f"kit demo --gpu: {name} done in {timings[name]} s", flush=True)

    print(f"kit demo --gpu: SGLang {facts['sglang']} on {facts['gpu']} -> {run_dir}", flush=True)
    t0 = time.perf_counter()
    target = str(resolve_target(cfg.target))
    draft = str(cfg.draft or shipped_draft())
    step("target_and_draft", t0)

    t0 = time.perf_counter()
    specs, lints = launches(plan, target, draft, run_dir, facts["sglang"])
    oracle_proc = start_oracle(plan, target, draft, run_dir / "oracle.log")
    labels = {n: f"{n} ({specs[n].speculative_algorithm} {plan.spec.label()})" for n in ("seed", "fixed")}
    servers = {n: ServerProcess.from_spec(specs[n], engine="sglang", grace=10) for n in LAUNCHES}
    for n in LAUNCHES:
        print(f"  {n}: {specs[n].command()}", flush=True)
        servers[n].start()
    started: dict[str, Any] = {}
    for n in LAUNCHES:
        try:
            servers[n].wait_ready(max(30.0, plan.ready_timeout_s - (time.perf_counter() - t0)))
            started[n] = {"ok": True, "ready_s": round(time.perf_counter() - t0, 1)}
        except ServerExited as e:
            started[n] = {"ok": False, "error": startup_error(specs[n].log_file) or str(e).splitlines()[0]}
        print(f"  {n}: {started[n]}", flush=True)
    step("servers_ready", t0)

    try:
        if not started["baseline"]["ok"]:
            raise KitInputError(f"the baseline server did not start: {started['baseline']['error']}")
        urls = {n: servers[n].base_url for n in LAUNCHES if started[n]["ok"]}
        if len(urls) > 1:
            t0 = time.perf_counter()
            bench_all(plan, urls, labels, target, specs["fixed"].log_file, run_dir / "bench", cfg.quiet_check)
            step("bench", t0)
    finally:
        t0 = time.perf_counter()
        _stop_all(servers)
        step("servers_stopped", t0)
    serving = {
        "machine": facts,
        "plan": asdict(plan),
        "target": target,
        "draft": draft,
        "launches": {
            n: {
                "command": specs[n].command(),
                **started[n],
                "lint": lints[n].to_dict()["findings"] if n in lints else [],
            }
            for n in LAUNCHES
        },
        "bench_labels": labels,
        "timings_s": timings,
        "breakeven": cfg.breakeven,  # bench/gpu_breakeven.py's measured costs on this GPU, when given
    }
    (run_dir / "serving.json").write_text(json.dumps(serving, indent=1, default=str))
    t0 = time.perf_counter()
    oracle_proc.wait(600)
    step("oracle_wait", t0)
    return finish(run_dir, t_start=t_all)


def launch_findings(launch: dict, version: str | None) -> list[dict]:
    """A served launch's findings before its start: as recorded, else its command checked again."""
    if launch.get("lint") is not None:
        return launch["lint"]
    from kit.preflight import launch_report
    from kit.serving import launch as kl

    spec = kl.spec_from_command(launch["command"])
    launch["lint"] = launch_report(spec, sglang_version=version).to_dict()["findings"]
    return launch["lint"]


def break_even(path: str | None, observed: dict, speedup: dict) -> dict[str, Any] | None:
    """The break-even digest of a breakeven.json (`kit.measure.breakeven.digest`) for this run's fixed launch:
    its observed accept length and its measured speedup beside the prediction."""
    if not path:
        return None
    from kit.measure import breakeven as kb

    fixed = speedup.get("fixed_launch") or {}
    return kb.digest(kb.load(path), observed.get("fixed_launch"), fixed.get("median"), source=path)


def finish(run_dir: Path, t_start: float | None = None, breakeven: str | None = None) -> Path:
    """Score a served run directory: the kit's graphed engine on this GPU, the oracle's numbers, verdicts,
    figures, `summary.json` and `summary.md` (with `breakeven`, else the one the run was given, the
    break-even on this GPU). Also `python -m kit.demo_gpu finish RUN_DIR [--breakeven FILE]` for a run whose
    scoring did not complete (its `serving.json`, `oracle.log` and `bench/` directory are all it reads)."""
    from kit.measure import plots
    from kit.measure.bench import load_result
    from kit.measure.verdict import verdict
    from kit.summary import collect, fmt_speedup, record

    run_dir = Path(run_dir)
    t_finish = time.perf_counter()
    serving = json.loads((run_dir / "serving.json").read_text())
    plan = GpuPlan(**{**serving["plan"], "spec": SpecParams(**serving["plan"]["spec"])})
    facts, timings = serving["machine"], serving["timings_s"]
    t0 = time.perf_counter()
    try:
        reference = reference_graphed(plan, serving["target"], serving["draft"])
    except Exception as e:  # the SGLang figures stand without it; say why it is missing
        reference = {"error": f"{type(e).__name__}: {e}"[:400]}
    timings["reference_graphed"] = round(time.perf_counter() - t0, 1)
    oracle = oracle_result(run_dir / "oracle.log")

    # scores: observed (SGLang, pooled completion/verify), expected (oracle), speedups, verdicts
    observed, tok_s, speedup, sources = {}, {}, {}, {}
    findings = Report()
    res = load_result(run_dir / "bench") if (run_dir / "bench" / "summary.json").exists() else None
    for n, label in serving["bench_labels"].items() if res else ():
        labels = res.summary["labels"]
        if label not in labels:
            continue
        observed[f"{n}_launch"] = labels[label].get("accept_length")
        sources[f"{n}_launch"] = labels[label].get("accept_sources")
        tok_s[f"{n}_launch"] = labels[label].get("output_tok_s")
        tok_s.setdefault("baseline", labels["baseline"].get("output_tok_s"))
        speedup[f"{n}_launch"] = paired(res, label)
        static = launch_findings(serving["launches"][n], facts.get("sglang"))
        # both launches against what the draft reaches when wired right (the oracle's fixed-launch figure);
        # the oracle replaying the seed's own wiring is kept beside it (accept_length_expected)
        findings.extend(verdict(observed[f"{n}_launch"], oracle.get("fixed_launch"), static, label=f"{n} launch"))
    if res:
        findings.extend(res.report.findings)
        shown = {serving["bench_labels"][k.removesuffix("_launch")]: v for k, v in speedup.items()}
        plots.throughput_speedup(res.summary, run_dir, data=res.describe(), speedup=shown)
    pairs = [
        {"label": f"{n} launch", "expected_accept_length": oracle.get("fixed_launch"), "observed_accept_length": v}
        for n, v in ((k.removesuffix("_launch"), v) for k, v in observed.items())
    ]
    data = plots.describe(
        engine=f"SGLang {facts['sglang']}",
        gpu=facts["gpu"],
        prompts=f"{plan.num_prompts} built-in x {plan.max_new_tokens} tokens",
        concurrency=plan.concurrency,
    )
    plots.expected_vs_observed(pairs, run_dir, data=data)
    plots.engine_comparison(engine_rows(tok_s, speedup, reference), run_dir, data=data)
    figures = sorted(p.name for p in run_dir.glob("*.png"))
    be = break_even(breakeven or serving.get("breakeven"), observed, speedup)

    timings["finish"] = round(time.perf_counter() - t_finish, 1)
    if t_start is not None:
        timings["total"] = round(time.perf_counter() - t_start, 1)
    headline = {
        "seed_launch": observed.get("seed_launch"),
        "fixed_launch": observed.get("fixed_launch"),
        "oracle": oracle.get("fixed_launch"),
    }
    record(
        run_dir,
        "gpu_demo",
        verdict=next((f.title for f in findings.findings if f.code.startswith("verdict.")), None),
        findings=findings,
        accept_length=headline,
        figures=figures,
    )
    summary = collect(
        run_dir,
        {
            "engine": "sglang",
            "machine": facts,
            "plan": serving["plan"],
            "accept_length_expected": {
                "fixed_launch": oracle.get("fixed_launch"),
                "seed_launch": oracle.get("seed_launch"),
            },
            "accept_sources": sources,
            "tok_s": tok_s,
            "speedup": speedup,
            "machine_watch": {
                n: (res.summary["labels"].get(lab) or {}).get("machine") for n, lab in serving["bench_labels"].items()
            }
            if res
            else {},  # fmt: skip
            "reference_engine_graphed": reference,
            "oracle": oracle,
            "launches": {
                n: {k: v for k, v in d.items() if k != "lint"}
                | {"lint_errors": [f["code"] for f in d.get("lint") or [] if f.get("severity") == "error"]}
                for n, d in serving["launches"].items()
            },  # fmt: skip
            "timings_s": timings,
            **({"break_even": be} if be else {}),
        },
    )
    a = summary["accept_length"]
    sp = {k: fmt_speedup(v) for k, v in speedup.items()}
    ref = {n: (reference.get(n) or {}).get("speedup") for n in ("seed", "fixed")}
    print(
        f"kit demo --gpu: accept length seed_launch={a['seed_launch']} fixed_launch={a['fixed_launch']} "
        f"oracle={a['oracle']}; SGLang speedup over no speculation {sp}; the kit's graphed engine {ref}; "
        f"timings {timings}"
    )
    if be:
        print(f"kit demo --gpu: {be['sentence']}")
    print(f"kit demo --gpu: summary -> {run_dir / 'summary.md'}")
    return run_dir


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m kit.demo_gpu", description="score a served `kit demo --gpu` run")
    sub = p.add_subparsers(dest="cmd", required=True)
    fin = sub.add_parser("finish", help="score RUN_DIR (serving.json, oracle.log, bench/)")
    fin.add_argument("run_dir")
    fin.add_argument("--breakeven", default=None, help="a breakeven.json of bench/gpu_breakeven.py for the summary")
    a = p.parse_args(argv)
    if not (Path(a.run_dir) / "serving.json").exists():
        raise SystemExit(f"python -m kit.demo_gpu: error: {a.run_dir}: no serving.json (not a served GPU demo run)")
    if a.breakeven:
        from kit.measure.breakeven import load

        try:
            load(a.breakeven)
        except KitInputError as e:
            raise SystemExit(f"python -m kit.demo_gpu: error: {e}") from None
    finish(Path(a.run_dir), breakeven=a.breakeven)
    return 0


if __name__ == "__main__":
    sys.exit(main())
