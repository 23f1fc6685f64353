"""`kit tune`'s model: the speedup a grid point should reach at a batch size, from a short calibration.

Per batch size B and point p = (steps s, topk k, draft tokens n) with expected accept length AL(p),
`kit.measure.breakeven`'s model with a verify that grows with its tokens:

    predicted speedup(B, p) = AL(p) * t_decode / t_iteration(p)
    t_iteration(p)          = t_decode * (1 + g * (n - 1)) + (s + 1) * t_draft

Calibration, per batch size, one short interleaved bench: the baseline gives t_decode = B / its output tok/s; two
points (`calibration_points`: the grid's points with the fewest and the most draft tokens, spanning its verify
sizes) give their iterations, B * measured accept length / tok/s, hence g and t_draft (two linear equations).
Assumptions: (1) a verify costs a decode step plus g of one per extra token a request carries, linear between the
calibrated sizes, g and t_draft fit per batch size (at least 0), so what changes with the batch is measured;
(2) each draft forward (s steps and the extend) costs t_draft whatever its topk (one layer and a head); (3) AL(p)
does not depend on B; (4) prefill and scheduling are inside the measured costs. A point whose iteration takes a
path the calibration did not (another attention kernel, eager mode past `--cuda-graph-max-bs`, a knee in the
forward's cost) or whose accept length is not the expected one is a miss, `bench.prediction_miss`, worth a look;
and since the ranking is then in doubt, `kit tune` measures the next `--top` points of it too (`second_look`).

    fit(0.05, {SpecParams(1, 1, 2): 0.07, SpecParams(3, 2, 8): 0.12}).speedup(SpecParams(2, 1, 3), 2.1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.findings import Code, Finding
from kit.sglang.params import SpecParams

SHORT, LONG = SpecParams(1, 1, 2), SpecParams(3, 1, 4)  # the shortest chain; the far end where the grid has none
PREDICTION_MISS = Code(
    "bench.prediction_miss",
    "bench/verdict: notebook 05",
    "warning",
    "`kit tune` measured a point's speedup far from its prediction (outside `--miss`, default ±35%): its accept "
    "length differs from the expected one (wiring, prompts), or its iteration runs a path the calibration did "
    "not (eager instead of CUDA graphs past `--cuda-graph-max-bs`, another attention kernel for trees)",
    "compare its measured accept length with the expected one (`kit bench`, `kit oracle`); for costs, rerun "
    "the point alone with `kit bench` and read the server log",
)


@dataclass(frozen=True)
class StepCosts:
    """One batch size's fitted costs (module docstring: the model and its assumptions), seconds."""

    decode: float
    draft: float
    growth: float  # g: the verify's extra cost per extra token a request carries, relative to one decode step

    def iteration(self, p: SpecParams) -> float:
        extra = p.speculative_num_draft_tokens - 1
        return self.decode * (1 + self.growth * extra) + (p.speculative_num_steps + 1) * self.draft

    def speedup(self, p: SpecParams, accept_length: float) -> float:
        return accept_length * self.decode / self.iteration(p)


def _row(p: SpecParams, decode: float) -> tuple[float, float]:
    """p's iteration minus a decode step = this row . (g, t_draft)."""
    return decode * (p.speculative_num_draft_tokens - 1), p.speculative_num_steps + 1


def calibration_points(points: list[SpecParams]) -> tuple[SpecParams, SpecParams]:
    """The grid's own ends, so the calibration launches no point outside it: its point with the fewest draft tokens
    (then steps) and its point with the most (then steps) that the fit can tell apart from it (its
    tokens-to-forwards ratio differs). Where the grid has no such pair: 1-1-2 and its farthest point, or 3-1-4."""

    def apart(a: SpecParams, b: SpecParams) -> bool:
        return _row(a, 1)[0] * _row(b, 1)[1] != _row(a, 1)[1] * _row(b, 1)[0]

    by_size = sorted(points, key=lambda p: (p.speculative_num_draft_tokens, p.speculative_num_steps))
    for short in (by_size[0], SHORT):
        far = [p for p in reversed(by_size) if p != short and apart(p, short)]
        if far:
            return short, far[0]
    return SHORT, LONG


