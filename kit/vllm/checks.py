"""`kit doctor` on a vLLM launch line: what that vLLM release does with its `--speculative-config` (`kit.vllm.rules`).

The engine-neutral checks (draft keys, aux ids, fc width, vocabulary map, shapes...) judge the same `Deployment` an
SGLang line makes (`kit.vllm.cmdline`: the line in SGLang's names); this provider adds what only vLLM decides.
Shared faults, shared codes: a method of EAGLE (not EAGLE-3) with an EAGLE-3 draft is `aux.algorithm`, as for
SGLang's `--speculative-algorithm EAGLE`; a flag the release's parser refuses is `launch.flag` (`launch.parser`: no
parser recorded for that release); a draft class the release does not have is `draft.arch` (`draft_class`: the name
its EAGLEConfig gives the draft's architecture, looked up in its registry; vLLM's V1 engine, the default).
vLLM's own codes: `launch.vllm_config` (the JSON), `launch.vllm_method`,
`launch.vllm_flag` (legacy flags), `launch.vllm_draft_tp`, `launch.vllm_speculators` (`vllm serve DRAFT` on a release
that does not detect its format), `aux.vllm_target` (no aux hidden states from the target). Where vLLM reads the
draft's aux ids depends on the model runner that serves the deployment (`kit.vllm.runner`); the draft's keys go
through the release's own loader rules (`kit.vllm.loader`): `draft.vllm_keys` where it refuses one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from kit.checkpoint.aux_ids import NESTED, TOP
from kit.checkpoint.convert import LAYER_SHIFT
from kit.checkpoint.hf_config import target_facts
from kit.checkpoint.inspect import ARCH, KEYS_DROPPED, PARAMS_MISSING
from kit.checkpoint.safetensors_io import read_checkpoint
from kit.findings import Code, Finding, finding_list
from kit.hf import HFConfig
from kit.sglang.parser import PARSER, resolution_findings
from kit.sglang.versions import Version
from kit.vllm.cmdline import LEGACY, VllmLaunch, launch_test, read_argv, resolve
from kit.vllm.loader import CLASSES, draft_class, draft_module, vllm_load
from kit.vllm.rules import VllmRules, releases, rules_for
from kit.vllm.runner import ids_read, second_runner
from kit.wiring.aux import ALGORITHM, fc_in_features, is_eagle3_draft, training_points

LAUNCH, AUX = "launch/process/logs: notebook 04", "aux/probe/oracle: notebook 03"
VLLM_CONFIG = Code(
    "launch.vllm_config",
    LAUNCH,
    "error",
    "vLLM's `--speculative-config` is not a JSON object (often shell quoting: double quotes around JSON that holds "
    "double quotes): vLLM's parser refuses the launch; or it holds a key the release's SpeculativeConfig has no "
    "field for (`kit.vllm.rules` spec_keys): startup stops on an unexpected keyword argument",
    'single-quote the JSON: --speculative-config \'{"method": "eagle3", "model": DRAFT, ...}\'; drop the unknown key',
)
VLLM_METHOD = Code(
    "launch.vllm_method",
    LAUNCH,
    "error",
    "the `method` in vLLM's `--speculative-config` is not one that vLLM release accepts (`kit.vllm.rules`: the "
    "methods its SpeculativeConfig declares)",
    '`"method": "eagle3"` for an EAGLE-3 draft',
)
VLLM_FLAG = Code(
    "launch.vllm_flag",
    LAUNCH,
    "error",
    "a speculative flag of older vLLM releases (`--speculative-model`, `--num-speculative-tokens`, "
    "`--speculative-draft-tensor-parallel-size`, ...) that the judged vLLM release no longer has: its parser refuses "
    "the launch",
    "move the values into --speculative-config's JSON (model, num_speculative_tokens, draft_tensor_parallel_size)",
)
VLLM_DRAFT_TP = Code(
    "launch.vllm_draft_tp",
    LAUNCH,
    "error",
    "`draft_tensor_parallel_size` is not a size that vLLM release allows for an EAGLE draft (`kit.vllm.rules` "
    "draft_tp: e.g. 1 or the target's tensor-parallel size); vLLM refuses the config at startup",
    "drop draft_tensor_parallel_size, or set it to a size the release allows",
)
VLLM_SPECULATORS = Code(
    "launch.vllm_speculators",
    LAUNCH,
    "error",
    "`vllm serve DRAFT` with a speculators-format draft and no speculative flags, on a vLLM release that does not "
    "detect that format or its algorithm (`kit.vllm.rules` speculators; detection from 0.10.1): the draft is loaded as "
    "the model to serve, with no verifier; or one that detects it, serves its verifier, and builds no speculative "
    "config from it (0.10.2, vllm-project/vllm PR #25250): the verifier runs without speculation, silently; or a "
    "speculators-format draft in --speculative-config on a release that does not read that format: startup stops "
    "(its config.json has no model_type transformers knows)",
    "a vLLM release that detects it, or --speculative-config with the verifier as the served model (the draft in the "
    "SGLang layout: kit convert --to sglang)",
)
VLLM_KEYS = Code(
    "draft.vllm_keys",
    "ckpt/draft: notebook 02",
    "error",
    "a checkpoint key vLLM's EAGLE-3 draft loader has no parameter for, after that release's renames (`kit.vllm.rules` "
    "draft_loaders: `model.` prefix, `midlayer.` -> `layers.0.`, q/k/v and gate/up stacking, `d2t`): vLLM stops at "
    "startup with a KeyError or ValueError naming it (SGLang would drop it silently); a key its loader lets pass "
    "unloaded (0.25.0 on: an unexpected `.bias`) is `draft.keys_dropped`, parameters no key fills "
    "`draft.params_missing`",
    "write the keys as the release loads them (a speculators-layout checkpoint: `kit convert DRAFT OUT --to "
    "speculators`), or drop the ones its draft class does not have",
)
VLLM_TARGET = Code(
    "aux.vllm_target",
    AUX,
    "error",
    "an EAGLE-3 launch on vLLM whose target architecture does not emit aux hidden states in that release (its model "
    "class does not implement `SupportsEagle3`, vllm-project/vllm PR #16937: each model must): vLLM stops at startup "
    "('Model does not support EAGLE3 interface ...')",
    "a vLLM release whose aux_archs list the target's architecture, or serve it on SGLang",
)


def effective_method(v: VllmLaunch, rules: VllmRules) -> tuple[str | None, str]:
    """(the method that release runs, how it was chosen): the one given, else the one the draft's path detects."""
    if v.method or not v.draft:
        return v.method, "given"
    hit = next((m for s, m in rules.name_detect if s.lower() in v.draft.lower()), None)
    return hit, f"detected from the draft path {v.draft!r}" if hit else "not given"


