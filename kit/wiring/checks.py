"""Static EAGLE-3 wiring checks: configs + a launch command -> findings (no weights, no torch).

Codes (docs/findings.md): aux.algorithm, aux.layer_ids_ignored, aux.layer_shift, aux.fc_width, aux.hidden_width,
aux.target_capture; from `draft_target_checks` (kit.sglang.loader rules): draft.nextn_zero, draft.context_short,
draft.mla_geometry, draft.rope; from `draft_dtype_checks` (kit.sglang.dtype rules): draft.dtype. Used by
`kit doctor` and notebook 03; kit.wiring.plan gives the `Wiring` SGLang would give the draft.

    from kit.wiring.checks import wiring_checks
    findings = wiring_checks(target_cfg, draft_cfg, argv, version=None, draft_dir=None)  # None: the default release
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kit.checkpoint.aux_ids import top_level_points
from kit.checkpoint.convert import LAYER_SHIFT
from kit.checkpoint.hf_config import target_facts
from kit.findings import Code, Finding, finding_list
from kit.hf import HFConfig
from kit.sglang.capture import capture_rule, ids_for_points, recorded_release, sglang_points
from kit.sglang.draft_config import read_draft_config
from kit.sglang.flags import flag_value
from kit.wiring.aux import ALGORITHM, fc_in_features, is_eagle3_draft, launch_algorithm, read_ids, training_points
from kit.wiring.plan import serving_points

DTYPE = Code(
    "draft.dtype",
    "ckpt/draft: notebook 02",
    "error",
    "target and draft run different dtypes: SGLang resolves the one `--dtype` (default `auto`) against each model's "
    "config (`model_config.py` `_get_and_verify_dtype`; the draft worker's ModelConfig gets the same "
    "`server_args.dtype`): `auto` keeps a 16-bit config dtype and runs a float32 config, or one naming none, as "
    "float16 (Gemma: bfloat16). Nothing casts between them: the draft takes the target's embedding and hidden states "
    "as they are (`torch.cat([embeds, hidden_states])`), so its first forward, the CUDA-graph capture at startup, "
    "raises `expected mat1 and mat2 to have the same dtype` (real SGLang 0.5.17 on an H200: the kit's float32-config "
    "embedded target, the bfloat16 demo draft, no `--dtype`). Not reported where ServerArgs forces bfloat16 on both "
    "(GptOss MXFP4, MistralLarge3, Pixtral targets). Rule per release: `kit.sglang.dtype.DTYPE_RULES`",
    "`--dtype bfloat16` (or the dtype the title names) on the launch, or write that `torch_dtype` into the other "
    "model's config.json",
)
LAYER_IDS_IGNORED = Code(
    "aux.layer_ids_ignored",
    "aux/probe/oracle: notebook 03",
    "error / warning / info",
    "aux layer ids sit at the top level of the draft config (speculators style); SGLang reads only "
    "`eagle_config.eagle_aux_hidden_state_layer_ids` and captures its default points. The ids are converted first "
    "(kit.checkpoint.aux_ids.top_level_points): info (harmless) when as speculators ids (point = id, vLLM's hidden "
    "state before layer id) they are SGLang's default points; warning when they are only as the output-convention ids "
    "`speculators convert` copies from a SGLang/SpecForge/ModelOpt head (point = id + 1); error otherwise",
    "move the ids under `eagle_config`, in SGLang's convention for the target class (`kit convert`)",
)
FC_WIDTH = Code(
    "aux.fc_width",
    "aux/probe/oracle: notebook 03",
    "error / warning",
    "`fc.weight` input width ≠ k × target hidden size, or `num_aux_hidden_states` ≠ number of ids (error); k × Ht "
    "equals H so the fc gate never fires (warning)",
    "make k, `target_hidden_size` and `fc.weight` agree",
)
HIDDEN_WIDTH = Code(
    "aux.hidden_width",
    "aux/probe/oracle: notebook 03",
    "error",
    "the target's hidden size differs from the draft's `target_hidden_size` (or hidden size): the draft was built for "
    "another target; SGLang does not start (fc's matmul fails in the first draft forward during startup: `mat1 and "
    "mat2 shapes cannot be multiplied`, real SGLang 0.5.17)",
    "use the matching target or fix `target_hidden_size`",
)
NEXTN_ZERO = Code(
    "draft.nextn_zero",
    "aux/probe/oracle: notebook 03",
    "error",
    "the draft config says `num_nextn_predict_layers: 0` (ModelOpt's Kimi/DeepSeek MLA exports, e.g. "
    "nvidia/Kimi-K2.5-Thinking-Eagle3): sglang 0.4.10-0.5.12 test `is not None`, take the MTP branch and size the "
    "draft KV cache at zero layers; the first draft forward raises `IndexError` in `set_mla_kv_buffer` "
    "(`model_runner.py` `model_has_mtp_layers = ... is not None`; fixed in 0.5.13 by `_nnpl > 0`, sglang PR #26726)",
    "delete the key from the draft config, or use sglang >= 0.5.13",
)
CONTEXT_SHORT = Code(
    "draft.context_short",
    "aux/probe/oracle: notebook 03",
    "error",
    "the served context (`--context-length`, else the target's derived context, which SGLang hands to the draft's "
    "ModelConfig: `draft_worker_common.py` `context_length=target_model_config.context_len`) exceeds the draft's "
    'derived context (`get_context_length`: `max_position_embeddings` x rope factor): startup `ValueError` ("To allow '
    'overriding this maximum ...", `model_config.py` `_derive_context_length`) unless '
    "`SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`; with it, a warning: SGLang rewrites the draft's "
    "`max_position_embeddings` and the draft runs past its training range (acceptance drops, sglang #6783); error "
    "again in releases that keep the draft's rotary cache short (illegal memory access, sglang #3574 / PR #9388)",
    "`--context-length` <= the draft's, or a draft trained for the longer context",
)
MLA_GEOMETRY = Code(
    "draft.mla_geometry",
    "aux/probe/oracle: notebook 03",
    "warning",
    "an MLA draft (`Eagle3DeepseekV2ForCausalLM`) whose "
    "`kv_lora_rank`/`q_lora_rank`/`qk_rope_head_dim`/`qk_nope_head_dim`/`v_head_dim` differ from its MLA target's (an "
    "MLA draft for a non-MLA target is a design, e.g. TorchSpec's Qwen3 MLA draft, not compared): SGLang gives the "
    "draft its own MLA KV pool from the draft config (`model_config.py` MLA branch lists "
    "`Eagle3DeepseekV2ForCausalLM`), so it loads; the config was not taken from this target (tensor shapes: "
    "`draft.shape`)",
    "check the draft was trained for this target",
)
ROPE = Code(
    "draft.rope",
    "aux/probe/oracle: notebook 03",
    "warning",
    "an MLA draft's `rope_theta`/`rope_scaling` differ from its MLA target's: `kimi_k25_eagle3.py` builds the draft "
    "attention from the draft config, and YaRN's mscale also rescales the MLA softmax (`deepseek_v2.py` "
    "`compute_mla_mscale_scaling`)",
    "give the draft config the rope it was trained with (usually the target's)",
)
TARGET_CAPTURE = Code(
    "aux.target_capture",
    "aux/probe/oracle: notebook 03",
    "error",
    "the target class cannot capture aux states in that SGLang release (no `set_eagle3_layers_to_capture`, derived "
    "from its source); or it has the setter (own or inherited) but the setter writes `self.model.layers_to_capture` "
    "while its decoder model captures only layers marked `_is_layer_to_capture` (marked only by that model's own "
    "setter), so the forward returns a bare tensor where it unpacks `(hidden, aux)`: startup crash (per release: "
    "`bare_forward` in capture_rules.json, e.g. `MiniMaxM3SparseForCausalLM` in 0.5.16-0.5.17, 0.5.18 marks the layers "
    "in the setter; Qwen3.5's VL wrappers in 0.5.11-0.5.21, whose decoder model comes from the `language_model_cls` "
    "default); or the forward that runs unpacks the aux states but calls the logits processor without them, so the "
    "draft gets the final hidden state alone, accept length near 1 (`aux_dropped`: "
    "`Qwen2_5_VLForConditionalGeneration` in 0.5.5.post3; SpecForge issue 310, sglang PR 13904); or the ids map to "
    "points the class never produces (≥ L outside GptOss)",
    "use a release/class that captures, or ids inside the target's layers",
)


class _Facts:
    """What every wiring rule reads, derived once from the configs, the launch and the release."""

    def __init__(self, target_cfg, draft_cfg, argv, version, draft_dir, trained_with):
        self.draft_cfg, self.argv, self.version = draft_cfg, argv, version
        self.draft_dir, self.trained_with = draft_dir, trained_with
        d = self.draft = read_draft_config(draft_cfg)  # the same config in its one typed form
        self.use_aux = d.use_aux_hidden_state  # eagle_config.use_aux_hidden_state as declared
        # the draft's hidden size, the target hidden size it expects, the aux states it fuses, fc's input width k x Ht
        self.H, self.Ht, self.k = d.hidden_size, d.effective_target_hidden_size, d.num_aux
        self.fed = self.k * self.Ht if self.Ht and self.k else None
        self.alg = launch_algorithm(argv)  # the launch's --speculative-algorithm
        self.tf = target_facts(target_cfg)
        self.L = self.tf.num_layers  # the target's layers
        self.nested = read_ids("sglang", draft_cfg)[0]  # eagle_config ids (the ones SGLang reads)
        self.top = d.top_level_aux_layer_ids  # top-level ids (speculators' place)
        # the points SGLang captures for this launch, and the release's capture rule for the target class
        self.srv, self.rule = serving_points(draft_cfg, self.tf, version) if target_cfg else (None, None)
        self.has_target = target_cfg is not None
        self.readings: dict = {}  # top-level ids read in each convention (kit.checkpoint.aux_ids)
        self.default = None  # SGLang's default points
        self.copied_matches = False  # the top-level ids, read as ids speculators convert copied, mean the default
        if self.top and not self.nested:
            self.readings = top_level_points(self.top, self.L) if self.L else {}
            self.default = sglang_points(None, self.L, self.rule) if (self.L and self.rule) else None
            same = self.default is not None and self.readings["speculators"] == self.default
            self.copied_matches = self.default is not None and not same and self.readings["copied"] == self.default

    @property
    def captures(self) -> bool:
        """The launch asks SGLang to capture aux states (EAGLE3, or no algorithm given) for a known target."""
        return self.has_target and self.alg in (None, "EAGLE3")


def _algorithm(f: _Facts) -> Iterator[Finding]:
    """`aux.algorithm`: EAGLE (not EAGLE3) or use_aux_hidden_state false: fc is skipped."""
    if f.alg == "EAGLE":
        yield ALGORITHM(
            f"EAGLE-3 draft launched with --speculative-algorithm {flag_value(f.argv or [], '--speculative-algorithm')}: "
            "fc is skipped, accept length 1.00",
            evidence={
                "algorithm": f.alg,
                "draft_architecture": (f.draft_cfg.get("architectures") or [None])[0],
                "state_fed": f.Ht,
                "fc_expects": f.fed,
                "embed_width": f.H,
            },
            fix="launch with --speculative-algorithm EAGLE3 (only EAGLE3 turns on aux hidden-state capture)",
        )
    elif f.alg == "EAGLE3" and f.use_aux is False:
        yield ALGORITHM(
            "eagle_config.use_aux_hidden_state is false: the target sends one state, fc is skipped",
            evidence={"use_aux_hidden_state": False, "fc_expects": f.fed, "embed_width": f.H},
            fix="set eagle_config.use_aux_hidden_state to true (or remove it) for an EAGLE-3 draft",
        )


def _top_level_ids(f: _Facts) -> Iterator[Finding]:
    """`aux.layer_ids_ignored`: ids at the top level, which SGLang never reads; graded by what they mean in each
    convention against SGLang's default points (`kit.checkpoint.aux_ids.top_level_points`)."""
    if not (f.top and not f.nested):
        return
    default, readings = f.default, f.readings
    sev, why = "error", ""
    if default is not None and readings["speculators"] == default:
        sev = "info"
        why = (
            f"; harmless here: as speculators ids (point = id) they mean SGLang's default points {default}, so "
            "SGLang serves this draft exactly as if it read them"
        )
    elif f.copied_matches:
        sev = "warning"
        why = (
            f"; as speculators-trained ids (point = id) they mean points {readings['speculators']}, not the "
            f"{default} SGLang captures; as ids `speculators convert` copied from a SGLang/SpecForge/ModelOpt head "
            f"(output of layer id) they mean exactly {default}: check which trained the draft"
        )
    elif default is not None:
        why = (
            f"; they mean points {readings['speculators']} as speculators ids and {readings.get('copied')} as "
            f"copied output-convention ids, SGLang captures {default}"
        )
    yield LAYER_IDS_IGNORED(
        "aux layer ids are at the top level; SGLang reads only eagle_config and uses its default" + why,
        evidence={
            "top_level_ids": f.top,
            "sglang_reads": "eagle_config.eagle_aux_hidden_state_layer_ids",
            "sglang_default_points": default,
            "points_meant_by_ids": readings.get("speculators"),
            "points_if_copied_by_speculators_convert": readings.get("copied"),
        },
        severity=sev,
        fix="put the ids under eagle_config.eagle_aux_hidden_state_layer_ids in SGLang's convention "
        "(python -m kit convert does this)",
    )


