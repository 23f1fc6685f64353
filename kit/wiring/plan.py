"""The wiring SGLang gives a draft under a launch: algorithm, aux capture on/off, capture points, dropped keys.

Runtime knowledge (the CPU reference server, the probe, the oracle); kit.wiring.checks imports it, never the reverse.

    from kit.wiring.plan import wiring_from_launch
    wiring = wiring_from_launch(argv, draft_config, target_config, draft_dir=draft_dir)
"""

from __future__ import annotations

from kit.checkpoint.hf_config import TargetFacts, target_facts
from kit.checkpoint.load_sim import dropped_keys
from kit.hf import HFConfig
from kit.sglang.capture import capture_rule, sglang_points
from kit.sglang.draft_config import read_draft_config
from kit.wiring.aux import launch_algorithm, read_ids


def serving_points(draft_cfg: HFConfig, tf: TargetFacts, version: str | None):
    """(points SGLang captures, rule) for this draft on this target; (None, None) if it cannot."""
    rule = capture_rule(tf.architecture, version)
    if rule is None or not tf.num_layers:
        return None, rule
    ids, _ = read_ids("sglang", draft_cfg)
    return sglang_points(ids, tf.num_layers, rule), rule


def wiring_from_launch(
    argv: list[str], draft_config: HFConfig, target_config: HFConfig, version: str | None = None, draft_dir=None
):
    """The Wiring SGLang would give the draft: algorithm, aux capture on/off, physical points,
    and (with draft_dir and kit.sglang.loader) the checkpoint keys its loader drops."""
    from kit.reference.speculate import Wiring

    alg = launch_algorithm(argv) or "NONE"
    aux_on = alg == "EAGLE3" and read_draft_config(draft_config).use_aux_hidden_state is not False
    tf = target_facts(target_config)
    pts, rule = serving_points(draft_config, tf, version)
    notes = []
    if rule is None and aux_on:
        notes.append(f"{tf.architecture} cannot capture aux states: SGLang raises at startup")
    elif aux_on and rule.get("bare_forward"):
        notes.append(f"{tf.architecture}'s forward never sees the layers its setter writes: SGLang raises at startup")
    elif aux_on and rule.get("aux_dropped"):
        notes.append(f"{tf.architecture}'s forward drops the captured aux states: the draft sees the final state only")
    return Wiring(
        aux_capture=aux_on,
        capture_points=tuple(pts) if (aux_on and pts) else None,
        dropped_keys=dropped_keys(draft_dir, rule["version"]) if draft_dir is not None and rule is not None else (),
        algorithm=alg,
        notes=tuple(notes),
    )
