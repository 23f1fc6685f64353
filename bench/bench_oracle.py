"""Benchmark of the offline oracle and the config-only probe. Prints one JSON document (last line).

Why: the oracle is what notebooks 03/05 and the demo run on a laptop; its cost decides how many
prompts a user can afford. The config-only probe must stay cheap for a 1T-parameter target.

Sections of the JSON:
  oracle       SmolLM2-135M + the demo draft (quick unless --full): target tokens/s processed in
               the teacher-forced pass, draft steps/s (one draft step = one tree level for one
               position), wall time per evaluation, accept lengths (correct wiring, aux off)
  speculative  `speculate.speculative_generate` vs `greedy_generate` on the same prompts
               (CPU reference of what a server does per request): tokens/s and accept length
  kimi_probe   time to build a 61-layer 7168-wide Kimi-K2.5-sized target on the meta device
               and run the hooked forward (kit.wiring.probe, config.json only)

    python bench/bench_oracle.py [--full] [--prompts 8] [--max-new-tokens 64] [--threads N]
Machine used for the committed numbers: 2-core CPU, no GPU (other work on it adds noise).
"""

from __future__ import annotations

import argparse
import platform
import time

from _run import emit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="use the full demo draft (trains it once, ~5 min)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()

    import torch

    from kit.models import load_target
    from kit.reference.draft_io import load_draft
    from kit.reference.oracle import OracleConfig, continuations, evaluate, prompt_texts
    from kit.reference.speculate import Wiring, greedy_generate, speculative_generate
    from kit.reference.train import ensure_demo_draft
    from kit.sglang.params import SpecParams
    from kit.wiring import aux
    from kit.wiring.probe import ProbeConfig, probe

    if a.threads:
        torch.set_num_threads(a.threads)
    doc: dict = {
        "machine": {
            "cpu_count": __import__("os").cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
        }
    }
    t0 = time.perf_counter()
    path = ensure_demo_draft(quick=not a.full)
    target, tok = load_target()
    draft = load_draft(path, target_model=target)
    t1 = time.perf_counter()
    seqs = continuations(target, tok, prompt_texts(OracleConfig(num_prompts=a.prompts)), a.max_new_tokens)
    t2 = time.perf_counter()
    ev = {}
    for name, w in (("correct", Wiring()), ("aux_off", Wiring(aux_capture=False))):
        s = time.perf_counter()
        r = evaluate(target, draft, seqs, SpecParams(3, 1, 4), w)
        ev[name] = {
            "wall_s": round(time.perf_counter() - s, 2),
            "accept_length": r.accept_length,
            "position_accept_length": r.position_accept_length,
            **{
                k: v
                for k, v in r.to_dict().items()
                if k in ("target_tokens_per_s", "draft_steps_per_s", "target_tokens", "draft_steps")
            },
        }
    tree = evaluate(target, draft, seqs, SpecParams(3, 2, 6), Wiring())
    ev["tree_3_2_6"] = {"accept_length": tree.accept_length, "draft_steps_per_s": tree.to_dict()["draft_steps_per_s"]}
    doc["oracle"] = {
        "draft": str(path),
        "load_s": round(t1 - t0, 1),
        "reference_generation_s": round(t2 - t1, 1),
        "prompts": a.prompts,
        "max_new_tokens": a.max_new_tokens,
        **ev,
    }

    spec_tok = greedy_tok = spec_s = greedy_s = 0.0
    als = []
    for prompt, _ in seqs[:4]:
        s = time.perf_counter()
        g = greedy_generate(target, prompt, a.max_new_tokens, tok.eos_token_id)
        greedy_s += time.perf_counter() - s
        s = time.perf_counter()
        r = speculative_generate(
            target, draft, prompt, a.max_new_tokens, SpecParams(3, 1, 4), Wiring(), tok.eos_token_id
        )
        spec_s += time.perf_counter() - s
        assert r.tokens == g.tokens
        spec_tok += len(r.tokens)
        greedy_tok += len(g.tokens)
        als.append(r.accept_length)
    doc["speculative"] = {
        "greedy_tok_s": round(greedy_tok / greedy_s, 1),
        "speculative_tok_s": round(spec_tok / spec_s, 1),
        "accept_length_mean": round(sum(als) / len(als), 3),
        "tokens_equal_greedy": True,
    }

    s = time.perf_counter()
    kp = probe(
        ProbeConfig(
            target=str(aux.KIMI_TARGET_CONFIG),
            draft=str(aux.KIMI_DRAFT_CONFIG),
            config_only=True,
            algorithm="EAGLE3",
            sglang_version="0.5.23",
        )
    )
    doc["kimi_probe"] = {
        "total_s": round(time.perf_counter() - s, 2),
        "build_s": kp.build_s,
        "forward_s": kp.forward_s,
        "built_as": kp.built_as,
        "num_layers": kp.num_layers,
        "fused": kp.shapes["fused"],
        "fc": kp.verdict["fc"],
    }
    emit(doc)


if __name__ == "__main__":
    main()
