"""RaggedTarget's measured GEMM order: either order gives the model's own numbers."""

import torch

from kit.reference.target import Piece, RaggedTarget, linear, small_rows_transposed
from kit.tests.tinymodels import one_thread, tiny_target  # noqa: F401 (autouse fixture)


def test_either_gemm_order_gives_the_same_verify_forward():
    m = tiny_target(layers=3, dtype=torch.float32)
    ids = [5, 7, 9, 11, 2, 3, 4, 8]
    outs = []
    for transposed in (False, True):
        rt = RaggedTarget(m, [1, 2])
        rt.transposed = transposed
        kv = rt.new_kv(32)
        rt.forward([Piece(kv, ids[:5], logits="last")])
        outs.append(rt.forward([Piece(kv, ids[5:])])[0])  # a 3-token verify: the small-row path
    (pred_a, feats_a), (pred_b, feats_b) = outs
    assert pred_a == pred_b and len(pred_a) == 3
    assert torch.allclose(feats_a, feats_b, atol=1e-5)


def test_small_rows_transposed_measures_and_says_why():
    weights = [torch.randn(64, 32) for _ in range(4)]
    pick, why = small_rows_transposed(weights)
    assert isinstance(pick, bool) and "x @ W^T" in why and "W @ x^T" in why
    assert small_rows_transposed([]) == (False, "not a CPU")


def test_linear_keeps_the_module_path_outside_small_rows():
    lin = torch.nn.Linear(8, 4, bias=False)
    for rows in (1, 3, 9):
        x = torch.randn(rows, 8)
        assert torch.allclose(linear(lin, x, transposed=True), lin(x), atol=1e-6)


def test_gemm_order_is_measured_once_per_model(monkeypatch):
    import kit.reference.target as kt

    calls = []
    monkeypatch.setattr(kt, "small_rows_transposed", lambda w: calls.append(len(w)) or (False, "stub"))
    m = tiny_target(layers=3, dtype=torch.float32)
    for _ in range(3):  # a per-prompt greedy or speculative call builds an engine each time
        assert RaggedTarget(m, None).transposed_why == "stub"
    assert calls == [3]
