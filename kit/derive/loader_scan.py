"""The loader rules of each SGLang release (`kit/sglang/loader_rules.json`, read by `kit.sglang.loader`), derived.

`derive_features(version, architecture=...)` reads a draft class's file (+ `llama.py` for the Llama class) of a
release's wheel as text (`kit.sglang.source`): feature flags, each with its evidence line, and from the AST of its
`load_weights` the stacked mapping, `re.sub` renames and fused pairs; `derive_runtime(version)` the release-wide
rules any draft meets (`RUNTIME_MARKERS`, ModelConfig's draft architecture rewrites, `CONTEXT_LENGTH_KEYS`, the
classes whose processor startup loads, SGLang's own config model_types); `scan_registered(version)` every
`EntryClass` architecture. kit/tests/sglang/test_sglang_rules.py re-derives the boundary releases and compares.

    python -m kit.derive.loader_scan --write V...        # re-derive these releases' rows in kit/sglang/loader_rules.json
    python -m kit.derive.loader_scan [VERSION [CLASS]]   # print one class's features (CLASS "runtime": release-wide)
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

from kit.derive import read_rows, write_table
from kit.sglang import loader
from kit.sglang.loader import EAGLE_FILE, LLAMA_EAGLE3, MLA_EAGLE3, MLA_FILE, MODEL_CONFIG_FILE
from kit.sglang.source import source_files, source_root, source_text
from kit.sglang.versions import DEFAULT_RELEASE, sort_versions

LLAMA_FILE = "srt/models/llama.py"

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

# Eagle3DeepseekV2ForCausalLM (kimi_k25_eagle3.py): one MLA decoder layer, its own load_weights
MLA_MARKERS: dict[str, tuple[str, str]] = {
    "single_layer_only": (MLA_FILE, r"only supports 1 layer"),
    "requires_q_lora_rank": (MLA_FILE, r"requires q_lora_rank"),
    "decoder_is_midlayer": (MLA_FILE, r"self\.midlayer\s*=\s*Eagle3MLADecoderLayer"),
    "fused_a_proj_input_2h": (MLA_FILE, r"^\s*2 \* config\.hidden_size,\s*$"),
    "fc_bias_from_config": (MLA_FILE, r"bias=getattr\(config, \"bias\""),
    "fc_norm": (MLA_FILE, r"getattr\(\s*config, \"fc_norm\""),
    "norm_output": (MLA_FILE, r"self\.norm_output\s*=\s*getattr"),
    "num_aux_from_layer_ids": (MLA_FILE, r"def _get_eagle_aux_layer_count"),
    "null_target_hidden_falls_back": (
        MLA_FILE,
        r"getattr\(config, \"target_hidden_size\", None\) or config\.hidden_size",
    ),
    "missing_draft_vocab_uses_target_head": (MLA_FILE, r"self\.load_lm_head_from_target = True"),
    "tied_lm_head_is_embed": (MLA_FILE, r"self\.lm_head\s*=\s*self\.model\.embed_tokens"),
    "d2t_sets_hot_token_id": (MLA_FILE, r"self\.hot_token_id\s*=\s*loaded_weight \+ torch\.arange"),
    "set_embed_skips_if_target_hidden_differs": (
        MLA_FILE,
        r"self\.config\.target_hidden_size != self\.config\.hidden_size",
    ),
    "model_prefix_except_lm_head": (MLA_FILE, r"if not mapped_name\.startswith\(\"lm_head\.\"\)"),
    "unknown_key_warns": (MLA_FILE, r"logger\.warning\(\"Eagle3 MLA: skipping unexpected weight"),
    "kv_b_proj_split_after_load": (MLA_FILE, r"w = self_attn\.kv_b_proj\.weight"),
}
MARKERS_OF = {LLAMA_EAGLE3: MARKERS, MLA_EAGLE3: MLA_MARKERS}  # each draft class's markers

# release-wide rules for any draft: feature -> (files searched in order, regex)
_RUNNER_FILES = (
    "srt/model_executor/model_runner.py",
    "srt/model_executor/model_runner_components/layer_setup.py",
)
_SPEC_WORKER_FILES = (
    "srt/speculative/eagle_worker.py",
    "srt/speculative/draft_worker_common.py",
    "srt/speculative/eagle_worker_v2.py",
)
RUNTIME_MARKERS: dict[str, tuple[tuple[str, ...], str]] = {
    # `num_nextn_predict_layers: 0` in a draft config takes the MTP branch: the draft KV pool gets
    # zero layers and the first draft forward raises IndexError (fixed by testing `> 0`)
    "nnpl_zero_sizes_draft_kv_at_zero": (
        _RUNNER_FILES,
        r"model_has_mtp_layers = self\.model_config\.num_nextn_predict_layers is not None\s*$",
    ),
    "nnpl_zero_treated_as_absent": (_RUNNER_FILES, r"model_has_mtp_layers = _nnpl is not None and _nnpl > 0"),
    # the draft's ModelConfig is built with the target's context length
    "draft_context_is_target_context": (
        _SPEC_WORKER_FILES,
        r"context_length\s*=\s*target\w*(\.model_runner\.model_config)?\.context_len",
    ),
    # a context length above the model's derived one raises unless the env var allows it
    "longer_context_raises": ((MODEL_CONFIG_FILE,), r"To allow overriding this maximum"),
    "longer_context_allowed_by_default": (
        (MODEL_CONFIG_FILE,),
        r"\"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN\", default=\"True\"",
    ),
    "draft_context_override_rewrites_draft": (
        (MODEL_CONFIG_FILE,),
        r"Overriding the draft model's max_position_embeddings",
    ),
    # the MLA draft class gets an MLA KV pool sized from its own kv_lora_rank/qk_rope_head_dim
    "mla_draft_kv_cache": ((MODEL_CONFIG_FILE,), r"\"Eagle3DeepseekV2ForCausalLM\" in self\.hf_config\.architectures"),
}


def _first_match(texts: dict[str, str | None], files, rx: str) -> list | None:
    for f in files:
        for i, line in enumerate((texts.get(f) or "").splitlines(), 1):
            if re.search(rx, line):
                return [f, i, line.strip()]
    return None


def derive_features(
    version: str, download: bool = True, architecture: str = LLAMA_EAGLE3
) -> tuple[dict[str, Any], dict[str, list]]:
    """Feature flags + evidence of one EAGLE-3 draft class in one release, read from its wheel's source."""
    cls_file, markers = loader.DRAFT_CLASSES[architecture], MARKERS_OF[architecture]
    files = sorted({cls_file, *(f for f, _ in markers.values())})
    texts = {f: source_text(version, f, download=download) for f in files}
    feats: dict[str, Any] = {"has_eagle3": texts[cls_file] is not None}
    ev: dict[str, list] = {}
    if texts[cls_file] is None:
        return feats, ev
    for feat, (f, rx) in markers.items():
        hit = _first_match(texts, (f,), rx)
        feats[feat] = hit is not None
        if hit:
            ev[feat] = hit
    if architecture == LLAMA_EAGLE3:
        feats["legacy_name_map"] = _legacy_map(texts[EAGLE_FILE]) if feats["legacy_name_map"] else {}
    feats.update(load_weights_structure(texts[cls_file], architecture))
    if not feats["stacked"] and feats.get("delegates_to_llama_loader"):
        # 0.4.5-0.4.8: load_weights hands every name to LlamaForCausalLM.load_weights
        feats["stacked"] = load_weights_structure(texts[LLAMA_FILE] or "", "LlamaForCausalLM")["stacked"]
    return feats, ev


