"""Which of vLLM's model runners serves a deployment, as the release's `VllmConfig.use_v2_model_runner` decides.

Why: the first runner reads a draft config's aux layer ids at the top level and under `eagle_config`, the second only
at the top level, so the same draft gets different capture points; which one runs depends on the target (listed
architectures, MoE, quantized), the launch's flags (features the second runner lacks) and VLLM_USE_V2_MODEL_RUNNER.
How: `kit.derive.vllm_scan` records the property's body as [condition, value] steps (`VllmRules.aux_v2_*`);
`second_runner` evaluates them over what the line and the target's config.json say, three-valued: a condition that
is not surely true does not fire.

    v2, why = second_runner(rules_for("0.24.0"), dep, read_argv(argv), "eagle3")
"""

from __future__ import annotations

import ast
import contextlib
import operator
import re

from kit.hf import EXPERT_KEYS, HFConfig
from kit.vllm.cmdline import VllmLaunch, resolve
from kit.vllm.rules import VllmRules

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
        experts = any(cfg.text.get(k) for k in EXPERT_KEYS)
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
