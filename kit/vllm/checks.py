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
draft's aux ids depends on the model runner that serves the deployment: `second_runner` decides it as the release's
`use_v2_model_runner` does (its steps derived from the wheel, evaluated over the line's flags and the target's config).
"""

from __future__ import annotations

import ast
import contextlib
import json
import operator
import re
from collections.abc import Iterator
from typing import Any

from kit.checkpoint.aux_ids import NESTED, TOP
from kit.checkpoint.convert import LAYER_SHIFT
from kit.checkpoint.hf_config import target_facts
from kit.checkpoint.inspect import ARCH, KEYS_DROPPED, PARAMS_MISSING
from kit.checkpoint.safetensors_io import read_checkpoint
from kit.findings import Code, Finding, finding_list
from kit.hf import HFConfig
from kit.sglang.parser import PARSER, resolution_findings
from kit.vllm.cmdline import LEGACY, VllmLaunch, launch_test, read_argv, resolve
from kit.vllm.rules import VllmRules, releases, rules_for
from kit.wiring.aux import ALGORITHM, fc_in_features, is_eagle3_draft, training_points

LAUNCH, AUX = "launch/process/logs: notebook 04", "aux/probe/oracle: notebook 03"
VLLM_CONFIG = Code(
    "launch.vllm_config",
    LAUNCH,
    "error",
    "vLLM's `--speculative-config` is not a JSON object (often shell quoting: double quotes around JSON that holds "
    "double quotes): vLLM's parser refuses the launch",
    'single-quote the JSON: --speculative-config \'{"method": "eagle3", "model": DRAFT, ...}\'',
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
    "config from it (0.10.2, vllm-project/vllm PR #25250): the verifier runs without speculation, silently",
    "a vLLM release that detects it, or --speculative-config with the verifier as the served model",
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
        yield ARCH(
            f"{ver} names the EAGLE-3 draft's class {named[1]} (from its architecture {named[0]}), which is not among "
            f"its EAGLE-3 draft classes ({', '.join(rules.draft_archs)}): startup fails",
            evidence={
                "engine": "vllm",
                "draft_arch": named[0],
                "class": named[1],
                "classes": list(rules.draft_archs),
                "first_release_with_it": first,
                "source": rules.evidence.get("draft_archs"),
            },  # fmt: skip
            fix=f"vLLM >= {first}" if first else "an architecture whose EAGLE-3 class the release has",
        )
    if method in rules.eagle_methods and draft_config is not None and eagle3:
        yield ALGORITHM(
            f"{ver}: EAGLE-3 draft launched with method {method!r} ({how}): vLLM builds an EAGLE-1 head, whose fc "
            "takes 2 x hidden, not the draft's 3 aux states (load fails on fc.weight, or no aux capture)",
            evidence={"engine": "vllm", "method": method, "how": how, "draft_arch": draft_config.get("architectures")},
            fix='set "method": "eagle3" in --speculative-config',
        )


def draft_class(rules: VllmRules, draft_config) -> tuple[str, str] | None:
    """(the draft's architecture, the class name the release looks up for it: `draft_rename`); None where the release
    renames nothing, or the draft is in speculators' format (vLLM converts its config first)."""
    arch = ((draft_config or {}).get("architectures") or [None])[0]
    if not (arch and rules.draft_rename) or HFConfig.of(draft_config).is_speculators:
        return None
    return arch, eval(rules.draft_rename, {"__builtins__": {}})(arch)


UNKNOWN = type("Unknown", (), {"__repr__": lambda self: "unknown"})()
SUB_CONFIGS = {"model_config", "cache_config", "parallel_config", "compilation_config", "attention_config"}


class _Config:
    """VllmConfig as far as the launch and the target's config.json tell it, for the derived conditions of
    `use_v2_model_runner` (`VllmRules.aux_v2_*`): a flag's value by its dest, the speculative JSON's keys, the
    target's facts; anything else is UNKNOWN, and a condition that is not surely true does not fire."""

    def __init__(self, rules: VllmRules, dep, v: VllmLaunch, method: str | None):
        cfg = HFConfig.of(dep.target_config)
        res = resolve(v, rules)
        self.rules, self.values, self.spec, self.method = rules, dict(res.values if res else {}), v.spec, method
        experts = any(cfg.text.get(k) for k in ("n_routed_experts", "num_experts", "num_local_experts"))
        quant = cfg.get("quantization_config") or self.values.get("quantization")
        self.facts = {"is_moe": experts, "is_quantized": bool(quant), "runner_type": "generate"}
        self.facts |= {"is_diffusion": False, "is_attention_free": False, "architectures": [cfg.architecture]}
        self.listed = "*" in rules.aux_v2_archs or cfg.architecture in rules.aux_v2_archs

    def run(self, steps) -> tuple[object, str | None]:
        """(the value of the first step whose condition is surely true, that condition); (UNKNOWN, None) if none."""
        for cond, value in steps:
            if self.sure(cond):
                return self.ev(ast.parse(value, mode="eval").body), cond
        return UNKNOWN, None

    def sure(self, cond: str) -> bool:
        v = self.ev(ast.parse(cond, mode="eval").body)
        return v is not UNKNOWN and bool(v)

    def unsupported(self) -> list[str]:
        return [self.ev(ast.parse(f, mode="eval").body) for c, f in self.rules.aux_v2_unsupported if self.sure(c)]

    def attr(self, base, name: str):
        if base == "self":
            if name == "speculative_config":
                return "spec" if self.spec else None
            return ("config", name) if name in SUB_CONFIGS else self.values.get(name, UNKNOWN)
        if base == "spec":
            return self.method if name == "method" else self.spec.get(name, UNKNOWN)
        if base == ("config", "model_config") and name in self.facts:
            return self.facts[name]
        return self.values.get(name, UNKNOWN) if isinstance(base, tuple) else UNKNOWN

    def ev(self, n: ast.expr):  # one branch per node kind the derived conditions use
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return {"self": "self", "target_listed": self.listed, "HAS_TRITON": True}.get(n.id, UNKNOWN)
        if isinstance(n, ast.Attribute):
            return self.attr(self.ev(n.value), n.attr)
        if isinstance(n, (ast.Tuple, ast.List)):
            return tuple(self.ev(e) for e in n.elts)
        if isinstance(n, ast.JoinedStr):
            return "".join(str(self.ev(p.value)) if isinstance(p, ast.FormattedValue) else p.value for p in n.values)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            v = self.ev(n.operand)
            return UNKNOWN if v is UNKNOWN else not v
        if isinstance(n, ast.BoolOp):  # three-valued: a sure False (And) or True (Or) decides, else UNKNOWN wins
            vals = [self.ev(x) for x in n.values]
            decisive = [v for v in vals if v is not UNKNOWN and bool(v) == isinstance(n.op, ast.Or)]
            return decisive[0] if decisive else UNKNOWN if UNKNOWN in vals else vals[-1]
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, b = self.ev(n.left), self.ev(n.comparators[0])
            if UNKNOWN in (a, b):
                return UNKNOWN
            with contextlib.suppress(TypeError):
                return COMPARE[type(n.ops[0])](a, b)
            return UNKNOWN
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if getattr(n.func.value, "id", "") == "self" and n.func.attr in self.rules.aux_v2_methods:
                return self.run(self.rules.aux_v2_methods[n.func.attr])[0]
            if getattr(n.func.value, "id", "") == "self" and n.func.attr == "_get_v2_model_runner_unsupported_features":
                return self.unsupported()
            if getattr(n.func.value, "id", "") == "current_platform":  # the kit judges CUDA hosts
                return n.func.attr == "is_cuda"
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "getattr" and len(n.args) >= 2:
            return self.attr(self.ev(n.args[0]), n.args[1].value)
        return UNKNOWN


COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Gt: operator.gt, ast.Lt: operator.lt, ast.GtE: operator.ge,
    ast.LtE: operator.le, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}  # fmt: skip


