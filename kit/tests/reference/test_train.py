"""kit.reference.train: the TTT loss, vocabulary and cache key on tiny models (hermetic; the real run is in tests/)."""

import torch

from kit.reference.train import TrainConfig, capture_ids, draft_vocab, ttt_loss
from kit.tests.tinymodels import one_thread, tiny_draft  # noqa: F401 (autouse fixture)


def test_capture_ids_give_sglang_default_points():
    assert capture_ids(30) == [1, 14, 26]  # +1 in SGLang's Llama class -> [2, 15, 27]
    assert [x + 1 for x in capture_ids(61)] == [2, 30, 58]


def test_cache_key_tracks_settings():
    a, b = TrainConfig(), TrainConfig(epochs=3)
    assert a.key("t") == TrainConfig().key("t") != b.key("t") and a.key("t") != a.key("u")
    assert TrainConfig(json=True, out="x").key("t") == a.key("t")  # output flags do not retrain
    q = TrainConfig(quick=True).preset()
    assert q.num_prompts < a.num_prompts and q.gen_tokens < a.gen_tokens


def test_draft_vocab_covers_labels_and_floor():
    data = [{"labels": torch.tensor([90, 91]), "ids": torch.tensor([5, 95])}]
    hot = draft_vocab(data, 96, 10)
    assert hot.tolist() == list(range(10)) + [90, 91, 95]


def test_ttt_loss_trains_and_uses_unrolled_steps():
    torch.manual_seed(0)
    d = tiny_draft(draft_vocab=96, dtype=torch.float32)
    B, N = 4, 24
    ids = torch.randint(0, 96, (B, N))
    labels = torch.roll(ids, -1, 1)  # a fixed random sequence: memorizable
    feats = torch.randn(B, N, 96)
    mask = torch.ones(B, N, dtype=torch.bool)
    t2d = torch.arange(96)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-2)
    first = None
    for _ in range(40):
        loss, accs = ttt_loss(d, ids, feats, labels, mask, 3, t2d)
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert len(accs) == 3 and float(loss.detach()) < 0.5 * first
    assert accs[0] > 0.5
