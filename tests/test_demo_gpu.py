"""`kit demo --gpu` (kit/demo_gpu.py) without a GPU: its preflight, the seed's launch adapted to one GPU, and the
scoring of a served run directory whose benches ran against STUBS of SGLang's HTTP API (kit/tests/sglang_stub.py).

The serving half needs real SGLang on a GPU (`kit demo --gpu` there; its figures: docs/performance.md).
Run: python -m pytest tests/test_demo_gpu.py
"""

import importlib.util
import json
import subprocess
import sys
from dataclasses import asdict

import pytest

from kit import demo_gpu
from kit.measure.bench import BenchConfig, run_bench
from kit.serving import launch as kl
from kit.tests.sglang_stub import StubConfig, StubThread

PROMPTS = [{"id": f"p{i}", "kind": "chat", "text": f"prompt {i}"} for i in range(4)]
STEP = 0.004  # seconds per stub decode step: the arms' speeds follow their steps, not the host's noise


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_without_sglang_the_gpu_demo_says_how_to_install_it(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kit", "demo", "--gpu", "--runs-dir", str(tmp_path)], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert "kit bundle install" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_seeds_launch_on_one_gpu_keeps_its_fault_and_drops_its_8_gpus(tmp_path, monkeypatch):
    from kit.sglang.bundle import RELEASES

    # SGLang installed from the kit's 0.5.17 bundle: its launch flags come from the bundle's manifest
    monkeypatch.setattr("kit.sglang.bundle_site.installed_bundle_flags", lambda: list(RELEASES["0.5.17"].launch_flags))
    plan = demo_gpu.GpuPlan()
    seed = kl.spec_from_command(demo_gpu.SEED_LAUNCH)
    spec = demo_gpu.one_gpu(seed, plan, "/t", "/d", 31001, tmp_path / "s.log", "0.5.17")
    assert (spec.tp_size, spec.host, spec.port, spec.model_path) == (None, "127.0.0.1", 31001, "/t")
    assert spec.speculative_algorithm == "EAGLE" and spec.speculative_draft_model_path == "/d"
    assert spec.spec_params().label() == "2-1-3"
    assert spec.env["NCCL_PROTO"] == "LL"  # the seed's variables stay
    argv = spec.argv()
    assert argv[argv.index("--attention-backend") + 1] == "triton"  # the bundle's flags (kit.sglang.bundle)
    assert "--max-total-tokens" in argv and "--num-continuous-decode-steps" in argv
    assert spec.mem_fraction_static == 0.75  # three fill 0.75 of one GPU together, their pools capped
    # the release's current spelling of the decode CUDA-graph cap (0.5.17 warns on the old alias)
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "4" and "--cuda-graph-max-bs" not in argv
    older = demo_gpu.one_gpu(seed, plan, "/t", "/d", 31001, tmp_path / "s.log", "0.5.12").argv()
    assert older[older.index("--cuda-graph-max-bs") + 1] == "4"


def _served_run(tmp_path):
    """A run directory as the serving half leaves it, the benches run against stubs (16 tokens a request: the
    seed stub accepts nothing, AL = 16 / 15 verify steps after the prefill token)."""
    run = tmp_path / "run"
    run.mkdir()
    plan = demo_gpu.GpuPlan(num_prompts=4, max_new_tokens=16, repeats=2)
    labels = {"seed": "seed (X 2-1-3)", "fixed": "fixed (X 2-1-3)"}
    with (
        StubThread(StubConfig(spec=False, step_delay=STEP)) as base,
        StubThread(StubConfig(accept_pattern=[1], step_delay=STEP)) as seed,
        StubThread(StubConfig(accept_pattern=[3, 2], step_delay=STEP)) as fixed,
    ):
        cfg = BenchConfig(url=fixed.url, baseline_url=base.url, label=labels["fixed"], also_url=[f"{labels['seed']}={seed.url}"],
                          num_prompts=4, max_new_tokens=16, concurrency=1, repeats=2, warmup=0, progress=False,
                          interleave=True, out_dir=str(run / "bench"))  # fmt: skip
        run_bench(cfg, prompts=PROMPTS)
    oracle = {"params": "2-1-3", "results": {
        "correct": {"meta_accept_length": 2.4, "accept_length": 2.3, "wiring": "EAGLE3"},
        "launched as EAGLE": {"meta_accept_length": 1.02, "accept_length": 1.01, "wiring": "EAGLE"}}}  # fmt: skip
    (run / "oracle.log").write_text("progress line\n" + json.dumps(oracle) + "\n")
    serving = {
        "machine": {"sglang": "0.5.17", "gpu": "a stub", "torch": "x", "python": "3"},
        "plan": asdict(plan),
        "target": str(tmp_path / "no-target"),
        "draft": str(tmp_path / "no-draft"),
        "launches": {
            n: {"command": f"python -m sglang.launch_server # {n}", "ok": True, "ready_s": 1.0, "lint": []}
            for n in demo_gpu.LAUNCHES
        },  # fmt: skip
        "bench_labels": labels,
        "timings_s": {"servers_ready": 1.0},
    }
    (run / "serving.json").write_text(json.dumps(serving))
    return run


def test_finish_scores_a_served_run(tmp_path):
    run = demo_gpu.finish(_served_run(tmp_path))
    s = json.loads((run / "summary.json").read_text())
    a = s["accept_length"]
    assert a["seed_launch"] == pytest.approx(16 / 15) and a["fixed_launch"] > 2.0 and a["oracle"] == 2.4
    assert s["accept_length_expected"] == {"fixed_launch": 2.4, "seed_launch": 1.02}
    assert set(s["speedup"]) == {"seed_launch", "fixed_launch"}
    assert len(s["speedup"]["fixed_launch"]["ratios"]) == 2
    assert "error" in s["reference_engine_graphed"]  # no model here: said, not fatal
    codes = [f["code"] for f in s["steps"]["gpu_demo"]["findings"]["findings"]]
    assert "verdict.wiring_fault" in codes  # the seed's EAGLE launch against the correctly wired oracle
    assert set(s["machine_watch"]) == {"seed", "fixed"} and s["machine_watch"]["fixed"]["samples"] >= 0
    for fig in ("engine_comparison", "expected_vs_observed", "throughput_speedup"):
        assert (run / f"{fig}.png").exists()


def test_finish_refuses_a_directory_that_was_not_served(tmp_path):
    with pytest.raises(SystemExit, match="no serving.json"):
        demo_gpu.main(["finish", str(tmp_path)])


def test_one_speedup_per_launch_in_the_summary_and_its_figure_and_the_break_even_beside_it(tmp_path, monkeypatch):
    from kit.measure import plots
    from kit.measure.bench import load_result
    from kit.measure.breakeven import IterationCosts, SizePoint, analyze

    drawn = {}
    real = plots.throughput_speedup

    def spy(summary, out_dir, name="throughput_speedup", data="", speedup=None):
        drawn[name] = speedup
        return real(summary, out_dir, name=name, data=data, speedup=speedup)

    monkeypatch.setattr(plots, "throughput_speedup", spy)
    # the stubs' arms share this host with the other test workers, whose load can widen two repeats' interval: the
    # headline is shown whatever the timings (this test is about where it goes, not whether it holds)
    monkeypatch.setattr("kit.measure.machine.busy_reason", lambda summary: None)
    monkeypatch.setattr("kit.measure.metrics.inconclusive", lambda *a, **k: None)
    costs = [SizePoint("135m", 134_515_008, 576, 30, IterationCosts(1.6, 4.0)),
             SizePoint("7b", 6_677_598_208, 4096, 32, IterationCosts(7.0, 9.0))]  # fmt: skip
    be_file = tmp_path / "breakeven.json"
    be_file.write_text(json.dumps({"analysis": analyze(costs, 2.171, at="135m", measured_speedup=0.93), "errors": []}))
    run = _served_run(tmp_path)
    demo_gpu.main(["finish", str(run), "--breakeven", str(be_file)])
    s = json.loads((run / "summary.json").read_text())
    fixed = s["speedup"]["fixed_launch"]
    label = "fixed (X 2-1-3)"
    bench = load_result(run / "bench").summary["launch_speedup"][label]
    assert fixed["pairing"] == "repeat" and fixed["n"] == 2 and fixed["ratios"] == bench["ratios"]
    assert fixed["median"] == round(bench["median"], 3) and drawn["throughput_speedup"][label] == fixed
    md = (run / "summary.md").read_text()
    assert f"| fixed launch | {fixed['median']:.2f}x" in md and "(n 2 repeats)" in md
    # the break-even for this run's own accept length and speedup, from the file's measured costs
    be = s["break_even"]
    assert be["accept_length"] == s["accept_length"]["fixed_launch"]
    assert be["at_demo_target"]["measured_speedup"] == fixed["median"]
    assert be["sentence"].startswith(f"with accept length {be['accept_length']:.2f}, EAGLE-3 pays on this GPU")
    assert be["sentence"] in md


def test_a_breakeven_file_that_is_not_one_is_a_one_line_error(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text("[1, 2]")
    r = subprocess.run([sys.executable, "-m", "kit", "demo", "--gpu", "--breakeven", str(bad), "--runs-dir",
                        str(tmp_path / "runs")], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "--breakeven" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
