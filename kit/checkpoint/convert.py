"""`python -m kit convert SRC DST --to sglang|speculators|eagle [--target PATH] [--sglang-version X] [--force]`

Rewrites an EAGLE-3 draft into the layout another stack loads (`kit.checkpoint.layouts`): speculators -> SGLang
(`midlayer.*` for one layer, else `layers.N.*` with `hidden_norm` as SGLang's pre-attention norm for N >= 1, and a
flat `LlamaForCausalLMEagle3` config); SGLang / SpecForge / EAGLE -> speculators (`Eagle3DraftModel`); anything
the kit reads -> official EAGLE (`midlayer.*`, plain Llama config).

Strict: refuses when the destination needs a tensor the source lacks (unless `--target` supplies
`embed_tokens`/`lm_head`) or would drop a weight (q/k norms, fc_norm in an SGLang without it...). Safe: never
touches SRC, refuses DST inside SRC (or SRC inside DST) and a non-empty DST without `--force`; streams tensor by
tensor into a temporary directory, verifies it (keys, shapes, sha256 of every tensor), then renames it.
`kit_provenance.json` records the source layout, its aux layer-id convention and the kit version. SRC may be a
Hugging Face id (`--revision`; downloaded into the cache by kit.checkpoint.hub.download); of a hub `--target`
only the embed_tokens/lm_head rows a draft lacks are fetched, by range reads.

Aux layer ids name different target layers in each stack (kit.checkpoint.aux_ids), so they are translated through
capture points: the source's ids -> the points the draft was trained on -> the ids that make the destination
capture them on `--target` (SGLang's rule per class and release: kit.sglang.capture); without a target where the
meaning depends on one, it refuses. The output config.json records the source's ids, convention and points under
`kit_aux_source`, so a copied config keeps what `kit doctor` judges the wiring by.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import __version__
from kit import config as kconfig
from kit.checkpoint.hf_config import declared_draft
from kit.checkpoint.inspect import CONFIG, KEYS_DROPPED, corrupt_report, find_config
from kit.checkpoint.layouts import (
    detect_layout,
    from_canonical,
    sglang_to_eagle_config,
    sglang_to_speculators_config,
    speculators_to_sglang_config,
    to_canonical,
)
from kit.checkpoint.safetensors_io import (
    DTYPE_BITS,
    CheckpointError,
    TensorInfo,
    WriteEntry,
    _umask,
    bytes_to_torch,
    iter_bytes,
    read_checkpoint,
    sha256_of,
    write_stream,
)
from kit.config import opt
from kit.findings import Code, Finding, KitInputError, Report, emit
from kit.hf import AUX_IDS, HFConfig
from kit.sglang.draft_config import read_draft_config

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "aux/probe/oracle: notebook 03"
LAYER_SHIFT = Code(
    "aux.layer_shift",
    SECTION,
    "error / warning",
    "the points the engine captures (SGLang: its per-class, per-version id rule, kit/sglang/capture_rules.json; "
    "vLLM: the ids its release reads from the draft config, as points, else its default, kit/vllm/rules.json; "
    "top-level ids only where the deployment runs on its second model runner, as the release's "
    "`use_v2_model_runner` decides: its default targets (listed ones from 0.22.0, every dense one from 0.25.0, "
    "every one from 0.29.0), the features it lacks (EAGLE-3 with pipeline parallelism, prompt embeds, ...), "
    "VLLM_USE_V2_MODEL_RUNNER) "
    "differ from the points the draft was trained on (speculators config, the `kit_aux_source` record "
    "`kit convert` writes into config.json, `kit_provenance.json`, or `--trained-with`); a warning when "
    "only a speculators config's ids say so and, read as ids `speculators convert` copied, they are the "
    "points SGLang captures; `kit convert` warns when it translates top-level ids that, read as ids "
    "`speculators convert` copied, would mean SGLang's default points (the fix names both id sets)",
    "write the ids the finding gives; if none exist for that class/version, retrain on points it can capture",
)

HELP = "convert a draft between speculators, SGLang and official EAGLE layouts (strict, streaming)"
DESTS = ("sglang", "speculators", "eagle")
PROVENANCE = "kit_provenance.json"
# the output config's record of the source's aux ids, their convention and the points they name
AUX_SOURCE_KEY = "kit_aux_source"
TARGET_EMBED = ("model.embed_tokens.weight", "embed_tokens.weight", "model.language_model.embed_tokens.weight")


@dataclass
class ConvertConfig:
    src: str = opt(
        "source draft directory, or a Hugging Face id (from the cache, else downloaded into it)", "", positional=True
    )
    dst: str = opt("output directory (created)", "", positional=True)
    to: str = opt("destination layout", "sglang", choices=list(DESTS))
    target: str | None = opt(
        "target model dir (or its config.json): gives the aux layer-id translation, and embed_tokens/lm_head when the "
        "draft lacks them"
    )
    sglang_version: str | None = opt("SGLang release the output must load in (default: installed, else newest known)")
    revision: str | None = opt("hub revision of SRC when it is a Hugging Face id")
    target_revision: str | None = opt(
        "hub revision of --target when it is a Hugging Face id (its config.json and headers are read; only the "
        "embed_tokens/lm_head rows a draft lacks are fetched)"
    )
    force: bool = opt("replace a non-empty DST", False)
    json: bool = opt("print one JSON document as the last line", False)


@dataclass
class Source:
    """Where one output tensor's bytes come from: a source tensor, target rows, or literal bytes."""

    dtype: str
    shape: tuple
    chunks: Callable[[], Iterable[bytes]]
    origin: str


