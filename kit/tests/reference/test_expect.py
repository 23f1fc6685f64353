"""`kit expect`: training accuracies -> expected accept length (chain and SGLang tree), from every log format.

Run: python -m pytest kit/tests/reference/test_expect.py -q
"""

import itertools
import json
import math

import pytest

from kit.cli import main
from kit.findings import KitInputError
from kit.reference.expect import (
    Accuracies,
    ExpectConfig,
    chain_accept_length,
    expect,
    parse_log,
    rank_probs,
    read_accuracies,
    tree_accept_length,
)
from kit.sglang.params import SpecParams

# the shape of SpecForge's tracker output (train/acc_k, train/ploss_k per step; eval/acc_k at eval steps)
SPECFORGE_LOG = """\
step 100 {'train/loss': 7.91, 'train/acc_0': 0.52, 'train/acc_1': 0.41, 'train/acc_2': 0.35, 'train/ploss_0': 2.9}
step 200 {'train/loss': 6.13, 'train/acc_0': 0.745, 'train/acc_1': 0.66, 'train/acc_2': 0.61, 'train/ploss_0': 2.1}
eval {'eval/acc_0': 0.73, 'eval/acc_1': 0.64, 'eval/acc_2': 0.58, 'eval/ploss_0': 2.2, 'eval/simulated_acc_len': 1.4}
"""
# speculators' metric logger: nested dicts, full_acc_k (cumulative) and cond_acc_k (conditional)
SPECULATORS_LOG = """\
{"train": {"loss": 3.2, "full_acc_0": 0.70, "cond_acc_0": 0.70, "full_acc_1": 0.49, "cond_acc_1": 0.70}}
{"val": {"loss": 3.4, "full_acc_0": 0.60, "cond_acc_0": 0.60, "full_acc_1": 0.30, "cond_acc_1": 0.50}}
"""


def test_chain_is_specforge_simulated_acc_len_plus_the_bonus_token():
    acc = [0.745, 0.66, 0.61]
    specforge = sum(math.prod(acc[: k + 1]) for k in range(3))  # specforge/eval/evaluator.py _simulated_acc_len
    assert chain_accept_length(acc, 3) == pytest.approx(1 + specforge)
    assert chain_accept_length([0.745], 3) == pytest.approx(1 + 0.745 + 0.745**2 + 0.745**3)  # repeated
    assert chain_accept_length([1.0], 5) == 6 and chain_accept_length([0.0], 5) == 1


def test_cumulative_accuracies_are_converted():
    cum = Accuracies([0.7, 0.49, 0.3], "cumulative", "x")
    assert cum.conditional() == pytest.approx([0.7, 0.7, 0.3 / 0.49])
    assert chain_accept_length(cum.conditional(), 3) == pytest.approx(1 + 0.7 + 0.49 + 0.3)


def test_tree_reduces_to_chain_and_grows_with_budget():
    acc = [0.745, 0.66, 0.61, 0.6, 0.58]
    assert tree_accept_length(acc, 5, 1, 6, 0.25) == pytest.approx(chain_accept_length(acc, 5))
    prev = 1.0
    for n in (2, 4, 8, 16, 32, 64):
        al = tree_accept_length(acc, 5, 8, n, 0.25)
        assert prev <= al <= 6
        prev = al
    assert tree_accept_length(acc, 5, 8, 32, 0.0) == pytest.approx(chain_accept_length(acc, 5))  # q=0: no gain
    assert sum(rank_probs(0.7, 50, 0.25)) == pytest.approx(1.0, abs=1e-5)


def test_tree_matches_brute_force_over_every_node_set():
    """With calibrated scores the best-scored nodes are the likeliest: no other connected tree does better."""
    acc, q, topk, steps, budget = [0.6, 0.5], 0.4, 2, 2, 3
    nodes = {}
    for path in itertools.chain(itertools.product(range(topk), repeat=1), itertools.product(range(topk), repeat=2)):
        nodes[path] = math.prod(rank_probs(acc[d], topk, q)[r] for d, r in enumerate(path))
    best = max(
        sum(nodes[p] for p in pick)
        for pick in itertools.combinations(nodes, budget)
        if all(len(p) == 1 or p[:1] in pick for p in pick)
    )
    assert tree_accept_length(acc, steps, topk, budget + 1, q) == pytest.approx(1 + best)


