"""Expected vs observed acceptance: is a low accept length a wiring fault or a weak draft?

The oracle (`kit.reference.oracle`) runs target and draft offline, in plain PyTorch, wired right, and says
what accept length (AL, bonus token included: no draft token ever accepted is 1.0) the draft *should* reach;
the server says what it *does* reach. Joining the two separates the seed's stories:

  observed ~ 1 while expected well above 1   -> verdict.wiring_fault  (error): the serving stack is mis-wired;
        the static findings (`kit doctor`, passed as `static_findings`) name the probable causes
  observed clearly below expected (not ~1)   -> verdict.below_expected (warning): partly wired
  both low                                   -> verdict.weak_draft    (warning): train more
  observed ~ expected                        -> verdict.healthy       (info)

Where the expectation comes from (`expectation_source`, each finding's `expected_from`): "transformers forward"
(`kit oracle` on the target's forward), "server capture" (the oracle on states captured inside the user's
SGLang server: `kit launch --capture-hidden`, then `kit oracle --hidden-states`), or "training log" (the
draft's training accuracies, `kit expect`, an upper estimate: `training=` of `verdict_table`/`sweep_findings`).

    from kit.measure.verdict import verdict
    findings = verdict(observed=1.0, expected=2.1, static_findings=doctor_report.findings)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from kit.findings import Code, Finding
from kit.sglang.params import SpecParams

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "bench/verdict: notebook 05"
WIRING_FAULT = Code(
    "verdict.wiring_fault",
    SECTION,
    "error",
    "observed accept length ≈ 1 while the oracle expects well above 1: the serving stack is mis-wired",
    "fix the static findings listed in evidence (kit doctor), launch with --speculative-algorithm EAGLE3, convert the "
    "checkpoint with kit convert; do not retrain the draft",
)
BELOW_EXPECTED = Code(
    "verdict.below_expected",
    SECTION,
    "warning",
    "observed accept length clearly below the oracle's (but not ≈ 1): partly mis-wired or mismatched settings",
    "check aux layer ids (off-by-one between stacks), chat template and sampling settings match the oracle's; "
    "compare per-position acceptance",
)
WEAK_DRAFT = Code(
    "verdict.weak_draft",
    SECTION,
    "warning",
    "expected and observed accept lengths both low: the draft itself is weak",
    "train longer or on data closer to the served traffic (same chat template); check the draft matches this target",
)
HEALTHY = Code("verdict.healthy", SECTION, "info", "observed accept length matches the oracle's expectation", "—")
NO_DATA = Code(
    "verdict.no_data",
    SECTION,
    "info",
    "no verdict: observed or expected accept length missing",
    "run the oracle (kit oracle) with the same target, draft and speculative parameters, and bench with --api sglang",
)

ONE_TOL = 0.1  # observed AL within this of 1.0 counts as "never accepts"
WELL_ABOVE = 1.3  # an expected AL at or above this means the draft is worth wiring
REL_TOL = 0.2  # observed within this fraction of expected counts as matching
# the sources of an expected accept length (`expectation_source`)
TRANSFORMERS_FORWARD, SERVER_CAPTURE, TRAINING_LOG = "transformers forward", "server capture", "training log"

# what produced AL ~ 1.0 in the field (public issues), in the order worth checking
GENERIC_CAUSES = [
    "--speculative-algorithm EAGLE instead of EAGLE3: the target passes one layer's hidden state, fc is skipped (sglang PR #21272)",
    "draft weights not loaded: checkpoint keys (layers.0.* vs midlayer.*) silently dropped by the loader",
    "aux hidden-state layer ids not read (top-level eagle_aux_hidden_state_layer_ids instead of eagle_config.*) or off by one",
    "draft lm_head missing or d2t/t2d vocabulary map wrong (random head, accept rate 0.00)",
    "draft trained for a different target or tokenizer/chat template",
    "broken collectives (custom all-reduce after a driver update): zero acceptance need not be the draft",
]


def expectation_source(oracle_doc=None, training=None) -> str:
    """Where an expected accept length came from: the training log (`training`: expect.Accuracies), a server capture
    (an oracle document or dict whose `hidden_states` source says so), or the target's forward (any other)."""
    if training is not None:
        return f"{TRAINING_LOG} ({training.source})"
    states = (
        oracle_doc.get("hidden_states") if isinstance(oracle_doc, dict) else getattr(oracle_doc, "hidden_states", None)
    )
    captured = (states or {}).get("source") or ""
    return SERVER_CAPTURE if captured.startswith(SERVER_CAPTURE) else TRANSFORMERS_FORWARD


def _causes(static_findings: Iterable[Any]) -> list[str]:
    """Static findings (Findings or dicts) that could explain a fault, as 'code: title': errors, then warnings."""

    def get(f, key):
        return f.get(key) if isinstance(f, dict) else getattr(f, key, None)

    rows = [(get(f, "severity"), f"{get(f, 'code')}: {get(f, 'title')}") for f in static_findings or ()]
    return [cause for sev in ("error", "warning") for s, cause in rows if s == sev]