@dataclass
class Plan:
    to: str
    config: dict[str, Any]
    tensors: dict[str, Source] = field(default_factory=dict)  # output name -> source
    dropped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)


def _rows(t: TensorInfo, rows: list[int], origin: str) -> Source:
    """Selected rows of a 2-D tensor, read row by row (bounded memory)."""
    width = DTYPE_BITS[t.dtype] * t.shape[1] // 8

    def gen():
        with open(t.file, "rb") as f:
            for r in rows:
                f.seek(t.start + r * width)
                yield f.read(width)

    return Source(t.dtype, (len(rows), t.shape[1]), gen, origin)


def _target_tensors(target: str) -> tuple[TensorInfo | None, TensorInfo | None]:
    """The target's embed_tokens and lm_head (the embedding when tied)."""
    from kit.models import resolve_target

    d = resolve_target(target)
    ck = read_checkpoint(d)
    emb = next((ck.tensors[k] for k in TARGET_EMBED if k in ck.tensors), None)
    tied = json.loads((d / "config.json").read_text()).get("tie_word_embeddings")
    return emb, ck.tensors.get("lm_head.weight") or (emb if tied else None)


def _target_config(target: str) -> HFConfig:
    """The target's config.json: `target` is a model directory, its config.json, or 'embedded'."""
    from kit.checkpoint.hf_config import read_config
    from kit.models import resolve_target

    p = Path(target).expanduser()
    return read_config(p if p.is_file() else resolve_target(target))[0]


