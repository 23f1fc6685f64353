"""Break-even of SGLang's EAGLE-3 chain at batch 1: measured per-iteration costs -> predicted speedup.

At batch 1 (CUDA graphs, greedy) the baseline's target decode step, t_decode, yields 1 token, and one EAGLE-3
chain iteration, t_iteration = t_draft_extend + num_steps * t_draft_step + t_verify(num_draft_tokens) (+ the
scheduler's bookkeeping), yields `accept_length` tokens (accepted drafts + the bonus token). Per token,

    predicted speedup          = accept_length * t_decode / t_iteration
    break-even accept length   = t_iteration / t_decode          (speedup 1)

and for a whole request of N new tokens after a prefill (what a tok/s benchmark divides)

    request speedup = (t_prefill_base + (N - 1) * t_decode) / (t_prefill_spec + (N - 1) / accept_length * t_iteration)

A chain (topk 1) runs the same kernels whatever is accepted, so the iteration cost measured with a
random-weight draft is a trained one's. The verify at batch 1 is memory-bound and grows with the target's
weights like t_decode, while the draft step grows with the hidden width only: t_iteration / t_decode falls as
the target grows, and there is a size from which a given accept length pays (`break_even`, linear in
log(parameters) between measured sizes).

`bench/gpu_breakeven.py` measures both on SmolLM2-architecture targets of several sizes and writes
`breakeven.json` through `analyze`; `kit demo --gpu --breakeven FILE` and notebook 05 recompute it for their
run's accept length (`digest`) and state it in one sentence in `summary.md`.

    IterationCosts(t_decode_ms=1.75, t_iteration_ms=4.1).predicted_speedup(2.17)
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kit.findings import KitInputError
from kit.hf import HFConfig


@dataclass(frozen=True)
class IterationCosts:
    """One target size's measured costs at batch 1, in milliseconds."""

    t_decode_ms: float  # baseline: one target decode step (one token)
    t_iteration_ms: float  # EAGLE-3 chain: drafts + the draft extend + one verify, one iteration

    def __post_init__(self):
        if not (self.t_decode_ms > 0 and self.t_iteration_ms > 0):
            raise ValueError(f"costs must be positive: {self}")

    @property
    def break_even_accept_length(self) -> float:
        """The accept length at which speculation costs what it saves (speedup 1)."""
        return self.t_iteration_ms / self.t_decode_ms

    def predicted_speedup(self, accept_length: float) -> float:
        """Decode throughput with speculation over without: accept_length * t_decode / t_iteration."""
        return accept_length * self.t_decode_ms / self.t_iteration_ms

    def request_speedup(
        self, accept_length: float, new_tokens: int, t_prefill_base_ms: float = 0.0, t_prefill_spec_ms: float = 0.0
    ) -> float:
        """One request's tok/s with speculation over without: token 1 from prefill, the rest decode steps/iterations."""
        n = max(new_tokens - 1, 0)
        base = t_prefill_base_ms + n * self.t_decode_ms
        return base / (t_prefill_spec_ms + n / accept_length * self.t_iteration_ms)


def draft_step_ms(t_iteration_a_ms: float, steps_a: int, t_iteration_b_ms: float, steps_b: int) -> float:
    """One draft step's cost from two chains on the same target that differ in num_steps (the verify of one
    more token costs next to nothing at batch 1): the slope of t_iteration over num_steps."""
    if steps_a == steps_b:
        raise ValueError("the two chains must differ in num_steps")
    return (t_iteration_a_ms - t_iteration_b_ms) / (steps_a - steps_b)


@dataclass(frozen=True)
class SizePoint:
    """One measured target size: its shape and its costs."""

    name: str
    params: int
    hidden: int
    layers: int
    costs: IterationCosts

    def row(self, accept_length: float) -> dict[str, Any]:
        c = self.costs
        figures = [c.t_decode_ms, c.t_iteration_ms, c.break_even_accept_length, c.predicted_speedup(accept_length)]
        names = "t_decode_ms t_iteration_ms break_even_accept_length predicted_speedup".split()
        shape = {"name": self.name, "params": self.params, "hidden": self.hidden, "layers": self.layers}
        return shape | {k: round(v, 4) for k, v in zip(names, figures)}


@dataclass(frozen=True)
class BreakEven:
    """Where a draft with `accept_length` starts to pay. where: "within" (interpolated between two measured sizes),
    "smallest" (pays at the smallest: params and t_decode_ms are its), "beyond" (not even at the largest: None)."""

    accept_length: float
    where: str
    params: float | None
    t_decode_ms: float | None


def _log_lerp(a: float, b: float, f: float) -> float:
    """The point a fraction f of the way from a to b on a log scale."""
    return math.exp(math.log(a) + f * (math.log(b) - math.log(a)))


def break_even(points: list[SizePoint], accept_length: float) -> BreakEven:
    """The smallest target (parameters, decode step) where `accept_length` reaches the break-even one, linear in
    log(params) between the two measured sizes around it."""
    if not points:
        raise ValueError("no measured sizes")
    pts = sorted(points, key=lambda p: p.params)
    ratios = [p.costs.break_even_accept_length for p in pts]
    for i, (p, r) in enumerate(zip(pts, ratios)):
        if r > accept_length:
            continue
        if i == 0:
            return BreakEven(accept_length, "smallest", float(p.params), p.costs.t_decode_ms)
        q, rq = pts[i - 1], ratios[i - 1]
        f = (rq - accept_length) / (rq - r)  # 0 at the smaller size, 1 at this one
        t_decode = _log_lerp(q.costs.t_decode_ms, p.costs.t_decode_ms, f)
        return BreakEven(accept_length, "within", _log_lerp(q.params, p.params, f), t_decode)
    return BreakEven(accept_length, "beyond", None, None)


