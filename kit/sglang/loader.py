"""What each SGLang release does with an EAGLE-3 draft checkpoint, per draft class, read from its recorded rules.

SGLang registers two EAGLE-3 draft classes (an `EntryClass` scan of 0.4.4-0.5.23): `LlamaForCausalLMEagle3`
(0.4.5+; also the class of Qwen, GptOss and Llama-4 EAGLE-3 drafts) and `Eagle3DeepseekV2ForCausalLM` (0.5.12+,
`kimi_k25_eagle3.py`: one DeepSeek-V2 MLA layer for Kimi/DeepSeek targets); the Mistral classes are EAGLE-1/2
drafts. Each has its own `load_weights`, and both changed across releases: the Llama class's decoder name
(`midlayer` vs `layers.N`), legacy renames, silent drops (0.4.9+) or delegation to the Llama loader (0.4.5-0.4.8:
KeyError / warning); the MLA class's `layers.0.` -> `midlayer.` rename, gate/up stacking, the `q_a_proj` +
`kv_a_proj_with_mqa` fusion, logged skips, `fc_norm` (0.5.13+). `kit/sglang/loader_rules.json` records, per class
and release, feature flags with their evidence line and the stacked mapping, renames and fused pairs, plus the
release-wide rules and registered architectures; `kit.derive.loader_scan` derives it from each wheel and
kit/tests/sglang/test_sglang_rules.py re-derives it, so an SGLang change breaks our test, not our users.

`resolve_draft_class(config, version)` is SGLang's dispatch from `architectures`; `simulate_load` replays that
class's loader on names and shapes only: every key loaded / renamed / dropped (why), and every parameter left at
its initial value after the runtime's embed/head sharing. Used by `kit doctor` (`kit.checkpoint.inspect`):

    simulate_load({"fc.weight": (576, 1728), ...}, HFConfig.of(draft_config), "0.5.17").ok
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit.hf import HFConfig
from kit.sglang.draft_config import ABSENT, read_draft_config
from kit.sglang.versions import Version, pick_recorded, sort_versions, stored_rows

TABLE_PATH = Path(__file__).with_name("loader_rules.json")
LLAMA_EAGLE3 = "LlamaForCausalLMEagle3"
MLA_EAGLE3 = "Eagle3DeepseekV2ForCausalLM"
EAGLE_FILE = "srt/models/llama_eagle3.py"
MLA_FILE = "srt/models/kimi_k25_eagle3.py"
MODEL_CONFIG_FILE = "srt/configs/model_config.py"
# EAGLE-3 draft classes: class -> the file with its load_weights
DRAFT_CLASSES: dict[str, str] = {LLAMA_EAGLE3: EAGLE_FILE, MLA_EAGLE3: MLA_FILE}


@dataclass(frozen=True)
class Rules:
    version: str  # the release asked about
    checked: str  # the release whose source these features come from
    exact: bool  # True when `version` itself was checked
    features: dict[str, Any]
    evidence: dict[str, list]  # feature -> [file, line number, line text]
    architecture: str = LLAMA_EAGLE3  # the draft class these rules describe ("runtime": release-wide)


def context_keys(version: str | None = None) -> list[str]:
    """CONTEXT_LENGTH_KEYS of that release: the config fields SGLang reads a context length from, in order."""
    return runtime_rules(version).features.get("context_length_keys") or ["max_position_embeddings"]


def derived_context_length(text_config: HFConfig, version: str | None = None) -> int:
    """SGLang's get_context_length: the first of CONTEXT_LENGTH_KEYS present, times rope_scaling.factor
    unless rope_scaling names original_max_position_embeddings or is llama3; 2048 when none is set."""
    keys = context_keys(version)
    rs = text_config.get("rope_scaling") or {}
    factor = 1 if "original_max_position_embeddings" in rs or rs.get("rope_type") == "llama3" else rs.get("factor", 1)
    return next((int(factor * text_config[k]) for k in keys if text_config.get(k) is not None), 2048)


# -- the recorded table -----------------------------------------------------------------------
@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    doc = json.loads(TABLE_PATH.read_text())
    doc["versions"] = stored_rows(doc["versions"], "loader")
    return doc


def known_versions() -> list[str]:
    return sort_versions(_table()["versions"])


def rules_for(version: str | None = None, architecture: str = LLAMA_EAGLE3) -> Rules:
    """Rules of one draft class in `version`: its own recorded row, else the newest checked release
    not after it. architecture="runtime" gives the release-wide rules any draft meets."""
    rel = pick_recorded(version, known_versions())
    row = _table()["versions"][rel.checked]
    part = row["runtime"] if architecture == "runtime" else row["classes"].get(architecture)
    part = part or {"features": {"has_eagle3": False}, "evidence": {}}
    return Rules(rel.requested, rel.checked, rel.exact, part["features"], part["evidence"], architecture)


def runtime_rules(version: str | None = None) -> Rules:
    return rules_for(version, "runtime")


# a release whose loader silently drops a speculators-layout checkpoint's layer keys (the 0.4.9-0.5.11 era,
# docs/sglang-versions.md): the oracle's "keys dropped" fault and the notebooks replay it
DROPS_SPECULATORS_KEYS = "0.4.10"


def releases_with(
    feature: str, value: Any = True, architecture: str = LLAMA_EAGLE3, after: str | None = None
) -> Iterator[str]:
    """The recorded releases (after `after`, oldest first) whose rules (of that draft class, or "runtime") have
    `feature` == value (class rows: only releases with EAGLE-3 support)."""
    for v in known_versions():
        if after is not None and Version.parse(v) <= Version.parse(after):
            continue
        f = rules_for(v, architecture).features
        if (architecture == "runtime" or f.get("has_eagle3")) and feature in f and f[feature] == value:
            yield v


def first_release(
    feature: str, value: Any = True, architecture: str = LLAMA_EAGLE3, after: str | None = None
) -> str | None:
    """The oldest of `releases_with`, for "sglang X+ loads it" messages."""
    return next(releases_with(feature, value, architecture, after), None)


def last_release(feature: str, value: Any = True, architecture: str = LLAMA_EAGLE3) -> str | None:
    """The newest of `releases_with` (notebook 02: the last `midlayer`-era release)."""
    return ([None, *releases_with(feature, value, architecture)])[-1]


def registered_architectures(version: str | None = None) -> set[str]:
    """Architectures (`EntryClass` names) that release registers, from the recorded table."""
    r = rules_for(version)
    names: set[str] = set()
    for v in known_versions():  # rows store the registered set as deltas from the previous row, or whole
        row = _table()["versions"][v]
        if "registered" in row:
            names = set(row["registered"])
        else:
            names = (names | set(row["registered_delta"]["added"])) - set(row["registered_delta"]["removed"])
        if v == r.checked:
            break
    return names


def eagle3_draft_architectures(version: str | None = None) -> set[str]:
    """Registered classes that are EAGLE-3 drafts with a recorded loader table in that release."""
    reg = registered_architectures(version)
    return {a for a in DRAFT_CLASSES if a in reg and rules_for(version, a).features.get("has_eagle3")}


def resolve_draft_class(draft_config: HFConfig, version: str | None = None) -> tuple[str | None, str]:
    """The class SGLang instantiates for this draft config, and its status (eagle3 |
    registered_not_eagle3 | not_registered | missing). Mirrors ModelConfig's draft rewrites of
    architectures[0], then ModelRegistry.resolve_model_cls: the first architecture if registered,
    else the first registered one in the list, else the Transformers fallback (no EAGLE-3 loader)."""
    archs = list(draft_config.get("architectures") or [])
    if not archs:
        return None, "missing"
    archs[0] = runtime_rules(version).features.get("draft_arch_rewrites", {}).get(archs[0], archs[0])
    reg = registered_architectures(version)
    arch = next((a for a in archs if a in reg), None)
    if arch is None:
        return None, "not_registered"
    return arch, "eagle3" if arch in eagle3_draft_architectures(version) else "registered_not_eagle3"


# -- simulation -------------------------------------------------------------------------------
@dataclass
class KeyOutcome:
    key: str
    shape: tuple
    status: str  # loaded | dropped | vocab_map | fails
    param: str | None = None
    renamed: bool = False  # loaded under a name other than the key (+ "model." prefix aside)
    reason: str = ""
    loud: bool = False  # SGLang itself logs or raises for it


@dataclass
class LoadSimulation:
    version: str
    checked: str
    exact: bool
    architecture: str | None
    arch_status: str  # eagle3 | registered_not_eagle3 | not_registered | missing
    draft_class: str | None = None  # the class whose loader was replayed (after SGLang's dispatch)
    build_errors: list[str] = field(default_factory=list)
    keys: list[KeyOutcome] = field(default_factory=list)
    params_missing: list[dict] = field(default_factory=list)  # param, shape, reason, critical
    runtime: list[str] = field(default_factory=list)  # what the serving runtime replaces
    unused_loaded: list[str] = field(default_factory=list)  # loaded into params forward never reads

    def by_status(self, status: str) -> list[KeyOutcome]:
        return [k for k in self.keys if k.status == status]

    @property
    def ok(self) -> bool:
        critical = any(m["critical"] for m in self.params_missing)
        return self.arch_status == "eagle3" and not self.build_errors and not self.by_status("fails") and not critical

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[dict[str, Any]]:
        """One row per checkpoint key and per never-filled parameter (for a table)."""
        unfilled = [
            KeyOutcome(None, m["shape"], "never_filled", m["param"], reason=m["reason"]) for m in self.params_missing
        ]
        return [
            {**{n: v for n, v in asdict(k).items() if n != "loud"}, "shape": list(k.shape)}
            for k in self.keys + unfilled
        ]


def _param_shapes(
    cfg: dict[str, Any], f: dict[str, Any], errors: list[str]
) -> tuple[dict[str, tuple], dict[str, dict], dict]:
    """Parameters the release builds for `cfg`: {name: shape}, stacked shard shapes, facts."""
    c = read_draft_config(cfg)
    H, V, nh, nkv, I_ = c.hidden_size, c.vocab_size, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size
    L = c.num_hidden_layers if c.num_hidden_layers is not None else 1
    if not all(isinstance(x, int) for x in (H, V, nh, nkv, L, I_)):
        errors.append(
            "config lacks integer hidden_size/vocab_size/num_attention_heads/num_hidden_layers/"
            "intermediate_size: the draft model cannot be built"
        )
        return {}, {}, {}
    hd = c.head_dim_or_default
    Ht = H
    if c.target_hidden_size is None:  # SGLang tests hasattr(): a null value is used as-is
        errors.append(
            "config has target_hidden_size: null; SGLang's hasattr() check uses None as the fc "
            "input width (TypeError at build) — drop the key or set an integer"
        )
    elif c.target_hidden_size is not ABSENT:
        Ht = c.target_hidden_size
    k = c.num_aux if f.get("num_aux_configurable") else 3
    if f.get("single_layer_only") and L != 1:
        errors.append(f"num_hidden_layers={L}: this SGLang raises 'EAGLE3 currently only supports 1 layer'")
    tie = c.tie_word_embeddings
    Vd = c.draft_vocab_size
    head_from_target = not tie and Vd is None and bool(f.get("null_draft_vocab_uses_target_head"))
    if not tie and Vd is ABSENT:
        errors.append(
            "config has no draft_vocab_size: SGLang reads config.draft_vocab_size (AttributeError); "
            "write null to take the target's lm_head, or the draft vocab size"
        )
    elif not tie and Vd is None and not head_from_target:
        errors.append(
            "draft_vocab_size is null: this SGLang builds ParallelLMHead(None, H) (TypeError); set the draft vocab size"
        )
    Vd = V if Vd is ABSENT or Vd is None else Vd
    P: dict[str, tuple] = {
        "model.embed_tokens.weight": (V, H),
        "model.fc.weight": (H, k * Ht),
        "model.norm.weight": (H,),
    }
    if (f.get("fc_bias_from_config") and c.bias) or f.get("fc_default_bias"):
        # 0.4.5-0.4.8 build nn.Linear(3*Ht, H) with torch's default bias=True
        P["model.fc.bias"] = (H,)
    if f.get("norm_before_fc") and c.norm_before_fc:
        P["model.input_norm.weight"] = (k * Ht,)
    if f.get("fc_norm") and c.fc_norm:
        P.update({f"model.fc_norm.{j}.weight": (Ht,) for j in range(k)})
    shards: dict[str, dict] = {}
    bias = c.attention_bias
    layers = ["model.midlayer"] if f.get("decoder_is_midlayer") else [f"model.layers.{i}" for i in range(L)]
    for i, pre in enumerate(layers):
        w_in, qkv = 2 * H if i == 0 else H, f"{pre}.self_attn.qkv_proj.weight"
        P[qkv] = ((nh + 2 * nkv) * hd, w_in)
        shards[qkv] = {"q": (nh * hd, w_in), "k": (nkv * hd, w_in), "v": (nkv * hd, w_in)}
        P[f"{pre}.self_attn.o_proj.weight"] = (H, nh * hd)
        if bias:
            P[f"{pre}.self_attn.o_proj.bias"] = (H,)
        P[f"{pre}.mlp.gate_up_proj.weight"] = (2 * I_, H)
        shards[f"{pre}.mlp.gate_up_proj.weight"] = {0: (I_, H), 1: (I_, H)}
        P[f"{pre}.mlp.down_proj.weight"] = (H, I_)
        for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm"):
            P[f"{pre}.{n}.weight"] = (H,)
    if not tie:
        P["lm_head.weight"] = (Vd, H)
    # LlamaForCausalLM.set_embed tests hasattr(config, "target_hidden_size") and inequality
    own_embed = c.target_hidden_size is not ABSENT and c.target_hidden_size != H
    own_embed = own_embed and bool(f.get("set_embed_skips_if_target_hidden_differs"))
    return P, shards, {"H": H, "tie": tie, "head_from_target": head_from_target, "own_embed": own_embed}


def _mla_param_shapes(
    cfg: dict[str, Any], f: dict[str, Any], errors: list[str]
) -> tuple[dict[str, tuple], dict[str, dict], dict]:
    """Parameters Eagle3DeepseekV2ForCausalLM builds for `cfg` (kimi_k25_eagle3.py + DeepseekV2AttentionMLA)."""
    c = read_draft_config(cfg)
    names = "hidden_size vocab_size num_attention_heads intermediate_size kv_lora_rank qk_nope_head_dim"
    dims = {n: getattr(c, n) for n in (names + " qk_rope_head_dim v_head_dim").split()}
    missing = [name for name, v in dims.items() if not isinstance(v, int)]
    if missing:
        errors.append(f"config lacks integer {'/'.join(missing)}: the MLA draft layer cannot be built")
        return {}, {}, {}
    H, V, nh, I_, kv, nope, rope, vd = dims.values()
    qr = c.q_lora_rank
    if not isinstance(qr, int) or isinstance(qr, bool):
        if f.get("requires_q_lora_rank"):
            shown = None if qr is ABSENT else qr
            errors.append(
                f"q_lora_rank={shown!r}: this SGLang raises 'Eagle3 MLA layer requires q_lora_rank in the draft config'"
            )
        qr = 0
    L = c.num_hidden_layers if c.num_hidden_layers is not None else 1
    if f.get("single_layer_only") and L != 1:
        errors.append(f"num_hidden_layers={L}: this SGLang raises 'EAGLE3 currently only supports 1 layer'")
    Ht_cfg = None if c.target_hidden_size is ABSENT else c.target_hidden_size
    Ht = (Ht_cfg or H) if f.get("null_target_hidden_falls_back") else H if c.target_hidden_size is ABSENT else Ht_cfg
    ids = c.aux_layer_ids if c.aux_layer_ids is not None else c.top_level_aux_layer_ids
    k = len(ids) if ids is not None else 3  # _get_eagle_aux_layer_count: no num_aux_hidden_states here
    tie = c.tie_word_embeddings
    Vd = None if c.draft_vocab_size is ABSENT else c.draft_vocab_size
    head_from_target = not tie and Vd is None and bool(f.get("missing_draft_vocab_uses_target_head"))
    Vd = Vd or V
    pre = "model.midlayer"
    a_in = 2 * H if f.get("fused_a_proj_input_2h") else H
    P: dict[str, tuple] = {
        "model.embed_tokens.weight": (V, H),
        "model.fc.weight": (H, k * Ht),
        "model.norm.weight": (H,),
        f"{pre}.self_attn.q_a_layernorm.weight": (qr,),
        f"{pre}.self_attn.q_b_proj.weight": (nh * (nope + rope), qr),
        f"{pre}.self_attn.kv_a_layernorm.weight": (kv,),
        f"{pre}.self_attn.kv_b_proj.weight": (nh * (nope + vd), kv),
        f"{pre}.self_attn.o_proj.weight": (H, nh * vd),
        f"{pre}.mlp.gate_up_proj.weight": (2 * I_, H),
        f"{pre}.mlp.down_proj.weight": (H, I_),
    }
    shards: dict[str, dict] = {f"{pre}.mlp.gate_up_proj.weight": {0: (I_, H), 1: (I_, H)}}
    part_rows = {"q_a_proj": qr, "kv_a_proj_with_mqa": kv + rope}
    for fu in f.get("fused") or []:
        name = f"{pre}.self_attn.{fu['param']}.weight"
        P[name] = (qr + kv + rope, a_in)
        shards[name] = {part: (part_rows.get(part, 0), a_in) for part in fu["parts"]}
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        P[f"{pre}.{n}.weight"] = (H,)
    if f.get("fc_bias_from_config") and c.bias:
        P["model.fc.bias"] = (H,)
    if f.get("fc_norm") and c.fc_norm:
        P.update({f"model.fc_norm.{j}.weight": (Ht,) for j in range(k)})
    if not tie:
        P["lm_head.weight"] = (Vd, H)
    # Eagle3DeepseekV2ForCausalLM.set_embed: skips only for a non-null, different target_hidden_size
    own_embed = bool(f.get("set_embed_skips_if_target_hidden_differs")) and Ht_cfg is not None and Ht_cfg != H
    return P, shards, {"H": H, "tie": tie, "head_from_target": head_from_target, "own_embed": own_embed}


def _load_own(name: str, f: dict, P: dict) -> tuple[str | None, Any, str]:
    """Replay the 0.4.9+ loop: returns (param or None, shard id, why-dropped)."""
    n2, shard = next(((name.replace(w, p), s) for p, w, s in f["stacked"] if w in name), (name, None))
    pn = n2 if n2 in P else f"model.{n2}"
    return (pn, shard, "") if pn in P else (None, None, f"no parameter {pn!r} in this release")


def _mla_name(key: str, f: dict) -> str:
    """kimi_k25_eagle3 load_weights: the derived `re.sub` renames, then `model.` unless lm_head."""
    name = key
    for pat, repl in f.get("renames") or []:
        name = re.sub(pat, repl, name)
    if f.get("model_prefix_except_lm_head") and not name.startswith("lm_head."):
        name = f"model.{name}"
    return name


def _load_mla(name: str, f: dict, P: dict, pending: dict, o: KeyOutcome) -> tuple[str | None, Any, str]:
    """Replay Eagle3DeepseekV2ForCausalLM.load_weights for one mapped name: stacked gate/up, then the
    fused pair (cached until both halves arrive), then a direct parameter, else a logged skip."""
    for param, weight, shard in f["stacked"]:
        if weight in name and name.replace(weight, param) in P:
            return name.replace(weight, param), shard, ""
    for fu in f.get("fused") or []:
        a, b = fu["parts"]
        if a in name or b in name:
            part = a if a in name else b
            fused = (name if part == a else name.replace(b, a)).replace(a, fu["param"])
            pending.setdefault(fused, {})[part] = o
            return None, None, "pending"
    if name in P:
        return name, None, ""
    o.loud = bool(f.get("unknown_key_warns"))
    return None, None, f"no parameter {name!r}: logged 'Eagle3 MLA: skipping unexpected weight' and skipped"


def _settle_fused(pending: dict, f: dict, P: dict, shards: dict, filled: dict) -> None:
    """Halves of a fused projection: both present -> cat -> one weight_loader call (shape assertion);
    one missing -> the other stays cached and is never loaded (SGLang logs nothing)."""
    parts_of = {fu["param"]: fu["parts"] for fu in f.get("fused") or []}
    for fused, got in pending.items():
        parts = next((ps for p, ps in parts_of.items() if p in fused), [])
        lacking = [p for p in parts if p not in got]
        for part, o in got.items():
            if lacking:
                o.reason = (
                    f"cached for {fused}, which also needs {lacking[0]}: the checkpoint lacks it, so this key is "
                    "never loaded (no log)"
                )
                continue
            if fused not in P:
                o.reason = f"no parameter {fused!r}: the fused weight is skipped without a log"
                continue
            want = shards[fused][part]
            o.param, o.renamed = fused, True
            if tuple(want) != o.shape:
                o.status, o.loud = "fails", True
                o.reason = f"shape {list(o.shape)} != {part} rows of {fused} {list(want)}: weight loader assertion"
                continue
            o.status = "loaded"
            filled.setdefault(fused, set()).add(part)


def simulate_load(ckpt_shapes: dict[str, Any], draft_config: HFConfig, version: str | None = None) -> LoadSimulation:
    """Replay `version`'s EAGLE-3 loader on checkpoint names/shapes and the draft config.json.

    The class is the one SGLang's dispatch picks from `architectures` (resolve_draft_class); when that is
    no EAGLE-3 class, the keys are replayed with the class they look like, so the report also says what
    the checkpoint would do once its architecture is fixed."""
    written = (draft_config.get("architectures") or [None])[0]
    cls, status = resolve_draft_class(draft_config, version)
    if status != "eagle3":
        cls = MLA_EAGLE3 if any("kv_a_proj_with_mqa" in k or "q_a_proj" in k for k in ckpt_shapes) else LLAMA_EAGLE3
    r = rules_for(version, cls)
    f = r.features
    sim = LoadSimulation(r.version, r.checked, r.exact, written, status, cls)
    if not f.get("has_eagle3"):
        sim.build_errors.append(f"sglang {r.version} has no {DRAFT_CLASSES[cls]} ({cls}): it cannot load this draft")
        sim.keys = [KeyOutcome(k, tuple(s), "dropped", reason=f"no {cls} loader") for k, s in ckpt_shapes.items()]
        return sim
    if rewritten := runtime_rules(version).features.get("draft_arch_rewrites", {}).get(written):
        sim.runtime.append(f"architectures[0]={written!r} is rewritten to {rewritten!r} for a draft (ModelConfig)")
    if status == "eagle3" and written != cls:
        sim.runtime.append(f"architectures[0]={written!r} is dispatched to {cls}")
    elif status != "eagle3":
        sim.runtime.append(f"keys replayed with the {cls} loader (what they would do under that architecture)")
    mla = cls == MLA_EAGLE3
    P, shards, facts = (_mla_param_shapes if mla else _param_shapes)(draft_config, f, sim.build_errors)
    filled: dict[str, set] = {}
    pending: dict[str, dict] = {}
    legacy = f.get("legacy_name_map") or {}
    for key, shape in ckpt_shapes.items():
        shape = tuple(shape)
        o = KeyOutcome(key, shape, "dropped")
        sim.keys.append(o)
        name = _mla_name(key, f) if mla else key
        for old, new in legacy.items():
            name = name.replace(old, new)
        if "d2t" in name:
            o.status, o.reason = "vocab_map", "d2t becomes hot_token_id = d2t + arange(Vd) (not a parameter)"
            continue
        if "t2d" in name:
            o.reason = "t2d is skipped by design"
            continue
        if mla:
            pn, shard, why = _load_mla(name, f, P, pending, o)
            if why == "pending":
                continue
        elif f.get("delegates_to_llama_loader"):
            pn, shard, why = _load_delegate(name, f, P, facts, o)
        else:
            pn, shard, why = _load_own(name, f, P)
        if pn is None:
            o.reason = o.reason or why
            continue
        want = shards.get(pn, {}).get(shard) if shard is not None else P[pn]
        o.param, o.renamed = pn, name.removeprefix("model.") != key.removeprefix("model.")
        if want is not None and tuple(want) != shape:
            o.status, o.loud = "fails", True
            o.reason = f"shape {list(shape)} != parameter {list(want)}: weight loader assertion at startup"
            continue
        o.status = "loaded"
        filled.setdefault(pn, set()).add(shard)
    _settle_fused(pending, f, P, shards, filled)
    _runtime_fill(sim, f, P, shards, facts, filled, draft_config)
    return sim


def _load_delegate(name: str, f: dict, P: dict, facts: dict, o: KeyOutcome):
    """Replay 0.4.5-0.4.8: every non-lm_head name gets 'model.' and goes to LlamaForCausalLM.load_weights."""
    n = name if "lm_head" in name else f"model.{name}"
    if "rotary_emb.inv_freq" in n or "projector" in n:
        return None, None, "rotary/projector tensors are skipped"
    if facts.get("tie") and "lm_head.weight" in n:
        return None, None, "tie_word_embeddings: lm_head.weight is skipped"
    for param, weight, shard in f["stacked"]:
        if weight in n:
            n2 = n.replace(weight, param)
            if n2 in P:
                return n2, shard, ""
            if n2.endswith(".bias"):
                return None, None, "extra bias skipped"
            o.status, o.loud = "fails", True
            o.reason = f"KeyError {n2!r}: the Llama loader indexes params_dict without a check (startup crash)"
            return None, None, o.reason
    if n in P:
        return n, None, ""
    o.loud = bool(f.get("llama_loader_warns_unknown"))
    return None, None, f"no parameter {n!r}; logged 'Parameter {n} not found in params_dict'"


_CRITICAL = ("lm_head.weight", "model.embed_tokens.weight", "model.fc.weight")


def _runtime_fill(sim: LoadSimulation, f: dict, P: dict, shards: dict, facts: dict, filled: dict, cfg: dict) -> None:
    if not P:
        return
    H = facts["H"]
    if facts["head_from_target"]:
        sim.runtime.append("no draft vocab size: embed_tokens and lm_head are both taken from the target")
        for n in ("model.embed_tokens.weight", "lm_head.weight"):
            if n in filled:
                sim.runtime.append(f"checkpoint {n.removeprefix('model.')} is overwritten by the target's")
            filled[n] = {None}
    elif not facts["own_embed"]:
        if "model.embed_tokens.weight" in filled:
            sim.runtime.append("checkpoint embed_tokens is overwritten by the target's embedding (set_embed)")
        filled["model.embed_tokens.weight"] = {None}
        if facts["tie"]:
            sim.runtime.append("tie_word_embeddings: lm_head is the (target's) embed_tokens")
    else:
        sim.runtime.append(
            f"target_hidden_size={cfg.get('target_hidden_size')} != hidden_size={H}: the draft keeps "
            "its own embed_tokens (must be in the checkpoint)"
        )
    later_hidden = f.get("later_layers_prenorm_is_hidden_norm")
    for pn, shape in P.items():
        got = filled.get(pn)
        need = set(shards[pn]) if pn in shards else {None}
        unused = later_hidden and re.match(r"model\.layers\.([1-9]\d*)\.input_layernorm\.weight$", pn)
        if unused:
            if got:
                sim.unused_loaded.append(pn)
            continue
        if got is not None and need <= got:
            continue
        part = f" (shards {sorted(map(str, need - got))} missing)" if got else ""
        crit = (pn in _CRITICAL or ".self_attn." in pn or ".mlp." in pn) and not pn.endswith("layernorm.weight")
        init = "ones" if pn.endswith("norm.weight") or ".fc_norm." in pn else "its random/empty initialization"
        why = f"never filled{part}: stays {init}"
        if pn == "lm_head.weight":
            why += " — draft logits are noise (accept length ~1.00)"
        sim.params_missing.append({"param": pn, "shape": list(shape), "reason": why, "critical": crit})


@lru_cache(maxsize=8)
def config_model_types(version: str, download: bool = False) -> frozenset[str] | None:
    """model_types SGLang `version` brings its own config class for (`model_type = "x"` in srt/configs/*.py, added
    to Transformers' by its AutoConfig registry): `_recorded_or_read`."""
    from kit.sglang.source import source_files

    read = lambda: config_model_types_in(source_files(version, "srt/configs", download))
    return _recorded_or_read(version, "config_model_types", read)


def config_model_types_in(texts: dict[str, str]) -> frozenset[str]:
    return frozenset(m for t in texts.values() for m in re.findall(r'^\s+model_type\s*=\s*"([^"]+)"', t, re.M))


def _recorded_or_read(version: str, feature: str, read: Callable[[], frozenset[str] | None]) -> frozenset[str] | None:
    """A release-wide feature from that release's own recorded row, else `read()` from its source (the importable
    SGLang or the cache); None when neither is at hand."""
    from kit.findings import KitInputError

    rules = runtime_rules(version)
    if rules.exact and rules.features.get(feature) is not None:
        return frozenset(rules.features[feature])
    try:
        return read()
    except (KitInputError, OSError):
        return None


def _mapping_keys(tree: ast.AST, name: str) -> set[str]:
    """String keys given to the mapping `name` in a module's source: `name = OrderedDict([(k, v), ...])`,
    `name = OrderedDict(**{k: v}, **name)` and `name.update({k: v})`."""
    keys: set[str] = set()

    def literal_keys(node) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Dict):
                keys.update(k.value for k in sub.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
            elif isinstance(sub, ast.Tuple) and sub.elts and isinstance(sub.elts[0], ast.Constant):
                if isinstance(sub.elts[0].value, str):
                    keys.add(sub.elts[0].value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            literal_keys(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            if isinstance(node.func.value, ast.Name) and node.func.value.id == name:
                literal_keys(node)
    return keys


@lru_cache(maxsize=1)
def transformers_model_types() -> frozenset[str] | None:
    """The model_types the importable Transformers has a config class for (its CONFIG_MAPPING_NAMES), read from
    the source of its auto-config modules as text: importing them costs about 3 s of CPU (torch and the model
    registry come with them). Imported after all when the source does not read as expected; None without
    Transformers."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    auto = Path(list(spec.submodule_search_locations)[0]) / "models" / "auto"
    keys: set[str] = set()
    for f in ("auto_mappings.py", "configuration_auto.py"):
        try:
            keys |= _mapping_keys(ast.parse((auto / f).read_text()), "CONFIG_MAPPING_NAMES")
        except (OSError, SyntaxError, ValueError):
            pass
    if "llama" in keys:
        return frozenset(keys)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return frozenset(CONFIG_MAPPING_NAMES)


def known_model_type(model_type: str, version: str, download: bool = False) -> bool | None:
    """Whether SGLang `version` reads a config of `model_type` without remote code: Transformers' own (the
    importable Transformers, the one the server runs with) or SGLang's (config_model_types). None: cannot tell."""
    theirs = transformers_model_types()
    if theirs is None:
        return None
    if model_type in theirs:
        return True
    own = config_model_types(version, download)
    return None if own is None else model_type in own


@lru_cache(maxsize=8)
def processor_archs(version: str, download: bool = False) -> frozenset[str] | None:
    """Architectures whose HF processor SGLang `version` loads at startup even with --skip-tokenizer-init
    (TokenizerManager.init_tokenizer_and_processor, whenever ModelConfig.is_multimodal): model_config.py's
    `multimodal_model_archs` less the `mm_disabled_models` it serves text-only unless --enable-multimodal
    (`_recorded_or_read`)."""
    from kit.sglang.source import source_text

    read = lambda: processor_archs_in(source_text(version, MODEL_CONFIG_FILE, download) or "")
    return _recorded_or_read(version, "processor_archs", read)


def processor_archs_in(src: str) -> frozenset[str] | None:
    node = None
    for n in ast.parse(src).body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "multimodal_model_archs" for t in n.targets):
            node = n.value
            break
    if not isinstance(node, (ast.List, ast.Tuple)):
        return None
    # the string entries; a `*OTHER_ARCHS` splice (MiMo-V2: multimodal only with vision/audio configs) is left out
    archs = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    m = re.search(r"mm_disabled_models\s*=\s*(\[[^\]]*\])", src)
    disabled = set(ast.literal_eval(m.group(1))) if m else set()
    return frozenset(a for a in archs if a not in disabled)
