"""Checkpoints written by the real speculators 0.9.0 and SpecForge 0.2.0, through kit inspect/convert, back into the other library.

Runs in the `speculators` side venv (kit.venvs: speculators 0.9.0 + SpecForge 0.2.0 installed
--no-deps over the CPU torch). Inside it, subprocess scripts build a tiny verifier, save a draft
with `Eagle3DraftModel.save_pretrained` (speculators) and one with SpecForge's
`LlamaForCausalLMEagle3.save_pretrained`; the kit inspects and converts each to the other's layout;
the other library loads the result and both compute step-0 draft logits for the same token ids
and aux hidden states: they must be equal (float32, CPU).
"""

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kit.checkpoint.convert import convert
from kit.checkpoint.inspect import inspect
from kit.checkpoint.safetensors_io import read_checkpoint, sha256_of

pytestmark = pytest.mark.interop

MAKE = r"""
import json, sys, torch
from pathlib import Path
from transformers import LlamaConfig, LlamaForCausalLM
w = Path(sys.argv[1]); torch.manual_seed(0)
V, H, VD = 1000, 64, 200
LlamaForCausalLM(LlamaConfig(num_hidden_layers=8, hidden_size=H, num_attention_heads=2, num_key_value_heads=2,
    intermediate_size=128, vocab_size=V, max_position_embeddings=512, rms_norm_eps=1e-6,
    tie_word_embeddings=False)).save_pretrained(w / "verifier")

def perturb(m, skip):
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.is_floating_point() and not any(s in n for s in skip):
                p.add_(torch.randn_like(p) * 0.1)

def vocab(seed):
    g = torch.Generator().manual_seed(seed)
    kept = torch.sort(torch.randperm(V, generator=g)[:VD]).values
    t2d = torch.zeros(V, dtype=torch.bool); t2d[kept] = True
    return t2d, kept - torch.arange(VD)

from speculators.models.eagle3 import Eagle3DraftModel
from speculators.train.cli import create_transformer_layer_config
tl = create_transformer_layer_config(verifier_name_or_path=str(w / "verifier"), num_layers=1, draft_arch="llama",
                                     hidden_act=None, sliding_window=0, full_attention_indices=[0])
t2d, d2t = vocab(1)
m = Eagle3DraftModel.from_training_args(verifier_config=tl, t2d=t2d, d2t=d2t, verifier_name_or_path=str(w / "verifier"),
        draft_vocab_size=VD, norm_before_residual=False, ttt_steps=1, draft_attn_impl="simple_flex_attention")
perturb(m, ("embed_tokens", "lm_head", "verifier"))
m.save_pretrained(w / "spec")
# the same draft on speculators' Qwen3 decoder layer (`--draft-arch qwen3`: q/k norms in its attention)
tl = create_transformer_layer_config(verifier_name_or_path=str(w / "verifier"), num_layers=1, draft_arch="qwen3",
                                     hidden_act=None, sliding_window=0, full_attention_indices=[0])
Eagle3DraftModel.from_training_args(verifier_config=tl, t2d=t2d, d2t=d2t, verifier_name_or_path=str(w / "verifier"),
        draft_vocab_size=VD, norm_before_residual=False, ttt_steps=1,
        draft_attn_impl="simple_flex_attention").save_pretrained(w / "spec_qwen3")

from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig
cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H, "num_attention_heads": 2,
       "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 1, "vocab_size": V,
       "draft_vocab_size": VD, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu",
       "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
       "pad_token_id": 0, "torch_dtype": "float32"}
(w / "sf_config.json").write_text(json.dumps(cfg))
sf = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(str(w / "sf_config.json")), attention_backend="sdpa")
sf.load_embedding(str(w / "verifier")); sf.freeze_embedding()
t2d, d2t = vocab(2)
sf.t2d.copy_(t2d); sf.d2t.copy_(d2t)
perturb(sf, ("embed_tokens",))
sf.save_pretrained(w / "sf")
print("made")
"""

