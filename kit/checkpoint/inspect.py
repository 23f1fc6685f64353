"""`python -m kit inspect PATH [--json] [--sglang-version X]` — a draft checkpoint from its headers.

PATH is a file, a sharded index, a directory, or a Hugging Face id (`--revision R`; kit.checkpoint.hub: the local
cache, else config.json and the safetensors headers over the network, no weights). From headers only (no torch):
lists keys, dtypes, shapes, bytes and per-prefix totals; names the layout (kit.checkpoint.layouts); checks
config.json against the shapes (widths, heads, vocab, layers, aux count implied by `fc`); replays the SGLang
release's loader (kit.sglang.loader.simulate_load: loaded, renamed, silently dropped, never filled); checks
`d2t`/`t2d` (kit.checkpoint.vocab reads those two small tensors).

Also the `kit doctor --draft PATH` provider (`doctor_checks`). Codes: draft.arch, draft.keys_dropped,
draft.params_missing, draft.shape, draft.d2t, draft.layers, draft.config, draft.layout,
draft.unused_weights, draft.quant, ckpt.corrupt, ckpt.pickle. Exit: 0 ok, 1 error findings, 2 unreadable.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import config as kconfig
from kit.checkpoint.hf_config import declared_draft
from kit.checkpoint.layouts import Layout, detect_layout, layer_indices, to_canonical
from kit.checkpoint.safetensors_io import CORRUPT, HEADER_VIEW, Checkpoint, CheckpointError, read_checkpoint
from kit.config import opt
from kit.findings import Code, Finding, KitInputError, Report, emit, fill_placeholders, write_json_line
from kit.hf import HFConfig
from kit.sglang.draft_config import DraftConfig, llama_draft_shapes
from kit.sglang.versions import sort_versions

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "ckpt/draft: notebook 02"
PICKLE = Code(
    "ckpt.pickle",
    SECTION,
    "warning",
    "`.bin`/`.pt` pickle weight files sit next to the safetensors; the kit ignores them",
    "delete them or re-save as safetensors",
)
LAYOUT = Code(
    "draft.layout",
    SECTION,
    "warning / info",
    "which stack wrote the draft (sglang, eagle, speculators, specforge, kimi_mla, unknown) and the "
    "evidence; warning when it matches no stack's layout (unknown)",
    "—",
)
ARCH = Code(
    "draft.arch",
    SECTION,
    "error",
    "the class SGLang dispatches `architectures` to (draft rewrites of `architectures[0]` first, e.g. "
    "`DeepseekV3ForCausalLM` -> `DeepseekV3ForCausalLMNextN`, an MTP class; then the first registered "
    "name) is not an EAGLE-3 draft class of that release (`LlamaForCausalLMEagle3`; "
    "`Eagle3DeepseekV2ForCausalLM` from 0.5.12). E.g. `Eagle3DraftModel` (speculators), SpecForge's "
    "`DeepseekV3ForCausalLMEagle3`, TorchSpec's `DeepSeekForCausalLMEagle3`, plain `LlamaForCausalLM`. On vLLM "
    "(V1, 0.9.0 on): the class its EAGLEConfig names for the draft's architecture (`Eagle3{arch}` unless it starts "
    "with Eagle3, or from 0.10.1 ends with it) is not in its registry: SpecForge's `LlamaForCausalLMEagle3` before "
    "0.10.2, `Eagle3Qwen3ForCausalLM` before 0.24.0",
    "`kit convert SRC DST --to sglang`; on vLLM, a release with that class",
)
KEYS_DROPPED = Code(
    "draft.keys_dropped",
    SECTION,
    "error",
    "the loader of the draft's class in that release drops checkpoint keys (Llama class: `layers.0.*` "
    "before 0.5.12, silently; MLA class: unexpected names are logged and skipped, half of the "
    "`q_a_proj`+`kv_a_proj_with_mqa` pair without the other is never loaded, without a log); warning when"
    " no draft weight is among them; info lines from `convert` list what it did not write",
    "`kit convert --to sglang --sglang-version X`",
)
PARAMS_MISSING = Code(
    "draft.params_missing",
    SECTION,
    "error",
    "parameters SGLang builds that neither the checkpoint nor the runtime (target embed/head sharing) "
    "fills — they keep their init (lm_head -> accept length ~1.00); warning when only norms",
    "supply the tensors (`convert --target`), or `draft_vocab_size: null` for the target head",
)
SHAPE = Code(
    "draft.shape",
    SECTION,
    "error",
    "config.json and tensor shapes disagree (hidden, heads, kv heads, head_dim, intermediate, vocab, "
    "draft vocab, aux count implied by `fc`), or a key would fail SGLang's shape assertion",
    "use the config the draft was trained with",
)
LAYERS = Code(
    "draft.layers",
    SECTION,
    "error",
    "`num_hidden_layers` disagrees with the saved layers, or the SGLang release loads single-layer drafts only",
    "fix the config / use SGLang >= 0.5.12",
)
CONFIG = Code(
    "draft.config",
    SECTION,
    "error",
    "config.json missing or unusable by SGLang: no `model_type` (a speculators config; transformers' "
    "AutoConfig raises 'Unrecognized model' and SGLang does not start, seen on real SGLang 0.5.17 on an "
    "H200), speculators nesting, no `draft_vocab_size`, `target_hidden_size: null`; warning for ignored "
    "fields (`norm_before_residual`); info notes from `convert`",
    "`kit convert --to sglang` writes a loadable config",
)
UNUSED_WEIGHTS = Code(
    "draft.unused_weights",
    SECTION,
    "warning",
    "weights load into parameters that SGLang's forward never reads (`layers.N.input_layernorm`, N>=1: "
    "SGLang uses `hidden_norm`)",
    "`kit convert --to sglang` renames them",
)
QUANT = Code(
    "draft.quant",
    SECTION,
    "error",
    "an `hf_quant_config.json` beside the draft makes that release set the draft up quantized against "
    'what the file says: releases that read *any* ModelOpt file as `{"quant_method": "modelopt"}` '
    '(`ModelOptFp8Config`), and then the loader: for a BF16 head exported with `"quant_algo": null` (FP8 '
    "KV cache only) 0.4.5.post3-0.4.8 fail at startup, and from 0.4.9 `get_quant_config` keeps a "
    "`LlamaForCausalLMEagle3` head unquantized (info) and raises for any other class (the parse derived "
    "by executing each release's `ModelConfig._parse_quant_hf_config` on probe files: "
    "kit/sglang/quant_rules.json; the loader branch scanned from `weight_utils.py`: kit.sglang.quant); "
    "info: how the release sets the draft up",
    "remove `hf_quant_config.json` from a copy of the draft directory, or serve with a release that "
    "parses `quant_algo`",
)

HELP = "list a draft checkpoint's keys from headers, name its layout, simulate SGLang's loader"
_PREFIX = re.compile(r"^(\D*?\.\d+)\.")  # up to and including the first numeric component
DRAFT_WEIGHTS = re.compile(r"^(layers\.\d+\.|fc\.|fc_norm\.|input_norm\.|norm\.|lm_head\.)")


@dataclass
class InspectConfig:
    path: str = opt(
        "checkpoint file, directory or index, or a Hugging Face id (the local cache first, else its config.json and "
        "safetensors headers over the network; no weights downloaded)",
        "",
        positional=True,
    )
    revision: str | None = opt("hub revision of a Hugging Face id (default: main)")
    sglang_version: str | None = opt("SGLang release to simulate (default: installed, else newest known)")
    json: bool = opt("print one JSON document as the last line", False)


@dataclass
class Inspection:
    checkpoint: Checkpoint
    config: dict[str, Any] | None
    config_path: str | None
    layout: Layout
    draft_config: DraftConfig | None  # as declared (`kit.checkpoint.hf_config.declared_draft`); None: no config.json
    simulation: Any = None  # kit.sglang.loader.LoadSimulation, when the layout is a draft
    report: Report = field(default_factory=Report)

    def key_rows(self) -> list[dict[str, Any]]:
        base = {f: Path(f).name for f in self.checkpoint.files}
        return [
            {"name": t.name, "dtype": t.dtype, "shape": t.shape, "bytes": t.end - t.start, "file": base[t.file]}
            for t in self.checkpoint.tensors.values()
        ]


def find_config(path: Path) -> Path | None:
    d = path if path.is_dir() else path.parent
    return d / "config.json" if (d / "config.json").is_file() else None


def shape_checks(ck: Checkpoint, layout: Layout, d: DraftConfig) -> list[Finding]:
    """draft.shape / draft.layers: config numbers vs tensor shapes (canonical names)."""
    canon = {c: t.shape for k, t in ck.tensors.items() if (c := to_canonical(k, layout))}
    H, nh, nkv, hd = d.hidden_size, d.num_attention_heads, d.num_key_value_heads, d.head_dim_or_default
    I_, V, Vd = d.intermediate_size, d.vocab_size, d.draft_vocab_or_target
    Ht, k = d.effective_target_hidden_size, d.trained_num_aux
    out: list[Finding] = []
    if not all(isinstance(x, int) for x in (H, nh, nkv, hd, I_)):
        return out
    L = d.num_hidden_layers or 1
    want = {name: shape for name, (shape, _) in llama_draft_shapes(H, nh, nkv, hd, I_, V, Vd, Ht, k, L).items()}
    want.pop("fc.weight")  # judged below, with the aux count it implies
    if layout.name == "kimi_mla":  # MLA attention has other tensors and widths: the loader replay checks them
        want = {n: s for n, s in want.items() if ".self_attn." not in n}
    bad = [(n, list(canon[n]), list(s)) for n, s in want.items() if n in canon and tuple(canon[n]) != s]
    fc = canon.get("fc.weight")
    implied = fc[1] / Ht if fc is not None and len(fc) == 2 and Ht else None
    if fc is not None and len(fc) == 2 and (fc[0] != H or implied != k):
        title = f"fc.weight {list(fc)} implies {implied:g} aux states of width {Ht}; config says {k}"
        ev = {"fc.weight": list(fc), "hidden_size": H, "target_hidden_size": Ht, "num_aux": k}
        fix = "set num_aux_hidden_states / eagle_config.eagle_aux_hidden_state_layer_ids (and target_hidden_size) to match "
        out.append(SHAPE(title, evidence=ev, fix=fix + "the trained fc"))
    if bad:
        title = f"{len(bad)} tensor shape(s) disagree with config.json, e.g. {bad[0][0]} {bad[0][1]} vs {bad[0][2]}"
        config = dict(hidden_size=H, num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd, intermediate_size=I_)
        ev = {"mismatches": bad[:20], "config": dict(config, vocab_size=V, draft_vocab_size=Vd)}
        fix = "the config.json does not describe these weights: use the training run's config"
        out.append(SHAPE(title, evidence=ev, fix=fix))
    present = sorted(layer_indices(canon))
    if present and (present != list(range(len(present))) or len(present) != L):
        title = f"config num_hidden_layers={L} but the checkpoint has decoder layers {present}"
        ev = {"num_hidden_layers": L, "layers_in_checkpoint": present}
        out.append(LAYERS(title, evidence=ev, fix="make num_hidden_layers equal the number of saved layers"))
    return out


def simulation_findings(sim, layout: Layout) -> list[Finding]:
    ver = f"sglang {sim.version}" + ("" if sim.exact else f" (rules of {sim.checked})")
    out: list[Finding] = []
    if sim.arch_status != "eagle3":
        what = {
            "missing": "config.json has no architectures",
            "registered_not_eagle3": f"{sim.architecture} is a target-model class, not an EAGLE-3 draft class",
            "not_registered": f"{sim.architecture} is not registered",
        }[sim.arch_status]
        ev = {"architecture": sim.architecture, "layout": layout.name}
        fix = "python -m kit convert SRC DST --to sglang --target TARGET_DIR (writes LlamaForCausalLMEagle3)"
        out.append(ARCH(f"{what} in {ver}", evidence=ev, fix=fix))
    fix = "fix config.json (kit convert --to sglang writes a loadable one)"
    for e in sim.build_errors:
        code = LAYERS if e.startswith("num_hidden_layers") else CONFIG
        out.append(code(e if len(e) <= 160 else e[:157] + "...", evidence={"detail": e, "sglang": ver}, fix=fix))
    fails = sim.by_status("fails")
    if fails:
        title = f"{len(fails)} key(s) fail to load in {ver}: {fails[0].key} ({fails[0].reason})"
        ev = {"keys": [(k.key, k.reason) for k in fails[:10]]}
        fix = "config and weights disagree; use the config the draft was trained with"
        out.append(SHAPE(title, evidence=ev, fix=fix))
    dropped = [k for k in sim.by_status("dropped") if k.reason != "t2d is skipped by design"]
    if dropped:
        weights = [k for k in dropped if DRAFT_WEIGHTS.match(to_canonical(k.key, layout) or "")]
        drops = "drops" if any(k.loud for k in dropped) else "silently drops"
        title = f"{ver} {drops} {len(dropped)} checkpoint key(s), e.g. {dropped[0].key}"
        ev = {"dropped": [(k.key, k.reason) for k in dropped[:12]], "count": len(dropped)}
        fix = (
            f"python -m kit convert SRC DST --to sglang --sglang-version {sim.version} (renames keys for that release, "
        )
        fix += "refuses what cannot load)"
        out.append(KEYS_DROPPED(title, evidence=ev, severity="error" if weights else "warning", fix=fix))
    if sim.params_missing:
        crit = [m for m in sim.params_missing if m["critical"]]
        m0 = (crit or sim.params_missing)[0]
        title = f"{len(sim.params_missing)} parameter(s) never filled in {ver}, e.g. {m0['param']} ({m0['reason']})"
        ev = {"params": [(m["param"], m["reason"]) for m in sim.params_missing[:12]]}
        fix = "supply the tensors (kit convert --target PATH copies embed_tokens/lm_head from the target) or set "
        fix += "draft_vocab_size: null to take the target's lm_head"
        out.append(PARAMS_MISSING(title, evidence=ev, severity="error" if crit else "warning", fix=fix))
    if sim.unused_loaded:
        title = f"{len(sim.unused_loaded)} weight(s) load into parameters {ver} never uses, e.g. {sim.unused_loaded[0]}"
        fix = "SGLang uses layers.N.hidden_norm (N>=1) as the pre-attention norm: kit convert --to sglang renames input_layernorm there"
        out.append(UNUSED_WEIGHTS(title, evidence={"params": sim.unused_loaded[:12]}, fix=fix))
    return out


def config_findings(cfg: HFConfig | None, layout: Layout) -> list[Finding]:
    if cfg is None:
        return [
            CONFIG("no config.json next to the weights", fix="copy the training run's config.json next to the weights")
        ]
    out = []
    if not cfg.get("model_type"):
        # SGLang builds the draft's ModelConfig through transformers' AutoConfig, which needs model_type
        # (seen on real SGLang: "Unrecognized model in ... Should have a `model_type` key")
        title = "SGLang will not start: config.json has no model_type, so transformers' AutoConfig raises "
        title += "'Unrecognized model' before SGLang reads architectures"
        fix = "python -m kit convert SRC DST --to sglang --target TARGET_DIR (writes a flat llama config)"
        out.append(CONFIG(title, evidence={"layout": layout.name, "keys": sorted(cfg)[:20]}, fix=fix))
    if cfg.get("norm_before_residual"):
        title = "norm_before_residual: true — SGLang ignores it, so its draft numerics differ from training"
        fix = "retrain with norm_before_residual=false for SGLang, or serve with vLLM"
        out.append(CONFIG(title, evidence={"norm_before_residual": True}, severity="warning", fix=fix))
    return out


def _architecture(draft_dir: Path) -> str | None:
    """architectures[0] of the draft directory's config.json (what SGLang's loader compares)."""
    try:
        archs = json.loads((Path(draft_dir) / "config.json").read_text()).get("architectures") or [None]
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return archs[0]


def quant_findings(draft_dir: Path, sglang_version: str | None) -> list[Finding]:
    """`draft.quant`: what the release sets the draft up as from an `hf_quant_config.json` beside it."""
    from kit.sglang.quant import FILE, draft_quantization, misread_releases, no_algo_loader

    f = Path(draft_dir) / FILE
    if not f.is_file():
        return []
    try:
        hq = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return [QUANT(f"{f}: unreadable ({e})", evidence={}, severity="warning")]
    q = draft_quantization(sglang_version, hq) if isinstance(hq, dict) else None
    if q is None:
        return []
    algo = hq["quantization"].get("quant_algo") if isinstance(hq.get("quantization"), dict) else None
    ver = f"sglang {q['requested']}" + ("" if q["exact"] else f" (rules of {q['version']})")
    evidence = {"file": str(f), "quant_algo": algo, "quant_method": q["quant_method"], "class": q["class"]}
    evidence["derived_from"] = q["evidence"]
    wrong = (q["probe"] == "no_algo" and q["quant_method"]) or (
        q["probe"] == "nvfp4" and q["class"] and "Fp4" not in q["class"] and "FP4" not in q["class"]
    )
    arch = _architecture(draft_dir)
    loader = no_algo_loader(q["requested"], arch) if wrong and q["probe"] == "no_algo" else None
    fix = f"remove {FILE} from the draft directory (a copy: never edit the original), or serve with a release that parses quant_algo"
    reads = f"reads the draft's {FILE} (quant_algo {algo!r}) as {q['quant_method']}"
    if loader and loader["outcome"] == "unquantized":
        title = f"{ver} {reads}, but its loader sets this head up unquantized: get_quant_config returns no quant "
        title += f"config for a {arch} head whose file names no algorithm"
        return [QUANT(title, evidence={**evidence, "loader": loader["evidence"]}, severity="info")]
    if loader:
        title = f"{ver} does not start: it {reads}, and its loader raises ValueError ('Invalid quant_config') for a "
        title += f"{arch!s} head whose file names no algorithm"
        return [QUANT(title, evidence={**evidence, "loader": loader["evidence"]}, fix=fix)]
    if wrong:
        builds = f"{q['class']}: the draft head is set up quantized and acceptance collapses"
        if q["probe"] == "no_algo":
            builds = f"{q['class']} from a file that names no algorithm: the loader tests the missing algorithm as a "
            builds += "string and startup fails (TypeError)"
        ev = {**evidence, "releases_that_misread": sort_versions(misread_releases())}
        return [QUANT(f"{ver} {reads} and builds {builds}", evidence=ev, fix=fix)]
    how = f"{q['quant_method']} ({q['class']})" if q["quant_method"] else "unquantized"
    title = f"{ver} sets the draft up as {how} from its {FILE} (quant_algo {algo!r})"
    return [QUANT(title, evidence=evidence, severity="info")]


def inspect(
    path: str | Path, sglang_version: str | None = None, target_vocab: int | None = None, config: HFConfig | None = None
) -> Inspection:
    """Everything `kit inspect` reports, as data; `target_vocab`: the target's vocab_size when one is known (else
    t2d's length, else the draft config's vocab_size stand for it); `config`: the checkpoint's config.json when the
    caller has read it already. Raises CheckpointError for unreadable input."""
    from kit.checkpoint.hf_config import read_config

    p = Path(path)
    ck = read_checkpoint(p)
    cp = find_config(p)
    cfg = read_config(cp)[0] if config is None and cp is not None else config
    lay = detect_layout(ck.tensors, cfg)
    dc = declared_draft(cfg) if cfg else None
    title = f"layout: {lay.name} — {lay.evidence.get('why')}"
    rep = Report([LAYOUT(title, evidence=lay.evidence, severity="info" if lay.name != "unknown" else "warning")])
    if ck.pickle_files:
        title = f"pickle weight file(s) present and ignored: {', '.join(Path(x).name for x in ck.pickle_files)}"
        fix = "delete them or re-save as safetensors; pickle can run code when loaded"
        rep.add(PICKLE(title, evidence={"files": ck.pickle_files}, fix=fix))
    ins = Inspection(ck, cfg, str(cp) if cp else None, lay, dc, report=rep)
    if lay.name in ("unknown",) and not any(k.startswith(("midlayer.", "fc.")) for k in ck.tensors):
        return ins  # not an EAGLE-3 draft (e.g. a target): listing only
    rep.extend(config_findings(cfg, lay))
    rep.extend(quant_findings(cp.parent if cp else (p if p.is_dir() else p.parent), sglang_version))
    if cfg:
        rep.extend(shape_checks(ck, lay, dc))
        from kit.checkpoint.layouts import speculators_to_sglang_config
        from kit.checkpoint.vocab import check_vocab
        from kit.sglang.loader import registered_architectures, simulate_load

        # a speculators draft is simulated with the config `kit convert --to sglang` would write
        view = speculators_to_sglang_config(cfg, None) if lay.name == "speculators" else cfg
        sim = ins.simulation = simulate_load(ck.shapes(), view, sglang_version)
        if lay.name == "speculators":  # simulated as if its config were flattened; the real one is not
            arch = sim.architecture = (cfg.get("architectures") or [None])[0]
            registered = arch in registered_architectures(sim.version)
            sim.arch_status = "missing" if arch is None else "registered_not_eagle3" if registered else "not_registered"
            why = "speculators config: SGLang reads no transformer_layer_config/speculators_config (flat fields only)"
            sim.build_errors.insert(0, why + " — keys below are simulated as if flattened")
        rep.extend(simulation_findings(ins.simulation, lay))
        names = {to_canonical(k, lay): k for k in ck.tensors}
        t2d = names.get("t2d", "t2d")
        t2d_shape = ck.tensors[t2d].shape if t2d in ck.tensors else ()
        rep.extend(
            check_vocab(
                ck,
                target_vocab or (t2d_shape[0] if len(t2d_shape) == 1 else dc.vocab_size),
                dc.draft_vocab_or_target,
                lm_head=names.get("lm_head.weight"),
                d2t_name=names.get("d2t", "d2t"),
                t2d_name=t2d,
                reads_t2d=any(o.key == t2d and o.status != "dropped" for o in sim.keys),
            )
        )
    return ins


def prefix_totals(ck: Checkpoint) -> dict[str, dict[str, int]]:
    """{prefix: tensors, params, bytes}; prefix = name up to its first numeric part ("layers.3")."""
    out: dict[str, dict[str, int]] = {}
    cur, row = "\0", None
    for t in ck.tensors.values():
        if not t.name.startswith(cur):  # names of one layer are usually adjacent: regex once per run
            m = _PREFIX.match(t.name)
            pre = m.group(1) if m else t.name.split(".", 1)[0]
            cur = pre + "."
            row = out.setdefault(pre, {"tensors": 0, "params": 0, "bytes": 0})
        row["tensors"] += 1
        row["params"] += math.prod(t.shape)
        row["bytes"] += t.nbytes
    return out


def corrupt_report(e: CheckpointError) -> Report:
    fix = "re-export the checkpoint; the kit never loads a file it cannot validate"
    return Report([CORRUPT(str(e)[:300], fix=fix)])


# -- doctor provider --------------------------------------------------------------------------
def doctor_checks(dep) -> list[Finding]:
    """kit doctor provider (`dep`: a `kit.preflight.Deployment`): the draft's checkpoint, keys through the
    release's loader rules when its folder has weights (or their headers), else its config alone."""
    if dep.draft is None:
        return []
    d = dep.draft.folder
    weights = ("*.safetensors", "*.bin", "model.safetensors.index.json", HEADER_VIEW)
    if d is None or not any(any(d.glob(w)) for w in weights):
        # a lone config: architecture and config-level checks only
        from kit.sglang.loader import resolve_draft_class, rules_for

        cfg = dep.draft.config
        lay = detect_layout([], cfg)
        r = rules_for(dep.sglang_version)
        arch = (cfg.get("architectures") or [None])[0]
        out = config_findings(cfg, lay)
        dispatched, status = resolve_draft_class(cfg, r.version)
        if status != "eagle3":
            title = f"architecture {arch!r} is not an EAGLE-3 draft class registered in sglang {r.version}"
            title += f" (loaded as {dispatched})" if dispatched and dispatched != arch else ""
            ev = {"architecture": arch, "dispatched_to": dispatched, "layout": lay.name}
            out.append(ARCH(title, evidence=ev, fix="python -m kit convert SRC DST --to sglang"))
        return out + (quant_findings(d, dep.sglang_version) if d is not None else [])
    vocab = dep.target_config.text.get("vocab_size") if dep.target_config is not None else None
    try:
        ins = inspect(d, dep.sglang_version, vocab if isinstance(vocab, int) else None, dep.draft.config)
    except CheckpointError as e:
        return corrupt_report(e).findings
    return ins.report.findings