def load_weights_structure(src: str, cls: str) -> dict[str, list]:
    """What `cls.load_weights` does with names, read from its AST: the stacked mapping
    (`stacked_params_mapping`), `re.sub` renames, and fused projections (two checkpoint tensors
    concatenated into one parameter, e.g. q_a_proj + kv_a_proj_with_mqa -> fused_qkv_a_proj_with_mqa)."""
    out: dict[str, list] = {"stacked": [], "renames": [], "fused": []}
    tree = ast.parse(src)
    fn = next(
        (
            f
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.name == cls
            for f in node.body
            if isinstance(f, ast.FunctionDef) and f.name == "load_weights"
        ),
        None,
    )
    if fn is None:
        return out
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.List)
            and any(isinstance(t, ast.Name) and t.id == "stacked_params_mapping" for t in node.targets)
        ):
            out["stacked"] = [list(ast.literal_eval(e)) for e in node.value.elts]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "sub"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and len(node.args) >= 2
            and all(isinstance(a, ast.Constant) for a in node.args[:2])
        ):
            out["renames"].append([node.args[0].value, node.args[1].value])
    seg = ast.get_source_segment(src, fn) or ""
    # `if "<a>" in mapped_name or "<b>" in mapped_name:` caches both parts; `.replace("<a>", "fused_...")`
    # names the parameter; `torch.cat([cached[a], cached[b]])` fuses them in that order
    pair = re.search(r'if "(\w+)" in mapped_name or "(\w+)" in mapped_name', seg)
    fused = re.search(r'\.replace\("(\w+)", "(fused_\w+)"\)', seg)
    if pair and fused and "torch.cat(" in seg:
        parts = [pair.group(1), pair.group(2)]
        if fused.group(1) != parts[0]:
            parts.reverse()
        out["fused"].append({"param": fused.group(2), "parts": parts})
    return out


