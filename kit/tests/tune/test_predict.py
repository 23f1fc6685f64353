"""kit.tune.predict with made-up step costs: the model, the ranking, the selection, the answer, the miss finding."""

import math

import pytest

from kit.sglang.params import SpecParams
from kit.tune.predict import StepCosts, best, calibrated, calibration_points, fit, miss_finding, second_look, select


def test_the_two_calibration_points_are_reproduced():
    # made-up costs: decode 10 ms, a draft forward 2 ms, each extra verify token a request carries 10% of a decode
    truth = StepCosts(0.010, 0.002, 0.1)
    short, tree = SpecParams(1, 1, 2), SpecParams(3, 2, 11)
    measured = {p: truth.iteration(p) for p in (short, tree)}
    costs = fit(0.010, measured)
    assert (costs.decode, costs.draft, costs.growth) == pytest.approx((0.010, 0.002, 0.1))
    for p, t in measured.items():  # each calibration point's prediction is what its calibration measured
        assert costs.speedup(p, 2.0) == pytest.approx(2.0 * 0.010 / t)
    assert costs.iteration(SpecParams(3, 1, 4)) == pytest.approx(0.010 * 1.3 + 4 * 0.002)
    assert costs.iteration(SpecParams(5, 1, 6)) == pytest.approx(0.010 * 1.5 + 6 * 0.002)  # beyond: extrapolated


def test_fit_never_goes_below_zero():
    chains = (SpecParams(1, 1, 2), SpecParams(3, 1, 4))
    flat = fit(0.010, dict(zip(chains, (0.016, 0.022))))  # +3 ms a step, 13 ms at 0 steps: a 3 ms draft, no growth
    assert flat.growth == pytest.approx(0.0) and flat.draft == pytest.approx(0.003)
    no_growth = fit(0.010, dict(zip(chains, (0.020, 0.022))))  # g would be < 0: the longer chain alone gives the draft
    assert no_growth.growth == 0.0 and no_growth.draft == pytest.approx(0.012 / 4)
    free_draft = fit(0.010, dict(zip(chains, (0.009, 0.015))))  # the draft would be < 0: the longer chain alone gives g
    assert free_draft.draft == 0.0 and free_draft.growth == pytest.approx(0.005 / 0.030)


def test_the_calibration_spans_the_grids_verify_sizes():
    grid = [SpecParams(1, 1, 2), SpecParams(2, 1, 3), SpecParams(2, 2, 7), SpecParams(3, 2, 11)]
    assert calibration_points(grid) == (SpecParams(1, 1, 2), SpecParams(3, 2, 11))
    assert calibration_points([SpecParams(2, 1, 3)]) == (SpecParams(1, 1, 2), SpecParams(2, 1, 3))
    assert calibration_points([SpecParams(1, 1, 2)]) == (SpecParams(1, 1, 2), SpecParams(3, 1, 4))
    # a grid without 1-1-2 is calibrated on its own points: no launch outside the grid
    assert calibration_points([SpecParams(2, 2, 7), SpecParams(3, 2, 11)]) == (
        SpecParams(2, 2, 7),
        SpecParams(3, 2, 11),
    )
    assert calibration_points([SpecParams(3, 2, 3), SpecParams(2, 1, 3)]) == (SpecParams(2, 1, 3), SpecParams(3, 2, 3))
    # 3-2-3 verifies 2 extra tokens over 4 draft forwards, as 1-1-2 does 1 over 2: the fit could not tell them apart
    assert calibration_points([SpecParams(1, 1, 2), SpecParams(3, 2, 3)]) == (SpecParams(1, 1, 2), SpecParams(3, 1, 4))


