"""A draft on disk through SGLang's loader rules (`kit.sglang.loader`): the keys a release drops silently, from
config.json and the safetensors headers alone. Runtime code (kit.wiring.plan, the oracle) uses it, not `kit inspect`.

    from kit.checkpoint.load_sim import dropped_keys
    dropped_keys("drafts/seed", DROPS_SPECULATORS_KEYS, layout="speculators")   # ('midlayer.self_attn.q_proj.weight', ...)
"""

from __future__ import annotations

from kit.checkpoint.hf_config import read_config
from kit.checkpoint.safetensors_io import read_checkpoint


def dropped_keys(draft_dir, version: str, layout: str = "sglang") -> tuple[str, ...]:
    """Checkpoint keys SGLang `version` drops silently for this draft, from the safetensors headers.

    layout "speculators" renames the single decoder layer `midlayer.*` -> `layers.0.*` first: the
    seed's checkpoint came from speculators and met a `midlayer`-era SGLang."""
    from kit.sglang.loader import simulate_load

    cfg, d = read_config(draft_dir)
    shapes = read_checkpoint(d).shapes()
    if layout == "speculators":
        shapes = {k.replace("midlayer.", "layers.0."): v for k, v in shapes.items()}
    sim = simulate_load(shapes, cfg, version)
    return tuple(
        k.key.replace("layers.0.", "midlayer.") if layout == "speculators" else k.key
        for k in sim.by_status("dropped")
        if "t2d" not in k.key
    )
