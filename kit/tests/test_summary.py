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


def test_an_inconclusive_speedup_is_no_headline_and_the_machine_is_said_beside_it(tmp_path):
    why = "its 95% interval [0.31, 30.86] is 99.5x wide (the machine was busy: other work used 1.0 cores on average)"
    sp = {"seed_launch": {"median": 9.48, "ci95": [0.31, 30.86], "n": 18, "inconclusive": why},
          "fixed_launch": {"median": 1.6, "ci95": [1.4, 1.8], "n": 18}}  # fmt: skip
    watch = {"EAGLE (seed) 2-1-3": {"samples": 40, "others_cores": {"mean": 1.0, "max": 1.3},
                                    "load1": {"mean": 3.1, "max": 3.4}}}  # fmt: skip
    record(tmp_path, "05_acceptance_throughput", speedup=sp, machine_watch=watch)
    s = collect(tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "9.48" not in md and f"| seed's launch | inconclusive: {why} |" in md
    assert "| fixed launch | 1.60x [1.40, 1.80] (n 18) |" in md
    assert s["machine_watch"] == watch and "- EAGLE (seed) 2-1-3: machine: others 1.0 cores, load 3.1" in md
