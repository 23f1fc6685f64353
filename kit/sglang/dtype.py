"""The dtype each SGLang release runs the target and the draft in, from its real source: the one home of that rule.

`ModelConfig.__init__` resolves `self.dtype = _get_and_verify_dtype(self.hf_text_config, dtype)` with `dtype =
server_args.dtype` (`--dtype`, default "auto"), and the draft worker builds its own `ModelConfig` from the same
`server_args` (no draft-only dtype flag). So one `--dtype` is resolved twice, against each model's own text config:

* `--dtype bfloat16 | float16 | half | float32 | float`: both models run that dtype;
* `--dtype auto`: the config's dtype, except that a float32 config, or one naming none, runs float16, and bfloat16
  for Gemma (`gemma2` only in 0.4.4, any `gemma*` from 0.4.5). The attribute read is `torch_dtype` until 0.5.4 and
  `dtype` from 0.5.8 (transformers >= 4.56 makes either key answer for both);
* before either, ServerArgs rewrites `--dtype` to bfloat16 for some targets: GptOss with MXFP4 (0.5.1+) and
  MistralLarge3 / Pixtral (0.5.8+); the draft then runs bfloat16 too (`FORCED_BF16`, `forced_dtype`).

SGLang never casts one model's tensors to the other's dtype: the draft concatenates the target's embedding and hidden
states with its own (`torch.cat([embeds, hidden_states], dim=-1)`, llama_eagle3.py), so a float16 target and a bfloat16
draft fail in the draft's first linear ("expected mat1 and mat2 to have the same dtype", real SGLang 0.5.17 on an H200;
sgl-project/sglang#3431, SpecForge#348, where `--dtype` is the fix; #25894, open, would give the draft the target's
dtype). `DTYPE_RULES` records the rule per release where it changes; `kit.derive.dtype_scan` checks it against each
release's own `_get_and_verify_dtype` on probe configs, and finds the bfloat16 overrides in its ServerArgs code
(kit/tests/sglang/test_dtype.py). `kit doctor` reports a mismatch as `draft.dtype` (kit.wiring.checks).

    resolve_model_dtype({"torch_dtype": "float32"}, None, "0.5.17").dtype   # 'float16'
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from kit.hf import HFConfig
from kit.sglang.versions import RecordedRelease, pick_recorded

SRC = "srt/configs/model_config.py"
# --dtype values SGLang's argparse accepts, and the dtype each names (its `_STR_DTYPE_TO_TORCH_DTYPE`)
NAMED = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32", "bfloat16": "bfloat16"}


@dataclass(frozen=True)
class DtypeRule:
    """`_get_and_verify_dtype` of a release, as far as it decides what a model runs."""

    reads: str  # the config attribute it reads: "torch_dtype" or "dtype"
    gemma_bf16: str  # model_types that run bfloat16 for a float32 config under auto: "gemma2", or "gemma*" (prefix)
    evidence: str  # where the first release with this rule says so
    forced_bf16: tuple[str, ...] = ()  # FORCED_BF16 names: targets whose --dtype ServerArgs rewrites to bfloat16

    def float32_auto(self, model_type: str | None) -> str:
        """What `--dtype auto` runs for a float32 config (or one naming no dtype)."""
        return "bfloat16" if fnmatchcase(model_type or "", self.gemma_bf16) else "float16"


# ServerArgs' bfloat16 overrides, by name -> (target architecture, quant_method its quantization_config must name,
# or None, and a regex that finds the override in a release's srt/server_args.py or srt/arg_groups/)
FORCED_BF16: dict[str, tuple[str, str | None, str]] = {
    "gpt_oss_mxfp4": (
        "GptOssForCausalLM",
        "mxfp4",
        r"mxfp4 triton kernels\s+(?:self\.dtype|overrides\[\"dtype\"\]) = \"bfloat16\"",
    ),
    "mistral_large_3": (
        "MistralLarge3ForCausalLM",
        None,
        # 0.5.17+: the MODEL_OVERRIDES dict entry; 0.5.8-0.5.12: `if model_arch in [...]: self.dtype = "bfloat16"`
        r"\"MistralLarge3ForCausalLM\"(?::\s*\{\"dtype\": \"bfloat16\"\}"
        r"|,\s*\"PixtralForConditionalGeneration\",\s*\]:\s*self\.dtype = \"bfloat16\")",
    ),
    "pixtral": (
        "PixtralForConditionalGeneration",
        None,
        r"\"PixtralForConditionalGeneration\"(?::\s*\{\"dtype\": \"bfloat16\"\}|,\s*\]:\s*self\.dtype = \"bfloat16\")",
    ),
}
_ALL_FORCED = tuple(FORCED_BF16)
# from the first recorded release that has it (the newest record not after a release answers); the releases
# between 0.5.4 and 0.5.8 are not in the kit's recorded set
DTYPE_RULES: dict[str, DtypeRule] = {
    "0.4.4": DtypeRule("torch_dtype", "gemma2", f'{SRC}:362 config_dtype = getattr(config, "torch_dtype", None)'),
    "0.4.5": DtypeRule("torch_dtype", "gemma*", f'{SRC}:405 if config.model_type.startswith("gemma"):'),
    "0.5.1": DtypeRule(
        "torch_dtype", "gemma*", 'srt/server_args.py:2277 self.dtype = "bfloat16" (GptOss, mxfp4)', ("gpt_oss_mxfp4",)
    ),
    "0.5.8": DtypeRule("dtype", "gemma*", f'{SRC}:1040 config_dtype = getattr(config, "dtype", None)', _ALL_FORCED),
}
# why a mismatch is a crash, not a cast (0.5.17; kit/tests/sglang/test_dtype.py checks each line is there)
NO_CAST_EVIDENCE = (
    ("srt/models/llama_eagle3.py", "hidden_states = torch.cat([embeds, hidden_states], dim=-1)"),
    ("srt/speculative/eagle_worker_v2.py", "self.draft_runner.model.set_embed(embed)"),
    (
        "srt/speculative/eagle_utils.py",
        "return model_runner.model_config.spec_hidden_size, model_runner.model_config.dtype",
    ),
)


def recorded_release(version: str | None) -> RecordedRelease:
    return pick_recorded(version, DTYPE_RULES)


def dtype_rule(version: str | None) -> DtypeRule:
    return DTYPE_RULES[recorded_release(version).checked]


# -- the rule, for a model's config ------------------------------------------------------------------------
def forced_dtype(target_cfg: HFConfig | None, version: str | None = None) -> str | None:
    """The FORCED_BF16 name whose override rewrites `--dtype` to bfloat16 for this target (None: none applies)."""
    if not target_cfg:
        return None
    target_cfg = HFConfig.of(target_cfg)
    arch = (target_cfg.get("architectures") or [None])[0]
    qc = target_cfg.get("quantization_config")
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    for name in dtype_rule(version).forced_bf16:
        if FORCED_BF16[name][0] == arch and FORCED_BF16[name][1] in (None, method):
            return name
    return None


@dataclass(frozen=True)
class ResolvedDtype:
    """What one model runs under one `--dtype`, and why."""

    dtype: str  # "bfloat16", "float16" or "float32"
    requested: str  # the --dtype value, "auto" when the launch gives none
    config_dtype: str | None  # the dtype its (text) config names, normalised; None: none
    config_key: str | None  # the config.json key it came from
    why: str  # one clause for a finding's title

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "config": self.config_dtype, "key": self.config_key, "why": self.why}


def config_dtype(cfg: HFConfig | None, version: str | None = None) -> tuple[str | None, str | None]:
    """(dtype, key) the release reads from a text config's `torch_dtype` / `dtype` (its own key first), normalised;
    a name SGLang's table lacks counts as none, as its `.get(..., None)` does."""
    if not cfg:
        return None, None
    text = HFConfig.of(cfg).text
    keys = ("torch_dtype", "dtype") if dtype_rule(version).reads == "torch_dtype" else ("dtype", "torch_dtype")
    k = next((k for k in keys if isinstance(text.get(k), str) and text[k]), None)
    return (NAMED.get(text[k].lower().removeprefix("torch.")), k) if k else (None, None)


def resolve_model_dtype(
    cfg: HFConfig | None, requested: str | None, version: str | None = None
) -> ResolvedDtype | None:
    """What `_get_and_verify_dtype` of that release returns for this config and `--dtype` (None or "auto": auto);
    None for a --dtype value SGLang rejects (`launch.flag` reports it)."""
    req = (requested or "auto").lower()
    named, key = config_dtype(cfg, version)
    said = f'config {key} "{named}"' if key and named else "no dtype in its config (float32 to SGLang)"
    if req != "auto":
        return ResolvedDtype(NAMED[req], req, named, key, f"--dtype {req}") if req in NAMED else None
    if named not in (None, "float32"):
        return ResolvedDtype(named, req, named, key, f"{said}, kept by --dtype auto")
    model_type = HFConfig.of(cfg or {}).text.get("model_type")
    out = dtype_rule(version).float32_auto(model_type)
    why = f"{said}, which --dtype auto runs as {out}" + (f" for model_type {model_type}" if out == "bfloat16" else "")
    return ResolvedDtype(out, req, named, key, why)
