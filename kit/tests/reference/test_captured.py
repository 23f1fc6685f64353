"""kit.reference.captured: a capture folder round-trips, and the oracle on captured states equals the oracle on
the kit's own target forward (tiny random models; the embedded SmolLM2 through the CLI)."""

import json

import pytest

from kit.findings import KitInputError
from kit.reference.captured import EmbeddingTarget, read_capture
from kit.reference.oracle import evaluate_each, save_capture
from kit.reference.speculate import Wiring, greedy_generate
from kit.sglang.params import SpecParams
from kit.tests.tinymodels import one_thread, tiny_draft, tiny_target  # noqa: F401 (autouse fixture)

PROMPTS = [[1, 5, 7, 9, 11, 3, 17], [2, 4, 6, 8, 10], [3]]
WIRINGS = {"correct": Wiring(), "launched as EAGLE": Wiring(algorithm="EAGLE"), "aux off": Wiring(aux_capture=False)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    t = tiny_target()
    seqs = [(p, greedy_generate(t, p, 16).tokens) for p in PROMPTS]
    seqs[-1] = (seqs[-1][0], seqs[-1][1][:1])  # too short to measure: kept in the capture, skipped by the oracle
    d = tiny_draft(t, draft_vocab=96, seed=3)
    out = tmp_path_factory.mktemp("cap") / "states"
    save_capture(t, d, seqs, out)
    tdir = tmp_path_factory.mktemp("target")
    t.save_pretrained(tdir)
    return t, d, seqs, out, tdir


@pytest.mark.parametrize("p", [SpecParams(3, 1, 4), SpecParams(2, 3, 7)], ids=lambda p: p.label())
def test_the_oracle_on_a_capture_equals_the_oracle_on_the_forward(setup, p):
    t, d, seqs, out, tdir = setup
    cap = read_capture(out, dtype="float64")
    assert cap.seqs() == seqs and cap.points == [1, 3, 4]  # the draft's ids (0, 2, 3) + 1
    stub = EmbeddingTarget(tdir, cap.num_hidden_layers, dtype="float64")  # embedding and head only
    direct = evaluate_each(t, d, seqs, p, WIRINGS)
    captured = evaluate_each(stub, d, cap.seqs(), p, WIRINGS, capture=cap)
    for name in WIRINGS:
        assert captured[name].accept_lengths == direct[name].accept_lengths, name
        assert captured[name].depth_rates == direct[name].depth_rates
    assert captured["correct"].accept_length != captured["launched as EAGLE"].accept_length


def test_what_a_capture_lacks_is_named(setup, tmp_path):
    t, d, seqs, out, tdir = setup
    cap = read_capture(out, dtype="float64")
    with pytest.raises(KitInputError, match=r"points \[2, 5\] were not captured"):
        evaluate_each(t, d, seqs, SpecParams(3, 1, 4), {"shifted": Wiring(layer_shift=1)}, capture=cap)
    with pytest.raises(KitInputError, match="capture.json: not found"):
        read_capture(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    meta = json.loads((out / "capture.json").read_text())
    (bad / "capture.json").write_text(json.dumps({**meta, "hidden_size": 7}))
    (bad / "states.safetensors").write_bytes((out / "states.safetensors").read_bytes())
    with pytest.raises(KitInputError, match="shapes disagree"):
        read_capture(bad)


@pytest.mark.slow
def test_kit_oracle_on_states_captured_from_the_embedded_model(tmp_path):
    """`kit oracle --save-states` then `--hidden-states`: the same accept lengths, without a target forward; and
    `--token-path` of that capture (the forward again, on the capture's text) the same too."""
    import subprocess
    import sys

    common = ["--quick", "--num-prompts", "3", "--max-new-tokens", "24", "--compare", "--json"]
    run = [sys.executable, "-m", "kit", "oracle", *common]
    env_dir = tmp_path / "states"
    a = subprocess.run([*run, "--save-states", str(env_dir)], capture_output=True, text=True, check=True)
    b = subprocess.run([*run, "--hidden-states", str(env_dir)], capture_output=True, text=True, check=True)
    c = subprocess.run([*run, "--token-path", str(env_dir)], capture_output=True, text=True, check=True)
    direct = json.loads(a.stdout.splitlines()[-1])["results"]
    on_its_text = json.loads(c.stdout.splitlines()[-1])  # the forward on the capture's own (its greedy) text
    assert on_its_text["token_path"] == str(env_dir)
    assert {k: v["accept_length"] for k, v in on_its_text["results"].items()} == {
        k: v["accept_length"] for k, v in direct.items()
    }
    captured = json.loads(b.stdout.splitlines()[-1])
    assert captured["hidden_states"]["source"].startswith("kit engine")
    for name in ("correct", "aux capture off", "launched as EAGLE"):
        assert captured["results"][name]["accept_length"] == direct[name]["accept_length"], name
    assert "not captured" in captured["results"]["capture shifted +1"]["skipped"]
