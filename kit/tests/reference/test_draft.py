"""kit.reference.draft: SGLang 0.5.23 EAGLE-3 numerics on tiny random drafts (hermetic)."""

import json

import pytest
import torch

from kit.findings import KitInputError
from kit.reference.draft import DraftSpec, Eagle3Draft
from kit.reference.draft_io import load_draft, normalize_key, save_draft
from kit.tests.tinymodels import one_thread, tiny_draft, tiny_spec, tiny_target  # noqa: F401 (autouse fixture)

H = 32


def _inputs(T=5, width=3 * H, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, 96, (1, T), generator=g),
        torch.randn(1, T, width, generator=g, dtype=torch.float64),
        torch.arange(T)[None],
    )


def test_fc_gate_runs_only_when_width_differs():
    d = tiny_draft()
    calls = []
    h = d.fc.register_forward_hook(lambda *a: calls.append(1))
    ids, hid, pos = _inputs()
    d(ids, hid, pos)
    assert calls == [1]
    d(ids, hid[..., :H], pos)  # single-layer state: the gate is false, fc silently skipped
    assert calls == [1]
    h.remove()


def test_layer0_input_is_cat_embed_then_hidden_and_residual_is_unnormalized():
    d = tiny_draft()
    ids, hid, pos = _inputs()
    seen = {}
    d.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, o: seen.update(x=i[0]))  # returns None
    with torch.no_grad():
        d.layers[0].self_attn.o_proj.weight.zero_()
        d.layers[0].mlp.down_proj.weight.zero_()
        logits, aux, _ = d(ids, hid, pos)
        fc = d.fc(hid)
        want = torch.cat([d.layers[0].input_layernorm(d.embed_tokens(ids)), d.layers[0].hidden_norm(fc)], -1)
    assert torch.allclose(seen["x"], want)
    assert torch.allclose(aux, fc)  # residual = un-normalized fc output
    assert torch.allclose(logits, d.norm(fc) @ d.lm_head.weight.t())


def test_norm_output_feeds_normalized_state_forward():
    d = tiny_draft(norm_output=True)
    ids, hid, pos = _inputs()
    _, aux, _ = d(ids, hid, pos)
    assert torch.allclose(
        aux.pow(2).mean(-1).sqrt() / d.norm.weight.abs().mean(), torch.ones(1, 5, dtype=aux.dtype), atol=0.5
    )


def test_fc_norm_and_input_norm_modules():
    assert len(tiny_draft(fc_norm=True).fc_norm) == 3
    assert tiny_draft(norm_before_fc=True).input_norm.weight.shape == (3 * H,)


def test_kv_cache_extend_equals_full_pass():
    d = tiny_draft()
    ids, hid, pos = _inputs(T=7)
    full, _, _ = d(ids, hid, pos)
    a, _, kv = d(ids[:, :4], hid[:, :4], pos[:, :4])
    b, _, _ = d(ids[:, 4:], hid[:, 4:], pos[:, 4:], past_kv=kv)
    assert torch.allclose(torch.cat([a, b], 1), full, atol=1e-10)


def test_multi_layer_uses_hidden_norm_as_prenorm():
    spec = tiny_spec()
    spec.num_layers = 2
    d = Eagle3Draft(spec).double()
    ids, hid, pos = _inputs()
    with torch.no_grad():
        d.layers[1].input_layernorm.weight.mul_(5)  # unused for i >= 1 in SGLang
        a, _, _ = d(ids, hid, pos)
        d.layers[1].input_layernorm.weight.mul_(0.2)
        b, _, _ = d(ids, hid, pos)
    assert torch.equal(a, b)


