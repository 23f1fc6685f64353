"""Which EAGLE-3 chain pays on this machine: the target's forward cost by token count, measured here, against
the draft's recorded accept length per chain.

A chain s-1-(s+1) gains the accept length per verify and costs one target forward of s+1 tokens plus s + 1 draft
forwards. An n-token forward's cost is the CPU's small-M GEMM, and CPUs differ (2-core EPYC AVX2, 1/2/3/4
tokens: 88/83/104/90 ms fp32, 3-1-4 wins; 2-core Xeon AMX: 60/61/62/81 ms, 2-1-3 wins). So `forward_ms` times
the target here, a draft step costs one target token scaled by the draft's share of the weights, and the accept
lengths come from the draft's `training.json` (its oracle run per chain, recorded by `kit train-draft`).

    python -m kit.reference.chain                 # the pick for the embedded target and the shipped draft
    pick_chain("embedded", draft_dir)             # ChainPick(params, why, forward_ms, predicted)
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from kit.sglang.params import SpecParams

CANDIDATES = (SpecParams(2, 1, 3), SpecParams(3, 1, 4))
DEFAULT = CANDIDATES[0]
MEASURE_VERSION = 6  # bump when the engine code changes what a forward costs (cached measurements go stale)


@dataclass
class ChainPick:
    params: SpecParams
    why: str
    forward_ms: dict[int, float]  # target forward over n new tokens, median ms
    predicted: dict[str, float]  # chain label -> predicted speedup over greedy


def recorded_accept_lengths(draft_dir: str | Path) -> dict[str, float]:
    """Chain label -> the draft's oracle accept length (per verify, SGLang's meta definition) from training.json."""
    p = Path(draft_dir) / "training.json"
    return accept_lengths_of(json.loads(p.read_text())) if p.is_file() else {}


def accept_lengths_of(record: dict) -> dict[str, float]:
    """Chain label -> oracle accept length from a parsed training record (the first length recorded per chain)."""
    out = {}
    for key, v in (record.get("oracle") or {}).items():
        label, _, tokens = key.partition("@")
        if isinstance(v, dict) and "meta_accept_length" in v and tokens:
            out.setdefault(label, float(v["meta_accept_length"]))
    return out


def weight_elements(model_dir: str | Path, skip: tuple[str, ...] = ("embed_tokens", "d2t", "t2d")) -> int:
    """Elements a forward reads: every safetensors tensor but the skipped (an embedding is a lookup, d2t/t2d maps)."""
    from kit.checkpoint.safetensors_io import read_header

    tensors = [t for f in sorted(Path(model_dir).glob("*.safetensors")) for t in read_header(f)[1]]
    return sum(math.prod(t.shape) for t in tensors if not any(s in t.name for s in skip))


def forward_ms(model, sizes: tuple[int, ...], reps: int = 5, prefix: int = 64) -> dict[int, float]:
    """Median ms of a `RaggedTarget` forward of n new tokens after `prefix` cached, per n (interleaved: same load)."""
    import torch

    from kit.reference.target import Piece, RaggedTarget

    rt = RaggedTarget(model, None)
    kv = rt.new_kv(prefix + max(sizes) + 8)
    vocab = model.config.get_text_config().vocab_size
    ids = [(7 + 13 * i) % vocab for i in range(prefix + max(sizes))]  # any ids: the cost does not depend on them
    with torch.inference_mode():
        rt.forward([Piece(kv, ids[:prefix], logits="last")])
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(reps + 1):  # the first round warms up
            for n in sizes:
                kv.len = prefix
                t0 = time.perf_counter()
                rt.forward([Piece(kv, ids[prefix : prefix + n])])
                times[n].append(time.perf_counter() - t0)
    return {n: round(statistics.median(v[1:]) * 1e3, 1) for n, v in times.items()}


def predict(accept: float, steps: int, fwd: dict[int, float], draft_share: float) -> float:
    """Speedup over greedy of a `steps`-step chain: accept fwd[1] / (fwd[steps + 1] + (steps + 1) share fwd[1])."""
    one = fwd[1]
    return accept * one / (fwd[steps + 1] + (steps + 1) * draft_share * one)


def pick_chain(target: str = "embedded", draft_dir: str | Path | None = None, device: str = "cpu") -> ChainPick:
    """The candidate chain with the best predicted speedup here (2-1-3 where nothing is recorded); the measurement
    is cached under $KIT_CACHE_DIR/chain-pick, keyed by target, draft record, machine and device."""
    import hashlib

    from kit.models import cache_dir, measurement_machine, resolve_target, shipped_draft, target_id, write_cache_json

    draft_dir = Path(draft_dir or shipped_draft())
    record = draft_dir / "training.json"
    record_text = record.read_text() if record.is_file() else "{}"
    accept = accept_lengths_of(json.loads(record_text))
    usable = [c for c in CANDIDATES if c.label() in accept]
    if not usable:
        return ChainPick(DEFAULT, f"{draft_dir}/training.json records no oracle accept length per chain", {}, {})
    tdir = resolve_target(target)
    ident = [MEASURE_VERSION, target_id(tdir), record_text, measurement_machine(), device]
    key = hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:16]
    cached = cache_dir() / "chain-pick" / f"{key}.json"
    if cached.is_file():
        fwd = {int(k): v for k, v in json.loads(cached.read_text()).items()}
    else:
        from kit.reference.llama import load_engine_target  # the model the engine serves, loaded as it loads it

        model, _ = load_engine_target(tdir, dtype="float32", device=device)
        fwd = forward_ms(model, tuple(sorted({1} | {c.speculative_num_steps + 1 for c in usable})))
        write_cache_json(cached, fwd)
    share = weight_elements(draft_dir) / max(weight_elements(tdir), 1)
    predicted = {c.label(): round(predict(accept[c.label()], c.speculative_num_steps, fwd, share), 3) for c in usable}
    best = max(usable, key=lambda c: predicted[c.label()])
    costs = ", ".join(f"{n}: {ms:.0f} ms" for n, ms in sorted(fwd.items()))
    why = f"target forward by new tokens on this machine ({costs}); recorded accept length " + ", ".join(
        f"{c.label()} {accept[c.label()]:.2f} -> predicted {predicted[c.label()]:.2f}x" for c in usable
    )
    return ChainPick(best, why, fwd, predicted)


if __name__ == "__main__":
    pick = pick_chain()
    print(f"chain {pick.params.label()}: {pick.why}")