def allowed_draft_tp(rules: VllmRules, tp: int) -> set[int] | None:
    """The draft TP sizes the release's rule names ("(1, target_tp)" -> {1, tp}); None when it names none."""
    if not rules.draft_tp_allowed:
        return None
    words = re.findall(r"\w+", rules.draft_tp_allowed)
    return {int(w) for w in words if w.isdigit()} | ({tp} if any("tp" in w for w in words) else set())


@finding_list
def launch_findings(v: VllmLaunch, rules: VllmRules, method: str | None) -> Iterator[Finding]:
    """The findings on the line alone: its JSON, method (`effective_method`), legacy flags and draft TP against the
    release."""
    ver = f"vLLM {rules.version}"
    if v.problem:
        yield VLLM_CONFIG(f"{ver}: {v.problem}", evidence={"entry": v.entry})
    if rules.spec_keys and (unknown := sorted(set(v.spec) - set(rules.spec_keys))):
        yield VLLM_CONFIG(
            f"{ver}'s SpeculativeConfig has no field {', '.join(map(repr, unknown))} given in --speculative-config: "
            "startup stops ('unexpected keyword argument')",
            evidence={"keys": unknown, "source": rules.evidence.get("flags")},
            fix=f"drop {', '.join(unknown)} from --speculative-config",
        )
    if (gone := [f for f in v.legacy if f not in rules.legacy_flags]) and rules.speculative_config:
        keys = [LEGACY[f] for f in gone]
        yield VLLM_FLAG(
            f"{ver} has no {', '.join(gone)} (its speculative settings are --speculative-config's keys {keys})",
            evidence={"flags": gone, "release_legacy_flags": list(rules.legacy_flags)},
            fix=f"--speculative-config '{json.dumps(v.spec)}' in place of {' '.join(gone)}",
        )
    yield from flag_findings(v, rules, gone)
    if v.auto and not (rules.speculators_detected and v.method in rules.speculators_algorithms):
        yield VLLM_SPECULATORS(
            f"{ver} does not read {v.draft!r} as a speculators {v.method} draft (it detects "
            f"{', '.join(rules.speculators_algorithms) or 'none'}): it serves the draft itself",
            evidence={"draft": v.draft, "algorithm": v.method, "source": rules.evidence.get("speculators")},
            fix=f"vllm serve {v.target} --speculative-config '{json.dumps(v.spec)}'",
        )
    elif v.auto and not rules.speculators_speculates:
        yield VLLM_SPECULATORS(
            f"{ver} reads {v.draft!r} as a speculators draft and serves its verifier {v.target!r}, but builds no "
            "speculative config from it: the verifier runs without speculation, with no error",
            evidence={"draft": v.draft, "verifier": v.target, "source": rules.evidence.get("speculators")},
            fix=f"vllm serve {v.target} --speculative-config '{json.dumps(v.spec)}'",
        )
    if method and rules.methods and method not in rules.methods:
        yield VLLM_METHOD(
            f"{ver} does not accept method {method!r} in --speculative-config (it accepts {', '.join(rules.methods)})",
            evidence={"method": method, "accepted": list(rules.methods), "source": rules.evidence.get("methods")},
        )
    allowed = allowed_draft_tp(rules, v.tp)
    if v.draft_tp is not None and method in (*rules.eagle_methods, *rules.eagle3_methods) and allowed:
        if v.draft_tp not in allowed:
            yield VLLM_DRAFT_TP(
                f"{ver}: draft_tensor_parallel_size {v.draft_tp} with tensor parallel size {v.tp}; the release "
                f"allows {sorted(allowed)} ({rules.draft_tp_allowed})",
                evidence={"draft_tp": v.draft_tp, "tp": v.tp, "rule": rules.draft_tp_allowed},
                fix=f"draft_tensor_parallel_size {min(allowed)} (or drop it)",
            )


