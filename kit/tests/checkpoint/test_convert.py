"""`kit convert`: layouts round-trip byte-exactly, strictness refuses, safety rules hold, fuzzed inputs fail cleanly."""

import hashlib
import json
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.checkpoint.convert import convert, convert_in_memory
from kit.checkpoint.inspect import inspect
from kit.checkpoint.safetensors_io import load_tensor, read_checkpoint, sha256_of, write_safetensors
from kit.cli import main
from kit.findings import KitInputError
from kit.tests.checkpoint.test_checkpoint import TINY, draft


def tree_hash(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_speculators_to_sglang_and_back(tmp_path):
    src = draft(tmp_path)
    before = tree_hash(src)
    tgt = str(tiny_target(tmp_path))
    rep = convert(src, tmp_path / "sg", "sglang", target=tgt, sglang_version="0.5.8")
    assert not rep.errors and tree_hash(src) == before
    out = read_checkpoint(tmp_path / "sg")
    s = read_checkpoint(src)
    assert "midlayer.self_attn.q_proj.weight" in out.tensors and not any(k.startswith("layers.") for k in out.tensors)
    assert sha256_of(out.tensors["midlayer.mlp.up_proj.weight"]) == sha256_of(s.tensors["layers.0.mlp.up_proj.weight"])
    prov = json.loads((tmp_path / "sg" / "kit_provenance.json").read_text())
    assert prov["source_layout"] == "speculators" and prov["source_aux_layer_id_convention"] == "speculators"
    assert prov["aux_layer_ids"] == [2, 4, 5] and prov["kit_version"]
    cfg = json.loads((tmp_path / "sg" / "config.json").read_text())
    # speculators ids are capture points; SGLang's Llama rule adds 1, so the ids are translated
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ] == [1, 3, 4]
    assert cfg["kit_aux_source"]["aux_layer_ids"] == [2, 4, 5] and cfg["kit_aux_source"]["capture_points"] == [2, 4, 5]
    for v in ("0.5.8", "0.5.23"):
        assert inspect(tmp_path / "sg", v).simulation.ok
    old = inspect(tmp_path / "sg", "0.4.6.post5").simulation
    assert [m["param"] for m in old.params_missing] == ["model.fc.bias"] and old.ok  # random default bias there
    convert(src, tmp_path / "sg046", "sglang", target=tgt, sglang_version="0.4.6.post5")
    sim = inspect(tmp_path / "sg046", "0.4.6.post5").simulation
    assert sim.ok and not sim.params_missing and "fc.bias" in read_checkpoint(tmp_path / "sg046").tensors
    with pytest.raises(KitInputError, match="--target"):
        convert(tmp_path / "sg", tmp_path / "back", "speculators")
    convert(tmp_path / "sg", tmp_path / "back", "speculators", target=tgt)
    b = read_checkpoint(tmp_path / "back")
    assert set(b.tensors) == set(s.tensors)
    assert all(sha256_of(b.tensors[k]) == sha256_of(s.tensors[k]) for k in s.tensors)
    cfgb = json.loads((tmp_path / "back" / "config.json").read_text())
    assert cfgb["transformer_layer_config"]["hidden_size"] == 16 and cfgb["eagle_aux_hidden_state_layer_ids"] == [
        2,
        4,
        5,
    ]
    assert cfgb["speculators_config"]["verifier"]["name_or_path"] == str((tmp_path / "target").resolve())


def test_to_eagle_and_multilayer(tmp_path):
    tgt = str(tiny_target(tmp_path))
    convert(draft(tmp_path), tmp_path / "e", "eagle", target=tgt)
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and "midlayer.fc" not in read_checkpoint(tmp_path / "e").tensors
    two = draft(tmp_path, name="two", num_layers=2)
    with pytest.raises(KitInputError, match="single-layer"):
        convert(two, tmp_path / "x", "sglang", target=tgt, sglang_version="0.5.8")
    with pytest.raises(KitInputError, match="one layer"):
        convert(two, tmp_path / "x", "eagle", target=tgt)
    convert(two, tmp_path / "two_sg", "sglang", target=tgt, sglang_version="0.5.23")
    ck = read_checkpoint(tmp_path / "two_sg")
    src = read_checkpoint(two)
    assert sha256_of(ck.tensors["layers.1.hidden_norm.weight"]) == sha256_of(
        src.tensors["layers.1.input_layernorm.weight"]
    )
    assert "layers.1.input_layernorm.weight" not in ck.tensors
    assert inspect(tmp_path / "two_sg", "0.5.23").simulation.ok


def tiny_target(tmp_path):
    t = tmp_path / "target"
    t.mkdir()
    g = torch.Generator().manual_seed(3)
    write_safetensors(
        t / "model.safetensors",
        {
            "model.embed_tokens.weight": torch.randn(64, 16, generator=g),
            "lm_head.weight": torch.randn(64, 16, generator=g),
        },
    )
    (t / "config.json").write_text(json.dumps(TINY))
    return t


