"""kit.measure.breakeven: predicted speedup and break-even from per-iteration costs (numbers worked by hand).

python -m pytest kit/tests/measure/test_breakeven.py -q
"""

import json

import pytest

from kit.hf import HFConfig
from kit.measure.breakeven import (
    BreakEven,
    IterationCosts,
    SizePoint,
    analyze,
    break_even,
    draft_step_ms,
    llama_params,
    sentence,
    sentence_for,
)


def test_one_sizes_costs_give_its_speedup_and_break_even_accept_length():
    c = IterationCosts(t_decode_ms=1.75, t_iteration_ms=4.1)
    assert c.break_even_accept_length == pytest.approx(4.1 / 1.75)  # 2.343: above the demo draft's 2.17
    assert c.predicted_speedup(2.171) == pytest.approx(0.92665, abs=1e-4)
    assert c.predicted_speedup(c.break_even_accept_length) == pytest.approx(1.0)
    # a request: the prefill's first token, then 127 tokens at 1.75 ms vs 127 / 2.171 iterations at 4.1 ms
    assert c.request_speedup(2.171, 128, 10.0, 12.0) == pytest.approx((10 + 127 * 1.75) / (12 + 127 / 2.171 * 4.1))
    with pytest.raises(ValueError):
        IterationCosts(0.0, 1.0)


def test_a_draft_step_is_the_slope_over_num_steps():
    assert draft_step_ms(4.1, 2, 3.0, 1) == pytest.approx(1.1)
    assert draft_step_ms(3.0, 1, 5.2, 3) == pytest.approx(1.1)
    with pytest.raises(ValueError):
        draft_step_ms(1.0, 2, 1.0, 2)


def _points():
    # break-even accept lengths 3.0, 1.5, 1.1: the iteration's share falls as the target grows
    return [
        SizePoint("big", 10**10, 4096, 32, IterationCosts(10.0, 11.0)),
        SizePoint("small", 10**8, 576, 30, IterationCosts(2.0, 6.0)),
        SizePoint("mid", 10**9, 2048, 24, IterationCosts(4.0, 6.0)),
    ]


def test_break_even_interpolates_in_log_params_between_the_sizes_around_it():
    be = break_even(_points(), 2.25)  # half way from 3.0 to 1.5
    assert be.where == "within"
    assert be.params == pytest.approx((1e8 * 1e9) ** 0.5)
    assert be.t_decode_ms == pytest.approx((2.0 * 4.0) ** 0.5)
    assert break_even(_points(), 1.2).params == pytest.approx(1e9 * 10 ** (0.75))  # (1.5 - 1.2) / (1.5 - 1.1)
    assert break_even(_points(), 3.5) == BreakEven(3.5, "smallest", 1e8, 2.0)
    assert break_even(_points(), 1.0) == BreakEven(1.0, "beyond", None, None)


def test_llama_params_counts_smollm2_135m_exactly():
    cfg = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True}  # fmt: skip
    assert llama_params(HFConfig.of(cfg)) == 134_515_008  # SmolLM2-135M's published count
    assert llama_params(HFConfig.of({**cfg, "tie_word_embeddings": False})) == 134_515_008 + 49152 * 576


def test_analyze_compares_the_prediction_with_the_measured_speedup_and_says_it_in_one_sentence(tmp_path):
    doc = analyze(_points(), 2.25, at="small", measured_speedup=0.8, new_tokens=128, prefill_ms={"baseline": 5.0})
    assert [r["name"] for r in doc["sizes"]] == ["small", "mid", "big"]
    assert doc["sizes"][0]["predicted_speedup"] == pytest.approx(0.75)
    at = doc["at_demo_target"]
    assert at["predicted_speedup"] == pytest.approx(0.75) and at["relative_error"] == pytest.approx(-0.0625)
    assert at["predicted_request_speedup"] == pytest.approx((5 + 127 * 2.0) / (127 / 2.25 * 6.0), abs=1e-4)
    assert doc["sentence"] == (
        "with accept length 2.25, EAGLE-3 pays on this GPU from a target decode step of ≥ 2.83 ms (≈ 316 M parameters)"
    )
    p = tmp_path / "breakeven.json"
    p.write_text(json.dumps({"analysis": doc, "errors": []}))
    text = sentence(json.loads(p.read_text()))
    assert text.endswith("predicted speedup at the demo's target 0.75x (measured 0.80x).")
    assert sentence({"errors": ["start 7b_eagle3: CUDA out of memory"]}) == (
        "break-even not measured (start 7b_eagle3: CUDA out of memory)"
    )
    assert "does not pay on this GPU at any measured" in sentence_for(BreakEven(1.0, "beyond", None, None))
    assert "1.7 B parameters" in sentence_for(BreakEven(2.0, "within", 1.7e9, 3.0))