FORWARD = r"""
import json, sys, torch
from pathlib import Path
w = Path(sys.argv[1]); T = 128
g = torch.Generator().manual_seed(7)
ids = torch.randint(0, 1000, (1, T), generator=g)
hid = torch.randn(1, T, 3 * 64, generator=g)

def speculators_logits(d):
    from speculators.models.eagle3 import Eagle3DraftModel
    m = Eagle3DraftModel.from_pretrained(str(d)).eval()
    out = []
    h = m.lm_head.register_forward_hook(lambda mod, i, o: out.append(o.detach().clone()))
    with torch.no_grad():
        m(hidden_states=hid, input_ids=ids, document_ids=torch.zeros(1, T, dtype=torch.long),
          position_ids=torch.arange(T).unsqueeze(0), ttt_steps=1)
    h.remove()
    return out[0], getattr(m, "d2t", None)

def specforge_logits(d):
    from specforge.modeling.auto import AutoDraftModel
    m = AutoDraftModel.from_pretrained(str(d), attention_backend="sdpa").eval()
    # SpecForge 0.2.0 + transformers 5.19: from_pretrained leaves the non-persistent rotary buffers
    # uninitialised (inv_freq zeros, cos/sin NaN); take them from a freshly constructed model
    fresh = dict(AutoDraftModel.from_config(m.config, attention_backend="sdpa").named_buffers())
    with torch.no_grad():
        for n, b in m.named_buffers():
            if "rotary_emb" in n:
                b.copy_(fresh[n])
    with torch.no_grad():
        h = m(hidden_states=hid, inputs_embeds=m.embed_input_ids(ids), ttt_length=1)  # returns norm(h)
        return m.lm_head(h), m.d2t

res = {}
for name, a, b in (("speculators_to_sglang", speculators_logits(w / "spec"), specforge_logits(w / "spec_sg")),
                   ("specforge_to_speculators", specforge_logits(w / "sf"), speculators_logits(w / "sf_sp"))):
    res[name] = {"max_abs_diff": float((a[0] - b[0]).abs().max()), "scale": float(a[0].abs().max()),
                 "d2t_equal": bool(torch.equal(a[1], b[1])), "shape": list(a[0].shape),
                 "argmax_equal": bool(torch.equal(a[0].argmax(-1), b[0].argmax(-1)))}
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def work():
    from kit.venvs import ensure_venv

    py = str(ensure_venv("speculators"))
    # own temp dir: pytest prunes old basetemps, and concurrent sessions would remove ours mid-test
    w = Path(tempfile.mkdtemp(prefix="kit-interop-"))
    try:
        r = subprocess.run([py, "-c", MAKE, str(w)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        yield py, w
    finally:
        shutil.rmtree(w, ignore_errors=True)


def test_inspect_genuine_checkpoints(work):
    _, w = work
    spec = inspect(w / "spec", "0.5.23")
    assert spec.layout.name == "speculators"
    assert "draft.arch" in spec.report.codes() and not spec.report.by_code("draft.shape")
    assert not spec.report.by_code("draft.d2t")
    old = inspect(w / "spec", "0.5.8")
    assert old.report.by_code("draft.keys_dropped")[0].severity == "error"
    sf = inspect(w / "sf", "0.5.23")
    assert sf.layout.name == "sglang" and not sf.report.errors, [f.title for f in sf.report.errors]
    assert sf.simulation.ok and inspect(w / "sf", "0.5.8").simulation.ok


def test_convert_and_load_in_the_other_library(work):
    py, w = work
    convert(w / "spec", w / "spec_sg", "sglang", target=str(w / "verifier"), sglang_version="0.5.8")
    convert(w / "sf", w / "sf_sp", "speculators", target=str(w / "verifier"))
    assert inspect(w / "spec_sg", "0.5.8").simulation.ok and inspect(w / "spec_sg", "0.5.23").simulation.ok
    a, b = read_checkpoint(w / "spec"), read_checkpoint(w / "spec_sg")
    assert sha256_of(a.tensors["layers.0.self_attn.q_proj.weight"]) == sha256_of(
        b.tensors["midlayer.self_attn.q_proj.weight"]
    )
    prov = json.loads((w / "sf_sp" / "kit_provenance.json").read_text())
    assert prov["source_layout"] == "sglang" and prov["destination_layout"] == "speculators"
    r = subprocess.run([py, "-c", FORWARD, str(w)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for name, x in res.items():
        assert x["shape"] == [1, 128, 200] and x["d2t_equal"], (name, x)
        assert x["max_abs_diff"] <= 1e-4 * max(1.0, x["scale"]), (name, x)
        assert x["argmax_equal"], (name, x)


CONVERT = r"""
import sys
from pathlib import Path
from speculators.convert.eagle.eagle3_converter import Eagle3Converter
w = Path(sys.argv[1])
# as speculators' examples/convert/eagle3/apply_eagle3_llama4_maverick.sh converts NVIDIA's head: the source head's
# output-convention ids ([1, L//2-1, L-4], SpecForge's and ModelOpt's default) passed through
Eagle3Converter().convert(w / "sf", w / "sf_conv", str(w / "verifier"), validate=False,
                          eagle_aux_hidden_state_layer_ids=[1, 3, 4])
