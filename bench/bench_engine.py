"""Benchmark: the reference engine's decoding against its peers, and speculative against its own greedy.

Same machine, same model (the embedded SmolLM2-135M-Instruct), same prompts (the kit's built-in
evaluation prompts, chat-templated), greedy decoding, a fixed number of new tokens (EOS ignored):

  peers        per-request output tok/s (prefill included) of the engine's greedy decode, of HF
               `model.generate` (do_sample=False, KV cache), and of llama.cpp's server
               (`python -m llama_cpp.server`, llama-cpp-python) on the GGUF the target is made from
               (skipped, with a note, when llama-cpp-python is not installed). The engine is fp32 like
               HF; llama.cpp runs the file's Q4_1 weights, so it reads ~6x fewer bytes per token.
  speculative  the engine with the demo draft (EAGLE3 chains: steps-topk-draft tokens 1-1-2, 2-1-3 and
               3-1-4 by default, --params) against the engine greedy, every arm run on every prompt
               in a rotating order so all arms see the same machine load; speedup per point = median
               over requests of the per-request tok/s ratio to the greedy run of the same prompt and
               repeat, with a 95% interval (t on the log ratios); when it is wider than +-20% the JSON
               says how many requests would narrow it. Every speculative output is checked equal to
               the greedy output. The target is met when a point's speedup is >= 1.0 with its
               interval above 0.9; the profile (ms per step by phase, target forward by token count)
               says why the other points fall short.
  concurrency  total output tok/s of the engine's decode loop with 1, 4 and 8 requests at once.
  profile      where a step's time goes (draft tree, target forward, host-side walk, draft extend).
  server       `python -m kit serve` over HTTP, greedy and speculative: a streamed answer's chunk
               arrival times (they spread over the decode), and 4 / 8 concurrent requests against one
               (target: 4 at once finish in less than 2x the time of one).

    python bench/bench_engine.py [--prompts 12] [--max-new-tokens 64] [--repeats 2] [--params 1-1-2 2-1-3 3-1-4]
                                 [--train-draft [--quick]] [--no-llamacpp] [--no-server]
    python bench/bench_engine.py --server-only --max-new-tokens 32 [--server-params 2-1-3]   # 4 at once vs one
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python bench/bench_engine.py ...
    python bench/bench_engine.py --device cuda      # the same on a GPU (no llama.cpp there)

Prints one JSON document (last line). Other processes on the machine add noise: the JSON records
the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time

from _run import emit, load_avg

# an AVX2-only CPU emulated: ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
ISA_VARS = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def tps(n: int, s: float) -> float:
    return n / s if s > 0 else float("nan")


def llamacpp_peer(texts: list[str], max_new: int, threads: int) -> dict:
    """Per-request output tok/s of llama-cpp-python's OpenAI server on the same prompts (completions API)."""
    import httpx

    from kit.models import gguf_path
    from kit.serving.process import free_port
    from kit.tests.peers import llama_cpp_server_argv

    port = free_port()
    cmd = llama_cpp_server_argv(gguf_path(), port, n_threads=threads, n_ctx=2048)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline or p.poll() is not None:
                return {"skipped": "llama.cpp server did not start"}
            time.sleep(0.3)
        rates = []
        body = {"max_tokens": max_new, "temperature": 0.0}  # tok/s from the completion tokens it reports
        httpx.post(url + "/v1/completions", json={**body, "prompt": texts[0]}, timeout=300)  # warm-up
        for t in texts:
            s = time.perf_counter()
            r = httpx.post(url + "/v1/completions", json={**body, "prompt": t}, timeout=300).json()
            rates.append(tps(r["usage"]["completion_tokens"], time.perf_counter() - s))
        return {"tok_s_median": statistics.median(rates), "requests": len(rates), "weights": "Q4_1 GGUF"}
    finally:
        p.terminate()
        p.wait(timeout=30)


def forward_costs(runner, prompt: list[int], sizes=(1, 2, 3, 4, 5, 8), reps: int = 7) -> dict:
    """Median ms of one target forward over T new tokens after the prompt, per T: what a verify of T
    draft tokens costs against a greedy step (T = 1) on this machine."""
    import torch

    from kit.reference.target import Piece

    kv = runner.new_kv(len(prompt) + 16)
    runner.forward([Piece(kv, list(prompt), logits="last")])
    P, out = kv.len, {}
    with torch.inference_mode():
        for T in sizes:
            ts = []
            for _ in range(reps):
                s = time.perf_counter()
                runner.forward([Piece(kv, list(prompt[:T]))])
                ts.append(time.perf_counter() - s)
                kv.len = P
            out[T] = round(1e3 * statistics.median(ts), 1)
    return out


