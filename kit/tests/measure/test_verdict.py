"""kit.measure.verdict: the three stories (wiring fault, weak draft, healthy) and the join with the oracle."""

import pytest

from kit.findings import Finding
from kit.measure.verdict import PARAM_KEYS, verdict, verdict_table

STATIC = [
    Finding(code="launch.eagle_not_eagle3", severity="error", title="EAGLE with an EAGLE-3 draft"),
    Finding(code="env.no_gpu", severity="info", title="no GPU"),
]


def test_wiring_fault_names_static_causes():
    (f,) = verdict(1.0, 2.3, STATIC, label="3-1-4")
    assert f.code == "verdict.wiring_fault" and f.severity == "error"
    assert f.evidence["probable_causes_static"] == ["launch.eagle_not_eagle3: EAGLE with an EAGLE-3 draft"]
    assert "launch.eagle_not_eagle3" in f.title and f.title.startswith("3-1-4:")
    assert any("EAGLE3" in c for c in f.evidence["probable_causes_generic"])


def test_an_error_is_the_first_suspect_before_an_earlier_warning():
    static = [Finding(code="env.nccl_var", severity="warning", title="NCCL_P2P_LEVEL=SYS"), *STATIC]
    (f,) = verdict(1.05, 2.05, static, label="seed launch")
    assert f.evidence["probable_causes_static"][0].startswith("launch.eagle_not_eagle3")
    assert f.evidence["probable_causes_static"][1].startswith("env.nccl_var")
    assert "first static suspect: launch.eagle_not_eagle3" in f.title


@pytest.mark.parametrize(
    "obs,exp,code",
    [
        (1.05, 2.0, "verdict.wiring_fault"),
        (1.15, 1.2, "verdict.weak_draft"),
        (1.6, 2.6, "verdict.below_expected"),
        (2.4, 2.5, "verdict.healthy"),
        (2.9, 2.5, "verdict.healthy"),
        (None, 2.5, "verdict.no_data"),
        (float("nan"), 2.5, "verdict.no_data"),
    ],
)
def test_verdict_classes(obs, exp, code):
    assert [f.code for f in verdict(obs, exp)] == [code]


def test_join_and_table():
    observed = [
        {
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
            "accept_length": 1.0,
        },
        {
            "speculative_num_steps": 5,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 6,
            "accept_length": 2.9,
        },
        {
            "speculative_num_steps": 7,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 8,
            "accept_length": 3.0,
        },
    ]
    expected = [
        {
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
            "expected_accept_length": 2.4,
        },
        {
            "speculative_num_steps": 5,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 6,
            "expected_accept_length": 3.0,
        },
    ]
    by_params = {tuple(r[k] for k in PARAM_KEYS): r["expected_accept_length"] for r in expected}
    j = [{**r, "observed_accept_length": r["accept_length"],
          "expected_accept_length": by_params.get(tuple(r[k] for k in PARAM_KEYS))} for r in observed]  # fmt: skip
    assert [r["expected_accept_length"] for r in j] == [2.4, 3.0, None]
    codes = [f.code for f in verdict_table(j, STATIC)]
    assert codes == ["verdict.wiring_fault", "verdict.healthy", "verdict.no_data"]


def test_the_verdict_names_where_the_expectation_came_from():
    """One naming: an oracle on server-captured states, on the target's forward, or the training log."""
    from types import SimpleNamespace

    from kit.measure.verdict import SERVER_CAPTURE, TRAINING_LOG, TRANSFORMERS_FORWARD, expectation_source

    server = {"hidden_states": {"source": "server capture (SGLang 0.5.17, smollm2)", "points": [2, 15, 27]}}
    kit_engine = {"hidden_states": {"source": "kit engine (smollm2, fp32)", "points": [2, 15, 27]}}
    assert expectation_source(server) == SERVER_CAPTURE
    assert expectation_source(kit_engine) == expectation_source({"results": {}}) == TRANSFORMERS_FORWARD
    assert expectation_source(training=SimpleNamespace(source="train.log")).startswith(TRAINING_LOG)
    # the seed's EAGLE launch: expected from the draft's own capture points in the server, observed ~1.0
    row = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    joined = [{**row, "observed_accept_length": 1.0, "expected_accept_length": 2.4, "expected_from": SERVER_CAPTURE}]
    (f,) = verdict_table(joined, STATIC)
    assert f.code == "verdict.wiring_fault" and f.evidence["expected_from"] == SERVER_CAPTURE
    (g,) = verdict_table([{**joined[0], "expected_from": None}], STATIC)
    assert g.evidence["expected_from"] == TRANSFORMERS_FORWARD