def flag_findings(v: VllmLaunch, rules: VllmRules, reported: list[str]) -> list[Finding]:
    """`launch.flag`: the line's flags against the release's recorded `vllm serve` parser (the flags in `reported`
    already named); `launch.parser` where none is recorded for it."""
    if (res := resolve(v, rules)) is None:
        return [
            PARSER(
                f"vLLM {rules.version}'s parser is not recorded in the kit: the line's flags were not checked",
                evidence={"release": rules.version},
                fix=f"python -m kit.derive.vllm_scan --parser {rules.version} SITE (vllm=={rules.version} in SITE)",
            )
        ]
    unknown = [u for u in res.unknown if u.split("=", 1)[0] not in reported]
    errors = [e["message"] for e in res.errors if e["option"] not in reported]
    return resolution_findings("vLLM", unknown, errors, f"vLLM {rules.version}'s parser (recorded)", res.abbreviated())


@finding_list
def model_findings(
    rules: VllmRules, method: str | None, how: str, target_config, draft_config, eagle3: bool
) -> Iterator[Finding]:
    """The findings that need the models: the target's aux hidden states, the method (`effective_method`: the one
    that runs, and how it was chosen) against the draft (`eagle3`: the draft is an EAGLE-3 one, `is_eagle3`)."""
    ver = f"vLLM {rules.version}"
    arch = ((target_config or {}).get("architectures") or [None])[0]
    if method in rules.eagle3_methods and arch and rules.aux_archs and arch not in rules.aux_archs:
        yield VLLM_TARGET(
            f"{ver}: the target {arch} emits no EAGLE-3 aux hidden states (not among the release's "
            f"{len(rules.aux_archs)} aux architectures): startup fails",
            evidence={"target_arch": arch, "method": method, "source": rules.evidence.get("aux_archs")},
        )
    if (
        method in rules.eagle3_methods
        and (named := draft_class(rules, draft_config))
        and named[1] not in rules.draft_archs
    ):
        first = next((r for r in releases() if named[1] in rules_for(r).draft_archs), None)
        mtype = draft_config.get("model_type")
        given = (
            f" made {rules.draft_override[mtype]} for its model_type {mtype}" if mtype in rules.draft_override else ""
        )
        fix = f"vLLM >= {first}" if first else "an architecture whose EAGLE-3 class the release has"
        if given and not first:
            fix = "a copy of the draft whose config.json has a model_type vLLM keeps"
            fix += " (deepseek_v2: the same MLA fields)" if str(mtype).startswith("deepseek") else ""
        yield ARCH(
            f"{ver} names the EAGLE-3 draft's class {named[1]} (from its architecture {named[0]}{given}), which is not "
            f"among its EAGLE-3 draft classes ({', '.join(rules.draft_archs)}): startup fails",
            evidence={
                "engine": "vllm",
                "draft_arch": named[0],
                "class": named[1],
                "classes": list(rules.draft_archs),
                "first_release_with_it": first,
                "source": rules.evidence.get("draft_archs"),
            },  # fmt: skip
            fix=fix,
        )
    if method in rules.eagle_methods and draft_config is not None and eagle3:
        yield ALGORITHM(
            f"{ver}: EAGLE-3 draft launched with method {method!r} ({how}): vLLM builds an EAGLE-1 head, whose fc "
            "takes 2 x hidden, not the draft's 3 aux states (load fails on fc.weight, or no aux capture)",
            evidence={"engine": "vllm", "method": method, "how": how, "draft_arch": draft_config.get("architectures")},
            fix='set "method": "eagle3" in --speculative-config',
        )