def _layer_shift(f: _Facts) -> Iterator[Finding]:
    """`aux.layer_shift`: the points SGLang captures are not the ones the draft was trained on."""
    if not (f.L and f.srv is not None):
        return
    trained = training_points(f.draft_cfg, f.L, f.tf.architecture, f.version, f.draft_dir, f.trained_with)
    if not trained or list(trained[0]) == list(f.srv):
        return
    ok_ids = ids_for_points(trained[0], f.L, f.rule)
    # known only from a speculators config's top-level ids that, read as copied ones, mean what SGLang serves
    unsure = f.copied_matches and trained[1].startswith("speculators config")
    yield LAYER_SHIFT(
        f"SGLang captures points {f.srv}, the draft was trained on {list(trained[0])}"
        + (" if speculators trained it; if speculators convert copied its ids, on exactly these" if unsure else ""),
        evidence={
            "serving_points": f.srv,
            "training_points": list(trained[0]),
            "known_from": trained[1],
            "target_class": f.tf.architecture,
            "sglang_rule": f"{f.rule['default']}; {f.rule['explicit']}",
            "rule_from_sglang": f.rule["version"],
            "ids_in_eagle_config": f.nested,
        },
        severity="warning" if unsure else "error",
        fix=f"write eagle_config.eagle_aux_hidden_state_layer_ids = {ok_ids}"
        if ok_ids
        else "these points cannot be expressed for this target class in this SGLang; retrain on points it can capture",
    )


