"""kit.reference.speculate: chain/tree drafting + greedy verification on tiny random models (hermetic)."""

import pytest
import torch

from kit.findings import KitInputError
from kit.reference.speculate import (
    BatchDecoder,
    Sequence,
    Wiring,
    draft_trees,
    greedy_generate,
    speculative_generate,
    walk_tree,
)
from kit.reference.target import reference_greedy
from kit.sglang.params import SpecParams
from kit.tests.tinymodels import CopyDraft, one_thread, tiny_draft, tiny_target  # noqa: F401 (autouse fixture)

PARAMS = [
    SpecParams(3, 1, 4),
    SpecParams(5, 1, 6),
    SpecParams(3, 2, 6),
    SpecParams(4, 3, 8),
    SpecParams(1, 4, 4),
    SpecParams(2, 4, 10),
]
PROMPT = [1, 5, 7, 9, 11, 3, 17]


@pytest.fixture(scope="module")
def pair():
    t = tiny_target()
    return t, tiny_draft(t, draft_vocab=96)


@pytest.mark.parametrize("p", PARAMS, ids=lambda p: p.label())
def test_tokens_equal_greedy(pair, p):
    t, d = pair
    g = greedy_generate(t, PROMPT, 24)
    r = speculative_generate(t, d, PROMPT, 24, p, Wiring())
    assert r.tokens == g.tokens == reference_greedy(t, PROMPT, 24)
    assert r.verify_steps == len(r.accept_lengths)
    assert sum(r.accept_lengths) + 1 == len(r.tokens)  # + the prefill token
    assert all(1 <= a <= p.speculative_num_steps + 1 for a in r.accept_lengths)


@pytest.mark.parametrize(
    "wiring",
    [
        Wiring(aux_capture=False),
        Wiring(layer_shift=1),
        Wiring(dropped_keys=("midlayer.mlp.down_proj.weight",)),
        Wiring(algorithm="EAGLE"),
    ],
    ids=str,
)
def test_faulted_wiring_still_exact(pair, wiring):
    t, d = pair
    g = greedy_generate(t, PROMPT, 16)
    assert speculative_generate(t, d, PROMPT, 16, SpecParams(3, 2, 5), wiring).tokens == g.tokens


@pytest.mark.parametrize(
    "p", [SpecParams(3, 1, 4), SpecParams(5, 1, 6), SpecParams(3, 2, 6), SpecParams(4, 3, 8)], ids=lambda p: p.label()
)
def test_copy_draft_gets_max_accept_length(p):
    t = tiny_target()
    d = CopyDraft(t, PROMPT[0])
    r = speculative_generate(t, d, PROMPT, 1 + 5 * (p.speculative_num_steps + 1), p, Wiring())
    assert r.tokens == greedy_generate(t, PROMPT, len(r.tokens)).tokens
    assert r.accept_lengths == [p.speculative_num_steps + 1] * 5


def test_eos_and_max_new_tokens(pair):
    t, d = pair
    g = greedy_generate(t, PROMPT, 20)
    eos = g.tokens[6]
    stop = g.tokens.index(eos)
    r = speculative_generate(t, d, PROMPT, 20, SpecParams(3, 1, 4), Wiring(), eos_token_id=eos)
    assert r.tokens == g.tokens[: stop + 1]
    assert greedy_generate(t, PROMPT, 20, eos_token_id=eos).tokens == r.tokens
    assert len(speculative_generate(t, d, PROMPT, 1, SpecParams(), Wiring()).tokens) == 1


def test_resolution_rules():
    assert (
        SpecParams(3, 1, 8).resolved().speculative_num_draft_tokens == 4
    )  # SGLang forces steps+1 for speculative_eagle_topk 1
    assert SpecParams(2, 2, 7).resolved().speculative_num_draft_tokens == 7  # 2 + 1*4 = 6 candidates
    with pytest.raises(KitInputError):
        SpecParams(2, 2, 8).resolved()


def test_tree_shape_and_scores(pair):
    t, d = pair
    torch.manual_seed(0)
    logits = torch.randn(96, dtype=torch.float64)
    aux = torch.randn(32, dtype=torch.float64)
    kv = [(torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(1, 2, 5, 8, dtype=torch.float64))]
    toks, pars, scores = draft_trees(d, logits[None], aux[None], kv, [5], [4], SpecParams(3, 2, 6).resolved())[0]
    assert len(toks) == 5
    for j, pa in enumerate(pars):
        assert pa < j  # parents precede children
        if pa >= 0:
            assert scores[j] <= scores[pa] + 1e-12  # cumulative score never grows down a path
    top2 = torch.topk(torch.softmax(logits, -1), 2).indices.tolist()
    assert {tk for tk, pa in zip(toks, pars) if pa == -1} == set(top2)  # step 0 = top-k of the logits


def test_walk_tree_follows_matching_children():
    toks, pars = [5, 6, 7, 8], [-1, -1, 0, 2]
    verify = lambda pred: lambda node, depth: pred[node + 1]  # serving: the verify forward's argmax
    assert walk_tree(toks, pars, verify([6, 0, 9, 0, 0])) == [1]
    assert walk_tree(toks, pars, verify([5, 7, 0, 8, 4])) == [0, 2, 3]
    assert walk_tree(toks, pars, verify([4, 0, 0, 0, 0])) == []
    truth = [5, 7]  # the oracle: the target's continuation, cut at its length
    assert walk_tree(toks, pars, lambda node, depth: truth[depth] if depth < len(truth) else None) == [0, 2]


@pytest.mark.parametrize("p", [None, SpecParams(3, 1, 4), SpecParams(3, 2, 6)], ids=lambda p: p and p.label())
def test_batched_sequences_joining_late_equal_plain_greedy(pair, p):
    """Continuous batching: sequences of different lengths join at different steps and leave when done;
    each one's output is the target's plain greedy output, as if it ran alone."""
    t, d = pair
    dec = BatchDecoder(t) if p is None else BatchDecoder(t, d, p, Wiring())
    prompts = [PROMPT, [3, 4], PROMPT[:5] * 3, [9] * 11]
    lengths = [20, 13, 26, 7]
    seqs = [Sequence(list(x), n) for x, n in zip(prompts, lengths)]
    running, step = [], 0
    while any(not s.done for s in seqs):
        if step < len(seqs):
            running.append(seqs[step])  # one more joins every step
        out = dec.step([s for s in running if not s.done])
        assert all(len(o) >= 1 for o in out)
        step += 1
    for s, x, n in zip(seqs, prompts, lengths):
        assert s.tokens == reference_greedy(t, x, n)
