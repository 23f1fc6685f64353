"""Aux hidden-state layer ids: each stack's convention (`kit.checkpoint.aux_ids`) and the facts the wiring
checks read from the files (draft dims, training provenance, fc width).

Capture point p is the residual stream entering decoder layer p (p=0 embeddings, p=L the final pre-norm state): HF
`output_hidden_states[p]` for p < L. The checks are kit.wiring.checks; the Wiring a launch gives is kit.wiring.plan.

    python -m kit doctor --target T --draft D --launch "python -m sglang.launch_server ..."
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.checkpoint.aux_ids import CONVENTION_OF, STACKS, TOP, capture_points, read_ids
from kit.checkpoint.safetensors_io import read_checkpoint
from kit.findings import Code, KitInputError
from kit.hf import HFConfig
from kit.sglang.draft_config import read_draft_config
from kit.sglang.flags import flag_value

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "aux/probe/oracle: notebook 03"
ALGORITHM = Code(
    "aux.algorithm",
    SECTION,
    "error",
    "an EAGLE-3 draft is launched with `--speculative-algorithm EAGLE`/`NEXTN` (or "
    "`eagle_config.use_aux_hidden_state: false`): the target sends one hidden state, SGLang's fc gate "
    "(`shape[-1] != embeds.shape[-1]`) is false, fc is skipped, accept length ≈ 1.00",
    "launch with `--speculative-algorithm EAGLE3`",
)

# a Kimi-K2.5-sized target config and a SpecForge-style EAGLE-3 draft config for it (laptop examples)
KIMI_TARGET_CONFIG = Path(__file__).parent.parent / "examples" / "kimi_k25_config.json"
KIMI_DRAFT_CONFIG = Path(__file__).parent.parent / "examples" / "kimi_k25_eagle3_config.json"


def stack_table(draft_cfg: HFConfig, L: int, arch: str | None, version: str | None = None) -> list[dict]:
    """One row per stack: ids as that stack reads them and the points they become (notebook 03)."""
    rows = []
    for st in STACKS:
        ids, where = read_ids(st, draft_cfg)
        points = capture_points(st, ids, L, arch, version)
        rows.append({"stack": st, "ids_read": ids, "read_from": where, "capture_points": points})
    return rows


def is_eagle3_draft(cfg: HFConfig) -> bool:
    archs = " ".join(cfg.get("architectures") or []).lower()
    return "eagle3" in archs or cfg.get("speculators_model_type") == "eagle3" or TOP in json.dumps(dict(cfg))


def launch_algorithm(argv: list[str] | None) -> str | None:
    alg = (flag_value(argv or [], "--speculative-algorithm") or "").upper()
    return "EAGLE" if alg == "NEXTN" else alg or None


def provenance(draft_dir: Path | None) -> dict[str, Any] | None:
    try:
        return json.loads((Path(draft_dir) / "kit_provenance.json").read_text()) if draft_dir else None
    except (OSError, json.JSONDecodeError):
        return None


def training_points(
    draft_cfg: HFConfig, L: int, arch: str | None, version: str | None, draft_dir=None, trained_with: str | None = None
) -> tuple[list[int], str] | None:
    """(points the draft was trained on, how we know) or None when the convention is unknown."""
    rec = draft_cfg.get("kit_aux_source") or {}  # written into config.json by kit convert
    if rec.get("capture_points") and rec.get("num_layers") in (None, L):
        why = f"config.json kit_aux_source: {rec.get('convention')} ids {rec.get('aux_layer_ids')}"
        return list(rec["capture_points"]), why
    prov = provenance(draft_dir) or {}
    if prov.get("capture_points"):
        return list(prov["capture_points"]), "kit_provenance.json capture_points"
    if conv := CONVENTION_OF.get(prov.get("source_aux_layer_id_convention") or prov.get("aux_convention")):
        ids = prov.get("aux_layer_ids")
        points = capture_points(conv, ids, L, arch, prov.get("sglang_version") or version)
        return points, f"kit_provenance.json: {conv} convention, ids {ids}"
    if draft_cfg.get("speculators_model_type"):
        ids, _ = read_ids("speculators", draft_cfg)
        return capture_points("speculators", ids, L), "speculators config (ids = points, vLLM hidden states)"
    if trained_with and (conv := CONVENTION_OF.get(trained_with.lower())):
        # the ids in the file are taken to be in the training stack's convention
        ids = read_ids("sglang", draft_cfg)[0] or read_draft_config(draft_cfg).top_level_aux_layer_ids
        return capture_points(conv, ids, L, arch, version), f"--trained-with {trained_with}, ids {ids}"
    return None


def fc_in_features(draft_dir) -> int | None:
    """fc.weight's input width from the safetensors header (no torch)."""
    if not draft_dir:
        return None
    try:
        ck = read_checkpoint(draft_dir)
    except KitInputError:  # CheckpointError included; unreadable files are reported by the checkpoint checks
        return None
    return next((int(t.shape[1]) for name, t in ck.tensors.items() if name.split(".")[-2:] == ["fc", "weight"]), None)