def fit(decode: float, iterations: dict[SpecParams, float]) -> StepCosts:
    """StepCosts from a decode step and two points' iterations, seconds: g and t_draft solve the two equations
    (never below 0: where one would be, the farther point alone gives the other)."""
    (a, t_a), (b, t_b) = sorted(iterations.items(), key=lambda x: x[0].speculative_num_draft_tokens)
    (a1, a2), (b1, b2), y_a, y_b = _row(a, decode), _row(b, decode), t_a - decode, t_b - decode
    det = a1 * b2 - a2 * b1
    g, draft = (y_a * b2 - a2 * y_b) / det, (a1 * y_b - y_a * b1) / det
    if g < 0:
        g, draft = 0.0, max(y_b / b2, 0.0)
    elif draft < 0:
        g, draft = max(y_b / b1, 0.0), 0.0
    return StepCosts(decode, draft, g)


def calibrated(batch: int, labels: dict[str, dict], points: tuple[SpecParams, SpecParams]) -> dict:
    """One batch size's calibration from its bench summary's arms (`summary["labels"]`): the measured step costs
    and the fit."""
    decode = batch / labels["baseline"]["output_tok_s"]
    arms = {p: labels[p.label()] for p in points}
    iterations = {p: batch * a["accept_length"] / a["output_tok_s"] for p, a in arms.items()}
    costs = fit(decode, iterations)
    return {"t_decode_s": decode, "t_iteration_s": {p.label(): t for p, t in iterations.items()},
            "accept_length": {p.label(): a["accept_length"] for p, a in arms.items()},
            "t_draft_s": costs.draft, "growth": costs.growth}  # fmt: skip


def second_look(rows: dict[str, dict], predicted: dict[str, float], measured: set[str], top: int, miss: float):
    """After a measured point missed its prediction by more than `miss` (`rows`: one bench's measured points): the
    `top` best predicted points not yet measured, whether or not the model says they can pay (it was off); else []."""
    if not any(r["median"] is not None and abs(r["median"] / r["predicted"] - 1) > miss for r in rows.values()):
        return []
    return [lab for lab in sorted(predicted, key=lambda lab: -predicted[lab]) if lab not in measured][:top]


def select(predicted: dict[str, float], top: int, miss: float) -> list[str]:
    """The labels to measure: the `top` best predicted, leaving out those that cannot pay even if the model is
    off by `miss` (predicted below 1 / (1 + miss)); the best one is kept always, so its prediction is checked."""
    ranked = sorted(predicted, key=lambda lab: -predicted[lab])
    keep = [lab for lab in ranked if predicted[lab] >= 1 / (1 + miss)][:top]
    return keep or ranked[:1]


def best(measured: dict[str, dict]) -> dict:
    """One batch size's answer from its measured points (`{label: {median, ci95, inconclusive, ...}}`): the
    point with the highest paired median speedup, and whether it pays (its interval above 1), is "no
    speculation" (its median at or below 1, or its interval reaching 1) or cannot tell (`inconclusive`: noise can
    withhold a claim that it pays, not make one, so an interval reaching 1 is "no speculation" however noisy)."""
    rows = {lab: r for lab, r in measured.items() if r.get("median") is not None}
    if not rows:
        return {"point": None, "verdict": "not measured"}
    lab = max(rows, key=lambda k: rows[k]["median"])
    r = rows[lab]
    lo, hi = (math.nan if v is None else v for v in r.get("ci95") or (None, None))
    figure = f"{lab} {r['median']:.2f}x [{lo:.2f}, {hi:.2f}]"
    if r["median"] > 1 and lo > 1:
        if r.get("inconclusive"):
            return {"point": lab, "pays": None, "verdict": f"inconclusive: {figure}: {r['inconclusive']}"}
        return {"point": lab, "pays": True, "verdict": figure}
    return {"point": None, "pays": False, "verdict": f"no speculation (best {figure})"}


def miss_finding(batch: int, label: str, predicted: float, measured: float, tolerance: float) -> Finding | None:
    """`bench.prediction_miss` when measured / predicted - 1 lies outside ±tolerance."""
    miss = measured / predicted - 1
    if abs(miss) <= tolerance:
        return None
    return PREDICTION_MISS(
        f"batch {batch}, {label}: measured {measured:.2f}x, predicted {predicted:.2f}x ({miss:+.0%})",
        evidence={"batch_size": batch, "point": label, "predicted": round(predicted, 3), "measured": measured},
    )