def test_d2t_maps_to_target_ids_and_roundtrip(tmp_path):
    t = tiny_target()
    d = tiny_draft(draft_vocab=40)
    hot = torch.sort(torch.randperm(96)[:40]).values
    d.hot_token_id = hot
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "target_hidden_size": H,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 2 * H,
        "vocab_size": 96,
        "draft_vocab_size": 40,
        "num_hidden_layers": 1,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]},
    }
    out = save_draft(d, tmp_path / "d", cfg)
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "midlayer.self_attn.q_proj.weight" in keys and "d2t" in keys and "t2d" in keys
    assert not any(k.startswith("embed_tokens") for k in keys)
    back = load_draft(out, target_model=t, dtype=torch.float64)
    assert torch.equal(back.to_target_ids(torch.tensor([0, 39])), hot[[0, 39]])
    ids, hid, pos = _inputs()
    d.attach_target(t)
    assert torch.allclose(back(ids, hid, pos)[0], d(ids, hid, pos)[0])
    assert back.embed_tokens.weight is t.get_input_embeddings().weight  # set_embed: target's embedding
    assert back.load_report["dropped"] == []
    dropped = load_draft(out, target_model=t, dtype=torch.float64, drop_keys=("midlayer.hidden_norm.weight",))
    assert torch.equal(dropped.layers[0].hidden_norm.weight, torch.ones(H, dtype=torch.float64))


def test_target_head_rules():
    t = tiny_target()
    d = Eagle3Draft(tiny_spec(draft_vocab=None)).double().attach_target(t)  # draft_vocab_size: null
    assert d.lm_head.weight is t.get_output_embeddings().weight
    own = Eagle3Draft(tiny_spec(hidden=32, draft_vocab=50)).double()
    own.spec.target_hidden_size = 64  # Ht != H: keeps own embedding
    e = own.embed_tokens.weight
    own.attach_target(t)
    assert own.embed_tokens.weight is e
    ea = tiny_draft(draft_vocab=50)
    ea.attach_target(t, algorithm="EAGLE")  # EAGLE worker path: target head, first Vd columns
    ids, hid, pos = _inputs()
    assert ea(ids, hid[..., :H], pos)[0].shape[-1] == 50 and ea.lm_head.weight is t.get_output_embeddings().weight


def test_config_reading_follows_sglang():
    base = {"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "draft_vocab_size": 10}
    s = DraftSpec.from_config(
        {
            **base,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]},
            "eagle_aux_hidden_state_layer_ids": [9],
        }
    )
    assert s.num_aux == 4 and s.aux_layer_ids == [1, 2, 3, 4]
    assert DraftSpec.from_config(base).num_aux == 3
    with pytest.raises(KitInputError):
        DraftSpec.from_config({k: v for k, v in base.items() if k != "draft_vocab_size"})
    with pytest.raises(KitInputError):
        DraftSpec.from_config({**base, "target_hidden_size": None})
    assert normalize_key("model.midlayer.mlp.up_proj.weight") == "layers.0.mlp.up_proj.weight"
    assert normalize_key("aux_norm_mid.weight") == "fc_norm.1.weight"


def test_shape_mismatch_is_loud(tmp_path):
    from safetensors.torch import save_file

    d = tmp_path / "bad"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "hidden_size": 32,
                "num_attention_heads": 4,
                "vocab_size": 96,
                "draft_vocab_size": 96,
            }
        )
    )
    save_file({"fc.weight": torch.zeros(32, 64)}, str(d / "model.safetensors"))
    with pytest.raises(KitInputError, match="fc.weight"):
        load_draft(d)


def test_use_plan_half_runs_inference_on_fp16_weights_and_training_in_fp32():
    from kit.reference.target import MODULE_PATH, GemmPlan, can_half

    d = tiny_draft(dtype=torch.float32)
    if not can_half(d.fc.weight):
        return  # no FBGEMM in this torch: a plan never sets half
    ids, hid, pos = _inputs()
    hid = hid.float()
    from kit.reference.target import _HALF

    with torch.no_grad():
        ref = d(ids, hid, pos)[0]
    d.use_plan(GemmPlan({}, "test", half=True))
    assert d.fc in _HALF and d in _HALF  # its linears' and its head's fp16 copies are made by use_plan, not later
    with torch.no_grad():
        half = d(ids, hid, pos)[0]
    assert d.fc.half and d.layers[0].mlp.down_proj.half
    assert not torch.equal(ref, half) and torch.allclose(ref, half, atol=2e-2)  # fp16-rounded weights: close
    assert torch.equal(half.argmax(-1), ref.argmax(-1))
    loss = d(ids, hid, pos)[0].sum()  # gradients wanted: the fp32 weights, differentiable
    loss.backward()
    assert d.fc.weight.grad is not None and torch.allclose(loss.detach(), ref.sum(), atol=1e-4)
    d.use_plan(MODULE_PATH)
    with torch.no_grad():
        assert torch.equal(d(ids, hid, pos)[0], ref)
