"""What each SGLang release does with an EAGLE-3 draft checkpoint — derived from its real source.

SGLang's `LlamaForCausalLMEagle3.load_weights` changed across releases: which decoder name it
builds (`midlayer` vs `layers.N`), whether it renames legacy keys, whether unknown keys are
dropped silently (0.4.9+) or delegated to the Llama loader (0.4.5-0.4.8: KeyError / warning),
which optional norms exist. This module:

* `derive_features(version)` reads `srt/models/llama_eagle3.py` (+ `llama.py`) of a real
  release (via `kit.sglang.source`, wheel text, never imported) and returns feature flags, each
  with its evidence line; `scan_registered(version)` lists every `EntryClass` architecture;
* `kit/sglang/loader_rules.json` records those results for the releases we checked (regenerate with
  `python -m kit.sglang.loader --write`); `kit/tests/sglang/test_sglang_rules.py` re-derives them from
  the real wheels, so an SGLang change breaks our test, not our users;
* `simulate_load(ckpt_shapes, draft_config, version)` replays that version's loader on names
  and shapes only: for every key loaded (into which parameter) / renamed / dropped (why), and
  every parameter left at its initial value after the runtime's embed/head sharing.

Aux-layer-id / capture rules live in kit.sglang.capture, not here.
How to run: `python -m kit.sglang.loader [VERSION]` prints the derived features.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kit.sglang.versions import DEFAULT_RELEASE, pick_recorded, sort_versions

TABLE_PATH = Path(__file__).with_name("loader_rules.json")
EAGLE_FILE = "srt/models/llama_eagle3.py"
LLAMA_FILE = "srt/models/llama.py"
STACKED = [
    (".qkv_proj", ".q_proj", "q"),
    (".qkv_proj", ".k_proj", "k"),
    (".qkv_proj", ".v_proj", "v"),
    (".gate_up_proj", ".gate_proj", 0),
    (".gate_up_proj", ".up_proj", 1),
]

# feature -> (file, regex whose first match is the evidence); absence means False
MARKERS: dict[str, tuple[str, str]] = {
    "delegates_to_llama_loader": (EAGLE_FILE, r"super\(\)\.load_weights\("),
    "decoder_is_midlayer": (EAGLE_FILE, r"self\.midlayer\s*=\s*LlamaDecoderLayer"),
    "single_layer_only": (EAGLE_FILE, r"only supports 1 layer"),
    "legacy_name_map": (EAGLE_FILE, r"legacy_name_map\s*=\s*\{"),
    "num_aux_configurable": (EAGLE_FILE, r"num_aux_hidden_states\s*=\s*getattr\(config"),
    "fc_bias_from_config": (EAGLE_FILE, r"bias=getattr\(config, \"bias\""),
    "fc_default_bias": (EAGLE_FILE, r"self\.fc = torch\.nn\.Linear\(.*config\.hidden_size\)\s*$"),
    "fc_norm": (EAGLE_FILE, r"getattr\(\s*config, \"fc_norm\""),
    "norm_before_fc": (EAGLE_FILE, r"self\.norm_before_fc\s*=\s*bool"),
    "norm_output": (EAGLE_FILE, r"self\.norm_output\s*=\s*getattr"),
    "null_draft_vocab_uses_target_head": (EAGLE_FILE, r"if config\.draft_vocab_size is None"),
    "tied_lm_head_is_embed": (EAGLE_FILE, r"self\.lm_head\s*=\s*self\.model\.embed_tokens"),
    "later_layers_prenorm_is_hidden_norm": (EAGLE_FILE, r"self\.hidden_norm\(hidden_states, residual\)"),
    "d2t_sets_hot_token_id": (EAGLE_FILE, r"self\.hot_token_id\s*=\s*loaded_weight \+ torch\.arange"),
    "set_embed_skips_if_target_hidden_differs": (
        LLAMA_FILE,
        r"self\.config\.target_hidden_size != self\.config\.hidden_size",
    ),
    "llama_loader_keyerror_on_unknown_stacked": (LLAMA_FILE, r"^\s+param = params_dict\[name\]\s*$"),
    "llama_loader_warns_unknown": (LLAMA_FILE, r"not found in params_dict"),
}


@dataclass(frozen=True)
class Rules:
    version: str  # the release asked about
    checked: str  # the release whose source these features come from
    exact: bool  # True when `version` itself was checked
    features: dict[str, Any]
    evidence: dict[str, list]  # feature -> [file, line number, line text]


# -- deriving from real source ----------------------------------------------------------------
def derive_features(version: str, download: bool = True) -> tuple[dict[str, Any], dict[str, list]]:
    """Feature flags + evidence for one release, read from its wheel's source text."""
    from kit.sglang.source import source_text

    texts = {f: source_text(version, f, download=download) for f in (EAGLE_FILE, LLAMA_FILE)}
    feats: dict[str, Any] = {"has_eagle3": texts[EAGLE_FILE] is not None}
    ev: dict[str, list] = {}
    if texts[EAGLE_FILE] is None:
        return feats, ev
    for feat, (f, rx) in MARKERS.items():
        feats[feat] = False
        for i, line in enumerate((texts[f] or "").splitlines(), 1):
            if re.search(rx, line):
                feats[feat] = True
                ev[feat] = [f, i, line.strip()]
                break
    feats["legacy_name_map"] = _legacy_map(texts[EAGLE_FILE]) if feats["legacy_name_map"] else {}
    return feats, ev


