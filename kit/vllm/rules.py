"""vLLM's EAGLE-3 support per release, read from `rules.json` (derived from real wheels by `kit.derive.vllm_scan`).

    >>> r = rules_for("0.33.0")
    >>> "eagle3" in r.eagle3_methods, r.speculative_config
    (True, True)

`rules_for(version)` answers for a release the table lists (`releases()`, oldest first; none named: the installed
vLLM's, else the newest); any other version is a KitInputError naming it. Each field keeps its evidence, [file, line,
text] in the first release of the span it belongs to (`VllmRules.evidence[field]`). `VllmRules.parser_flags` is the
release's `vllm serve` parser as recorded by running it (None where not recorded).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any

from kit.findings import KitInputError
from kit.sglang.flags import KNOWN_TYPES, FlagTable
from kit.sglang.versions import Version, installed_version

RULES_PATH = Path(__file__).with_name("rules.json")
RELEASES_PATH = Path(__file__).with_name("releases.json")
FIELDS = ("methods", "flags", "aux_archs", "draft_archs", "draft_tp", "speculators", "metrics")


@dataclass(frozen=True)
class VllmRules:
    version: str
    methods: tuple[str, ...]  # every `method` value the release accepts (declared in its Literal, or compared with)
    eagle3_methods: tuple[str, ...]  # those that mean EAGLE-3
    eagle_methods: tuple[str, ...]  # those that mean EAGLE (1/2)
    name_detect: tuple[tuple[str, str], ...]  # (substring of the draft's path, method it sets) with no method given
    speculative_config: bool  # the CLI has --speculative-config
    speculative_config_json: bool  # ... and parses it as JSON
    legacy_flags: tuple[str, ...]  # --speculative-model, --num-speculative-tokens, ... still on the CLI
    spec_options: tuple[str, ...]  # every CLI option naming spec/draft, and --speculative-config's aliases
    aux_archs: tuple[str, ...]  # target architectures whose class can emit EAGLE-3 aux hidden states
    aux_default: str | None  # the default aux layer ids, as a formula of num_layers
    aux_ids_read: tuple[str, ...]  # where the runner reads the draft config's ids: "top", "nested" (eagle_config)
    aux_overrides: Mapping[str, tuple[str, ...]]  # another formula -> the architectures that use it
    draft_archs: Mapping[str, str]  # architecture -> "module.Class" of the EAGLE-3 draft class it loads
    draft_loaders: Mapping[str, Mapping[str, Any]]  # "module.Class" -> {"ops": [...] (kit.vllm.loader replays them),
    # "inner_auto": its decoder model loads through AutoWeightsLoader, "embed_if": the rule of `pp` under which its
    # decoder model builds its own embedding, where it does not always, "reads": the optional EAGLE-3 config fields its
    # class file reads (attention_bias, fc_norm, norm_before_fc, the aux counts and ids)}
    draft_rename: str | None  # EAGLEConfig's rename of an EAGLE-3 draft's architecture, a lambda of one; None: the
    # release loads its one EAGLE-3 class whatever the draft names
    draft_tp_allowed: str | None  # e.g. "(1, target_tp)": the draft TP sizes the config accepts
    draft_tp_checks: tuple[str, ...]  # further conditions on the draft TP that raise, in v1/spec_decode
    speculators_detected: bool  # a speculators-format draft config is detected and converted
    speculators_speculates: bool  # ... and `vllm serve DRAFT` then speculates (0.10.2 serves the verifier alone)
    speculators_algorithms: tuple[str, ...]  # the `speculators_model_type` values it accepts
    metrics: tuple[str, ...]  # the Prometheus spec-decode counters, as exposed
    parser_flags: tuple[Mapping[str, Any], ...] | None  # `vllm serve`'s parser's actions, where it ran for this release
    evidence: Mapping[str, Any]  # field -> its evidence
    # the second model runner (vllm/v1/worker/gpu/): the targets its architecture list names ("*": none, every target),
    # where it reads the draft config's aux ids, and `use_v2_model_runner` as derived (`kit.derive.vllm_scan._v2_runner`:
    # [condition, value] steps, the methods they call, the unsupported features; judged by kit.vllm.runner.second_runner)
    aux_v2_archs: tuple[str, ...] = ()
    aux_v2_ids_read: tuple[str, ...] = ()
    aux_v2_steps: tuple[tuple[str, str], ...] = ()
    aux_v2_methods: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    aux_v2_unsupported: tuple[tuple[str, str], ...] = ()
    auto_ignores: tuple[str, ...] = ()  # key suffixes AutoWeightsLoader lets pass unloaded, without an error
    spec_keys: tuple[str, ...] = ()  # the keys --speculative-config takes (SpeculativeConfig's fields)
    draft_override: Mapping[str, str] = field(default_factory=dict)  # model_type -> the architecture any draft of it
    # is given before the EAGLE-3 rename (SpeculativeConfig.hf_config_override: deepseek_v3 -> DeepSeekMTPModel)

    @cached_property
    def flag_table(self) -> FlagTable | None:
        """`parser_flags` as a flag table (`kit.sglang.flags`), built once per rules; None where none is recorded.
        Choices whose value parser the kit does not have stay unchecked (argparse would compare them with the raw
        text); the model positional is left to `kit.vllm.cmdline.read_argv`."""
        if self.parser_flags is None:
            return None
        plain = lambda a: (
            a.get("type") in (None, *KNOWN_TYPES) or all(isinstance(c, str) for c in a.get("choices") or ())
        )
        options = tuple(a if plain(a) else {**a, "choices": None} for a in self.parser_flags if a["option_strings"])
        return FlagTable(self.version, self.version, True, options, {})


@lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(RULES_PATH.read_text())


@lru_cache(maxsize=1)
def releases() -> tuple[str, ...]:
    """Every release the table covers, oldest first."""
    return tuple(json.loads(RELEASES_PATH.read_text())["releases"])


def default_release() -> str:
    return releases()[-1]


def _cell(field: str, version: str) -> dict | None:
    want = Version.parse(version)
    for s in _doc()["fields"].get(field, []):
        if Version.parse(s["first"]) <= want <= Version.parse(s["last"]):
            return s
    return None


def _actions(cell: dict | None) -> tuple[dict, ...] | None:
    """A parser_flags span's actions, expanded from the table's pool (`parser_actions`)."""
    return tuple(_doc()["parser_actions"][i] for i in cell["value"]) if cell else None


def installed_release() -> str | None:
    """The listed release the vLLM installed here is judged at: its own, or the newest listed before it."""
    if (v := installed_version("vllm")) is None:
        return None
    older = [r for r in releases() if Version.parse(r) <= Version.parse(v)]
    return older[-1] if older else None


def rules_for(version: str | None = None) -> VllmRules:
    """The recorded rules of one listed release (None: the installed vLLM's, else the newest); KitInputError for any
    other."""
    version = version or installed_release() or default_release()
    listed = {Version.parse(v): v for v in releases()}
    try:
        key = Version.parse(version)
    except ValueError:
        raise KitInputError(f"not a vLLM version: {version!r}") from None
    if key not in listed:
        raise KitInputError(
            f"vLLM {version} is not in the kit's vLLM table ({releases()[0]}..{releases()[-1]}, EAGLE-3 releases)"
        )
    return _rules(listed[key])


@cache
def _rules(version: str) -> VllmRules:
    """One listed release's rules, read from the table once."""
    cells = {f: _cell(f, version) for f in (*FIELDS, "parser_flags")}
    v = {f: (c["value"] if c else {}) for f, c in cells.items()}
    m, fl, aux, dr, tp, sp = (v[f] for f in FIELDS[:6])
    return VllmRules(
        version=version,
        methods=tuple(sorted({*m.get("declared", []), *m.get("undeclared_accepted", [])})),
        eagle3_methods=tuple(m.get("eagle3", [])),
        eagle_methods=tuple(m.get("eagle", [])),
        name_detect=tuple(tuple(p) for p in m.get("name_detect", [])),
        speculative_config=bool(fl.get("speculative_config")),
        speculative_config_json=bool(fl.get("speculative_config_json")),
        legacy_flags=tuple(f for f, on in fl.get("legacy", {}).items() if on),
        spec_options=tuple(sorted({*fl.get("spec_options", []), *fl.get("speculative_config_aliases", [])})),
        aux_archs=tuple(aux.get("archs", [])),
        aux_default=aux.get("default"),
        aux_ids_read=tuple(aux.get("ids_read", [])),
        aux_overrides={f: tuple(a) for f, a in aux.get("overrides", {}).items()},
        draft_archs=dict(dr.get("archs", {})),
        draft_loaders=dict(dr.get("loaders", {})),
        draft_rename=dr.get("rename"),
        draft_tp_allowed=tp.get("allowed"),
        draft_tp_checks=tuple(c["if"] for c in tp.get("checks", [])),
        speculators_detected=bool(sp.get("detects")),
        speculators_speculates=bool(sp.get("speculates")),
        speculators_algorithms=tuple(sp.get("algorithms", {})),
        metrics=tuple(v["metrics"].get("exposed", [])),
        parser_flags=_actions(cells["parser_flags"]),
        evidence={f: c["evidence"] for f, c in cells.items() if c},
        aux_v2_archs=tuple(aux.get("v2_archs", [])),
        aux_v2_ids_read=tuple(aux.get("v2_ids_read", [])),
        aux_v2_steps=tuple(map(tuple, aux.get("v2_steps", []))),
        aux_v2_methods={m: tuple(map(tuple, s)) for m, s in aux.get("v2_methods", {}).items()},
        aux_v2_unsupported=tuple(map(tuple, aux.get("v2_unsupported", []))),
        auto_ignores=tuple(dr.get("auto_ignores", [])),
        draft_override=dict(dr.get("override", {})),
        spec_keys=tuple(fl.get("spec_keys", [])),
    )
