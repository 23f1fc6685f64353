"""`kit convert` passes its own doctor: aux layer ids are translated per stack convention and target class.

Every source layout (SGLang/SpecForge export, speculators, official EAGLE, SpecForge training checkpoint)
× every destination × every target family (Llama, Qwen, DeepSeek, Kimi, GptOss): convert, then `kit doctor`
finds no aux error (and no error at all for an SGLang destination); converting back restores the source's ids.
Drafts are written from header facts with `write_stream` (no torch), so this runs on any laptop.

Run: python -m pytest kit/tests/checkpoint/test_convert_aux.py -q
"""

import json
import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.checkpoint.convert import AUX_SOURCE_KEY, convert
from kit.checkpoint.layouts import from_canonical
from kit.checkpoint.safetensors_io import WriteEntry, write_stream
from kit.cli import main
from kit.doctor import DoctorConfig, diagnose
from kit.findings import KitInputError

H, NH, NKV, HD, I, V, VD, L = 16, 2, 1, 8, 24, 64, 32, 8
VERSION = "0.5.23"
LLAMA = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": H,
    "num_attention_heads": NH,
    "num_key_value_heads": NKV,
    "head_dim": HD,
    "intermediate_size": I,
    "vocab_size": V,
    "draft_vocab_size": VD,
    "num_hidden_layers": 1,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
}
# the same trained points [2, 4, 5] on an 8-layer target, spelled in each source stack's convention
SOURCES = {
    "speculators": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]},
    "sglang": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}},
    "specforge": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
    "eagle": {},  # official EAGLE has no ids: it captures [2, L//2, L-3] = [2, 4, 5]
}
TARGETS = {
    "llama": {"architectures": ["LlamaForCausalLM"]},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"]},
    "qwen3_moe": {"architectures": ["Qwen3MoeForCausalLM"]},
    "deepseek": {"architectures": ["DeepseekV3ForCausalLM"]},
    "kimi": {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {}},
    "gptoss": {"architectures": ["GptOssForCausalLM"]},
}


def _canonical() -> dict[str, tuple[str, tuple[int, ...]]]:
    layer = {
        "self_attn.q_proj.weight": (NH * HD, 2 * H),
        "self_attn.k_proj.weight": (NKV * HD, 2 * H),
        "self_attn.v_proj.weight": (NKV * HD, 2 * H),
        "self_attn.o_proj.weight": (H, NH * HD),
        "mlp.gate_proj.weight": (I, H),
        "mlp.up_proj.weight": (I, H),
        "mlp.down_proj.weight": (H, I),
        "input_layernorm.weight": (H,),
        "hidden_norm.weight": (H,),
        "post_attention_layernorm.weight": (H,),
    }
    out = {f"layers.0.{k}": ("F32", s) for k, s in layer.items()}
    out.update({"fc.weight": ("F32", (H, 3 * H)), "norm.weight": ("F32", (H,)), "lm_head.weight": ("F32", (VD, H))})
    out.update({"d2t": ("I64", (VD,)), "t2d": ("BOOL", (V,)), "embed_tokens.weight": ("F32", (V, H))})
    return out


def write_draft(path, layout: str):
    """A tiny draft in `layout`: real vocab maps, deterministic random weights, that stack's config."""
    rng = random.Random(7)
    literal = {"d2t": bytes(8 * VD), "t2d": b"\x01" * VD + b"\x00" * (V - VD)}
    entries = []
    for canon, (dtype, shape) in _canonical().items():
        name = from_canonical(canon, "sglang" if layout == "specforge" else layout, 1)
        name = f"draft_model.{name}" if layout == "specforge" and name not in ("d2t", "t2d") else name
        n = {"F32": 4, "I64": 8, "BOOL": 1}[dtype]
        for s in shape:
            n *= s
        data = literal.get(canon) or bytes(rng.randrange(60, 64) for _ in range(n))  # small positive floats
        entries.append(WriteEntry(name, dtype, shape, lambda d=data: [d]))
    path.mkdir(parents=True)
    write_stream(path / "model.safetensors", entries)
    if layout == "speculators":
        cfg = {
            "architectures": ["Eagle3DraftModel"],
            "speculators_model_type": "eagle3",
            "draft_vocab_size": VD,
            "norm_before_residual": False,
            "transformer_layer_config": {
                k: v for k, v in LLAMA.items() if k not in ("architectures", "draft_vocab_size")
            },
            "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": "t", "architectures": []}},
        }
    elif layout == "eagle":
        cfg = dict(LLAMA, architectures=["LlamaForCausalLM"])
    else:
        cfg = dict(LLAMA)
    cfg.update(SOURCES[layout])
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def write_target(path, family: str):
    base = {"hidden_size": H, "num_hidden_layers": L, "vocab_size": V, "num_attention_heads": NH}
    cfg = dict(TARGETS[family])
    if "text_config" in cfg:
        cfg["text_config"] = base
    else:
        cfg.update(base)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def doctor_errors(draft, target) -> list[str]:
    rep = diagnose(DoctorConfig(draft=str(draft), target=str(target), sglang_version=VERSION, probe_env=False))
    return [f"{f.code}: {f.title}" for f in rep.findings if f.severity == "error"]


