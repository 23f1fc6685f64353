"""kit.reference.oracle on tiny random models: the offline walk equals real speculative decoding (hermetic)."""

import pytest
import torch

from kit.reference.oracle import accepted, evaluate
from kit.reference.speculate import Wiring, greedy_generate, speculative_generate
from kit.sglang.params import SpecParams
from kit.tests.tinymodels import CopyDraft, one_thread, tiny_draft, tiny_target  # noqa: F401 (autouse fixture)

PROMPTS = [[1, 5, 7, 9, 11, 3, 17], [2, 4, 6, 8, 10]]


@pytest.fixture(scope="module")
def setup():
    t = tiny_target()
    seqs = [(p, greedy_generate(t, p, 20).tokens) for p in PROMPTS]
    return t, seqs


@pytest.mark.parametrize("p", [SpecParams(3, 1, 4), SpecParams(3, 2, 6), SpecParams(2, 3, 7)], ids=lambda p: p.label())
def test_walk_equals_speculative_generate(setup, p):
    t, seqs = setup
    d = tiny_draft(t, draft_vocab=96, seed=3)
    with torch.no_grad():  # make the random draft agree with the target now and then
        d.lm_head.weight.copy_(t.get_output_embeddings().weight)
    res = evaluate(t, d, seqs[:1], p)
    sg = speculative_generate(t, d, seqs[0][0], len(seqs[0][1]), p, Wiring())
    assert res.accept_lengths == sg.accept_lengths
    assert res.meta_accept_length == round(len(sg.tokens) / sg.verify_steps, 4)


def test_copy_draft_reaches_the_maximum(setup):
    t, seqs = setup
    p = SpecParams(3, 1, 4)
    res = evaluate(t, CopyDraft(t, PROMPTS[0][0]), seqs[:1], p)
    assert res.depth_rates == [1.0, 1.0, 1.0] and res.position_accept_length == 4.0
    assert all(a == 4 for a in res.accept_lengths[:-1])
    assert res.histogram.get(3, 0) == len(res.accept_lengths)


def test_fault_switches_run_and_report(setup):
    t, seqs = setup
    d = tiny_draft(t, draft_vocab=96)
    for w in (
        Wiring(aux_capture=False),
        Wiring(layer_shift=1),
        Wiring(algorithm="EAGLE"),
        Wiring(dropped_keys=("midlayer.self_attn.q_proj.weight",)),
    ):
        r = evaluate(t, d, seqs, SpecParams(3, 1, 4), w)
        assert r.verify_steps == len(r.accept_lengths) and 1.0 <= r.accept_length <= 4.0
        assert r.target_tokens == sum(len(a) + len(b) for a, b in seqs)
        assert r.wiring == w.describe()


def test_accepted_counts_along_tree():
    toks, pars = [5, 6, 7, 8], [-1, -1, 0, 2]
    assert accepted(toks, pars, [5, 7, 8]) == 3
    assert accepted(toks, pars, [6, 7]) == 1
    assert accepted(toks, pars, [5, 7]) == 2  # truth shorter than the tree: capped
    assert accepted(toks, pars, [9]) == 0


def test_dropped_keys_for_old_sglang(tmp_path):
    """The seed: speculators-named keys (layers.0.*) met a midlayer-era SGLang and were dropped."""
    from kit.checkpoint.load_sim import dropped_keys
    from kit.reference.draft_io import save_draft

    d = tiny_draft(draft_vocab=96)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 64,
        "vocab_size": 96,
        "draft_vocab_size": 96,
        "num_hidden_layers": 1,
    }
    out = save_draft(d, tmp_path / "d", cfg)
    old = dropped_keys(out, "0.4.10", "speculators")
    assert "midlayer.self_attn.q_proj.weight" in old and "fc.weight" not in old
    assert dropped_keys(out, "0.5.23", "speculators") == ()
