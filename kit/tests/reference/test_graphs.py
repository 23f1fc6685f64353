"""kit.reference.graphs: the static-shape chain decoder (CPU, against BatchDecoder) and its CUDA graphs (GPU)."""

import random

import pytest
import torch

from kit.findings import KitInputError
from kit.reference.graphs import ChainCore, GraphedChainDecoder, GraphedGreedy, chain_accept
from kit.reference.speculate import Wiring, greedy_generate, speculative_generate, walk_tree
from kit.sglang.params import SpecParams
from kit.tests.tinymodels import one_thread, tiny_draft, tiny_target  # noqa: F401 (autouse fixture)

PROMPT = [1, 5, 7, 9, 11, 3, 17]
CHAINS = [SpecParams(3, 1, 4), SpecParams(5, 1, 6), SpecParams(1, 1, 2), SpecParams(2, 1, 3)]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def sticky_draft(t, dtype=torch.float64):
    """A tiny draft whose d2t maps every draft id to the target's most frequent greedy token, so that
    some drafts are accepted (a random draft alone accepts none on this target)."""
    d = tiny_draft(t, dtype=dtype, draft_vocab=96)
    toks = greedy_generate(t, PROMPT, 40).tokens
    d.hot_token_id = torch.full((96,), max(set(toks), key=toks.count), dtype=torch.long, device=t.device)
    return d


@pytest.fixture(scope="module")
def pair():
    t = tiny_target()
    return t, sticky_draft(t)


def test_chain_accept_is_walk_tree_on_chains():
    rng = random.Random(0)
    for _ in range(500):
        S = rng.randint(1, 6)
        drafts = [rng.randint(0, 3) for _ in range(S)]
        pred = [rng.randint(0, 3) for _ in range(S + 1)]
        path = walk_tree(drafts, list(range(-1, S - 1)), lambda node, depth, pred=pred: pred[node + 1])
        n = chain_accept(torch.tensor(drafts), torch.tensor(pred))
        assert int(n) == len(path)
        assert pred[int(n)] == pred[len(path)]  # the bonus


@pytest.mark.parametrize("p", CHAINS, ids=lambda p: p.label())
def test_static_core_equals_batch_decoder(pair, p):
    t, d = pair
    ref = speculative_generate(t, d, PROMPT, 30, p, Wiring())
    core = ChainCore(t, d, p, Wiring(), capacity=128)
    with torch.inference_mode():
        s = core.run_spec(PROMPT, 30)
    assert s.tokens == ref.tokens == greedy_generate(t, PROMPT, 30).tokens
    assert s.accept_lengths == ref.accept_lengths and s.accepted_drafts == ref.accepted_drafts
    if p.speculative_num_steps > 1:
        assert max(ref.accepted_drafts) > 0  # the accepted path is exercised, not just n = 0


@pytest.mark.parametrize(
    "wiring", [Wiring(aux_capture=False), Wiring(layer_shift=1), Wiring(algorithm="EAGLE")], ids=str
)
def test_static_core_wirings(pair, wiring):
    t, d = pair
    p = SpecParams(3, 1, 4)
    ref = speculative_generate(t, d, PROMPT, 20, p, wiring)
    with torch.inference_mode():
        s = ChainCore(t, d, p, wiring, capacity=128).run_spec(PROMPT, 20)
    assert s.tokens == ref.tokens and s.accept_lengths == ref.accept_lengths


def test_static_core_greedy_and_eos(pair):
    t, d = pair
    g = greedy_generate(t, PROMPT, 24)
    core = ChainCore(t, capacity=64)
    with torch.inference_mode():
        assert core.run_greedy(PROMPT, 24).tokens == g.tokens
        eos = g.tokens[6]
        stop = g.tokens.index(eos)
        assert core.run_greedy(PROMPT, 24, [eos]).tokens == g.tokens[: stop + 1]
        spec = ChainCore(t, d, SpecParams(3, 1, 4), capacity=64)
        ref = speculative_generate(t, d, PROMPT, 24, SpecParams(3, 1, 4), eos_token_id=eos)
        s = spec.run_spec(PROMPT, 24, [eos])
    assert s.tokens == ref.tokens == g.tokens[: stop + 1] and s.accept_lengths == ref.accept_lengths


def test_refusals(pair):
    t, d = pair
    with pytest.raises(KitInputError, match="chains only"):
        ChainCore(t, d, SpecParams(3, 2, 6))
    with pytest.raises(KitInputError, match="capacity"):
        ChainCore(t, capacity=16).run_greedy(PROMPT, 24)
    with pytest.raises(KitInputError, match="CUDA"):
        GraphedGreedy(t)
    with pytest.raises(KitInputError, match="CUDA"):
        GraphedChainDecoder(t, d)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("p", [SpecParams(3, 1, 4), SpecParams(5, 1, 6)], ids=lambda p: p.label())
def test_graphed_equals_eager_on_cuda(p):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t = tiny_target(dtype=torch.float32).cuda()
    with torch.device("cuda"):
        d = sticky_draft(t, torch.float32).cuda()
        g = greedy_generate(t, PROMPT, 40)
        ref = speculative_generate(t, d, PROMPT, 40, p, Wiring())
    gg = GraphedGreedy(t, capacity=128)
    sd = GraphedChainDecoder(t, d, p, Wiring(), capacity=128)
    for _ in range(2):  # replays start from a clean state every request
        assert gg.generate(PROMPT, 40).tokens == g.tokens
        r = sd.generate(PROMPT, 40)
        assert r.tokens == g.tokens
        assert r.accept_lengths == ref.accept_lengths and max(r.accepted_drafts) > 0
    ph = sd.phase_times(PROMPT, 4)
    assert set(ph) == {"draft_chain", "verify", "accept", "extend"} and all(v > 0 for v in ph.values())