def ids_of(cfg: dict, layout: str):
    if layout == "speculators":
        return cfg.get("eagle_aux_hidden_state_layer_ids")
    return (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")


@pytest.mark.parametrize("family", sorted(TARGETS))
@pytest.mark.parametrize("src_layout", sorted(SOURCES))
def test_convert_then_doctor_then_back(tmp_path, src_layout, family):
    src = write_draft(tmp_path / "src", src_layout)
    tgt = write_target(tmp_path / "target", family)
    for to in ("sglang", "speculators", "eagle"):
        out = tmp_path / f"out_{to}"
        convert(src, out, to, target=str(tgt), sglang_version=VERSION)
        cfg = json.loads((out / "config.json").read_text())
        rec = cfg[AUX_SOURCE_KEY]
        assert rec["capture_points"] == [2, 4, 5] and rec["convention"] == src_layout and rec["translated"]
        errs = doctor_errors(out, tgt)
        if to == "sglang":
            assert not errs, errs
            assert ids_of(cfg, "sglang") == [1, 3, 4]  # every family's rule adds 1 to these ids
        else:  # another stack's layout: SGLang would not load it as is, but the wiring facts hold
            assert not [e for e in errs if e.startswith("aux.")], errs
        # the round trip restores the source's ids (specforge training checkpoints are not a destination)
        back_to = src_layout if src_layout != "specforge" else "sglang"
        back = tmp_path / f"back_{to}"
        convert(out, back, back_to, target=str(tgt), sglang_version=VERSION)
        bcfg = json.loads((back / "config.json").read_text())
        if src_layout in ("speculators", "sglang"):
            assert ids_of(bcfg, back_to) == ids_of(json.loads((src / "config.json").read_text()), src_layout)
        assert bcfg[AUX_SOURCE_KEY]["capture_points"] == [2, 4, 5]
        shutil.rmtree(back)


def test_speculators_ids_are_shifted_for_sglang_and_the_record_survives_a_config_copy(tmp_path):
    """The reported bug: [2, 4, 5] copied unchanged made SGLang capture [3, 5, 6] on an 8-layer Llama."""
    src = write_draft(tmp_path / "spec", "speculators")
    tgt = write_target(tmp_path / "llama", "llama")
    convert(src, tmp_path / "sg", "sglang", target=str(tgt), sglang_version=VERSION)
    cfg = json.loads((tmp_path / "sg" / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert cfg[AUX_SOURCE_KEY]["aux_layer_ids"] == [2, 4, 5] and cfg[AUX_SOURCE_KEY]["convention"] == "speculators"
    # only config.json + weights copied: no kit_provenance.json, the config still carries the fact
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(tmp_path / "sg" / f, copy / f)
    assert not doctor_errors(copy, tgt)
    # somebody "fixes" the ids back to the speculators integers: doctor names the shift from the record
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 5]
    (copy / "config.json").write_text(json.dumps(cfg))
    assert any(e.startswith("aux.layer_shift") for e in doctor_errors(copy, tgt))


def test_refuses_without_target_when_the_meaning_depends_on_it(tmp_path, capsys):
    src = write_draft(tmp_path / "spec", "speculators")
    with pytest.raises(KitInputError, match="--target"):
        convert(src, tmp_path / "sg", "sglang", sglang_version=VERSION)
    assert not (tmp_path / "sg").exists()
    rc = main(["convert", str(src), str(tmp_path / "sg"), "--to", "sglang"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--target" in err
    # speculators -> speculators-convention points need no target: the ids are the points already
    sg = write_draft(tmp_path / "sgsrc", "sglang")
    with pytest.raises(KitInputError, match="--target"):
        convert(sg, tmp_path / "x", "speculators", sglang_version=VERSION)


def test_untranslatable_points_are_refused(tmp_path):
    """Official EAGLE captures fixed points; a draft trained elsewhere cannot be written for it."""
    src = write_draft(tmp_path / "spec", "speculators")
    cfg = json.loads((src / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 4, 6]
    (src / "config.json").write_text(json.dumps(cfg))
    tgt = write_target(tmp_path / "llama", "llama")
    with pytest.raises(KitInputError, match="official EAGLE captures points"):
        convert(src, tmp_path / "e", "eagle", target=str(tgt), sglang_version=VERSION)
    convert(src, tmp_path / "sg", "sglang", target=str(tgt), sglang_version=VERSION)
    out = json.loads((tmp_path / "sg" / "config.json").read_text())
    assert out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 3, 5]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    points=st.lists(st.integers(1, L - 1), min_size=3, max_size=3, unique=True).map(sorted),
    family=st.sampled_from(sorted(TARGETS)),
)
def test_any_trained_points_convert_exactly_or_are_refused(tmp_path_factory, points, family):
    """Whatever points a speculators draft was trained on: SGLang captures exactly them after conversion, or the
    converter refuses (no ids express them for that class); converting back restores the ids."""
    base = tmp_path_factory.mktemp("pts")
    src = write_draft(base / "spec", "speculators")
    cfg = json.loads((src / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = points
    (src / "config.json").write_text(json.dumps(cfg))
    tgt = write_target(base / "t", family)
    try:
        convert(src, base / "sg", "sglang", target=str(tgt), sglang_version=VERSION)
    except KitInputError as e:
        assert "no eagle_aux_hidden_state_layer_ids make" in str(e) and not (base / "sg").exists()
        return
    assert not [e for e in doctor_errors(base / "sg", tgt) if e.startswith("aux.")]
    convert(base / "sg", base / "back", "speculators", target=str(tgt), sglang_version=VERSION)
    assert json.loads((base / "back" / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == points
