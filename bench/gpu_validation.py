"""GPU validation on one CUDA GPU: the kit's GPU paths run for real, and the figures of docs/results-h200.md.

What it measures (SmolLM2-135M target in bf16, the kit's demo draft, greedy):
  * oracle throughput — target tokens/s in the teacher-forced pass, draft steps/s;
  * batch-1 speculative vs plain greedy decoding in-process: accept length, tokens/s, speedup,
    and the cost of one draft step relative to one target verify step;
  * a torch.profiler table of one speculative request (where the time goes);
  * the reference server (`python -m kit serve --device cuda`) with and without speculation,
    measured by the kit's benchmark client at several concurrencies (accept length, speedup, CI).

Run (on the GPU host; the GGUF can be pointed at with KIT_SMOLLM2_GGUF):
    python bench/gpu_validation.py --draft DRAFT_DIR --out OUT_DIR [--concurrency 1 2 4]
Prints one JSON document as the last line of stdout and writes OUT_DIR/gpu_validation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def in_process(target, tok, draft, prompts, max_new, params, out: Path) -> dict:
    from kit.models import chat_ids
    from kit.reference.speculate import Wiring, greedy_generate, speculative_generate

    rows = [chat_ids(tok, p) for p in prompts]
    # warm up kernels / allocator once each path
    greedy_generate(target, rows[0], 8, tok.eos_token_id)
    speculative_generate(target, draft, rows[0], 8, params, Wiring(), tok.eos_token_id)
    g_tok = s_tok = 0
    g_t = s_t = draft_t = verify_t = 0.0
    steps = acc = 0
    same = True
    for r in rows:
        sync()
        t0 = time.perf_counter()
        g = greedy_generate(target, r, max_new, tok.eos_token_id)
        sync()
        g_t += time.perf_counter() - t0
        sync()
        t0 = time.perf_counter()
        s = speculative_generate(target, draft, r, max_new, params, Wiring(), tok.eos_token_id)
        sync()
        s_t += time.perf_counter() - t0
        g_list = g.tokens
        same &= list(g_list) == list(s.tokens)
        g_tok += len(g_list)
        s_tok += len(s.tokens)
        draft_t += s.draft_time_s
        verify_t += s.verify_time_s
        steps += s.verify_steps
        acc += sum(s.accept_lengths)
    res = {
        "prompts": len(rows),
        "max_new_tokens": max_new,
        "params": vars(params),
        "greedy_tok_s": round(g_tok / g_t, 1),
        "spec_tok_s": round(s_tok / s_t, 1),
        "speedup": round((s_tok / s_t) / (g_tok / g_t), 3),
        "accept_length": round(acc / steps, 3),
        "verify_steps": steps,
        "outputs_identical_to_greedy": same,
        "draft_step_ms": round(1e3 * draft_t / max(1, steps * params.speculative_num_steps), 3),
        "verify_step_ms": round(1e3 * verify_t / max(1, steps), 3),
        "greedy_step_ms": round(1e3 * g_t / max(1, g_tok), 3),
    }
    res["draft_step_over_target_step"] = round(res["draft_step_ms"] / res["greedy_step_ms"], 3)
    # where the time goes in one speculative request
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if target.device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        speculative_generate(target, draft, rows[0], max_new, params, Wiring(), tok.eos_token_id)
        sync()
    sort = "cuda_time_total" if target.device.type == "cuda" else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=25)
    (out / "profile_spec.txt").write_text(table)
    ka = prof.key_averages()
    cpu_total = sum(e.self_cpu_time_total for e in ka) / 1e3
    dev_total = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in ka) / 1e3
    res["profile"] = {
        "self_cpu_ms": round(cpu_total, 1),
        "self_device_ms": round(dev_total, 1),
        "kernel_launches": sum(e.count for e in ka if e.key.startswith("cudaLaunchKernel")),
    }
    return res


def oracle_throughput(target, tok, draft, prompts, max_new, params) -> dict:
    from kit.reference.oracle import continuations, evaluate

    sync()
    t0 = time.perf_counter()
    seqs = continuations(target, tok, prompts, max_new)
    sync()
    gen_s = time.perf_counter() - t0
    evaluate(target, draft, seqs[:1], params)  # warm-up
    sync()
    t0 = time.perf_counter()
    r = evaluate(target, draft, seqs, params)
    sync()
    wall = time.perf_counter() - t0
    d = r.to_dict()
    d.update(
        wall_s=round(wall, 3), reference_generation_s=round(gen_s, 2), positions_per_s=round(r.positions / wall, 1)
    )
    return d


def server_runs(target_dir, draft_dir, device, dtype, concurrency, n_prompts, max_new, repeats, out: Path) -> dict:
    from kit.measure.bench import BenchConfig, run_bench
    from kit.serving.process import ServerProcess

    common = ["--model-path", str(target_dir), "--device", device, "--dtype", dtype]
    spec = [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft_dir),
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]
    results = {}
    pb, ps = free_port(), free_port()
    base = ServerProcess(
        [sys.executable, "-m", "kit", "serve", *common, "--port", str(pb)],
        port=pb,
        log_file=str(out / "server_baseline.log"),
    )
    spc = ServerProcess(
        [sys.executable, "-m", "kit", "serve", *common, *spec, "--port", str(ps)],
        port=ps,
        log_file=str(out / "server_spec.log"),
    )
    with base, spc:
        base.wait_ready(timeout=300)
        spc.wait_ready(timeout=300)
        for c in concurrency:
            cfg = BenchConfig(
                url=spc.base_url,
                baseline_url=base.base_url,
                concurrency=c,
                num_prompts=n_prompts,
                max_new_tokens=max_new,
                repeats=repeats,
                warmup=2,
                out_dir=str(out / f"bench_c{c}"),
                progress=False,
                log_path=str(out / "server_spec.log"),
            )
            r = run_bench(cfg)
            s = r.summary
            results[f"c{c}"] = {k: s.get(k) for k in ("speedup", "accept_length", "arms") if k in s} or s
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", required=True)
    ap.add_argument("--out", default="gpu_validation")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-server", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from kit.models import embedded_dir, load_target
    from kit.prompts import builtin_prompts
    from kit.reference.draft_io import load_draft
    from kit.sglang.params import SpecParams

    t0 = time.perf_counter()
    target_dir = embedded_dir()
    target, tok = load_target(target_dir, dtype=a.dtype, device=a.device)
    load_s = time.perf_counter() - t0
    draft = load_draft(a.draft, target_model=target, dtype=getattr(torch, a.dtype)).to(a.device)
    prompts = [p["prompt"] for p in builtin_prompts()][: a.prompts]
    doc = {
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else a.device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": a.dtype,
        "target_load_s": round(load_s, 2),
    }

    def save():  # after every stage, so a run cut short still leaves its figures
        (out / "gpu_validation.json").write_text(json.dumps(doc, indent=2, default=str))

    for name, params in (("chain_3_1_4", SpecParams(3, 1, 4)), ("tree_3_4_8", SpecParams(3, 4, 8))):
        t0 = time.perf_counter()
        doc[f"batch1_{name}"] = in_process(target, tok, draft, prompts, a.max_new_tokens, params, out)
        os.replace(out / "profile_spec.txt", out / f"profile_{name}.txt")
        print(f"batch1 {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        save()
        t0 = time.perf_counter()
        doc[f"oracle_{name}"] = oracle_throughput(target, tok, draft, prompts, a.max_new_tokens, params)
        print(f"oracle {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        save()
    del target, draft
    if not a.skip_server:
        try:
            doc["server"] = server_runs(
                target_dir, a.draft, a.device, a.dtype, a.concurrency, a.prompts, a.max_new_tokens, a.repeats, out
            )
        except Exception as e:  # keep the in-process figures even if the server part fails
            doc["server_error"] = f"{type(e).__name__}: {e}"
    save()
    print(json.dumps(doc, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