def plan_aux(
    cfg: HFConfig, layout: str, to: str, target: str | None, sglang_version: str | None, require_target: bool = True
) -> dict[str, Any]:
    """{"ids": ids for the destination (None: keep none), "record": the AUX_SOURCE_KEY record}. Points come from the
    source's record when the kit wrote it, else from its ids on the target; the destination ids capture them."""
    from kit.checkpoint.aux_ids import capture_points, read_ids, top_level_points
    from kit.checkpoint.hf_config import target_facts
    from kit.sglang.capture import capture_rule, default_ids, ids_for_points

    src_ids, _ = read_ids(layout, cfg)  # in the convention of the stack the layout names
    prior = cfg.get(AUX_SOURCE_KEY) or {}
    tcfg = _target_config(target) if target else None
    tf = target_facts(tcfg) if tcfg else None
    L, arch = (tf.num_layers, tf.architecture) if tf else (prior.get("num_layers"), prior.get("target_class"))
    points = None
    if prior.get("capture_points") and (tf is None or prior.get("num_layers") in (None, L)):
        points = list(prior["capture_points"])
    elif layout == "speculators" and src_ids:
        points = top_level_points(src_ids, L)["speculators"]  # id = point on every target
    record = {"layout": layout, "convention": layout, "aux_layer_ids": src_ids, "capture_points": points}
    record.update(target_class=arch, num_layers=L, sglang_version=None)
    if (points is None or to != "speculators") and tf is None:
        if not require_target:
            return {"ids": src_ids, "record": dict(record, translated=False)}
        raise KitInputError(
            f"--target: the aux layer ids {src_ids or '(default)'} of this {layout} draft name different target "
            f"layers in {to}'s convention depending on the target; give --target TARGET_DIR (or its config.json)"
        )
    if not L:
        raise KitInputError(f"--target {target}: no num_hidden_layers in its config")
    if points is None:
        points = capture_points(layout, src_ids, L, arch, sglang_version)
    record.update(capture_points=points, translated=True)
    if to == "speculators":
        return {"ids": list(points), "record": record}
    if to == "eagle":
        if points != default_ids(L):
            raise KitInputError(
                f"--to eagle: official EAGLE captures points {default_ids(L)} on this {L}-layer target; the draft "
                f"was trained on {points}: convert to sglang or speculators instead"
            )
        return {"ids": None, "record": record}
    rule = capture_rule(arch, sglang_version)
    if rule is None:
        raise KitInputError(f"--target: {arch} cannot capture aux hidden states in the SGLang release checked")
    ids = ids_for_points(points, L, rule)
    record["sglang_version"] = rule["version"]
    if layout == "speculators" and src_ids and not prior.get("capture_points"):
        from kit.sglang.capture import sglang_points

        readings, default = top_level_points(src_ids, L), sglang_points(None, L, rule)
        if readings["copied"] == default and readings["speculators"] != default:
            # ids `speculators convert` copies from an output-convention head mean SGLang's default points
            record["copied_reading"] = {"points": default, "ids": ids_for_points(default, L, rule)}
    if ids is None:
        raise KitInputError(
            f"--to sglang: no eagle_aux_hidden_state_layer_ids make {arch} capture points {points} in sglang "
            f"{rule['version']} (rule {rule['default']}; {rule['explicit']})"
        )
    return {"ids": ids, "record": record}


def plan_conversion(
    src: str | Path, to: str, target: str | None = None, sglang_version: str | None = None, require_target: bool = True
) -> Plan:
    """Decide every output tensor and the output config; raise KitInputError when strictness forbids.
    `require_target=False` (in-memory loading) keeps untranslatable aux ids as they are, recorded as such."""
    src = Path(src)
    ck, cfg, lay = _read_source(src, to)
    d = declared_draft(cfg)
    plan = Plan(to, {})
    canon = _canonical_tensors(src, ck, lay, plan)
    fc = canon.get("fc.weight")
    if fc is None:
        raise KitInputError(f"{src}: no fc.weight — not an EAGLE-3 draft (or a partial checkpoint)")
    Ht = d.effective_target_hidden_size
    k = fc.shape[1] // Ht if Ht and fc.shape[1] % Ht == 0 else d.trained_num_aux  # the trained fc decides
    refuse = _refusals(canon, to, target, sglang_version, plan, d, k)
    if refuse:
        raise KitInputError(f"{src} -> {to}: refused: " + "; ".join(refuse))
    aux = plan_aux(cfg, lay.name, to, target, sglang_version, require_target)
    rec = aux["record"]
    copied = rec.get("copied_reading")
    if copied:
        title = f"top-level aux ids {rec['aux_layer_ids']} read as speculators-trained ids (points {rec['capture_points']}, "
        title += (
            f"written as {aux['ids']}); if `speculators convert` copied them from a SGLang/SpecForge/ModelOpt head, "
        )
        title += f"they mean SGLang's default points {copied['points']} instead"
        fix = f"if the draft came from `speculators convert`, set eagle_config.eagle_aux_hidden_state_layer_ids = {copied['ids']} "
        ev = {"source_ids": rec["aux_layer_ids"], "written_ids": aux["ids"], "if_copied": copied}
        plan.notes.append(LAYER_SHIFT(title, ev, "warning", fix + "in the output (kit doctor shows both readings)"))
    hot = _plan_vocab_maps(src, canon, plan, d)
    head_from_target = _plan_embed_and_head(src, cfg, canon, plan, target, d, hot)
    _check_required(src, canon, d.num_hidden_layers)
    _plan_weights(canon, plan, d.num_hidden_layers, head_from_target)
    if to == "sglang" and plan.provenance.get("sglang_version") and "fc.bias" not in canon:
        _plan_fc_bias(fc, plan, sglang_version)
    plan.config = _output_config(cfg, lay, plan, target, k, d.hidden_size)
    _write_aux(plan.config, to, aux)
    _record_provenance(plan, cfg, src, lay, target)
    return plan