def derive_runtime(version: str, download: bool = True) -> tuple[dict[str, Any], dict[str, list]]:
    """Release-wide rules for any draft (KV sizing, context length, draft architecture rewrites, the multimodal
    classes whose processor startup loads, SGLang's own config model_types)."""
    files = sorted({f for fs, _ in RUNTIME_MARKERS.values() for f in fs})
    texts = {f: source_text(version, f, download=download) for f in files}
    feats: dict[str, Any] = {}
    ev: dict[str, list] = {}
    for feat, (fs, rx) in RUNTIME_MARKERS.items():
        hit = _first_match(texts, fs, rx)
        feats[feat] = hit is not None
        if hit:
            ev[feat] = hit
    feats["draft_arch_rewrites"] = draft_arch_rewrites(texts[MODEL_CONFIG_FILE] or "")
    # what decides whether a target starts at all: the classes whose HF processor startup loads, and the
    # model_types SGLang brings config classes for (kit.rehearsal reads them; recorded so no host needs the source)
    archs = loader.processor_archs_in(texts[MODEL_CONFIG_FILE] or "")
    if archs is not None:
        feats["processor_archs"] = sorted(archs)
        ev["processor_archs"] = _first_match(texts, (MODEL_CONFIG_FILE,), r"^multimodal_model_archs\s*=")
    feats["config_model_types"] = sorted(loader.config_model_types_in(source_files(version, "srt/configs", download)))
    for f in _CONTEXT_FILES:  # get_context_length moved between releases
        text = source_text(version, f, download=download)
        keys = _list_constant(text or "", "CONTEXT_LENGTH_KEYS")
        if keys:
            feats["context_length_keys"] = keys
            ev["context_length_keys"] = _first_match({f: text}, (f,), r"^CONTEXT_LENGTH_KEYS\s*=")
            break
    return feats, ev


_CONTEXT_FILES = (
    "srt/utils/hf_transformers/common.py",
    "srt/utils/hf_transformers_utils.py",
    "srt/hf_transformers_utils.py",
)


def _list_constant(src: str, name: str) -> list | None:
    for node in ast.parse(src).body if src else ():
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, (ast.List, ast.Tuple))
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            return list(ast.literal_eval(node.value))
    return None