def serving_points(
    rules: VllmRules, draft_config, num_layers: int, read: tuple[str, ...] | None = None
) -> tuple[list[int], str] | None:
    """(the points that release captures for this draft, where its ids came from): the ids it reads from the draft
    config (`read`, default `aux_ids_read`: top level, then eagle_config), each the state entering that layer, else
    its default formula; None where the release records no default."""
    read = rules.aux_ids_read if read is None else read
    for where, ids in (("top", draft_config.get(TOP)), ("nested", (draft_config.get("eagle_config") or {}).get(TOP))):
        if ids and where in read:
            return list(ids), TOP if where == "top" else NESTED
    if not rules.aux_default:
        return None
    return list(eval(rules.aux_default, {"__builtins__": {}}, {"num_layers": num_layers})), rules.aux_default


@finding_list
def shift_findings(rules: VllmRules, dep, eagle3: bool, v: VllmLaunch, method: str | None) -> Iterator[Finding]:
    """`aux.layer_shift` on vLLM: the points it captures (point = id) against the ones the draft was trained on, read
    where the runner that serves the deployment reads them (`second_runner`)."""
    tf, d = target_facts(dep.target_config), dep.draft
    v2, runner = second_runner(rules, dep, v, method)
    read = ids_read(rules, v2)
    served = serving_points(rules, d.config, tf.num_layers, read) if eagle3 and tf.num_layers else None
    trained = served and training_points(
        d.config, tf.num_layers, tf.architecture, dep.sglang_version, d.folder, dep.trained_with
    )
    if not trained or list(trained[0]) == served[0]:
        return
    yield LAYER_SHIFT(
        f"vLLM {rules.version} captures points {served[0]} ({served[1]}), the draft was trained on {list(trained[0])}",
        evidence={
            "engine": "vllm",
            "serving_points": served[0],
            "read_from": served[1],
            "training_points": list(trained[0]),
            "known_from": trained[1],
            "ids_read": read,
            "runner": runner,
        },  # fmt: skip
        fix=f"write {TOP} = {list(trained[0])} at the draft config's top level (vLLM reads the state entering each "
        "listed layer)",
    )


@finding_list
def key_findings(rules: VllmRules, draft, pp: int = 1) -> Iterator[Finding]:
    """The draft's checkpoint keys (safetensors headers) through the release's loader (`vllm_load`, at the line's
    pipeline-parallel size `pp`): `draft.vllm_keys` (refused), `draft.keys_dropped` (let pass unloaded),
    `draft.params_missing` (left unfilled)."""
    ckpt = read_checkpoint(draft.folder) if draft and draft.folder else None
    keys = list(ckpt.shapes()) if ckpt and ckpt.tensors else []
    got = vllm_load(rules, draft.config, keys, pp) if keys else None
    if got is None:
        return
    ver = f"vLLM {rules.version}"
    where = {"engine": "vllm", "class": got["class"], "source": rules.evidence.get("draft_archs")}
    if refused := got["refused"]:
        newer = [r for r in releases() if Version.parse(r) > Version.parse(rules.version)]
        loads = next(
            (r for r in newer if not (vllm_load(rules_for(r), draft.config, keys, pp) or {}).get("refused")), None
        )
        convert = f"kit convert {draft.folder} {draft.folder}-speculators --to speculators, or drop {refused[0]}"
        yield VLLM_KEYS(
            f"{ver}'s {got['class']} has no parameter for {len(refused)} checkpoint key(s), e.g. {refused[0]}: startup "
            "stops with an error naming it",
            evidence={**where, "keys": refused[:12], "count": len(refused), "first_release_loading_them": loads},
            fix=f"vLLM >= {loads}, whose loader takes these keys" if loads else convert,
        )
    if ignored := got["ignored"]:
        yield KEYS_DROPPED(
            f"{ver} silently drops {len(ignored)} checkpoint key(s) its {got['class']} has no parameter for, e.g. "
            f"{ignored[0]}: its loader passes over them with no error",
            evidence={**where, "dropped": ignored[:12], "count": len(ignored)},
            fix="serve the draft on a class that has these weights, or retrain without them",
        )
    if (unfilled := got["unfilled"]) and not refused:
        yield PARAMS_MISSING(
            f"{ver}'s {got['class']}: no checkpoint key fills {len(unfilled)} parameter(s), e.g. {unfilled[0]}: vLLM "
            "serves them at their initial values, with no error",
            evidence={**where, "params": unfilled[:12]},
            fix="supply the tensors the draft was trained with",
        )


