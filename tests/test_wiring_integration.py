"""The wiring story on the real embedded target: SmolLM2-135M + the kit's shipped demo draft.

Correct EAGLE-3 wiring must give an accept length clearly above 1; the seed's faults (aux capture
off / launched as EAGLE) must collapse it to about 1. Also: speculative decoding on SmolLM2 emits
exactly the greedy tokens, and the CPU trainer's quick draft (the suite's one training, cached under
$KIT_CACHE_DIR) comes out in SGLang's layout with its provenance.
"""

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(shipped_draft):
    from kit.models import load_target
    from kit.reference.draft_io import load_draft
    from kit.reference.oracle import OracleConfig, continuations, prompt_texts

    target, tok = load_target()
    draft = load_draft(shipped_draft, target_model=target)
    seqs = continuations(target, tok, prompt_texts(OracleConfig(num_prompts=6)), 48)
    return target, tok, draft, seqs, shipped_draft


def test_trained_draft_is_sglang_layout_with_provenance(trained_quick_draft):
    import json

    from kit.checkpoint.safetensors_io import read_checkpoint

    path = trained_quick_draft
    keys = set(read_checkpoint(path).tensors)
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "d2t", "t2d", "lm_head.weight"} <= keys
    from kit.reference.train import ensure_demo_draft

    assert ensure_demo_draft(quick=True) == path  # cached: the second call trains nothing
    prov = json.loads((path / "kit_provenance.json").read_text())
    assert prov["capture_points"] == [2, 15, 27] and prov["source_layout"] == "sglang"
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]


def test_correct_wiring_beats_the_seed_faults(world):
    from kit.reference.oracle import evaluate
    from kit.reference.speculate import Wiring
    from kit.sglang.params import SpecParams

    target, _, draft, seqs, _ = world
    p = SpecParams(3, 1, 4)
    good = evaluate(target, draft, seqs, p, Wiring())
    off = evaluate(target, draft, seqs, p, Wiring(aux_capture=False))
    eagle = evaluate(target, draft, seqs, p, Wiring(algorithm="EAGLE"))
    print(f"accept length: correct {good.accept_length}, aux off {off.accept_length}, EAGLE {eagle.accept_length}")
    assert good.accept_length > 1.08 and good.position_accept_length > 1.08
    assert off.accept_length < 1.06 and eagle.accept_length < 1.06
    assert good.accept_length - off.accept_length > 0.05


def test_speculative_equals_greedy_on_smollm2(world):
    from kit.reference.speculate import Wiring, greedy_generate, speculative_generate
    from kit.sglang.params import SpecParams

    target, tok, draft, seqs, _ = world
    prompt = seqs[0][0]
    g = greedy_generate(target, prompt, 24, tok.eos_token_id)
    for p in (SpecParams(3, 1, 4), SpecParams(3, 2, 6)):
        r = speculative_generate(target, draft, prompt, 24, p, Wiring(), tok.eos_token_id)
        assert r.tokens == g.tokens


def test_oracle_results_are_cached_by_inputs(tmp_path, monkeypatch):
    """A second identical oracle run reads its results from the cache without loading a model; a draft whose
    files differ is a new entry (its results computed, not read)."""
    import shutil

    import kit.reference.llama
    from kit.models import shipped_draft
    from kit.reference.oracle import OracleConfig, run_config
    from kit.sglang.params import SpecParams

    draft = tmp_path / "draft"
    shutil.copytree(shipped_draft(), draft)
    cfg = OracleConfig(draft=str(draft), num_prompts=1, max_new_tokens=6, spec=SpecParams(2, 1, 3))
    first = run_config(cfg, log=lambda *_: None)
    real_load = kit.reference.llama.load_engine_target  # what the oracle loads its target with

    def refuse(*a, **k):
        raise AssertionError("the cached run loaded a model")

    monkeypatch.setattr(kit.reference.llama, "load_engine_target", refuse)
    assert run_config(cfg, log=lambda *_: None) == first
    (draft / "config.json").write_text((draft / "config.json").read_text() + "\n")  # same config, other bytes
    with pytest.raises(AssertionError, match="loaded a model"):
        run_config(cfg, log=lambda *_: None)
    monkeypatch.setattr(kit.reference.llama, "load_engine_target", real_load)
    again = run_config(cfg, log=lambda *_: None).results["requested"]
    assert (again.accept_length, again.histogram) == (
        first.results["requested"].accept_length,
        first.results["requested"].histogram,
    )