def draft_arch_rewrites(src: str) -> dict[str, str]:
    """ModelConfig's draft-only architecture rewrites (`if is_draft_model and architectures[0] == X:
    architectures[0] = Y`), e.g. DeepseekV3ForCausalLM -> DeepseekV3ForCausalLMNextN (an MTP class)."""

    def arch0(n) -> bool:
        return (
            isinstance(n, ast.Subscript)
            and isinstance(n.value, ast.Attribute)
            and n.value.attr == "architectures"
            and isinstance(n.slice, ast.Constant)
            and n.slice.value == 0
        )

    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.If) or not any(
            getattr(n, "id", getattr(n, "attr", None)) == "is_draft_model" for n in ast.walk(node.test)
        ):
            continue
        froms: list[str] = []
        for c in ast.walk(node.test):
            if isinstance(c, ast.Compare) and arch0(c.left) and len(c.ops) == 1:
                r = c.comparators[0]
                if isinstance(c.ops[0], ast.Eq) and isinstance(r, ast.Constant):
                    froms.append(r.value)
                elif isinstance(c.ops[0], ast.In) and isinstance(r, (ast.List, ast.Tuple)):
                    froms += [e.value for e in r.elts if isinstance(e, ast.Constant)]
        to = [
            st.value.value
            for st in node.body
            if isinstance(st, ast.Assign) and any(arch0(t) for t in st.targets) and isinstance(st.value, ast.Constant)
        ]
        for f in froms if to else ():
            out[f] = to[-1]
    return out


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


DOC = (
    "generated by `python -m kit.derive.loader_scan --write V...` from real "
    "sglang wheels; checked by kit/tests/sglang/test_sglang_rules.py"
)


def derive_row(version: str) -> dict[str, Any]:
    """One release's row with its registered classes whole (what `python -m kit.sglang.releases --derive V` stores)."""
    classes = {}
    for cls in loader.DRAFT_CLASSES:
        feats, ev = derive_features(version, architecture=cls)
        classes[cls] = {"features": feats, "evidence": ev}
    rt, rt_ev = derive_runtime(version)
    return {
        "classes": classes,
        "runtime": {"features": rt, "evidence": rt_ev},
        "registered": sorted(scan_registered(version)),
    }


def as_deltas(rows: dict[str, dict]) -> dict[str, dict]:
    """Rows with whole registered sets, in release order, each set stored as the delta from the previous row's."""
    out: dict[str, dict] = {}
    prev: set[str] = set()
    for v in sort_versions(rows):
        row = {k: x for k, x in rows[v].items() if k != "registered"}
        reg = set(rows[v]["registered"])
        out[v] = {**row, "registered_delta": {"added": sorted(reg - prev), "removed": sorted(prev - reg)}}
        prev = reg
    return out


def stored(path: Path = loader.TABLE_PATH) -> dict[str, dict]:
    """The repository's rows, each with its registered set whole (the deltas applied in release order)."""
    rows = read_rows(path)
    out: dict[str, dict] = {}
    names: set[str] = set()
    for v in sort_versions(rows):
        row = {k: x for k, x in rows[v].items() if k not in ("registered", "registered_delta")}
        if "registered" in rows[v]:
            names = set(rows[v]["registered"])
        else:
            d = rows[v]["registered_delta"]
            names = (names | set(d["added"])) - set(d["removed"])
        out[v] = {**row, "registered": sorted(names)}
    return out


def add_rows(rows: dict[str, dict], path: Path = loader.TABLE_PATH) -> bool:
    """Store these releases' rows (`derive_row`) in the table, every other release's row as it was; True when the
    file changed."""
    return write_table(path, {"_doc": DOC, "versions": as_deltas({**stored(path), **rows})})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        add_rows({v: derive_row(v) for v in sys.argv[2:]})
    else:
        v = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_RELEASE
        cls = sys.argv[2] if len(sys.argv) > 2 else LLAMA_EAGLE3
        print(json.dumps(derive_runtime(v) if cls == "runtime" else derive_features(v, architecture=cls), indent=1))