def _points_out_of_range(f: _Facts) -> Iterator[Finding]:
    """`aux.target_capture`: capture points the target class never produces."""
    if not (f.L and f.srv is not None):
        return
    L, rule = f.L, f.rule
    bad = [p for p in f.srv if p < 0 or p > L or (p == L and rule.get("explicit") != "as_is_if_max_is_L")]
    if bad:
        yield TARGET_CAPTURE(
            f"capture points {bad} are never produced by {f.tf.architecture} ({L} layers)",
            evidence={"serving_points": f.srv, "num_layers": L},
            fix="use ids inside the target's layers (the final state is reachable only on GptOss)",
        )


def _class_cannot_capture(f: _Facts) -> Iterator[Finding]:
    """`aux.target_capture`: the release's target class has no `set_eagle3_layers_to_capture`."""
    arch = f.tf.architecture
    if f.captures and arch and capture_rule(arch, f.version) is None:
        v = recorded_release(f.version).checked
        yield TARGET_CAPTURE(
            f"{arch} cannot capture aux hidden states in SGLang {v}",
            evidence={
                "target_architecture": arch,
                "sglang_version": v,
                "derived_from": "srt/models/*.py set_eagle3_layers_to_capture (kit/sglang/capture_rules.json)",
            },
            fix="serve this target with an SGLang release whose model class implements set_eagle3_layers_to_capture",
        )