def second_runner(rules: VllmRules, dep, v: VllmLaunch, method: str | None) -> tuple[bool, str]:
    """(whether vLLM serves this deployment on its second model runner, why), as the release's `use_v2_model_runner`
    decides (derived, `VllmRules.aux_v2_steps`): VLLM_USE_V2_MODEL_RUNNER in the launch's environment first, then
    the release's default for the target (MoE, quantized, listed architectures) and its unsupported features (the
    first runner serves instead); undecided conditions never fire."""
    asked = ((dep.launch.server_env if dep.launch else None) or {}).get("VLLM_USE_V2_MODEL_RUNNER")
    if asked:
        return asked.lower() in ("1", "true"), f"VLLM_USE_V2_MODEL_RUNNER={asked}"
    if not rules.aux_v2_steps:
        return False, f"vLLM {rules.version} picks no runner (none is a default second one, or it has one runner)"
    c = _Config(rules, dep, v, method)
    value, cond = c.run(rules.aux_v2_steps)
    if value is UNKNOWN:
        return c.listed, "undecided: the architecture list decides"
    if value is True:
        return True, "the second runner, the release's default for this deployment"
    if cond and "unsupported" in cond:
        return False, f"the first runner: the second does not support {', '.join(c.unsupported())}"
    if m := re.fullmatch(r"not self\.(\w+)\(\)", cond or ""):  # the default-target test said no: which of its steps
        steps = rules.aux_v2_methods.get(m[1], ())
        inner = c.run(steps)[1]
        cond = f"{dict(steps)[inner]} is false" if inner == "True" else inner
        return False, f"the first runner: not a default target of the second ({cond}; target_listed: {c.listed})"
    return False, f"the first runner: {cond}"


