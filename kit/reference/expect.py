"""`python -m kit expect`: the accept length a draft should reach, from its training accuracies alone.

A 1T-parameter target cannot run the oracle on a laptop, but every EAGLE-3 trainer logs per-position (TTT step)
accuracies. This turns them into the accept length SGLang would report (bonus included) for a chain or a tree.

Sources (the last value logged per position; eval before train unless `--split`):
* SpecForge logs: `train/acc_k`, `eval/acc_k`, computed with the true tokens as input; its own
  `simulated_acc_len` multiplies them, i.e. reads them as *conditional* accuracies.
* speculators logs: `full_acc_k` (*cumulative*: steps 0..k all correct) and `cond_acc_k` (*conditional*), preferred.
* the kit's trainer: a draft's `kit_provenance.json` (`epochs[-1].step_acc`, SpecForge's definition).
* by hand: `--acc 0.745 0.62 0.55` (`--accuracy-kind`; default conditional).

Model (assumptions, printed with every answer):
1. Position k accepts with conditional probability c_k: a chain of s steps reaches AL = 1 + sum_k prod_{j<=k} c_j.
2. Positions beyond the logged ones repeat the last logged accuracy.
3. Trees: at depth j the true token is the rank-r candidate with probability c_j for r = 1 and
   (1 - c_j) q (1 - q)^(r-2) for r >= 2 (`--second-choice-share` q); scores are calibrated, so SGLang's
   num_draft_tokens - 1 best-scored nodes are the likeliest, and AL = 1 + the sum of their path probabilities.

Checked against the oracle on the quick demo draft (SmolLM2-135M, 4 prompts x 40 tokens): training accuracies
[0.54, 0.387, 0.234] predict a 3-1-4 chain AL of 1.80, the oracle measures 1.21, and its own depth rates give
1.229: the formula holds, training accuracy is optimistic (read an upper estimate). For the 3-4-8 tree (oracle
1.34) the depth-1 top-4 coverage (0.31 against 0.17 top-1) gives q = 0.06, hence the default 0.1.

    python -m kit expect --acc 0.745                               # the seed's step-0 accuracy
    python -m kit expect --log train.log --speculative-eagle-topk 8 --speculative-num-draft-tokens 32
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

from kit import config as kconfig
from kit.config import opt
from kit.findings import KitInputError
from kit.sglang.params import SpecParams

HELP = "expected accept length from training accuracies (SpecForge/speculators logs or --acc), no target needed"
KINDS = ("conditional", "cumulative")
DEFAULT_SECOND_CHOICE_SHARE = 0.1  # measured 0.06 on the kit's quick demo draft (see below)
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
# SpecForge: train/acc_3, eval/acc_3 (not full_acc_/cond_acc_, which are speculators')
_SPECFORGE = re.compile(r"(?:(train|eval)/)?(?<![A-Za-z_])acc_(\d+)['\"]?\s*[:=]\s*" + _NUM)
_SPECULATORS = re.compile(r"(?:(train|val|eval)[/_.])?(full|cond)_acc_(\d+)['\"]?\s*[:=]\s*" + _NUM)
_SPLIT_NAME = {"train": "train", "val": "eval", "eval": "eval"}
_SPECULATORS_SPLIT = re.compile(r"['\"](train|val|eval)['\"]\s*:\s*\{")


@dataclass
class ExpectConfig:
    log: str | None = opt("training log (SpecForge or speculators) or a draft's kit_provenance.json")
    acc: list[float] | None = opt("per-position accuracies typed by hand")
    accuracy_kind: str = opt("how to read the accuracies (auto: by source)", "auto", choices=["auto", *KINDS])
    split: str = opt("which logged split to use", "auto", choices=["auto", "train", "eval"])
    spec: SpecParams = field(default_factory=lambda: SpecParams(3, 1, 4))
    second_choice_share: float = opt(
        "share of top-1 misses the next-ranked candidate catches (trees only)", DEFAULT_SECOND_CHOICE_SHARE
    )
    json: bool = opt("print one JSON document as the last line", False)


@dataclass
class Accuracies:
    values: list[float]
    kind: str  # conditional | cumulative
    source: str  # where they came from, for the report

    def conditional(self) -> list[float]:
        if self.kind == "conditional":
            return list(self.values)
        return [u / prev if prev > 0 else 0.0 for u, prev in zip(self.values, [1.0, *self.values])]


def _last_per_index(hits: list[tuple[str, int, float]], split: str) -> tuple[list[float], str] | None:
    """Values by position index, the last logged one per index, for the chosen split."""
    splits = {s for s, _, _ in hits}
    if split == "auto":
        split = "eval" if "eval" in splits else ("train" if "train" in splits else "")
    pick = {i: v for s, i, v in hits if s == split or (not s and split in ("", "train"))}
    if not pick:
        return None
    n = max(pick) + 1
    if set(pick) != set(range(n)):
        raise KitInputError(f"positions {sorted(set(range(n)) - set(pick))} missing from the log")
    return [pick[i] for i in range(n)], split or "unlabelled"


def parse_log(text: str, split: str = "auto", source: str = "log") -> Accuracies:
    """Per-position accuracies from a SpecForge or speculators training log (text or JSON lines)."""
    spec, split_now = [], ""
    for line in text.splitlines():
        m = _SPECULATORS_SPLIT.search(line)
        split_now = _SPLIT_NAME[m.group(1)] if m else split_now
        for m in _SPECULATORS.finditer(line):
            sp = _SPLIT_NAME[m.group(1)] if m.group(1) else split_now
            spec.append((m.group(2), sp, int(m.group(3)), float(m.group(4))))
    for kind, name in (("cond", "conditional"), ("full", "cumulative")):
        got = _last_per_index([(s, i, v) for k, s, i, v in spec if k == kind], split)
        if got:
            return Accuracies(got[0], name, f"{source}: speculators {kind}_acc_k ({got[1]})")
    hits = [(m.group(1) or "", int(m.group(2)), float(m.group(3))) for m in _SPECFORGE.finditer(text)]
    got = _last_per_index(hits, split)
    if got:
        return Accuracies(got[0], "conditional", f"{source}: SpecForge acc_k ({got[1]})")
    raise KitInputError(f"{source}: no per-position accuracies (acc_k, full_acc_k or cond_acc_k) found")


def read_accuracies(path: str | Path, split: str = "auto") -> Accuracies:
    p = Path(path)
    if p.is_dir():
        p = p / "kit_provenance.json"
    try:
        text = p.read_text()
    except OSError as e:
        raise KitInputError(f"{p}: cannot read ({e.strerror})")
    with contextlib.suppress(json.JSONDecodeError):
        doc = json.loads(text) if p.suffix == ".json" else None
        if isinstance(doc, dict) and doc.get("epochs") and doc["epochs"][-1].get("step_acc"):
            return Accuracies(list(doc["epochs"][-1]["step_acc"]), "conditional", f"{p}: kit train step_acc")
    return parse_log(text, split, str(p))


def extend(cond: list[float], steps: int) -> list[float]:
    """Positions 1..steps: the logged ones, then the last logged one repeated (assumption 2)."""
    if not cond:
        raise KitInputError("no accuracies given")
    if bad := [a for a in cond if not 0.0 <= a <= 1.0]:
        raise KitInputError(f"accuracy {bad[0]} outside [0, 1] (give fractions, e.g. 0.745)")
    return (list(cond) + [cond[-1]] * steps)[:steps]


def chain_accept_length(cond: list[float], steps: int) -> float:
    """Assumption 1: AL = 1 + sum_k prod_{j<=k} c_j."""
    return sum(itertools.accumulate(extend(cond, steps), operator.mul), 1.0)


def rank_probs(c: float, topk: int, q: float) -> list[float]:
    """P(the true token is the draft's rank-r candidate), r = 1..topk (assumption 3)."""
    return [c] + [(1 - c) * q * (1 - q) ** (r - 2) for r in range(2, topk + 1)]


def tree_accept_length(cond: list[float], steps: int, topk: int, num_draft_tokens: int, q: float) -> float:
    """SGLang's tree: topk beams per depth, the num_draft_tokens - 1 best-scored nodes verified."""
    candidates: list[float] = []
    beams = [1.0]
    for c in extend(cond, steps):
        children = [b * p for b in beams for p in rank_probs(c, topk, q)]
        candidates += children
        beams = heapq.nlargest(topk, children)
    return 1.0 + sum(heapq.nlargest(max(num_draft_tokens - 1, 0), candidates))


def expected_accept_length(acc: Accuracies, params: SpecParams, q: float = DEFAULT_SECOND_CHOICE_SHARE) -> float:
    p, cond = params.resolved(), acc.conditional()
    steps, topk, tokens = p.speculative_num_steps, p.speculative_eagle_topk, p.speculative_num_draft_tokens
    if topk == 1:
        return chain_accept_length(cond, min(steps, tokens - 1))
    return tree_accept_length(cond, steps, topk, tokens, q)


def assumptions(acc: Accuracies, steps: int, q: float, tree: bool) -> list[str]:
    out = [
        f"accuracies read as {acc.kind} per-position acceptance"
        + (" (converted to conditional: c_k = u_k / u_(k-1))" if acc.kind == "cumulative" else "")
        + "; greedy verification, the same data distribution as training",
        "AL = 1 + sum over depth of the chance all draft tokens up to it are accepted (bonus token included)",
    ]
    if len(acc.values) < steps:
        out.append(f"positions {len(acc.values) + 1}..{steps} repeat the last logged accuracy ({acc.values[-1]:.3f})")
    if tree:
        out.append(
            f"top-k coverage approximated from top-1 accuracy: rank r >= 2 catches (1-c) q (1-q)^(r-2), q = {q}; "
            "draft scores calibrated, so SGLang's best-scored nodes are the likeliest"
        )
    return out


def expect(cfg: ExpectConfig) -> dict:
    if (cfg.log is None) == (cfg.acc is None):
        raise KitInputError("give --log FILE or --acc A0 [A1 ...] (one of them)")
    acc = Accuracies(list(cfg.acc), "conditional", "--acc") if cfg.log is None else read_accuracies(cfg.log, cfg.split)
    if cfg.accuracy_kind != "auto":
        acc = Accuracies(acc.values, cfg.accuracy_kind, acc.source)
    if not 0.0 <= cfg.second_choice_share <= 1.0:
        raise KitInputError(f"--second-choice-share {cfg.second_choice_share}: give a fraction in [0, 1]")
    steps = cfg.spec.resolved().speculative_num_steps
    chain = {s: round(chain_accept_length(acc.conditional(), s), 3) for s in range(1, max(steps, 7) + 1)}
    return {
        "source": acc.source,
        "accuracies": acc.values,
        "accuracy_kind": acc.kind,
        "conditional": [round(c, 4) for c in acc.conditional()],
        "params": cfg.spec.resolved().label(),
        "expected_accept_length": round(expected_accept_length(acc, cfg.spec, cfg.second_choice_share), 3),
        "chain_by_steps": chain,
        "assumptions": assumptions(acc, max(steps, 7), cfg.second_choice_share, cfg.spec.speculative_eagle_topk > 1),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, ExpectConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(ExpectConfig, args)
    doc = expect(cfg)
    if cfg.json:
        print(json.dumps(doc))
        return 0
    print(f"accuracies ({doc['source']}, {doc['accuracy_kind']}): {doc['accuracies']}")
    print(f"expected accept length at {doc['params']}: {doc['expected_accept_length']:.2f}")
    chain = ", ".join(f"{s}: {v:.2f}" for s, v in doc["chain_by_steps"].items())
    print(f"chain (topk 1), by --speculative-num-steps: {chain}")
    print("assumptions:", *(f"  - {a}" for a in doc["assumptions"]), sep="\n")
    return 0