def test_parse_specforge_log_prefers_eval_and_takes_the_last_step():
    a = parse_log(SPECFORGE_LOG)
    assert a.values == [0.73, 0.64, 0.58] and a.kind == "conditional" and "SpecForge" in a.source
    assert parse_log(SPECFORGE_LOG, split="train").values == [0.745, 0.66, 0.61]


def test_parse_speculators_log_prefers_conditional():
    a = parse_log(SPECULATORS_LOG)
    assert a.values == [0.60, 0.50] and a.kind == "conditional" and "speculators" in a.source
    t = parse_log(SPECULATORS_LOG, split="train")
    assert t.values == [0.70, 0.70]
    only_full = "\n".join(line.replace("cond_acc", "other") for line in SPECULATORS_LOG.splitlines())
    f = parse_log(only_full, split="train")
    assert f.kind == "cumulative" and chain_accept_length(f.conditional(), 2) == pytest.approx(1 + 0.70 + 0.49)


def test_reads_the_kit_trainer_provenance(tmp_path):
    (tmp_path / "kit_provenance.json").write_text(
        json.dumps({"epochs": [{"step_acc": [0.1]}, {"step_acc": [0.5, 0.4]}]})
    )
    a = read_accuracies(tmp_path)
    assert a.values == [0.5, 0.4] and a.kind == "conditional"


def test_expect_document_and_seed_figure():
    doc = expect(ExpectConfig(acc=[0.745]))
    assert doc["params"] == "3-1-4" and doc["expected_accept_length"] == pytest.approx(2.71, abs=0.01)
    assert any("repeat the last logged accuracy" in a for a in doc["assumptions"])
    tree = expect(ExpectConfig(acc=[0.745], spec=SpecParams(5, 8, 32)))
    assert tree["expected_accept_length"] > doc["chain_by_steps"][5] and any(
        "top-k coverage" in a for a in tree["assumptions"]
    )
    cumulative = ExpectConfig(acc=[0.7, 0.49], accuracy_kind="cumulative", spec=SpecParams(2, 1, 3))
    assert expect(cumulative)["expected_accept_length"] == pytest.approx(2.19)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["expect"], "--log FILE or --acc"),
        (["expect", "--acc", "74.5"], "outside [0, 1]"),
        (["expect", "--log", "/nonexistent/train.log"], "cannot read"),
        (["expect", "--acc", "0.7", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "99"], "3-4-99"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_log_without_accuracies_is_refused(tmp_path):
    (tmp_path / "t.log").write_text("loss 3.1\nloss 2.9\n")
    with pytest.raises(KitInputError, match="no per-position accuracies"):
        read_accuracies(tmp_path / "t.log")
    with pytest.raises(KitInputError, match=r"positions \[1\] missing"):
        parse_log("acc_0: 0.5 acc_2: 0.4")


def test_expected_accept_length_uses_resolved_params():
    from kit.reference.expect import expected_accept_length

    a = Accuracies([0.8], "conditional", "x")
    assert expected_accept_length(a, SpecParams(2, 1, 3)) == pytest.approx(1 + 0.8 + 0.64)


def test_verdict_uses_training_accuracies_when_no_oracle_number_exists():
    from kit.measure.verdict import TRAINING_LOG, TRANSFORMERS_FORWARD, verdict_table

    row = {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "observed_accept_length": 1.0,
        "expected_accept_length": None,
    }
    assert verdict_table([row])[0].code == "verdict.no_data"
    seed = Accuracies([0.745], "conditional", "seed step-0 accuracy")
    f = verdict_table([row], training=seed)[0]
    assert f.code == "verdict.wiring_fault" and f.evidence["expected_accept_length"] == pytest.approx(2.71, abs=0.01)
    assert f.evidence["expected_from"] == f"{TRAINING_LOG} (seed step-0 accuracy)"
    oracle = verdict_table([dict(row, expected_accept_length=1.05)], training=seed)[0]
    assert oracle.evidence["expected_from"] == TRANSFORMERS_FORWARD  # an oracle number wins