def _forward_drops_capture(f: _Facts) -> Iterator[Finding]:
    """`aux.target_capture`: the forward that runs never collects the aux states (`bare_forward`: startup crash),
    or collects them and drops them before the logits processor (`aux_dropped`: accept length near 1)."""
    rule, arch = f.rule or {}, f.tf.architecture
    if not f.captures:
        return
    if how := rule.get("bare_forward"):
        title = (
            f"does not start: {arch} sets {how['writes']}, but {how['forward_of']}.forward captures only layers "
            f"marked {how['reads']}, so it returns a bare tensor where the forward unpacks (hidden, aux)"
        )
        source = "the setter, the decoder model's forward"
        fix = (
            "whose model forward reads layers_to_capture (kit doctor --sglang-version), or use a target class that "
            "captures"
        )
    elif how := rule.get("aux_dropped"):
        title = (
            f"captures {arch}'s aux states but drops them: {how['forward_of']}.forward unpacks {how['unpacks']} and "
            f"calls {how['not_passed_to']} without it, so the draft gets the final hidden state alone (accept length "
            "near 1)"
        )
        source = "the forward that runs, its logits-processor call"
        fix = "whose forward passes the aux states on (kit doctor --sglang-version)"
    else:
        return
    yield TARGET_CAPTURE(
        f"SGLang {rule['version']} {title}",
        evidence={
            "target_architecture": arch,
            "sglang_version": rule["version"],
            **how,
            "derived_from": f"srt/models/*.py: {source} (capture_rules.json)",
        },
        fix=f"serve this target with an SGLang release {fix}",
    )


