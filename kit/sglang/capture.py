"""Which target layers SGLang captures for an EAGLE-3 draft, per target class and release.

A capture point p is the residual stream entering decoder layer p (0: embeddings; L: the final pre-norm state).
Each target class's `set_eagle3_layers_to_capture` turns the draft's `eagle_aux_hidden_state_layer_ids` (or its
default) into points; `capture_rules.json` records the rule per class and release, derived by
`python -m kit.derive.capture_scan VERSION` (method bodies executed on probe ids) and re-checked by the tests.

    rule = capture_rule("LlamaForCausalLM", "0.5.17")   # None: the class cannot capture
    sglang_points(ids=[2, 4, 5], num_layers=8, rule=rule)  # -> [3, 5, 6]
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit.sglang.versions import RecordedRelease, pick_recorded, sort_versions, stored_rows

TABLE_PATH = Path(__file__).with_name("capture_rules.json")


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    doc = json.loads(TABLE_PATH.read_text())
    doc["versions"] = stored_rows(doc["versions"], "capture")
    return doc


def known_versions() -> list[str]:
    return sort_versions(table()["versions"])


def recorded_release(version: str | None) -> RecordedRelease:
    return pick_recorded(version, known_versions())


def capture_rule(arch: str | None, version: str | None = None) -> dict[str, Any] | None:
    """{"default", "explicit", "version", "exact", "delegates"?, "bare_forward"?, "aux_dropped"?} for a target class;
    None if it cannot capture. "bare_forward": its (or its delegate's) decoder forward never sees the layers the
    setter writes and returns a bare tensor where SGLang unpacks (hidden, aux), a startup crash. "aux_dropped": its
    forward calls the logits processor without the aux states, so the draft gets the final hidden state alone."""
    rel = recorded_release(version)
    rec = table()["versions"][rel.checked]
    key = next((k for k, archs in rec["rules"].items() if arch in archs), None)
    if key is None:
        return None
    default, explicit = key.split("|")
    delegates, bare_of = rec.get("delegates", {}).get(arch), rec.get("bare_forward", {})
    bare = bare_of.get(arch) or bare_of.get((delegates or {}).get("inner"))
    more = {"delegates": delegates, "bare_forward": bare, "aux_dropped": rec.get("aux_dropped", {}).get(arch)}
    out = {"default": default, "explicit": explicit, "version": rel.checked, "exact": rel.exact}
    return out | {k: v for k, v in more.items() if v}


def default_ids(num_layers: int) -> list[int]:
    """SGLang's default aux layer ids when the draft config gives none."""
    return [2, num_layers // 2, num_layers - 3]


def sglang_points(ids: list[int] | None, num_layers: int, rule: dict[str, Any]) -> list[int]:
    """Apply a recorded rule: the layer ids -> `layers_to_capture` (capture points)."""
    dflt = default_ids(num_layers)
    if ids is None or rule["explicit"] == "ignored":
        return [x + 1 for x in dflt] if rule["default"].startswith("+1") else dflt
    e = rule["explicit"]
    plus1 = e == "plus1" or (e == "plus1_if_first_is_1" and ids and ids[0] == 1)
    if plus1 or (e == "as_is_if_max_is_L" and max(ids) != num_layers):
        return [x + 1 for x in ids]
    return list(ids)


def ids_for_points(points: list[int], num_layers: int, rule: dict[str, Any]) -> list[int] | None:
    """The layer ids that make this rule capture exactly `points` (None if no ids do)."""
    for cand in ([p - 1 for p in points], list(points)):
        if min(cand) >= 0 and sglang_points(cand, num_layers, rule) == list(points):
            return cand
    return None