def _read_source(src: Path, to: str) -> tuple[Any, HFConfig, Any]:
    """(checkpoint headers, config, layout) of a convertible source, and a known destination."""
    from kit.checkpoint.hf_config import read_config

    ck = read_checkpoint(src)
    cp = find_config(src)
    if cp is None:
        raise KitInputError(f"{src}: no config.json; the converter needs the draft's architecture")
    cfg = read_config(cp)[0]
    lay = detect_layout(ck.tensors, cfg)
    if lay.name in ("kimi_mla", "unknown"):
        raise KitInputError(
            f"{src}: layout {lay.name} ({lay.evidence.get('why')}); the kit converts Llama-style EAGLE-3 drafts only"
        )
    if to not in DESTS:
        raise KitInputError(f"--to {to}: choose from {', '.join(DESTS)}")
    return ck, cfg, lay


def _canonical_tensors(src: Path, ck, lay, plan: Plan) -> dict[str, TensorInfo]:
    """Canonical name -> tensor; keys that are no draft weight go to `plan.dropped`."""
    canon: dict[str, TensorInfo] = {}
    for key, t in ck.tensors.items():
        c = to_canonical(key, lay)
        if c is None:
            plan.dropped.append((key, "not a draft weight (verifier_*/rotary buffer/unused SGLang norm)"))
        elif c in canon:
            raise KitInputError(f"{src}: keys {canon[c].name!r} and {key!r} both map to {c!r}")
        else:
            canon[c] = t
    return canon


def _refusals(canon: dict[str, TensorInfo], to: str, target, sglang_version, plan: Plan, d, k: int) -> list[str]:
    """What the destination cannot hold (strict: one reason each); records the SGLang release judged."""
    H, Ht, L = d.hidden_size, d.effective_target_hidden_size, d.num_hidden_layers
    qk = sorted(c for c in canon if c.endswith(("q_norm.weight", "k_norm.weight")))
    bias = sorted(c for c in canon if c.endswith((".q_proj.bias", ".k_proj.bias", ".v_proj.bias")))
    refuse: list[str] = []
    if qk and to in ("sglang", "eagle"):
        refuse.append(f"{qk[0]} (Qwen3-style q/k norms): {to} has no such parameter and would drop it")
    if bias and to in ("sglang",):
        refuse.append(f"{bias[0]}: SGLang's qkv_proj has no bias")
    if to == "sglang":
        from kit.sglang.loader import first_release, rules_for

        r = rules_for(sglang_version)
        f, ver = r.features, f"sglang {r.version}"
        plan.provenance["sglang_version"] = r.version
        if not f.get("has_eagle3"):
            refuse.append(f"{ver} has no EAGLE-3 support")
        if f.get("single_layer_only") and L != 1:
            since = first_release("single_layer_only", False)
            refuse.append(f"{L} layers: {ver} loads single-layer drafts only ({since}+ loads more)")
        if any(c.startswith("fc_norm.") for c in canon) and not f.get("fc_norm"):
            refuse.append(f"fc_norm.* weights: {ver} has no fc_norm ({first_release('fc_norm')}+)")
        if "input_norm.weight" in canon and not f.get("norm_before_fc"):
            refuse.append(f"input_norm.weight (norm_before_fc): {ver} has none ({first_release('norm_before_fc')}+)")
        if k != 3 and not f.get("num_aux_configurable"):
            refuse.append(f"{k} aux states: {ver} hard-codes 3")
    if to == "eagle":
        if L != 1 or any(c.startswith(("fc_norm.", "input_norm.")) for c in canon) or k != 3:
            refuse.append("official EAGLE code has one layer, k=3 and no fc_norm/input_norm")
    if to == "speculators" and Ht not in (None, H):
        refuse.append(f"target_hidden_size {Ht} != hidden_size {H}: speculators sizes fc by the draft hidden size")
    if to == "speculators" and not target:
        # Eagle3DraftModel.from_pretrained always reads the verifier's config: a null path fails
        refuse.append("speculators needs the verifier (target) model path in its config: pass --target TARGET_DIR")
    return refuse


