"""kit.reference.train: the TTT loss, vocabulary and cache key on tiny models (hermetic; the real run is in tests/)."""

import torch

from kit.reference.target import TargetCapture
from kit.reference.train import TrainConfig, capture_ids, continue_with_features, draft_vocab, ttt_loss
from kit.tests.tinymodels import one_thread, tiny_draft, tiny_target  # noqa: F401 (autouse fixture)


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


def test_features_captured_while_generating_equal_a_teacher_forced_pass():
    """One pass (hooks on during KV-cached generate, left padding) gives the teacher-forced states and labels."""
    m = tiny_target(layers=4, dtype=torch.float64)
    rows = [[5, 7, 9, 11, 2], [3, 4], [8, 8, 1]]  # different lengths: left padding in one batch
    data = continue_with_features(m, rows, gen_tokens=6, batch=3, points=[1, 2, 4], pad=0, eos=None, log=lambda *_: 0)
    assert [int(d["start"]) for d in data] == [4, 1, 2]
    for r, d in zip(rows, data):
        ids = d["ids"]
        assert ids[: len(r)].tolist() == r and len(ids) == len(r) + 5  # 6 new tokens, the last only a label
        with TargetCapture(m, [1, 2, 4]) as cap:
            logits = m(input_ids=ids[None]).logits[0]
        ref = cap.features()[0]
        assert torch.allclose(d["feats"].double(), ref, rtol=1e-2, atol=1e-2)  # stored in bf16
        assert d["labels"][d["start"] :].tolist() == logits.argmax(-1)[d["start"] :].tolist()
        assert d["labels"][d["start"] : -1].tolist() == ids[d["start"] + 1 :].tolist()  # label = next fed token


def test_sampled_continuations_are_labelled_with_the_greedy_token():
    """Sampled text, greedy labels: each label is the teacher-forced argmax after the sampled prefix."""
    m = tiny_target(layers=4, dtype=torch.float64)
    rows = [[5, 7, 9, 11, 2], [3, 4], [8, 8, 1]]
    torch.manual_seed(0)
    data = continue_with_features(
        m, rows, gen_tokens=12, batch=3, points=[1, 2, 4], pad=0, eos=None, log=lambda *_: 0, temperature=5.0
    )
    off_greedy = 0
    for r, d in zip(rows, data):
        ids = d["ids"]
        assert ids[: len(r)].tolist() == r and len(ids) == len(r) + 11
        logits = m(input_ids=ids[None]).logits[0]
        assert d["labels"][d["start"] :].tolist() == logits.argmax(-1)[d["start"] :].tolist()
        off_greedy += int((d["labels"][d["start"] : -1] != ids[d["start"] + 1 :]).sum())
    assert off_greedy > 0  # at temperature 5 the fed text leaves the greedy path
