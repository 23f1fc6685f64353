"""kit.reference.chain: the chain pick from a forward-cost curve and the draft's recorded accept lengths (hermetic)."""

import json

import torch

from kit.models import shipped_draft
from kit.reference.chain import DEFAULT, forward_ms, pick_chain, predict, recorded_accept_lengths
from kit.tests.tinymodels import tiny_target


def test_recorded_accept_lengths_take_each_chains_first_record(tmp_path):
    oracle = {
        "2-1-3@64": {"meta_accept_length": 1.9},
        "2-1-3@128": {"meta_accept_length": 1.5},
        "3-1-4@64": {"meta_accept_length": 2.1},
        "prompts": 24,
    }
    (tmp_path / "training.json").write_text(json.dumps({"oracle": oracle}))
    assert recorded_accept_lengths(tmp_path) == {"2-1-3": 1.9, "3-1-4": 2.1}
    assert recorded_accept_lengths(tmp_path / "missing") == {}


def test_the_shipped_draft_records_both_candidates():
    assert {"2-1-3", "3-1-4"} <= set(recorded_accept_lengths(shipped_draft()))


def test_predict_follows_the_verify_cost():
    # a 4-token forward cheaper than a 3-token one (AVX2 EPYC): 3-1-4 wins; the other way round (AMX Xeon): 2-1-3
    epyc, xeon = {1: 88.0, 3: 104.0, 4: 90.0}, {1: 60.0, 3: 62.0, 4: 81.0}
    for fwd, best in ((epyc, 3), (xeon, 2)):
        by_steps = {s: predict({2: 1.93, 3: 2.05}[s], s, fwd, 0.1) for s in (2, 3)}
        assert max(by_steps, key=by_steps.get) == best
    assert predict(2.0, 2, {1: 10.0, 3: 10.0}, 0.0) == 2.0  # a free verify and free draft steps: the accept length


def test_no_record_keeps_the_default_without_loading_a_model(tmp_path):
    pick = pick_chain("embedded", tmp_path)
    assert pick.params == DEFAULT and "records no oracle accept length" in pick.why and pick.forward_ms == {}


def test_forward_ms_times_each_size():
    model = tiny_target(dtype=torch.float32)
    fwd = forward_ms(model, (1, 3), reps=2, prefix=8)
    assert set(fwd) == {1, 3} and all(v > 0 for v in fwd.values())