def _fc_width(f: _Facts) -> Iterator[Finding]:
    """`aux.fc_width`: fc's weight, the id count and k x target hidden disagree, or fc's gate never fires."""
    fc_in = fc_in_features(f.draft_dir)
    k_ids = len(f.nested) if f.nested else None
    if fc_in is not None and f.fed is not None and fc_in != f.fed:
        yield FC_WIDTH(
            f"fc input width {fc_in} != k x target hidden = {f.k} x {f.Ht}",
            evidence={"fc_in_features": fc_in, "k": f.k, "target_hidden_size": f.Ht},
            fix="make num_aux_hidden_states / the eagle_config id count and target_hidden_size match fc.weight",
        )
    n_aux = f.draft.num_aux_hidden_states
    if n_aux and k_ids and n_aux != k_ids:
        yield FC_WIDTH(
            f"num_aux_hidden_states {n_aux} != {k_ids} layer ids",
            evidence={"num_aux_hidden_states": n_aux, "ids": f.nested},
            fix="list exactly num_aux_hidden_states ids (fc width and captured states must agree)",
        )
    if f.fed is not None and f.H and f.fed == f.H:
        yield FC_WIDTH(
            f"k x target hidden = {f.fed} equals the draft hidden size: SGLang's fc gate never fires",
            evidence={"k": f.k, "target_hidden_size": f.Ht, "hidden_size": f.H},
            severity="warning",
            fix="SGLang applies fc only when the incoming width differs from H; change k or H",
        )


def _hidden_width(f: _Facts) -> Iterator[Finding]:
    """`aux.hidden_width`: the target's hidden size is not the one the draft was built for."""
    th, Ht = f.tf.hidden_size, f.Ht
    if th and Ht and th != Ht:
        yield HIDDEN_WIDTH(
            f"SGLang will not start: target hidden size {th} != draft target_hidden_size "
            f"{Ht} (fc's matmul fails in the first draft forward)",
            evidence={"target_hidden_size_of_target": th, "draft_target_hidden_size": Ht, "draft_hidden_size": f.H},
            fix="this draft was built for another target; set target_hidden_size or use the right target",
        )


# the wiring rules (generators of findings), in report order; each reads the same derived facts
WIRING_RULES = (
    _algorithm,
    _top_level_ids,
    _layer_shift,
    _points_out_of_range,
    _class_cannot_capture,
    _forward_drops_capture,
    _fc_width,
    _hidden_width,
)


def wiring_checks(
    target_cfg: HFConfig | None,
    draft_cfg: HFConfig,
    argv: list[str] | None = None,
    version: str | None = None,
    draft_dir=None,
    trained_with: str | None = None,
) -> list[Finding]:
    """Every wiring rule's findings for an EAGLE-3 draft (nothing for another draft)."""
    if not is_eagle3_draft(draft_cfg):
        return []
    facts = _Facts(target_cfg, draft_cfg, argv, version, draft_dir, trained_with)
    return [finding for rule in WIRING_RULES for finding in rule(facts)]


MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
ROPE_FIELDS = ("factor", "original_max_position_embeddings", "mscale", "mscale_all_dim", "beta_fast", "beta_slow")


def _rope(c: dict[str, Any]) -> dict[str, Any]:
    """The rope an MLA layer gets from a config, as Eagle3MLADecoderLayer reads it: `rope_parameters`
    (transformers v5) when set, its rope_type "default" meaning no scaling; else rope_theta/rope_scaling."""
    rp = c.get("rope_parameters")
    if rp:
        theta, rs = rp.get("rope_theta", 10000), (rp if rp.get("rope_type") != "default" else {})
    else:
        theta, rs = c.get("rope_theta"), c.get("rope_scaling") or {}
    out = {"rope_theta": theta, "rope_type": rs.get("rope_type") or rs.get("type")}
    out.update({k: rs.get(k) for k in ROPE_FIELDS})
    return out