def ids_read(rules: VllmRules, v2: bool) -> tuple[str, ...]:
    """Where the model runner that serves the deployment reads the draft config's aux ids: the second runner's
    (`aux_v2_ids_read`, `second_runner`) or the first's (`aux_ids_read`)."""
    return rules.aux_v2_ids_read if v2 and rules.aux_v2_ids_read else rules.aux_ids_read


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


# the parameters of vLLM's Llama-layout EAGLE-3 draft classes (model_executor/models/llama_eagle3.py, qwen3_eagle3.py:
# each decoder layer with its `hidden_norm`, q/k/v and gate/up fused, biases where the config asks for them; fc with its
# optional norms; lm_head, the vocabulary map) beside the module each class file holds them in
LLAMA_CLASSES = {
    "llama_eagle3.Eagle3LlamaForCausalLM": (),
    "qwen3_eagle3.Eagle3Qwen3ForCausalLM": ("self_attn.q_norm", "self_attn.k_norm"),
}


def draft_params(module: str, cfg: HFConfig) -> set[str] | None:
    """The parameter names vLLM's draft class `module` builds for this config; None for a class the kit does not
    model (the MLA draft, whose keys are judged by SGLang's loader rules)."""
    if module not in LLAMA_CLASSES:
        return None
    with_bias = lambda names, on: [f"{n}.{w}" for n in names for w in ("weight", "bias")[: 1 + bool(on)]]
    norms = ("input_layernorm", "post_attention_layernorm", "hidden_norm", *LLAMA_CLASSES[module])
    layer = [f"{n}.weight" for n in norms]
    layer += with_bias(("self_attn.qkv_proj", "self_attn.o_proj"), cfg.get("attention_bias") or cfg.get("bias"))
    layer += with_bias(("mlp.gate_up_proj", "mlp.down_proj"), cfg.get("mlp_bias"))
    aux = len((cfg.get("eagle_config") or {}).get(TOP) or cfg.get(TOP) or [0, 0, 0])
    inner = {"embed_tokens.weight", "fc.weight", "norm.weight"}
    inner |= {f"layers.{i}.{n}" for i in range(cfg.get("num_hidden_layers") or 1) for n in layer}
    inner |= {"input_norm.weight"} if cfg.get("norm_before_fc") else set()
    inner |= {f"fc_norm.{j}.weight" for j in range(aux)} if cfg.get("fc_norm") else set()
    return {"lm_head.weight", "draft_id_to_target_id"} | {f"model.{n}" for n in inner}


def draft_module(rules: VllmRules, draft_config) -> tuple[str | None, HFConfig]:
    """("module.Class" of the release's EAGLE-3 draft class for this draft, the config it is built from): a
    speculators config is converted first (its layer's model_type picks the class), another names its architecture
    (`draft_class`; releases that rename nothing load their one Llama class)."""
    cfg = HFConfig.of(draft_config)
    named = (draft_class(rules, draft_config) or (None, "Eagle3LlamaForCausalLM"))[1]
    if cfg.is_speculators:
        cfg = HFConfig.of({**cfg, **(cfg.get("transformer_layer_config") or {})})
        qwen = cfg.get("model_type") == "qwen3" and "Eagle3Qwen3ForCausalLM" in rules.draft_archs
        named = "Eagle3Qwen3ForCausalLM" if qwen else "Eagle3LlamaForCausalLM"
    return rules.draft_archs.get(named), cfg