def llama_params(cfg: HFConfig) -> int:
    """Parameters of a Llama config: GQA attention, SwiGLU MLP, 2 RMSNorms a layer, final norm, embedding, head."""
    h, inter, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or h // heads
    kv = cfg.get("num_key_value_heads") or heads
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2
    layer = attn + 3 * h * inter + 2 * h
    embed = cfg["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return cfg["num_hidden_layers"] * layer + h + embed


def kv_bytes_per_token(cfg: HFConfig, dtype_bytes: int = 2) -> int:
    """KV cache bytes of one token over every layer of a Llama-shaped config (keys and values, bf16 by default)."""
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return cfg["num_hidden_layers"] * 2 * (cfg.get("num_key_value_heads") or heads) * head_dim * dtype_bytes


def analyze(
    points: list[SizePoint],
    accept_length: float,
    at: str | None = None,
    measured_speedup: float | None = None,
    new_tokens: int | None = None,
    prefill_ms: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The break-even document (`breakeven.json`'s analysis): each size's row, the break-even size for this
    accept length, and at size `at` (the demo's target) the predicted speedup beside a measured one."""
    be = break_even(points, accept_length)
    doc: dict[str, Any] = {
        "accept_length": accept_length,
        "sizes": [p.row(accept_length) for p in sorted(points, key=lambda p: p.params)],
        "break_even": asdict(be),
        "sentence": sentence_for(be),
    }
    point = next((p for p in points if p.name == at), None)
    if point is not None:
        cmp: dict[str, Any] = {"size": at, "predicted_speedup": round(point.costs.predicted_speedup(accept_length), 4)}
        if new_tokens:
            pre = prefill_ms or {}
            req = point.costs.request_speedup(
                accept_length, new_tokens, pre.get("baseline", 0.0), pre.get("eagle3", 0.0)
            )
            cmp["predicted_request_speedup"] = round(req, 4)
        if measured_speedup is not None:
            cmp["measured_speedup"] = measured_speedup
            cmp["relative_error"] = round(cmp["predicted_speedup"] / measured_speedup - 1, 4)
        doc["at_demo_target"] = cmp
    return doc


def sentence_for(be: BreakEven) -> str:
    """One sentence for a reader: where this accept length pays on the measured GPU."""
    a = f"with accept length {be.accept_length:.2f}"
    if be.where == "beyond":
        return f"{a}, EAGLE-3 does not pay on this GPU at any measured target size"
    p = f"{be.params / 1e9:.1f} B" if be.params >= 1e9 else f"{be.params / 1e6:.0f} M"
    step, size = f"{be.t_decode_ms:.2f} ms", f"≈ {p} parameters"
    if be.where == "smallest":
        return f"{a}, EAGLE-3 pays on this GPU already at the smallest measured target (decode step {step}, {size})"
    return f"{a}, EAGLE-3 pays on this GPU from a target decode step of ≥ {step} ({size})"


def load(path: str | os.PathLike, flag: str = "--breakeven") -> dict[str, Any]:
    """A `breakeven.json` (`bench/gpu_breakeven.py`'s output); KitInputError naming `flag` when missing or not one."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise KitInputError(f"{flag} {p}: not a readable breakeven.json ({type(e).__name__})") from None
    if not isinstance(doc, dict) or not ("analysis" in doc or "errors" in doc):
        raise KitInputError(f"{flag} {p}: not a breakeven.json of bench/gpu_breakeven.py (no analysis, no errors)")
    return doc


def digest(
    doc: dict[str, Any],
    accept_length: float | None = None,
    measured_speedup: float | None = None,
    source: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """A run's summary from a breakeven.json: its break-even recomputed for `accept_length` and, at the demo's target,
    the prediction beside `measured_speedup` (each the run's own, else the file's); `sentence` says it in one line."""
    an = doc.get("analysis") or {}
    rows = an.get("sizes") or []
    if not rows:
        return {"sentence": sentence(doc), "file": str(source) if source else None}
    costs = [IterationCosts(r["t_decode_ms"], r["t_iteration_ms"]) for r in rows]
    points = [SizePoint(r["name"], r["params"], r["hidden"], r["layers"], c) for r, c in zip(rows, costs)]
    at = an.get("at_demo_target") or {}
    a = accept_length if accept_length is not None else an.get("accept_length")
    m = measured_speedup if measured_speedup is not None else at.get("measured_speedup")
    out = analyze(points, a, at=at.get("size"), measured_speedup=m)
    return out | {"sentence": sentence({"analysis": out}), "file": str(source) if source else None}


def sentence(doc: dict[str, Any]) -> str:
    """The summary's sentence from a breakeven.json: the break-even, and the demo target's predicted (measured) speedup."""
    an = doc.get("analysis") or doc
    be = an.get("break_even")
    if not be:
        errs = doc.get("errors") or []
        return "break-even not measured" + (f" ({errs[0]})" if errs else "")
    text = sentence_for(BreakEven(**be))
    at = an.get("at_demo_target") or {}
    if at.get("predicted_speedup") is not None:
        text += f"; predicted speedup at the demo's target {at['predicted_speedup']:.2f}x"
        if at.get("measured_speedup") is not None:
            text += f" (measured {at['measured_speedup']:.2f}x)"
    return text + "."