# the codes whose rule is an SGLang release's own mechanics, which vLLM does otherwise: its draft class registry
# (vLLM renames the draft's architecture itself), its config's form (vLLM reads speculators configs), the draft's
# context and dtype (vLLM gives the draft the target's), top-level aux ids (vLLM reads them), SGLang's capture points
# (`shift_findings` judges vLLM's), per-class capture (aux.vllm_target here), SGLang's steps/topk/backends and
# SGLang-only packages and variables, and SGLang's parser (`flag_findings` runs vLLM's). Not reported from another
# provider for a vLLM line (kit.preflight.check).
SGLANG_RULES = frozenset(
    "draft.arch draft.config draft.context_short draft.nextn_zero draft.dtype aux.layer_ids_ignored aux.layer_shift "
    "aux.target_capture launch.spec_params launch.spec_verify launch.backend env.sglang_var env.sglang_requires "
    "env.sgl_kernel_lane launch.flag launch.parser".split()
)


def is_vllm_line(dep) -> bool:
    return dep.launch is not None and launch_test(dep.launch.argv) is not None


def not_judged(dep) -> frozenset[str]:
    """kit.preflight: the codes that do not hold for this deployment (SGLang's own rules, on a vLLM line; SGLang's
    loader's verdict on the draft's keys where vLLM's draft class is modelled here, `key_findings`)."""
    if not is_vllm_line(dep):
        return frozenset()
    modelled = dep.draft is not None and draft_module(rules_for(dep.vllm_version), dep.draft.config)[0] in CLASSES
    return SGLANG_RULES | ({KEYS_DROPPED.code, PARAMS_MISSING.code} if modelled else set())


def doctor_checks(dep) -> list[Finding]:
    """kit doctor provider (`dep`: a `kit.preflight.Deployment`): a vLLM launch line, else nothing."""
    if not is_vllm_line(dep):
        return []
    rules = rules_for(dep.vllm_version)
    v = read_argv(dep.launch.argv, rules)
    d = dep.draft
    eagle3 = d is not None and is_eagle3(d.config, d.folder)
    method, how = effective_method(v, rules)
    shifted = (
        shift_findings(rules, dep, eagle3 and method in rules.eagle3_methods, v, method) if dep.target_config else []
    )
    models = model_findings(rules, method, how, dep.target_config, d and d.config, eagle3)
    if d is not None and not v.auto and HFConfig.of(d.config).is_speculators and not rules.speculators_detected:
        first = next((r for r in releases() if rules_for(r).speculators_detected), None)
        models.append(VLLM_SPECULATORS(
            f"vLLM {rules.version} does not read a speculators-format draft config (from {first} on): transformers "
            "finds no model_type in the draft's config.json, and startup stops",
            evidence={"engine": "vllm", "first_release_reading_it": first, "source": rules.evidence.get("speculators")},
            fix=f"vLLM >= {first}, or the draft in the SGLang layout (kit convert DRAFT DST --to sglang)",
        ))  # fmt: skip
    pp = int(((res := resolve(v, rules)) and res.values.get("pipeline_parallel_size")) or 1)
    keys = key_findings(rules, d, pp) if eagle3 and method in rules.eagle3_methods else []
    return launch_findings(v, rules, method) + models + shifted + keys


def is_eagle3(draft_config, folder) -> bool:
    """An EAGLE-3 draft: its config says so, or its fc takes more than 2 x hidden (EAGLE-1's [embedding, state]): the
    official EAGLE-3 release names a plain LlamaForCausalLM."""
    fc, hidden = fc_in_features(folder), draft_config.get("hidden_size")
    return is_eagle3_draft(draft_config) or bool(fc and hidden and fc > 2 * hidden)