# -- verb -------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, InspectConfig)


def render_text(ins: Inspection, max_keys: int = 400) -> str:
    ck = ins.checkpoint
    lines = [
        f"{ck.path}: {len(ck.tensors)} tensors in {len(ck.files)} file(s), "
        f"{ck.total_params:,} parameters, {ck.total_bytes:,} bytes; layout {ins.layout.name}"
    ]
    rows = ins.key_rows()
    if len(rows) <= max_keys:
        w = max((len(r["name"]) for r in rows), default=4)
        lines += [f"  {r['name']:<{w}}  {r['dtype']:<5} {str(r['shape']):<18} {r['bytes']:>14,}" for r in rows]
    else:
        lines.append(f"  ({len(rows)} keys; per-prefix totals below, --json lists every key)")
        for pre, t in prefix_totals(ck).items():
            lines.append(f"  {pre:<40} {t['tensors']:>6} tensors {t['params']:>18,} params")
    sim = ins.simulation
    if sim is not None:
        lines.append(
            f"simulated load in sglang {sim.version} (rules of {sim.checked}): "
            f"{len(sim.by_status('loaded'))} loaded, {len(sim.by_status('dropped'))} dropped, "
            f"{len(sim.by_status('fails'))} failing, {len(sim.params_missing)} never filled"
        )
        for k in sim.keys:
            if k.status != "loaded" or k.renamed:
                lines.append(f"  {k.status:<9} {k.key} -> {k.param or '-'}  {k.reason}")
        for m in sim.params_missing:
            lines.append(f"  unfilled  {m['param']}  {m['reason']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(InspectConfig, args)
    if not cfg.path:
        raise KitInputError("give a checkpoint file or directory")
    from kit.checkpoint.hub import resolve

    model = resolve(cfg.path, cfg.revision, None, "a checkpoint file, directory or index")
    try:
        ins = inspect(model.path, cfg.sglang_version)
    except CheckpointError as e:
        rep = corrupt_report(e)
        if cfg.json:
            print(rep.to_json())
        print(f"kit inspect: error: {e}", file=sys.stderr)  # one line on stderr, like every user error
        return 2
    rep = ins.report
    if model.repo_id:
        rep.findings.insert(0, model.finding(None))
    pt, ck = prefix_totals(ins.checkpoint), ins.checkpoint
    total = {f"total_{k}": sum(r[k] for r in pt.values()) for k in ("params", "bytes")}
    rep.facts.update(path=ck.path, layout=ins.layout.name, files=ck.files, **total, config=ins.config_path)
    if cfg.json:
        doc = dict(rep.to_dict(), tensors=ins.key_rows(), prefixes=pt)
        if ins.simulation is not None:
            doc["simulation"] = ins.simulation.to_dict()
        write_json_line(doc)
        return rep.exit_code()
    if model.repo_id:
        print(f"{cfg.path}: {model.source}")
    print(render_text(ins))
    src = cfg.path if model.repo_id else str(Path(cfg.path).parent if Path(cfg.path).is_file() else Path(cfg.path))
    src = src.rstrip("/")
    dst = f"{src.rsplit('/', 1)[-1] if model.repo_id else src}-sglang"
    rep.findings = fill_placeholders(rep.findings, {"SRC": src, "DST": dst})
    return emit(rep, False)
