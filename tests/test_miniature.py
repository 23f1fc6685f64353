"""kit.rehearsal.miniature on the corpus's real target and draft configs: shrunk consistently, divisible for TP,
the preserved fields preserved, and SGLang's loader (the kit's replay) saying of the miniature draft exactly what
it says of the original header.

Drafts are the corpus's sparse safetensors (each exporter's key names and shapes, tests/corpus_cases.py), so a
7168-wide Kimi draft costs kilobytes; the miniature is written for real (random values).

    python -m pytest tests/test_miniature.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus_cases import load_configs, weight_spec, write_sparse_safetensors

from kit.rehearsal.miniature import miniature_target, write_miniature_draft, write_miniature_target

# (family, target config, draft config, the exporter's weight layout)
PAIRS = [
    ("llama", "target/llama-3.1-8b-instruct.json", "draft/specforge-llama3-8B-eagle3.json", "midlayer"),
    ("qwen3", "target/qwen3-8b.json", "draft/specforge-qwen3-8b-eagle3.json", "midlayer"),
    ("qwen3-moe", "target/qwen3-30b-a3b.json", "draft/specforge-qwen3-30B-A3B-eagle3.json", "midlayer"),
    ("gpt-oss", "target/gpt-oss-120b.json", "draft/nvidia-gpt-oss-120b-eagle3-v3.json", "midlayer"),
    ("deepseek-v3", "target/deepseek-v3.json", "draft/specforge-deepseek-v3-671b-eagle3.json", "midlayer"),
    ("kimi-k2.5", "target/kimi-k2.5.json", "draft/specforge-kimi-k25-eagle3.json", "midlayer"),
    ("kimi-mla", "target/kimi-k2.5.json", "draft/kimi-k2.6-eagle3.1-mla.json", "kimi_mla"),
]
PRESERVED = ("num_hidden_layers", "vocab_size", "max_position_embeddings", "model_type", "rope_scaling", "head_dim")
WIDTHS = {
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "target_hidden_size",
    "head_dim",
    "q_lora_rank",
    "kit_miniature",
}


def _text(cfg):
    return cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg


def _draft_dir(root: Path, name: str, layout: str) -> Path:
    cfg = load_configs()[name]["config"]
    d = root / "orig"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    write_sparse_safetensors(d / "model.safetensors", weight_spec(cfg, layout), cfg)
    return d


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("family,target,draft,layout", PAIRS, ids=[p[0] for p in PAIRS])
def test_miniature_target_keeps_what_faults_depend_on_and_divides_by_tp(family, target, draft, layout, tp):
    cfg = load_configs()[target]["config"]
    mini = miniature_target(cfg, tp=tp, draft_config=load_configs()[draft]["config"])
    t, m = _text(cfg), mini.text
    assert mini.config["architectures"] == cfg["architectures"] and mini.config.get("model_type") == cfg.get(
        "model_type"
    )
    for k in PRESERVED:
        assert m.get(k) == t.get(k) or (k == "head_dim" and t.get(k) is None), k
    assert m["hidden_size"] < t["hidden_size"] and m["hidden_size"] % 64 == 0
    assert m["num_attention_heads"] % tp == 0 and m["num_attention_heads"] < t["num_attention_heads"]
    kv = m.get("num_key_value_heads", m["num_attention_heads"])
    assert kv % tp == 0 or tp % kv == 0
    assert m["num_attention_heads"] % kv == 0
    for k in ("intermediate_size", "moe_intermediate_size"):
        if k in t:
            assert m[k] % (64 * tp) == 0 and m[k] < t[k]
    if "kv_lora_rank" in t:  # MLA: the ranks the kernels take are kept, q_lora_rank shrinks
        assert all(m[k] == t[k] for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
        assert m["q_lora_rank"] < t["q_lora_rank"] and any("MLA" in n for n in mini.notes)
    for k in ("n_routed_experts", "num_experts", "num_local_experts"):
        if k in t:
            topk = t.get("num_experts_per_tok") or t.get("experts_per_token")
            assert topk <= m[k] < t[k] and m[k] % (t.get("n_group") or 1) == 0
    # the input is not modified
    assert cfg == load_configs()[target]["config"]


@pytest.mark.parametrize("family,target,draft,layout", PAIRS, ids=[p[0] for p in PAIRS])
def test_miniature_draft_keeps_names_dtypes_and_the_loaders_verdict(tmp_path, family, target, draft, layout):
    from kit.checkpoint.inspect import inspect
    from kit.checkpoint.safetensors_io import read_checkpoint

    orig = _draft_dir(tmp_path, draft, layout)
    tcfg = load_configs()[target]["config"]
    dcfg = load_configs()[draft]["config"]
    mini = miniature_target(tcfg, tp=1, draft_config=dcfg)
    write_miniature_target(tcfg, tmp_path / "mini-target", mini)
    rec = write_miniature_draft(orig, tmp_path / "mini", mini)
    a, b = read_checkpoint(orig), read_checkpoint(tmp_path / "mini")
    assert list(a.tensors) == list(b.tensors)
    assert all(a.tensors[k].dtype == b.tensors[k].dtype for k in a.tensors)
    H, Hm = _text(tcfg)["hidden_size"], mini.text["hidden_size"]
    fc = next(k for k in b.tensors if k.endswith("fc.weight"))
    k_aux = a.tensors[fc].shape[1] // H
    assert tuple(b.tensors[fc].shape) == (b.tensors[fc].shape[0], k_aux * Hm)  # fc: k x H_mini in
    for name in ("d2t", "t2d"):  # vocabulary maps keep their size
        assert b.tensors[name].shape == a.tensors[name].shape
    assert b.tensors["lm_head.weight"].shape[0] == a.tensors["lm_head.weight"].shape[0]
    assert b.total_bytes < a.total_bytes // 5 and len(rec["tensors"]) == len(a.tensors)
    # the real config.json, edited only in its widths
    new = json.loads((tmp_path / "mini" / "config.json").read_text())
    changed = {k for k in set(new) | set(dcfg) if new.get(k) != dcfg.get(k)}
    assert changed <= WIDTHS and "hidden_size" in changed
    assert new["architectures"] == dcfg["architectures"] and new.get("eagle_config") == dcfg.get("eagle_config")
    # the kit's replay of SGLang's loader: the same verdict for every key and every never-filled parameter
    for version in ("0.5.8", "0.5.17"):
        x, y = inspect(orig, version), inspect(tmp_path / "mini", version)
        assert [(k.key, k.status, k.param) for k in x.simulation.keys] == [
            (k.key, k.status, k.param) for k in y.simulation.keys
        ]
        assert [m["param"] for m in x.simulation.params_missing] == [m["param"] for m in y.simulation.params_missing]
        sev = lambda ins: sorted((f.code, f.severity) for f in ins.report.findings if f.code != "draft.layout")  # noqa: E731
        assert sev(x) == sev(y)


def test_the_miniature_leaves_the_users_files_alone(tmp_path):
    orig = _draft_dir(tmp_path, "draft/specforge-llama3-8B-eagle3.json", "midlayer")
    before = {p.name: p.read_bytes() for p in orig.iterdir()}
    mini = miniature_target(load_configs()["target/llama-3.1-8b-instruct.json"]["config"])
    write_miniature_draft(orig, tmp_path / "mini", mini)
    assert {p.name: p.read_bytes() for p in orig.iterdir()} == before


def test_unknown_quantization_is_dropped_and_said_so():
    cfg = dict(load_configs()["target/qwen3-8b.json"]["config"])
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    mini = miniature_target(cfg)
    assert "quantization_config" not in mini.config and any("awq dropped" in n for n in mini.notes)
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    mini = miniature_target(cfg)
    assert mini.config["quantization_config"]["quant_method"] == "fp8"
    assert mini.text["hidden_size"] % 128 == 0 and mini.text["intermediate_size"] % 128 == 0