print("converted")
"""


def test_top_level_ids_graded_by_what_sglang_captures(work):
    """Two configs the real speculators writes, on their 8-layer verifier (SGLang's default points [2, 4, 5]): its
    own training export (ids [2, 4, 5], point = id: info) and `speculators convert` of the SpecForge head with the
    head's ids [1, 3, 4] copied, as its Maverick example does (points [2, 4, 5] as copied output-convention ids,
    [1, 3, 4] as speculators ids: warnings, not errors)."""
    from kit.hf import HFConfig
    from kit.wiring.checks import wiring_checks

    py, w = work
    r = subprocess.run([py, "-c", CONVERT, str(w)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    target = HFConfig.of(json.loads((w / "verifier" / "config.json").read_text()))
    argv = ["--speculative-algorithm", "EAGLE3"]

    def aux(d):
        cfg = json.loads((w / d / "config.json").read_text())
        found = wiring_checks(target, HFConfig.of(cfg), argv, "0.5.23", draft_dir=w / d)
        return cfg["eagle_aux_hidden_state_layer_ids"], {(f.code, f.severity) for f in found if "layer" in f.code}

    assert aux("spec") == ([2, 4, 5], {("aux.layer_ids_ignored", "info")})
    assert aux("sf_conv") == ([1, 3, 4], {("aux.layer_ids_ignored", "warning"), ("aux.layer_shift", "warning")})


def test_vllm_serve_of_the_genuine_speculators_draft(work):
    """`vllm serve DRAFT` on the draft the real speculators saved: read as vLLM reads it, its verifier the target, so
    a release that detects the format finds nothing wrong; 0.10.0, which does not, serves the draft itself, and 0.10.2
    serves the verifier alone."""
    from kit.doctor import DoctorConfig, diagnose

    _, w = work
    line = f"vllm serve {w / 'spec'} --max-model-len 512"
    new = diagnose(DoctorConfig(launch=line, vllm_version="0.33.0"))
    assert not new.errors, [f.title for f in new.errors]
    for old in ("0.10.0", "0.10.2"):  # 0.10.2 detects it but serves the verifier without speculation (PR #25250)
        assert [f.code for f in diagnose(DoctorConfig(launch=line, vllm_version=old)).errors] == [
            "launch.vllm_speculators"
        ], old


def test_vllm_loads_the_genuine_qwen3_layer_draft_from_0_24(work):
    """speculators' Qwen3-layer draft (`--draft-arch qwen3`, q/k norms in its attention) through vLLM's loader rules:
    before 0.24.0 vLLM builds every speculators EAGLE-3 draft on its Llama class, which has no q/k norms, and stops
    at startup on `layers.0.self_attn.q_norm.weight` (the KeyError of vllm PRs #44322 and #43132); 0.24.0 maps the
    qwen3 layer to Eagle3Qwen3ForCausalLM. The Llama-layer draft loads on both."""
    from kit.doctor import DoctorConfig, diagnose

    _, w = work
    errors = lambda d, v: {f.code for f in diagnose(DoctorConfig(launch=f"vllm serve {w / d}", vllm_version=v)).errors}
    [f] = [f for f in diagnose(DoctorConfig(launch=f"vllm serve {w / 'spec_qwen3'}", vllm_version="0.23.0")).errors]
    assert f.code == "draft.vllm_keys" and "layers.0.self_attn.k_norm.weight" in f.title and "0.24.0" in f.fix, f.fix
    assert not errors("spec_qwen3", "0.24.0") and not errors("spec", "0.23.0") and not errors("spec", "0.24.0")
    assert read_checkpoint(w / "spec_qwen3").tensors.keys() >= {"layers.0.self_attn.q_norm.weight"}


def test_real_t2d_without_d2t_is_graded_by_its_misnumbered_share(work, tmp_path):
    """SpecForge's export keeps 200 random ids of 1000: drop its d2t and SGLang would serve draft id i as target
    id i; its real t2d says which draft ids then mean another token (most of them here: an error, with the share)."""
    import torch

    from kit.checkpoint.safetensors_io import load_tensor, write_safetensors
    from kit.checkpoint.vocab import check_vocab, misnumbered_share

    _, w = work
    ck = read_checkpoint(w / "sf")
    t2d = load_tensor(ck.tensors["t2d"])
    tensors = {n: load_tensor(t) for n, t in ck.tensors.items() if n != "d2t"}
    write_safetensors(tmp_path / "model.safetensors", tensors)
    wrong, first = misnumbered_share(t2d.tolist(), 200)
    [f] = check_vocab(read_checkpoint(tmp_path), 1000, 200)
    assert f.severity == "error" and f.evidence["misnumbered_draft_ids"] == wrong and wrong / 200 > 0.05
    kept = torch.nonzero(t2d).flatten()
    assert first == int(torch.nonzero(kept != torch.arange(200)).flatten()[0])
