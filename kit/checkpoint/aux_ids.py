"""Each training/serving stack's aux layer-id convention: where it reads the ids, which target layers they name.

The same integers name different target layers in different stacks, so we speak in *capture points*: p is the
residual stream entering decoder layer p (p=0 embeddings, p=L the final pre-norm state). `read_ids` reads the ids
where a stack reads them, `capture_points` maps them to points (SGLang's rule per class and release:
`kit.sglang.capture`), `top_level_points` gives both readings of top-level (speculators-placed) ids. Used by
`kit convert` and kit.wiring.

    capture_points("speculators", [2, 4, 5], 8)                        # -> [2, 4, 5]
    capture_points("sglang", [2, 4, 5], 8, "LlamaForCausalLM", DEFAULT_RELEASE)  # -> [3, 5, 6]
"""

from __future__ import annotations

from kit.hf import AUX_IDS, HFConfig
from kit.sglang.capture import capture_rule, default_ids, sglang_points

STACKS = ("sglang", "vllm", "speculators", "specforge", "specforge-hf", "eagle")
# which stack's id convention a training provenance / --trained-with value implies
CONVENTION_OF = {**{s: s for s in STACKS}, "kit": "sglang"}
NESTED = f"eagle_config.{AUX_IDS}"
TOP = AUX_IDS


def read_ids(stack: str, cfg: HFConfig) -> tuple[list[int] | None, str]:
    """(ids, where) exactly where `stack` reads them; (None, "absent") means the stack's default. SGLang reads only
    `eagle_config`, speculators only the top level, vLLM and SpecForge either (top first)."""
    nested = (cfg.get("eagle_config") or {}).get(TOP)
    top = cfg.get(TOP)
    if stack == "eagle":
        return None, "not read (official EAGLE has no ids)"
    if stack != "sglang" and top:
        return list(top), TOP
    if stack != "speculators" and nested:
        return list(nested), NESTED
    return None, "absent"


# `speculators convert` copies a head's ids into the speculators config unchanged (speculators'
# examples/convert/eagle3/apply_eagle3_llama4_maverick.sh passes NVIDIA's Llama-4 Maverick ids [1, 23, 44]); the heads
# it converts (ModelOpt, SpecForge, SGLang) name the *output* of layer x, so copied ids mean point x + 1, the reading
# of the "specforge-hf" stack (a forward hook on layers[x]).
COPIED_BY_SPECULATORS_CONVERT = "specforge-hf"


def top_level_points(ids: list[int] | None, L: int) -> dict[str, list[int]]:
    """What top-level ids mean: {"speculators": as ids speculators trained on vLLM hidden states (point = id),
    "copied": as ids `speculators convert` copied from an output-convention head (point = id + 1)}."""
    return {
        "speculators": capture_points("speculators", ids, L),
        "copied": capture_points(COPIED_BY_SPECULATORS_CONVERT if ids else "speculators", ids, L),
    }


def capture_points(
    stack: str, ids: list[int] | None, L: int, arch: str | None = None, version: str | None = None
) -> list[int]:
    """Physical capture points `stack` uses for `ids` on an L-layer target of class `arch`."""
    if stack in ("vllm", "speculators", "eagle"):  # id = point (vLLM captures before layer idx); EAGLE reads none
        return list(ids) if ids and stack != "eagle" else default_ids(L)
    if stack == "specforge-hf":  # hooks on layers[x] output
        return [x + 1 for x in (ids or [1, L // 2 - 1, L - 4])]
    if stack == "specforge":  # 0.2.0 hands its ids to the SGLang target class
        ids = ids or [1, L // 2 - 1, L - 4]
    rule = capture_rule(arch, version) or capture_rule("LlamaForCausalLM", version)
    return sglang_points(ids, L, rule)