def _plan_vocab_maps(src: Path, canon: dict[str, TensorInfo], plan: Plan, d) -> list[int] | None:
    """d2t/t2d: derive the missing one from the other (they determine each other); the kept target ids."""
    from kit.checkpoint.vocab import _bools, _ints

    V, Vd, to = d.vocab_size, d.draft_vocab_or_target, plan.to
    d2t_t, t2d_t = canon.pop("d2t", None), canon.pop("t2d", None)
    hot: list[int] | None = None
    if d2t_t is not None:
        hot = [i + x for i, x in enumerate(_ints(d2t_t))]
    elif t2d_t is not None:
        hot = [i for i, b in enumerate(_bools(t2d_t)) if b]
    reduced = Vd is not None and V is not None and Vd != V
    if reduced and hot is None:
        raise KitInputError(
            f"{src}: draft vocab {Vd} < target vocab {V} but no d2t/t2d: the draft ids cannot be mapped"
        )
    if (reduced or to != "speculators") and hot is not None:
        origin = d2t_t.name if d2t_t is not None else "derived from t2d"
        d2t = lambda h=hot: [array("q", [x - i for i, x in enumerate(h)]).tobytes()]
        plan.tensors["d2t"] = Source("I64", (len(hot),), d2t, origin)
        mask = bytearray(V or (max(hot) + 1))
        for x in hot:
            mask[x] = 1
        origin = t2d_t.name if t2d_t is not None else "derived from d2t"
        plan.tensors["t2d"] = Source("BOOL", (len(mask),), lambda m=bytes(mask): [m], origin)
    elif not reduced and to == "speculators" and hot is not None:
        if hot != list(range(len(hot))):
            raise KitInputError(f"{src}: draft_vocab_size == vocab_size but d2t is not the identity")
        plan.dropped += [
            (t.name, "identity map: speculators stores none when Vd == V") for t in (d2t_t, t2d_t) if t is not None
        ]
    return hot


def _plan_embed_and_head(
    src: Path, cfg: HFConfig, canon: dict[str, TensorInfo], plan: Plan, target, d, hot: list[int] | None
) -> bool:
    """embed_tokens / lm_head, required per destination; --target may supply them. Returns whether SGLang takes
    the target's lm_head (`draft_vocab_size: null`)."""
    H, Ht, V, to = d.hidden_size, d.effective_target_hidden_size, d.vocab_size, plan.to
    head_from_target = to == "sglang" and "draft_vocab_size" in cfg and cfg.get("draft_vocab_size") is None
    need_embed = to == "speculators" or (to == "sglang" and Ht not in (None, H))
    need_head = not head_from_target
    needs = {"embed_tokens.weight": need_embed, "lm_head.weight": need_head}
    miss = [n for n, need in needs.items() if need and n not in canon]
    if miss and not target:
        what = f"the destination needs {', '.join(miss)}, which the draft lacks"
        raise KitInputError(f"{src} -> {to}: {what}; name its source with --target TARGET_MODEL_DIR")
    temb, thead = _target_tensors(target) if miss else (None, None)
    if "embed_tokens.weight" in miss:
        if temb is None or tuple(temb.shape) != (V, H):
            raise KitInputError(f"--target {target}: no embed_tokens of shape [{V}, {H}]")
        canon["embed_tokens.weight"] = temb
        plan.notes.append(CONFIG(f"embed_tokens copied from target {temb.name}", {"target": target}, "info"))
    if "lm_head.weight" in miss:
        if thead is None or tuple(thead.shape[:2]) != (V, H):
            raise KitInputError(f"--target {target}: no lm_head of shape [{V}, {H}]")
        rows = hot if hot is not None else list(range(V))
        plan.tensors["lm_head.weight"] = _rows(thead, rows, f"target:{thead.name} rows t2d")
        plan.notes.append(CONFIG(f"lm_head built from target {thead.name} ({len(rows)} kept rows)", severity="info"))
    return head_from_target