def vllm_load(rules: VllmRules, draft_config, keys) -> dict[str, Any] | None:
    """What the release's `load_weights` does with the draft's checkpoint keys (`draft_loaders` ops: on the class, the
    first that applies, as its if/elif chain; on its decoder model (`in`), each rename, then the first stacking):
    {"class", "refused": keys with no parameter, which stop startup, "ignored": such keys AutoWeightsLoader lets
    pass (`auto_ignores`, where the key reaches it), "unfilled": parameters no key fills, less the embedding and a
    head over the target's vocabulary, which vLLM shares from the target}. None where the class is not modelled."""
    module, cfg = draft_module(rules, draft_config)
    loader, params = rules.draft_loaders.get(module or "", {}), draft_params(module or "", cfg)
    if params is None or not loader:
        return None
    ops = loader["ops"]
    outer = [o for o in ops if "in" not in o and o["op"] in ("skip", "rename", "prefix")]
    renames = [o for o in ops if "in" in o and o["op"] in ("rename", "map") and o["to"] is not None]
    stacked = next((o["value"] for o in ops if o["op"] == "stacked"), [])
    out, filled = {"class": module, "refused": [], "ignored": []}, set()
    for key in keys:
        name = key
        op = next((o for o in outer if eval(o["if"], {"__builtins__": {}}, {"name": key})), None)
        if op:
            name = (
                None
                if op["op"] == "skip"
                else op["add"] + key
                if op["op"] == "prefix"
                else key.replace(op["from"], op["to"])
            )
        inner = bool(name and name.startswith("model."))
        if inner:
            stem = name.removeprefix("model.")
            for o in renames:
                stem = stem.replace(o["from"], o["to"])
            fused = next(((p, w) for p, w in stacked if w in stem), None)
            name = "model." + (stem.replace(fused[1], fused[0]) if fused else stem)
        if name and name not in params:
            auto = loader.get("inner_auto") or not inner  # the class's own loader is AutoWeightsLoader
            out["ignored" if auto and name.endswith(tuple(rules.auto_ignores)) else "refused"].append(key)
        filled.add(name)
    shared = {"model.embed_tokens.weight", "draft_id_to_target_id"}
    shared |= {"lm_head.weight"} if cfg.get("draft_vocab_size") in (None, cfg.get("vocab_size")) else set()
    return out | {"unfilled": sorted(params - filled - shared)}


@finding_list
def key_findings(rules: VllmRules, draft) -> Iterator[Finding]:
    """The draft's checkpoint keys (safetensors headers) through the release's loader (`vllm_load`): `draft.vllm_keys`
    (refused), `draft.keys_dropped` (let pass unloaded), `draft.params_missing` (left unfilled)."""
    ckpt = read_checkpoint(draft.folder) if draft and draft.folder else None
    got = vllm_load(rules, draft.config, ckpt.shapes()) if ckpt and ckpt.tensors else None
    if got is None:
        return
    ver = f"vLLM {rules.version}"
    where = {"engine": "vllm", "class": got["class"], "source": rules.evidence.get("draft_archs")}
    if refused := got["refused"]:
        yield VLLM_KEYS(
            f"{ver}'s {got['class']} has no parameter for {len(refused)} checkpoint key(s), e.g. {refused[0]}: startup "
            "stops with an error naming it",
            evidence={**where, "keys": refused[:12], "count": len(refused)},
            fix=f"kit convert {draft.folder} {draft.folder}-speculators --to speculators, or drop {refused[0]}",
        )
    if ignored := got["ignored"]:
        yield KEYS_DROPPED(
            f"{ver} silently drops {len(ignored)} checkpoint key(s) its {got['class']} has no parameter for, e.g. "
            f"{ignored[0]} (its weight loader ignores unexpected {', '.join(rules.auto_ignores)})",
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
    modelled = dep.draft is not None and draft_params(*draft_module(rules_for(dep.vllm_version), dep.draft.config))
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
    keys = key_findings(rules, d) if eagle3 and method in rules.eagle3_methods else []
    return launch_findings(v, rules, method) + models + shifted + keys


def is_eagle3(draft_config, folder) -> bool:
    """An EAGLE-3 draft: its config says so, or its fc takes more than 2 x hidden (EAGLE-1's [embedding, state]): the
    official EAGLE-3 release names a plain LlamaForCausalLM."""
    fc, hidden = fc_in_features(folder), draft_config.get("hidden_size")
    return is_eagle3_draft(draft_config) or bool(fc and hidden and fc > 2 * hidden)