@finding_list
def draft_target_checks(
    target_cfg: HFConfig | None,
    draft_cfg: HFConfig,
    env: dict[str, str] | None = None,
    argv: list[str] | None = None,
    version: str | None = None,
) -> Iterator[Finding]:
    """Draft config fields that SGLang reads at startup, against the target and the served context (a speculators
    draft's nested fields read as if flattened, as its `draft.config` finding says)."""
    from kit.checkpoint.hf_config import declared_draft, text_config
    from kit.sglang import loader

    rt = loader.runtime_rules(version)
    f, ev = rt.features, rt.evidence
    ver = f"sglang {rt.version}" + ("" if rt.exact else f" (rules of {rt.checked})")
    cls, _ = loader.resolve_draft_class(draft_cfg, version)
    d = declared_draft(draft_cfg).layer
    t = text_config(target_cfg) if target_cfg else None

    nnpl_zero = "nnpl_zero_sizes_draft_kv_at_zero"
    if d.get("num_nextn_predict_layers") == 0 and f.get(nnpl_zero):
        fixed = loader.first_release(nnpl_zero, False, "runtime", after=rt.checked)
        yield NEXTN_ZERO(
            f"num_nextn_predict_layers: 0 in the draft config: {ver} sizes the draft KV cache at zero "
            "layers and the first draft forward raises IndexError",
            evidence={"num_nextn_predict_layers": 0, "sglang": ver, "source": ev[nnpl_zero]},
            fix="delete num_nextn_predict_layers from the draft config.json"
            + (f" (or use sglang >= {fixed}, which treats 0 as absent)" if fixed else ""),
        )

    flag = flag_value(argv, "--context-length", version) if argv else None
    served, origin = None, None
    by_target = f.get("draft_context_is_target_context")
    if flag is not None and str(flag).isdigit():
        served, origin = int(flag), "--context-length"
    elif t is not None and by_target and any(t.get(k) for k in loader.context_keys(version)):
        # (a target config that names no context length is taken as partial: SGLang's 2048 default is not assumed)
        served, origin = loader.derived_context_length(t, version), "the target's derived context length"
    if served is not None and by_target and served > (drafted := loader.derived_context_length(d, version)):
        overwrite = ((env or {}).get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") or "").strip().lower()
        # SGLang's get_bool_env_var: "1" or "true", any case
        allowed = f.get("longer_context_allowed_by_default") or overwrite in ("1", "true")
        if not allowed and f.get("longer_context_raises"):
            sev, source = "error", "longer_context_raises"
            what = f"{ver} raises ValueError at startup (the draft's ModelConfig gets the target's context length)"
        elif f.get("draft_context_override_rewrites_draft"):
            sev, source = "warning", "draft_context_override_rewrites_draft"
            what = (
                f"SGLang overrides the draft's max_position_embeddings; past position {drafted} the draft runs "
                "outside its training and acceptance drops"
            )
        else:
            sev, source = "error", None
            what = (
                f"{ver} keeps the draft's rotary cache at {drafted} positions; longer requests fault in the draft "
                "(illegal memory access)"
            )
        yield CONTEXT_SHORT(
            f"served context {served} > the draft's {drafted}: {what}",
            evidence={
                "served_context": served,
                "from": origin,
                "draft_context": drafted,
                "draft_max_position_embeddings": d.get("max_position_embeddings"),
                "sglang": ver,
                **({"source": ev.get(source)} if source else {}),
            },
            severity=sev,
            fix=f"serve with --context-length {drafted} or less, or use a draft trained for the longer "
            "context (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 only silences the check)",
        )

    # an MLA draft for a non-MLA target is a design (TorchSpec's qwen3_8b_eagle3_mla): nothing to compare
    if cls != loader.MLA_EAGLE3 or t is None or t.get("kv_lora_rank") is None:
        return
    diff = {k: [d.get(k), t.get(k)] for k in MLA_FIELDS if d.get(k) != t.get(k)}
    if diff:
        yield MLA_GEOMETRY(
            f"MLA draft geometry differs from the target's ({', '.join(diff)}): SGLang builds the "
            "draft's own MLA cache from the draft config, so it loads, but the draft config was not "
            "taken from this target",
            evidence={"draft_vs_target": diff, "sglang": ver, "source": ev.get("mla_draft_kv_cache")},
            fix="check that the draft was trained for this target and that config.json matches its weights",
        )
    dr, tr = _rope(d), _rope(t)
    rdiff = {k: [dr[k], tr[k]] for k in dr if dr[k] != tr[k]}
    if rdiff:
        yield ROPE(
            f"MLA draft RoPE differs from the target's ({', '.join(rdiff)}): SGLang applies the "
            "draft config's rope (YaRN mscale also rescales its attention softmax)",
            evidence={"draft_vs_target": rdiff, "sglang": ver},
            fix="give the draft config the rope_theta/rope_scaling it was trained with (usually the target's)",
        )


@finding_list
def draft_dtype_checks(
    target_cfg: HFConfig | None, draft_cfg: HFConfig, argv: list[str] | None = None, version: str | None = None
) -> Iterator[Finding]:
    """`draft.dtype`: the one `--dtype` SGLang resolves against the target's config and against the draft's
    (kit.sglang.dtype); two different results crash the first draft forward, since the EAGLE draft takes the
    target's embedding and hidden states as they are. Judged for EAGLE launches (STANDALONE drafts share no
    tensors), or, with no launch given, for a draft whose architecture is an EAGLE class."""
    from kit.sglang.dtype import NO_CAST_EVIDENCE, dtype_rule, forced_dtype, recorded_release, resolve_model_dtype

    if target_cfg is None:
        return
    if argv:
        if launch_algorithm(argv) not in ("EAGLE", "EAGLE3"):
            return
    elif not (is_eagle3_draft(draft_cfg) or "eagle" in " ".join(draft_cfg.get("architectures") or []).lower()):
        return
    given = flag_value(argv, "--dtype", version) if argv else None
    if forced_dtype(target_cfg, version):  # ServerArgs runs this target, and so the draft, in bfloat16
        return
    t, d = resolve_model_dtype(target_cfg, given, version), resolve_model_dtype(draft_cfg, given, version)
    if t is None or d is None or t.dtype == d.dtype:
        return
    rel = recorded_release(version)
    ver = f"sglang {rel.requested}"
    # the dtype to ask for: a 16-bit one a config names, the target's first (its precision is the output's)
    named = [r.config_dtype for r in (t, d) if r.config_dtype in ("bfloat16", "float16")]
    want = named[0] if named else t.dtype
    side = "the target" if t.dtype != want else "the draft"
    how = "no --dtype on the launch: SGLang's default auto" if given is None else f"--dtype {given}"
    yield DTYPE(
        f"the target runs {t.dtype} ({t.why}) and the draft {d.dtype} ({d.why}): the draft takes the "
        f"target's embedding and hidden states uncast, and its first forward (CUDA-graph capture at startup) "
        f"raises 'expected mat1 and mat2 to have the same dtype' ({ver}, {how})",
        evidence={
            "target": t.to_dict(),
            "draft": d.to_dict(),
            "dtype_flag": given,
            "sglang": ver,
            "source": f"{dtype_rule(version).evidence} (the rule from {rel.checked} on)",
            "no_cast": [f"{f}: {line}" for f, line in NO_CAST_EVIDENCE],
        },
        fix=f'launch with --dtype {want} (SGLang resolves it for both models), or write "torch_dtype": '
        f'"{want}" into {side}\'s config.json',
    )


def doctor_checks(dep) -> list[Finding]:
    """kit doctor provider (`dep`: a `kit.preflight.Deployment`): needs at least a draft. SGLang reads its own
    process environment, so the launch's variables are the ones its server sees (a `VAR=1 && python ...` shell
    variable never reaches it)."""
    if dep.draft is None:
        return []
    env, argv = (dep.launch.server_env, dep.launch.argv) if dep.launch is not None else ({}, None)
    t, d, version = dep.target_config, dep.draft.config, dep.sglang_version
    out = wiring_checks(t, d, argv, version, dep.draft.folder, dep.trained_with)
    out += draft_dtype_checks(t, d, argv, version)
    return out + draft_target_checks(t, d, env, argv, version)