def _legacy_map(text: str) -> dict[str, str]:
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id == "legacy_name_map" for t in node.targets)
        ):
            return ast.literal_eval(node.value)
    return {}


def scan_registered(version: str, download: bool = True) -> set[str]:
    """Class names SGLang's ModelRegistry registers: the `EntryClass` of each srt/models/*.py."""
    from kit.sglang.source import source_root

    base = source_root(version, download) / "sglang" / "srt" / "models"
    names: set[str] = set()
    for p in sorted(base.glob("*.py")):
        try:
            tree = ast.parse(p.read_text())
        except SyntaxError:
            continue
        aliases: dict[str, str] = {}
        for node in tree.body:
            # `Foo = Bar` and `from x import Bar as Foo` register under Bar (the class __name__)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id != "EntryClass":
                        aliases[t.id] = node.value.id
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = a.name
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
            ):
                vals = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for v in vals:
                    if isinstance(v, ast.Name):
                        names.add(aliases.get(v.id, v.id))
    return names


# -- the recorded table -----------------------------------------------------------------------
@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return json.loads(TABLE_PATH.read_text())


def known_versions() -> list[str]:
    return sort_versions(_table()["versions"])


def rules_for(version: str | None = None) -> Rules:
    """Rules of `version`: its own recorded row, else the newest checked release not after it."""
    rel = pick_recorded(version, known_versions())
    row = _table()["versions"][rel.checked]
    return Rules(rel.requested, rel.checked, rel.exact, row["features"], row["evidence"])


def registered_architectures(version: str | None = None) -> set[str]:
    """Architectures (`EntryClass` names) that release registers, from the recorded table."""
    r = rules_for(version)
    names: set[str] = set()
    for v in known_versions():  # rows store the registered set as deltas from the previous row
        d = _table()["versions"][v]["registered_delta"]
        names = (names | set(d["added"])) - set(d["removed"])
        if v == r.checked:
            break
    return names


def eagle3_draft_architectures(version: str | None = None) -> set[str]:
    """Registered classes that are EAGLE-3 drafts (their name says Eagle3)."""
    return {a for a in registered_architectures(version) if "Eagle3" in a}