def strip(src, *names):
    ck = read_checkpoint(src)
    state = {k: load_tensor(t) for k, t in ck.tensors.items() if k not in names}
    write_safetensors(src / "model.safetensors", state)


def test_missing_tensors_need_target(tmp_path):
    src = draft(tmp_path, "sglang")
    strip(src, "embed_tokens.weight", "lm_head.weight")
    with pytest.raises(KitInputError, match="--target"):
        convert(src, tmp_path / "o", "speculators")
    assert not (tmp_path / "o").exists()
    tgt = tiny_target(tmp_path)
    convert(src, tmp_path / "o", "speculators", target=str(tgt))
    out = read_checkpoint(tmp_path / "o")
    t = read_checkpoint(tgt)
    assert torch.equal(
        load_tensor(out.tensors["embed_tokens.weight"]), load_tensor(t.tensors["model.embed_tokens.weight"])
    )
    kept = load_tensor(out.tensors["d2t"]) + torch.arange(32)
    assert torch.equal(load_tensor(out.tensors["lm_head.weight"]), load_tensor(t.tensors["lm_head.weight"])[kept])


def test_refusals_and_safety(tmp_path, capsys):
    src = draft(tmp_path)
    with pytest.raises(KitInputError, match="inside SRC"):
        convert(src, src / "sub", "sglang")
    with pytest.raises(KitInputError, match="SRC lies inside DST"):
        convert(src, tmp_path, "sglang", force=True)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    assert main(["convert", str(src), str(tmp_path / "busy"), "--to", "sglang"]) == 2
    assert "not empty" in capsys.readouterr().err
    tgt = str(tiny_target(tmp_path))
    assert main(["convert", str(src), str(tmp_path / "busy"), "--to", "sglang", "--target", tgt, "--force"]) == 0
    assert not (tmp_path / "busy" / "f").exists() and (tmp_path / "busy" / "kit_provenance.json").exists()
    q = draft(tmp_path, name="qwen")
    ck = read_checkpoint(q)
    state = {k: load_tensor(t) for k, t in ck.tensors.items()}
    state["layers.0.self_attn.q_norm.weight"] = torch.ones(8)
    write_safetensors(q / "model.safetensors", state)
    with pytest.raises(KitInputError, match="q/k norms"):
        convert(q, tmp_path / "q2", "sglang", target=tgt)
    (src / "model.safetensors").write_bytes(b"\0\0\0")
    assert main(["convert", str(src), str(tmp_path / "c"), "--to", "sglang"]) == 2
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".c.kit-*"))


def test_convert_in_memory(tmp_path):
    cfg, state = convert_in_memory(draft(tmp_path))
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert state["midlayer.self_attn.q_proj.weight"].shape == (16, 32) and state["d2t"].dtype == torch.int64


ALL_KEYS = None


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(drop=st.sets(st.integers(0, 15), max_size=4), to=st.sampled_from(["sglang", "speculators", "eagle"]))
def test_fuzz_dropped_keys_never_crash(tmp_path_factory, drop, to):
    base = tmp_path_factory.mktemp("fz")
    src = draft(base)
    names = sorted(read_checkpoint(src).tensors)
    strip(src, *[names[i] for i in drop if i < len(names)])
    dst = base / "out"
    try:
        convert(src, dst, to, target=str(tiny_target(base)))
    except KitInputError:
        assert not dst.exists()
        return
    finally:
        assert not list(base.glob(".out.kit-*"))
    ck = read_checkpoint(dst)
    assert ck.tensors and json.loads((dst / "kit_provenance.json").read_text())["destination_layout"] == to
    shutil.rmtree(base)


def test_copied_top_level_ids_are_flagged_when_converting(tmp_path):
    """Top-level ids [1, 3, 4] on an 8-layer Llama: as speculators-trained ids they mean points [1, 3, 4] (written
    as SGLang ids [0, 2, 3]); as ids `speculators convert` copied from a SGLang head they mean SGLang's default
    points [2, 4, 5]. The conversion says which reading it took and how to take the other."""
    tgt = str(tiny_target(tmp_path))
    src = draft(tmp_path, name="copied", aux_layer_ids=[1, 3, 4])
    rep = convert(src, tmp_path / "sg", "sglang", target=tgt, sglang_version="0.5.17")
    shift = [f for f in rep.findings if f.code == "aux.layer_shift"]
    assert len(shift) == 1 and shift[0].severity == "warning", rep.findings
    assert shift[0].evidence["written_ids"] == [0, 2, 3] and shift[0].evidence["if_copied"]["ids"] == [1, 3, 4]
    # ids that mean the default points read either way are not flagged
    rep = convert(draft(tmp_path), tmp_path / "sg2", "sglang", target=tgt, sglang_version="0.5.17")
    assert not [f for f in rep.findings if f.code == "aux.layer_shift"]
