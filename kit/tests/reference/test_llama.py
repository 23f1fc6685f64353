"""kit.reference.llama: the kit's own Llama-layout modules give transformers' tokens and features bit for bit.

Tiny random targets of each covered layout are built with transformers and saved; both loaders read the
same files and `RaggedTarget` runs both (a prefill, then a verify-shaped forward over a tree). The embedded
SmolLM2 checks the real default, and that the tokenizer class `kit.models.load_tokenizer` imports directly
is the one AutoTokenizer builds.
"""

import json

import pytest
import torch

from kit.reference.llama import LlamaLayout, load_engine_target, load_llama, unsupported
from kit.reference.target import Piece, RaggedTarget


def _save(tmp_path, kind: str):
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.25)  # fmt: skip
    cls, kw = {
        "llama": ("Llama", dict(tie_word_embeddings=True)),
        "llama-bias-untied": ("Llama", dict(tie_word_embeddings=False, attention_bias=True, mlp_bias=True)),
        "qwen2": ("Qwen2", dict(tie_word_embeddings=False)),
        "qwen3": ("Qwen3", dict(tie_word_embeddings=True, head_dim=16)),
        "mistral": ("Mistral", dict(tie_word_embeddings=False, sliding_window=None)),
    }[kind]
    cfg = getattr(transformers, f"{cls}Config")(**common, **kw)
    model = getattr(transformers, f"{cls}ForCausalLM")(cfg).eval()
    d = tmp_path / kind
    model.save_pretrained(d)
    return d, model


def _run(model) -> list:
    r = RaggedTarget(model, points=[1, 2, 4])
    kv = r.new_kv(64)
    out = r.forward([Piece(kv, list(range(5, 25)), logits="all")])
    out += r.forward([Piece(kv, [7, 8, 9, 10], parents=[-1, 0, 0, 1])])  # a verify over a small tree
    return out


@pytest.mark.parametrize("kind", ["llama", "llama-bias-untied", "qwen2", "qwen3", "mistral"])
def test_same_tokens_and_features_as_transformers(tmp_path, kind):
    d, hf = _save(tmp_path, kind)
    assert unsupported(d) is None
    lean = load_llama(d)
    assert isinstance(lean, LlamaLayout)
    # torch's own allocations, as transformers' weights are: a GEMM over a weight left at its file offset
    # splits its sums differently at some thread counts
    assert all(p.data_ptr() % 64 == 0 for p in lean.parameters())
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            for (ids_a, f_a), (ids_b, f_b) in zip(_run(lean), _run(hf)):
                assert ids_a == ids_b
                assert torch.equal(f_a, f_b)  # the same operations in the same order: bitwise
    finally:
        torch.set_num_threads(before)
    if kind == "llama":
        assert lean.lm_head.weight is lean.model.embed_tokens.weight  # tied as transformers ties it
    assert not any(p.requires_grad for p in lean.parameters())


def test_what_it_does_not_cover_is_named(tmp_path):
    d, _ = _save(tmp_path, "llama")
    cfg = json.loads((d / "config.json").read_text())
    for change, why in [
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}}, "rope type 'llama3'"),
        ({"model_type": "gpt2"}, "model_type 'gpt2'"),
    ]:
        (d / "config.json").write_text(json.dumps({**cfg, **change}))
        assert unsupported(d) == why
        with pytest.raises(ValueError, match="does not cover"):
            load_llama(d)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").unlink()
    assert unsupported(d) == "no safetensors weights"


def test_embedded_target_loads_without_transformers_models_and_decodes_the_same():
    import subprocess
    import sys

    code = (
        "import sys; from kit.reference.llama import load_engine_target; m, tok = load_engine_target('embedded'); "
        "print(type(m).__name__, type(tok).__name__, any(k.startswith('transformers.models') for k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["LlamaLayout", "TokenizersBackend", "False"]

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kit.models import chat_ids, resolve_target
    from kit.prompts import builtin_prompts
    from kit.reference.speculate import greedy_generate

    lean, tok = load_engine_target("embedded")
    d = resolve_target("embedded")
    hf, hf_tok = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(d)
    assert type(tok) is type(hf_tok)
    assert (tok.eos_token_id, tok.pad_token_id) == (hf_tok.eos_token_id, hf_tok.pad_token_id)
    prompts = [r["prompt"] for r in builtin_prompts()][:3]
    for p in prompts:
        ids = chat_ids(tok, p)
        assert ids == chat_ids(hf_tok, p) and tok.encode(p) == hf_tok.encode(p)
        a, b = greedy_generate(lean, ids, 12, tok.eos_token_id), greedy_generate(hf, ids, 12, tok.eos_token_id)
        assert a.tokens == b.tokens
        assert tok.decode(a.tokens, skip_special_tokens=True) == hf_tok.decode(b.tokens, skip_special_tokens=True)