def build_table(versions: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "_doc": "generated by `python -m kit.sglang.loader --write V...` from real "
        "sglang wheels; checked by kit/tests/test_sglang_rules.py",
        "versions": {},
    }
    prev: set[str] = set()
    for v in sort_versions(versions):
        feats, ev = derive_features(v)
        reg = scan_registered(v)
        out["versions"][v] = {
            "features": feats,
            "evidence": ev,
            "registered_delta": {"added": sorted(reg - prev), "removed": sorted(prev - reg)},
        }
        prev = reg
    return out


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
    build_errors: list[str] = field(default_factory=list)
    keys: list[KeyOutcome] = field(default_factory=list)
    params_missing: list[dict] = field(default_factory=list)  # param, shape, reason, critical
    runtime: list[str] = field(default_factory=list)  # what the serving runtime replaces
    unused_loaded: list[str] = field(default_factory=list)  # loaded into params forward never reads

    def by_status(self, status: str) -> list[KeyOutcome]:
        return [k for k in self.keys if k.status == status]

    @property
    def ok(self) -> bool:
        return (
            self.arch_status == "eagle3"
            and not self.build_errors
            and not self.by_status("fails")
            and not any(m["critical"] for m in self.params_missing)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[dict[str, Any]]:
        """One row per checkpoint key and per never-filled parameter (for a table)."""
        out = [
            {
                "key": k.key,
                "shape": list(k.shape),
                "status": k.status,
                "param": k.param,
                "renamed": k.renamed,
                "reason": k.reason,
            }
            for k in self.keys
        ]
        out += [
            {
                "key": None,
                "shape": list(m["shape"]),
                "status": "never_filled",
                "param": m["param"],
                "renamed": False,
                "reason": m["reason"],
            }
            for m in self.params_missing
        ]
        return out


def _param_shapes(
    cfg: dict[str, Any], f: dict[str, Any], errors: list[str]
) -> tuple[dict[str, tuple], dict[str, dict], dict]:
    """Parameters the release builds for `cfg`: {name: shape}, stacked shard shapes, facts."""
    H, V = cfg.get("hidden_size"), cfg.get("vocab_size")
    nh = cfg.get("num_attention_heads")
    nkv = cfg.get("num_key_value_heads") or nh
    L = cfg.get("num_hidden_layers", 1)
    I_ = cfg.get("intermediate_size")
    if not all(isinstance(x, int) for x in (H, V, nh, nkv, L, I_)):
        errors.append(
            "config lacks integer hidden_size/vocab_size/num_attention_heads/num_hidden_layers/"
            "intermediate_size: the draft model cannot be built"
        )
        return {}, {}, {}
    hd = cfg.get("head_dim") or H // nh
    if "target_hidden_size" in cfg:  # SGLang tests hasattr(): a null value is used as-is
        Ht = cfg["target_hidden_size"]
        if Ht is None:
            errors.append(
                "config has target_hidden_size: null; SGLang's hasattr() check uses None as the fc "
                "input width (TypeError at build) — drop the key or set an integer"
            )
            Ht = H
    else:
        Ht = H
    eagle = cfg.get("eagle_config") or {}
    k = 3
    if f.get("num_aux_configurable"):
        k = cfg.get("num_aux_hidden_states") or len(eagle.get("eagle_aux_hidden_state_layer_ids") or []) or 3
    if f.get("single_layer_only") and L != 1:
        errors.append(f"num_hidden_layers={L}: this SGLang raises 'EAGLE3 currently only supports 1 layer'")
    tie = bool(cfg.get("tie_word_embeddings", False))
    head_from_target = False
    Vd = cfg.get("draft_vocab_size", "<missing>")
    if not tie:
        if Vd == "<missing>":
            errors.append(
                "config has no draft_vocab_size: SGLang reads config.draft_vocab_size (AttributeError); "
                "write null to take the target's lm_head, or the draft vocab size"
            )
            Vd = V
        elif Vd is None:
            if f.get("null_draft_vocab_uses_target_head"):
                head_from_target, Vd = True, V
            else:
                errors.append(
                    "draft_vocab_size is null: this SGLang builds ParallelLMHead(None, H) (TypeError); "
                    "set the draft vocab size"
                )
                Vd = V
    P: dict[str, tuple] = {
        "model.embed_tokens.weight": (V, H),
        "model.fc.weight": (H, k * Ht),
        "model.norm.weight": (H,),
    }
    if (f.get("fc_bias_from_config") and cfg.get("bias")) or f.get("fc_default_bias"):
        # 0.4.5-0.4.8 build nn.Linear(3*Ht, H) with torch's default bias=True
        P["model.fc.bias"] = (H,)
    if f.get("norm_before_fc") and eagle.get("norm_before_fc", cfg.get("norm_before_fc", False)):
        P["model.input_norm.weight"] = (k * Ht,)
    if f.get("fc_norm") and (cfg.get("fc_norm") or cfg.get("use_aux_norm")):
        for j in range(k):
            P[f"model.fc_norm.{j}.weight"] = (Ht,)
    shards: dict[str, dict] = {}
    bias = bool(cfg.get("attention_bias", cfg.get("bias", False)))
    layers = ["model.midlayer"] if f.get("decoder_is_midlayer") else [f"model.layers.{i}" for i in range(L)]
    for i, pre in enumerate(layers):
        w_in = 2 * H if i == 0 else H
        P[f"{pre}.self_attn.qkv_proj.weight"] = ((nh + 2 * nkv) * hd, w_in)
        shards[f"{pre}.self_attn.qkv_proj.weight"] = {
            "q": (nh * hd, w_in),
            "k": (nkv * hd, w_in),
            "v": (nkv * hd, w_in),
        }
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
    facts = {
        "H": H,
        "Ht": Ht,
        "k": k,
        "V": V,
        "Vd": Vd,
        "tie": tie,
        "head_from_target": head_from_target,
        "layers": layers,
    }
    return P, shards, facts


def _load_own(name: str, f: dict, P: dict) -> tuple[str | None, Any, str]:
    """Replay the 0.4.9+ loop: returns (param or None, shard id, why-dropped)."""
    for param, weight, shard in STACKED:
        if weight in name:
            n2 = name.replace(weight, param)
            pn = n2 if n2 in P else f"model.{n2}"
            return (pn, shard, "") if pn in P else (None, None, f"no parameter {pn!r} in this release")
    pn = name if name in P else f"model.{name}"
    return (pn, None, "") if pn in P else (None, None, f"no parameter {pn!r} in this release")


def simulate_load(
    ckpt_shapes: dict[str, Any], draft_config: dict[str, Any], version: str | None = None
) -> LoadSimulation:
    """Replay `version`'s EAGLE-3 loader on checkpoint names/shapes and the draft config.json."""
    r = rules_for(version)
    f = r.features
    archs = draft_config.get("architectures") or []
    arch = archs[0] if archs else None
    reg = registered_architectures(r.version)
    status = (
        "missing"
        if arch is None
        else "eagle3"
        if arch in reg and "Eagle3" in arch
        else "registered_not_eagle3"
        if arch in reg
        else "not_registered"
    )
    sim = LoadSimulation(r.version, r.checked, r.exact, arch, status)
    if not f.get("has_eagle3"):
        sim.build_errors.append(f"sglang {r.version} has no {EAGLE_FILE}: EAGLE-3 drafts are not supported")
        sim.keys = [KeyOutcome(k, tuple(s), "dropped", reason="no EAGLE-3 loader") for k, s in ckpt_shapes.items()]
        return sim
    if arch and arch != "LlamaForCausalLMEagle3" and status == "eagle3":
        sim.runtime.append(
            f"{arch} has its own loader (e.g. kimi_k25_eagle3.py); simulated with the Llama EAGLE-3 rules"
        )
    P, shards, facts = _param_shapes(draft_config, f, sim.build_errors)
    filled: dict[str, set] = {}
    legacy = f.get("legacy_name_map") or {}
    for key, shape in ckpt_shapes.items():
        shape = tuple(shape)
        o = KeyOutcome(key, shape, "dropped")
        sim.keys.append(o)
        name = key
        for old, new in legacy.items():
            if old in name:
                name = name.replace(old, new)
        if "d2t" in name:
            o.status, o.reason = "vocab_map", "d2t becomes hot_token_id = d2t + arange(Vd) (not a parameter)"
            continue
        if "t2d" in name:
            o.reason = "t2d is skipped by design"
            continue
        if f.get("delegates_to_llama_loader"):
            pn, shard, why = _load_delegate(name, f, P, facts, o)
        else:
            pn, shard, why = _load_own(name, f, P)
        if pn is None:
            o.reason = o.reason or why
            continue
        want = shards.get(pn, {}).get(shard) if shard is not None else P[pn]
        o.param, o.renamed = pn, name != key
        if want is not None and tuple(want) != shape:
            o.status, o.loud = "fails", True
            o.reason = f"shape {list(shape)} != parameter {list(want)}: weight loader assertion at startup"
            continue
        o.status = "loaded"
        filled.setdefault(pn, set()).add(shard)
    _runtime_fill(sim, f, P, shards, facts, filled, draft_config)
    return sim


def _load_delegate(name: str, f: dict, P: dict, facts: dict, o: KeyOutcome):
    """Replay 0.4.5-0.4.8: every non-lm_head name gets 'model.' and goes to LlamaForCausalLM.load_weights."""
    n = name if "lm_head" in name else f"model.{name}"
    if "rotary_emb.inv_freq" in n or "projector" in n:
        return None, None, "rotary/projector tensors are skipped"
    if facts.get("tie") and "lm_head.weight" in n:
        return None, None, "tie_word_embeddings: lm_head.weight is skipped"
    for param, weight, shard in STACKED:
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


def _runtime_fill(sim: LoadSimulation, f: dict, P: dict, shards: dict, facts: dict, filled: dict, cfg: dict) -> None:
    if not P:
        return
    H, _Ht = facts["H"], facts["Ht"]
    embed_from_target = not (
        f.get("set_embed_skips_if_target_hidden_differs")
        and "target_hidden_size" in cfg
        and cfg.get("target_hidden_size") != H
    )
    if facts["head_from_target"]:
        sim.runtime.append("draft_vocab_size is null: embed_tokens and lm_head are both taken from the target")
        embed_from_target = True
        for n in ("model.embed_tokens.weight", "lm_head.weight"):
            if n in filled:
                sim.runtime.append(f"checkpoint {n.removeprefix('model.')} is overwritten by the target's")
            filled[n] = {None}
    elif embed_from_target:
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
        crit = (
            pn in ("lm_head.weight", "model.embed_tokens.weight", "model.fc.weight")
            or ".self_attn." in pn
            or ".mlp." in pn
        )
        init = "ones" if pn.endswith("norm.weight") or ".fc_norm." in pn else "its random/empty initialization"
        why = f"never filled{part}: stays {init}"
        if pn == "lm_head.weight":
            why += " — draft logits are noise (accept length ~1.00)"
        sim.params_missing.append({"param": pn, "shape": list(shape), "reason": why, "critical": crit})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        TABLE_PATH.write_text(json.dumps(build_table(sys.argv[2:]), indent=1, sort_keys=True) + "\n")
        print(f"wrote {TABLE_PATH}")
    else:
        v = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_RELEASE
        print(json.dumps(derive_features(v), indent=1))