def server_concurrency(texts: list[str], max_new: int, draft_dir: str | None, params=None) -> dict:
    """`python -m kit serve` over HTTP (speculative at `params`, a SpecParams, when `draft_dir` is given):
    one streamed request's chunk arrival times, then wall time of one request against 4 and 8 sent at
    once (one decode loop batches them)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from kit.serving.launch import LaunchSpec
    from kit.serving.process import ServerProcess, free_port

    spec = LaunchSpec(port=free_port(), max_running_requests=8)
    if draft_dir:
        spec = LaunchSpec(port=spec.port, max_running_requests=8, speculative_algorithm="EAGLE3",
                          speculative_draft_model_path=str(draft_dir), **params.given())  # fmt: skip
    body = lambda t: {"text": t, "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True}}
    with ServerProcess.from_spec(spec, engine="reference") as srv:
        srv.wait_ready(600)
        url = srv.base_url + "/generate"
        httpx.post(url, json=body(texts[0]), timeout=600)  # warm-up
        t0, arrivals = time.perf_counter(), []
        with httpx.stream("POST", url, json={**body(texts[0]), "stream": True}, timeout=600) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    arrivals.append(round(time.perf_counter() - t0, 3))

        def one(t):
            s = time.perf_counter()
            httpx.post(url, json=body(t), timeout=600)
            return time.perf_counter() - s

        out = {"stream_chunk_arrival_s": arrivals, "stream_chunks": len(arrivals)}
        single = statistics.median(one(texts[i % len(texts)]) for i in range(3))
        out["one_request_s"] = single
        # each of the batch's prompts alone (best of 2): a speculative request's steps depend on its prompt's
        # acceptance, so a batch finishes with its slowest member, which alone already takes longer than the median
        alone = {i: min(one(texts[i % len(texts)]) for _ in range(2)) for i in range(4)}
        for c in (4, 8):
            s = time.perf_counter()
            with ThreadPoolExecutor(c) as ex:
                list(ex.map(one, [texts[i % len(texts)] for i in range(c)]))
            wall = time.perf_counter() - s
            out[f"c{c}_wall_s"], out[f"c{c}_over_one"] = wall, wall / single
            out[f"c{c}_total_tok_s"] = c * max_new / wall
        out["c1_total_tok_s"] = max_new / single
        out["c4_slowest_alone_s"] = max(alone.values())
        out["c4_over_slowest_alone"] = out["c4_wall_s"] / out["c4_slowest_alone_s"]
        out["target"] = "4 concurrent requests finish in less than 2x the time of one"
        out["pass"] = out["c4_over_one"] < 2.0
        out["pass_against_the_same_prompts_alone"] = out["c4_over_slowest_alone"] < 2.0
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats per prompt and arm")
    ap.add_argument("--params", nargs="+", default=["1-1-2", "2-1-3", "3-1-4"], help="steps-topk-draft tokens")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--draft", default=None, help="draft dir (default: the kit's shipped demo draft)")
    ap.add_argument("--train-draft", action="store_true", help="the demo draft trained on this CPU instead")
    ap.add_argument("--quick", action="store_true", help="with --train-draft: the quick draft (about a minute)")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--no-server", action="store_true", help="skip the HTTP section (kit serve)")
    ap.add_argument("--server-only", action="store_true", help="only the HTTP section (kit serve)")
    ap.add_argument("--server-params", default="2-1-3", help="the speculative server's chain (steps-topk-tokens)")
    a = ap.parse_args()

    import httpx
    import torch

    from kit.measure.metrics import paired_speedup
    from kit.models import chat_ids, load_target
    from kit.prompts import builtin_prompts, interleave_kinds
    from kit.reference.draft_io import load_draft
    from kit.reference.speculate import BatchDecoder, Sequence, Wiring, decode_one
    from kit.reference.train import demo_draft
    from kit.sglang.params import SpecParams

    doc: dict = {
        "bench": "engine",
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "device": a.device,
            "loadavg_before": load_avg(),
            "isa_env": {k: os.environ[k] for k in ISA_VARS if k in os.environ},
        },
    }
    draft_dir = a.draft or demo_draft(train_draft=a.train_draft, quick=a.quick)
    server_point = SpecParams(*map(int, a.server_params.split("-"))).resolved()

    def server_section() -> dict:
        texts = [r["prompt"] for r in interleave_kinds(builtin_prompts())][: a.prompts]
        return {
            "greedy": server_concurrency(texts, a.max_new_tokens, None),
            "speculative": {"params": server_point.label(),
                            **server_concurrency(texts, a.max_new_tokens, str(draft_dir), server_point)},
        }  # fmt: skip

    if a.server_only:
        doc["server"] = server_section()
        doc["machine"]["loadavg_after"] = load_avg()
        emit(doc)
        return
    target, tok = load_target(device=a.device)
    draft = load_draft(draft_dir, target_model=target).to(a.device)
    texts = [r["prompt"] for r in interleave_kinds(builtin_prompts())][: a.prompts]
    rows = [chat_ids(tok, t) for t in texts]
    M = a.max_new_tokens
    points = [SpecParams(*map(int, p.split("-"))).resolved() for p in a.params]
    greedy = BatchDecoder(target)
    specs = {p.label(): BatchDecoder(target, draft, p, Wiring()) for p in points}
    arms = {"greedy": greedy, **specs}

    def engine(dec, ids):
        s = time.perf_counter()
        seq = decode_one(dec, ids, M)
        return seq, tps(len(seq.tokens), time.perf_counter() - s)

    def hf(ids):
        x = torch.tensor([ids], device=a.device)
        s = time.perf_counter()
        with torch.inference_mode():
            out = target.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=M,
                min_new_tokens=M,
                do_sample=False,
                pad_token_id=tok.pad_token_id or 0,
            )
        return out[0, len(ids) :].tolist(), tps(out.shape[1] - len(ids), time.perf_counter() - s)

    with torch.device(a.device):
        for dec in arms.values():
            engine(dec, rows[0])
        hf(rows[0])  # warm-up
        for dec in arms.values():  # count the measured requests only
            dec.times = dict.fromkeys(dec.times, 0.0)
            dec.steps = 0
        rates = {k: [] for k in arms}
        ratios = {k: [] for k in specs}
        accepts = {k: [] for k in specs}
        h_rates, equal, n = [], True, 0
        for rep in range(a.repeats):
            for ids in rows:
                names = list(arms)
                shift = n % len(names)  # rotate the order so no arm always runs first
                n += 1
                res = {k: engine(arms[k], ids) for k in names[shift:] + names[:shift]}
                gs, gr = res["greedy"]
                rates["greedy"].append(gr)
                for k in specs:
                    ss, sr = res[k]
                    equal &= gs.tokens == ss.tokens
                    rates[k].append(sr)
                    ratios[k].append(sr / gr)
                    accepts[k].append(len(ss.tokens) / max(len(ss.accept_lengths), 1))
                if rep == 0:
                    htoks, hr = hf(ids)
                    h_rates.append(hr)
                    # min_new_tokens masks EOS in HF, so compare up to the engine's first EOS
                    cut = gs.tokens.index(tok.eos_token_id) if tok.eos_token_id in gs.tokens else len(gs.tokens)
                    equal &= htoks[:cut] == gs.tokens[:cut]
        g_med = statistics.median(rates["greedy"])
        doc["peers"] = {
            "prompts": len(rows),
            "max_new_tokens": M,
            "engine_greedy_tok_s_median": g_med,
            "hf_generate_tok_s_median": statistics.median(h_rates),
            "engine_over_hf": g_med / statistics.median(h_rates),
            "outputs_equal_hf_greedy": equal,
        }
        per_point = {}
        for k, dec in specs.items():
            sp = paired_speedup(ratios[k])
            per_point[k] = {
                "speculative_tok_s_median": statistics.median(rates[k]),
                "accept_length_mean": statistics.fmean(accepts[k]),
                "speedup": sp,
                "pass": sp["median"] >= 1.0 and sp["low"] > 0.9,
                "ms_per_verify_step": {ph: round(1e3 * v / max(dec.steps, 1), 2) for ph, v in dec.times.items()},
            }
        best = max(per_point, key=lambda k: per_point[k]["speedup"]["median"])
        doc["speculative"] = {
            "draft": str(draft_dir),
            "requests_per_point": len(rows) * a.repeats,
            "engine_greedy_tok_s_median": g_med,
            "points": per_point,
            "best": best,
            "target": "speedup >= 1.0 with the 95% interval above 0.9 (at one point at least)",
            "passing_points": [k for k, v in per_point.items() if v["pass"]],
            "pass": any(v["pass"] for v in per_point.values()),
            "outputs_equal_greedy": equal,
        }
        doc["profile"] = {
            "greedy_ms_per_decode_step": {k: round(1e3 * v / max(greedy.steps, 1), 2) for k, v in greedy.times.items()},
            "target_forward_ms_by_tokens": forward_costs(specs[best].runner, rows[0]),
        }
        spec = specs[best]
        conc = {}  # total output tok/s of one decode loop holding c requests (prefill included)
        for dec_name, dec in (("greedy", greedy), ("speculative", spec)):
            for c in (1, 4, 8):
                seqs = [Sequence(list(rows[j % len(rows)]), M) for j in range(c)]
                s = time.perf_counter()
                while not all(q.done for q in seqs):
                    live = [q for q in seqs if not q.done]
                    dec.step(live)
                conc[f"{dec_name}_c{c}_tok_s"] = tps(sum(len(q.tokens) for q in seqs), time.perf_counter() - s)
        doc["concurrency"] = conc
    if a.no_llamacpp or a.device != "cpu":
        doc["peers"]["llamacpp"] = {"skipped": "--no-llamacpp" if a.no_llamacpp else "CPU only"}
    else:
        try:
            import llama_cpp  # noqa: F401  (optional third-party peer)

            try:
                doc["peers"]["llamacpp"] = llamacpp_peer([tok.decode(r) for r in rows], M, torch.get_num_threads())
            except httpx.HTTPError as e:
                doc["peers"]["llamacpp"] = {"skipped": f"llama.cpp server failed: {type(e).__name__}: {e}"}
        except ImportError:
            doc["peers"]["llamacpp"] = {
                "skipped": "llama-cpp-python is not installed (pip install -r requirements-peers.txt)"
            }
    if not a.no_server and a.device == "cpu":
        doc["server"] = server_section()
    doc["machine"]["loadavg_after"] = load_avg()
    emit(doc)


if __name__ == "__main__":
    main()