def verdict(
    observed: float | None,
    expected: float | None,
    static_findings: Iterable[Any] = (),
    label: str = "",
    params: dict | None = None,
    one_tol: float = ONE_TOL,
    well_above: float = WELL_ABOVE,
    rel_tol: float = REL_TOL,
    expected_from: str = TRANSFORMERS_FORWARD,
) -> list[Finding]:
    """One verdict finding for an (observed, expected) accept-length pair; `expected_from` names its source."""
    pre = f"{label}: " if label else ""
    ev = {"observed_accept_length": observed, "expected_accept_length": expected, "expected_from": expected_from}
    if params:
        ev["params"] = params
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (observed, expected)):
        return [NO_DATA(f"{pre}no verdict: observed or expected accept length missing", ev, fix=NO_DATA.fix)]
    ev["ratio"] = round(observed / expected, 3) if expected else None
    causes = _causes(static_findings)
    if observed <= 1.0 + one_tol and expected >= well_above:
        ev |= {"probable_causes_static": causes, "probable_causes_generic": GENERIC_CAUSES}
        first = f"; first static suspect: {causes[0].split(':')[0]}" if causes else ""
        what = f"server accepts nothing (AL {observed:.2f}) while the draft should reach {expected:.2f}"
        return [WIRING_FAULT(f"{pre}{what}: the serving stack is mis-wired{first}", ev, fix=WIRING_FAULT.fix)]
    if expected < well_above and observed < well_above:
        what = f"draft is weak: expected AL {expected:.2f}, observed {observed:.2f}"
        return [WEAK_DRAFT(f"{pre}{what}; wiring is not the bottleneck", ev, fix=WEAK_DRAFT.fix)]
    if observed < expected * (1 - rel_tol):
        ev["probable_causes_static"] = causes
        what = f"observed AL {observed:.2f} is {1 - observed / expected:.0%} below the expected {expected:.2f}"
        return [BELOW_EXPECTED(f"{pre}{what}: partly mis-wired or mismatched settings", ev, fix=BELOW_EXPECTED.fix)]
    return [HEALTHY(f"{pre}observed AL {observed:.2f} matches the expected {expected:.2f}", ev)]


def oracle_expected(
    target: str = "embedded",
    draft: str | None = None,
    quick: bool = False,
    num_prompts: int = 6,
    max_new_tokens: int = 32,
    hidden_states: str | None = None,
):
    """A `point -> expected accept length` callable backed by kit.reference.oracle (cached per point; `source`
    names the expectation's origin). `hidden_states`: a capture folder (`kit launch --capture-hidden`) the draft
    runs on, `target` then giving only embedding and head. Server's definition: completion_tokens / spec_verify_ct."""
    cache: dict[Any, float] = {}  # SpecParams -> the oracle's accept length

    def expected(point) -> float:
        if point not in cache:
            from kit.reference.oracle import OracleConfig, run_config

            kw = dict(target=target, draft=draft, quick=quick, num_prompts=num_prompts, max_new_tokens=max_new_tokens)
            doc = run_config(OracleConfig(**kw, spec=point, hidden_states=hidden_states), log=lambda *_: None)
            cache[point] = doc.results["requested"].meta_accept_length
            expected.source = expectation_source(doc)
        return cache[point]

    expected.source = SERVER_CAPTURE if hidden_states else TRANSFORMERS_FORWARD
    return expected


PARAM_KEYS = tuple(SpecParams().given())  # a row's speculative columns, SGLang's names
SPEC_KEYS = ("target", "draft", *PARAM_KEYS)


def training_expected(training, row: dict) -> float | None:
    """Expected accept length of a row's speculative params from training accuracies (kit.reference.expect)."""
    from kit.reference.expect import expected_accept_length

    if training is None or any(row.get(k) is None for k in PARAM_KEYS):
        return None
    return round(expected_accept_length(training, SpecParams(**{k: row[k] for k in PARAM_KEYS})), 3)


def verdict_table(
    joined: Sequence[dict], static_findings: Iterable[Any] = (), keys: Sequence[str] = SPEC_KEYS, training=None
) -> list[Finding]:
    """A verdict per joined row, labelled by its speculative params, its expectation's source `expected_from` (default
    the transformers forward); `training` (expect.Accuracies) supplies rows the oracle did not cover."""
    static = list(static_findings or ())
    out = []
    for r in joined:
        params = {k: r[k] for k in keys if k in r}
        label = "-".join(str(r[k]) for k in PARAM_KEYS if k in r)
        expected, source = r.get("expected_accept_length"), r.get("expected_from") or TRANSFORMERS_FORWARD
        if expected is None and training is not None:
            expected, source = training_expected(training, r), expectation_source(training=training)
        out += verdict(r.get("observed_accept_length"), expected, static, label, params, expected_from=source)
    return out