def test_calibrated_reads_a_bench_summary():
    ends = (SpecParams(1, 1, 2), SpecParams(2, 2, 7))
    labels = {"baseline": {"output_tok_s": 100.0}, "1-1-2": {"output_tok_s": 150.0, "accept_length": 1.8},
              "2-2-7": {"output_tok_s": 120.0, "accept_length": 2.4}}  # fmt: skip
    entry = calibrated(4, labels, ends)
    assert entry["t_decode_s"] == pytest.approx(0.04)
    assert entry["t_iteration_s"] == {"1-1-2": pytest.approx(4 * 1.8 / 150), "2-2-7": pytest.approx(4 * 2.4 / 120)}
    fitted = fit(0.04, {p: entry["t_iteration_s"][p.label()] for p in ends})
    assert (entry["t_draft_s"], entry["growth"]) == (fitted.draft, fitted.growth)


def test_select_measures_the_best_predicted_that_can_pay():
    predicted = {"1-1-2": 1.1, "2-1-3": 1.4, "3-1-4": 1.3, "3-4-8": 0.5}
    assert select(predicted, 2, 0.35) == ["2-1-3", "3-1-4"]
    assert select(predicted, 9, 0.35) == ["2-1-3", "3-1-4", "1-1-2"]  # 0.5 cannot pay even 35% off
    assert select({"a": 0.4, "b": 0.6}, 2, 0.35) == ["b"]  # none can: the best is still checked


def _row(median, lo, hi, inconclusive=None):
    return {"median": median, "ci95": [lo, hi], "inconclusive": inconclusive}


def test_best_says_pays_no_speculation_or_inconclusive():
    assert best({"2-1-3": _row(1.3, 1.2, 1.4), "3-1-4": _row(1.5, 1.4, 1.6)}) | {"verdict": ""} == {
        "point": "3-1-4",
        "pays": True,
        "verdict": "",
    }
    no = best({"2-1-3": _row(0.9, 0.85, 0.95)})
    assert no["point"] is None and no["pays"] is False and no["verdict"].startswith("no speculation (best 2-1-3 0.90x")
    assert best({"2-1-3": _row(1.1, 0.95, 1.2)})["pays"] is False  # the interval reaches 1: not shown to pay
    unsure = best({"2-1-3": _row(1.6, 1.1, 2.0, "its 95% interval is 1.9x wide")})
    assert unsure["pays"] is None and unsure["point"] == "2-1-3" and "1.9x wide" in unsure["verdict"]
    # noisy and reaching 1 (H100, batch 4, 2026-12-07): no speculation, as the blind grid said, not the point
    noisy = best({"2-4-21": _row(1.01, 0.89, 1.14, "the paired median 1.01x and the arms' tok/s ratio 0.94x disagree")})
    assert noisy["point"] is None and noisy["pays"] is False and noisy["verdict"].startswith("no speculation")
    assert best({"2-1-3": _row(None, None, None)}) == {"point": None, "verdict": "not measured"}
    assert "nan" in best({"2-1-3": {"median": 1.2, "ci95": [None, None], "inconclusive": "no interval"}})["verdict"]


def test_a_large_miss_is_a_finding():
    assert miss_finding(1, "2-1-3", 1.5, 1.3, 0.35) is None
    f = miss_finding(4, "3-2-7", 1.5, 0.6, 0.35)
    assert f.code == "bench.prediction_miss" and f.severity == "warning"
    assert f.title == "batch 4, 3-2-7: measured 0.60x, predicted 1.50x (-60%)"
    assert miss_finding(1, "x", 1.0, 1.0 + 0.35 + 1e-9, 0.35) is not None
    assert not math.isnan(f.evidence["predicted"])


def test_a_second_look_only_after_a_miss():
    pred = {"1-1-2": 1.1, "2-1-3": 0.9, "3-1-4": 0.7}
    near = {"1-1-2": {"median": 1.2, "predicted": 1.1}}
    assert second_look(near, pred, {"1-1-2"}, 2, 0.35) == []
    far = {"1-1-2": {"median": 1.9, "predicted": 1.1}}
    assert second_look(far, pred, {"1-1-2"}, 2, 0.35) == ["2-1-3", "3-1-4"]  # below select's cut: measured anyway
    assert second_look({"1-1-2": {"median": None, "predicted": 1.1}}, pred, {"1-1-2"}, 2, 0.35) == []