# the tensors every layer of a Llama-class EAGLE-3 draft has
_LAYER_TENSORS = [f"self_attn.{p}_proj.weight" for p in "qkvo"]
_LAYER_TENSORS += [f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
_LAYER_TENSORS += ["input_layernorm.weight", "post_attention_layernorm.weight"]


def _check_required(src: Path, canon: dict[str, TensorInfo], L: int | None) -> None:
    layers = [f"layers.{i}.{n}" for i in range(L or 1) for n in _LAYER_TENSORS]
    missing = [n for n in ["fc.weight", "norm.weight", *layers, "layers.0.hidden_norm.weight"] if n not in canon]
    if missing:
        raise KitInputError(f"{src}: missing {len(missing)} required tensor(s), e.g. {missing[0]}")


def _plan_weights(canon: dict[str, TensorInfo], plan: Plan, L: int | None, head_from_target: bool) -> None:
    """Every remaining canonical tensor under the destination's name (or dropped, with the reason)."""
    to = plan.to
    if head_from_target and "lm_head.weight" in canon:
        head = canon.pop("lm_head.weight").name
        plan.dropped.append((head, "draft_vocab_size: null — SGLang takes the target's lm_head"))
    # an embed_tokens SGLang does not need is still written: it replaces it with the target's, others use it
    for c, t in canon.items():
        later_layer = c.startswith("layers.") and not c.startswith("layers.0.")
        if to != "sglang" and later_layer and c.endswith("hidden_norm.weight"):
            plan.dropped.append((t.name, "layers>=1 hidden_norm: unused outside SGLang"))
        else:
            plan.tensors[from_canonical(c, to, L or 1)] = Source(t.dtype, t.shape, lambda t=t: iter_bytes(t), t.name)


def _plan_fc_bias(fc: TensorInfo, plan: Plan, sglang_version: str | None) -> None:
    from kit.sglang.loader import rules_for

    if rules_for(sglang_version).features.get("fc_default_bias"):
        # those releases give fc torch's default (random) bias; zeros reproduce a bias-free fc
        nb = DTYPE_BITS[fc.dtype] * fc.shape[0] // 8
        plan.tensors["fc.bias"] = Source(fc.dtype, (fc.shape[0],), lambda n=nb: [bytes(n)], "zeros (bias-free fc)")


def _output_config(cfg: HFConfig, lay, plan: Plan, target, k: int, H: int | None) -> dict[str, Any]:
    """The destination's config.json: through SGLang's flat form, then into the destination's."""
    to = plan.to
    if lay.name == "speculators":
        scfg = speculators_to_sglang_config(cfg, k)
        if cfg.get("norm_before_residual"):
            title = "source trained with norm_before_residual=true; SGLang/EAGLE ignore it"
            fix = "expect lower acceptance outside vLLM, or retrain with it off"
            plan.notes.append(CONFIG(title, severity="warning", fix=fix))
    else:
        scfg = {**cfg, "architectures": ["LlamaForCausalLMEagle3"]}
        scfg.setdefault("num_aux_hidden_states", k)
        if "target_hidden_size" in scfg and scfg["target_hidden_size"] in (None, H):
            scfg.pop("target_hidden_size")
    if to == "sglang":
        return scfg
    if to == "speculators":
        from kit.models import resolve_target

        tdir = resolve_target(target)
        tarch = json.loads((tdir / "config.json").read_text()).get("architectures") or ["LlamaForCausalLM"]
        return sglang_to_speculators_config(HFConfig.of(scfg), str(tdir.resolve()), tarch)
    return sglang_to_eagle_config(HFConfig.of(scfg))


def _record_provenance(plan: Plan, cfg: HFConfig, src: Path, lay, target) -> None:
    declared = read_draft_config(cfg)
    ids = declared.top_level_aux_layer_ids or declared.aux_layer_ids
    plan.provenance.update(kit_version=__version__, source=str(src.resolve()), source_layout=lay.name,
                           source_layout_evidence=lay.evidence, source_aux_layer_id_convention=lay.name,
                           aux_layer_ids=ids, destination_layout=plan.to, target=target, dropped=plan.dropped,
                           created_unix=int(time.time()))  # fmt: skip


def _write_aux(config: dict[str, Any], to: str, aux: dict[str, Any]) -> None:
    """Put the destination's aux ids where its stack reads them, and the source record beside them."""
    ids = aux["ids"]
    if to == "speculators":
        config[AUX_IDS] = ids
    elif to == "sglang":
        ec = config.setdefault("eagle_config", {"use_aux_hidden_state": True})
        if ids:
            ec[AUX_IDS] = list(ids)
        else:
            ec.pop(AUX_IDS, None)
        config.pop(AUX_IDS, None)
    config[AUX_SOURCE_KEY] = aux["record"]


def _safe_paths(src: Path, dst: Path, force: bool) -> None:
    s, d = src.resolve(), dst.resolve()
    if d == s or d.is_relative_to(s):
        raise KitInputError(f"{dst}: DST lies inside SRC {src}; choose a directory outside it")
    if s.is_relative_to(d):
        raise KitInputError(f"{dst}: SRC lies inside DST; replacing DST would delete the source")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())) and not force:
        raise KitInputError(f"{dst}: exists and is not empty (use --force to replace it)")


