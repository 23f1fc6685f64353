"""kit.summary: step records gathered into summary.json/.md, the speedups over no speculation on top."""

import json

from kit.summary import collect, record


def test_speedups_of_both_launches_reach_the_summary(tmp_path):
    sp = {"fixed_launch": {"median": 1.52, "ci95": [1.31, 1.7], "n": 6}, "seed_launch": {"median": 0.93,
          "ci95": [0.9, 0.97], "n": 6}}  # fmt: skip
    record(tmp_path, "05_acceptance_throughput", accept_length={"fixed_launch": 1.9, "seed_launch": 1.1}, speedup=sp)
    s = collect(tmp_path)
    assert s["speedup"] == sp
    assert json.loads((tmp_path / "summary.json").read_text())["speedup"]["fixed_launch"]["median"] == 1.52
    md = (tmp_path / "summary.md").read_text()
    assert "| fixed launch | 1.52x [1.31, 1.70] (n 6) |" in md and "| seed's launch | 0.93x" in md


def test_a_run_without_a_payoff_says_n_a(tmp_path):
    record(tmp_path, "04_launch_server", accept_length={"fixed_launch": 1.5})
    s = collect(tmp_path)
    assert s["speedup"] == {"fixed_launch": None, "seed_launch": None}
    assert "| fixed launch | n/a |" in (tmp_path / "summary.md").read_text()


def test_the_pairing_and_a_steps_break_even_reach_summary_md(tmp_path):
    sp = {"fixed_launch": {"median": 0.93, "ci95": [0.81, 1.1], "n": 4, "pairing": "repeat"}, "seed_launch": None}
    be = {"sentence": "with accept length 2.17, EAGLE-3 pays on this GPU from a target decode step of ≥ 3.10 ms "
                      "(≈ 1.2 B parameters)"}  # fmt: skip
    record(tmp_path, "05_acceptance_throughput", speedup=sp, break_even=be)
    s = collect(tmp_path)
    assert s["break_even"] == be
    md = (tmp_path / "summary.md").read_text()
    assert "| fixed launch | 0.93x [0.81, 1.10] (n 4 repeats) |" in md
    assert "paired median, 95% interval" in md
    assert f"**Where EAGLE-3 pays on this GPU** (measured costs, `bench/gpu_breakeven.py`): {be['sentence']}" in md