def verify_output(out: Path, plan: Plan, hashes: dict[str, str]) -> None:
    """Re-read the written checkpoint: same keys, dtypes, shapes, and bytes (sha256)."""
    ck = read_checkpoint(out / "model.safetensors")
    if set(ck.tensors) != set(plan.tensors):
        raise KitInputError(f"{out}: verification failed: written keys differ from the plan")
    for n, s in plan.tensors.items():
        t = ck.tensors[n]
        if t.dtype != s.dtype or tuple(t.shape) != tuple(s.shape) or sha256_of(t) != hashes[n]:
            raise KitInputError(f"{out}: verification failed for {n}")


def convert(
    src: str | Path,
    dst: str | Path,
    to: str = "sglang",
    target: str | None = None,
    sglang_version: str | None = None,
    force: bool = False,
) -> Report:
    """Convert SRC into DST (see module doc). Returns a report; raises KitInputError when refused."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise KitInputError(f"{src}: give the draft directory (config.json + safetensors)")
    _safe_paths(src, dst, force)
    plan = plan_conversion(src, to, target, sglang_version)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.kit-"))
    try:
        entries = [WriteEntry(n, s.dtype, tuple(s.shape), s.chunks) for n, s in plan.tensors.items()]
        hashes = write_stream(tmp / "model.safetensors", entries, {"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(plan.config, indent=2) + "\n")
        tensors = {n: {"sha256": hashes[n], "from": s.origin} for n, s in plan.tensors.items()}
        (tmp / PROVENANCE).write_text(json.dumps(dict(plan.provenance, tensors=tensors), indent=2, default=str) + "\n")
        verify_output(tmp, plan, hashes)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
        rep = Report(list(plan.notes))
        if to == "sglang":
            from kit.checkpoint.inspect import inspect, simulation_findings

            ins = inspect(tmp, sglang_version)
            bad = [f for f in simulation_findings(ins.simulation, ins.layout) if f.severity == "error"]
            if bad:
                raise KitInputError(f"{dst}: the converted draft would still not load cleanly: {bad[0].title}")
        if dst.exists():
            old = dst.with_name(f".{dst.name}.kit-old-{int(time.time())}")
            dst.rename(old)
            tmp.rename(dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep.extend(KEYS_DROPPED(f"not written: {key} ({why})", severity="info") for key, why in plan.dropped)
    rep.facts.update(dst=str(dst), to=to, tensors=len(plan.tensors), source_layout=plan.provenance["source_layout"])
    return rep


def convert_in_memory(src: str | Path, sglang_version: str | None = None) -> tuple[dict, dict]:
    """(SGLang config, {SGLang key: torch.Tensor}) for a draft in any layout — for kit.draft."""
    plan = plan_conversion(src, "sglang", None, sglang_version, require_target=False)
    return plan.config, {n: bytes_to_torch(b"".join(s.chunks()), s.dtype, s.shape) for n, s in plan.tensors.items()}


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, ConvertConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(ConvertConfig, args)
    from kit.checkpoint.hub import download, resolve

    # a hub id: the draft downloaded (its tensors are rewritten), the target resolved from its headers
    src = download(cfg.src, cfg.revision, None, "a draft directory") if cfg.src else None
    target = None
    if cfg.target and cfg.target != "embedded":
        target = resolve(cfg.target, cfg.target_revision, "--target", "a model directory or a config.json")
    for m in (src, target):
        if m is not None and m.repo_id and not cfg.json:
            print(f"{m.name}: {m.source}")
    src_path, target_path = src.path if src else cfg.src, str(target.path) if target else cfg.target
    try:
        rep = convert(src_path, cfg.dst, cfg.to, target_path, cfg.sglang_version, cfg.force)
    except CheckpointError as e:
        rep = corrupt_report(e)
        print(rep.to_json() if cfg.json else f"kit convert: error: {e}")
        return 2
    if not cfg.json:
        print(f"wrote {rep.facts['dst']} ({rep.facts['tensors']} tensors, {rep.facts['source_layout']} -> {cfg.to})")
    return emit(rep, cfg.json)
