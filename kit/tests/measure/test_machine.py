"""kit.measure.machine: the host watched while a benchmark runs, pooled per arm, and said in one line."""

import subprocess
import sys
import time

import pytest

from kit.measure import machine as mach
from kit.measure.records import RequestRecord


def test_a_busy_process_outside_the_benchmark_shows_as_other_work(tmp_path, monkeypatch):
    # the shell exits at once, so the busy loop is re-parented away from this process tree: outside work
    out = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'import time\nt=time.time()\nwhile time.time()-t<8: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pid = int(out.stdout.strip())
    try:
        path = tmp_path / "machine.jsonl"
        with mach.Watch(path, interval_s=0.25):
            time.sleep(1.6)
        samples = mach.read_samples(path)
    finally:
        subprocess.run(["kill", str(pid)], check=False)
    assert len(samples) >= 5 and all(s["dt"] > 0 for s in samples)
    summary = mach.summarize(samples)
    assert summary["others_cores"]["mean"] >= 0.5  # one busy core (plus whatever else this host runs)
    monkeypatch.setattr(mach.os, "cpu_count", lambda: 2)  # judged as on a 2-core laptop, whatever runs the test
    assert "other work used" in mach.busy_reason(summary)


def test_work_of_the_benchmark_itself_is_not_outside_work(tmp_path, monkeypatch):
    """Host busy time minus this process tree's CPU time: a tree that used every busy second leaves no others."""
    clock = {"n": 0}

    def jiffies():  # (busy, steal, total): 1.5 cores busy on 2, no steal, per 0.25 s sample at 100 Hz
        clock["n"] += 1
        return int(37.5 * clock["n"]), 0, 50 * clock["n"]

    def tree(self):  # this process tree used 1.5 cores of CPU time per sample too
        return {1}, 0.375 * clock["n"]

    monkeypatch.setattr(mach, "_cpu_jiffies", jiffies)
    monkeypatch.setattr(mach.Watch, "_tree", tree)
    monkeypatch.setattr(mach.os, "sysconf", lambda name: 100)
    path = tmp_path / "machine.jsonl"
    with mach.Watch(path, interval_s=0.25):
        time.sleep(0.8)
    own = [s["others_cores"] for s in mach.read_samples(path)]
    assert own and max(own) < 0.3 and all(s["steal_pct"] == 0 for s in mach.read_samples(path))


def test_samples_are_pooled_per_arm_by_the_windows_of_its_requests(monkeypatch):
    monkeypatch.setattr(mach.os, "cpu_count", lambda: 2)
    samples = [{"t": t, "dt": 0.5, "load1": float(t), "others_cores": 0.0 if t < 3 else 1.0} for t in (1, 2, 3, 4)]
    recs = [RequestRecord(label="baseline", rid="a", ok=True, t_start=0.6, e2e=1.2),
            RequestRecord(label="spec", rid="a", ok=True, t_start=2.6, e2e=1.2),
            RequestRecord(label="spec", rid="w", ok=True, t_start=0.0, e2e=9.0, warmup=True)]  # fmt: skip
    per = mach.by_label(samples, recs)
    assert per["baseline"]["samples"] == 2 and per["baseline"]["others_cores"]["mean"] == 0.0
    assert per["spec"]["samples"] == 2 and per["spec"]["others_cores"]["max"] == 1.0
    assert mach.busy_reason(per["baseline"]) is None and "1.0 cores" in mach.busy_reason(per["spec"])


@pytest.mark.parametrize(
    "summary, said",
    [
        ({"samples": 3, "steal_pct": {"mean": 5.0, "max": 9.0}}, "stole 5.0%"),
        ({"samples": 3, "sm_clock_mhz": {"median": 1200, "min": 1100, "max_rated": 1980}, "gpu_other_procs": 0},
         "SM clock at 1200 MHz of 1980"),
        ({"samples": 3, "sm_clock_mhz": {"median": 1980, "min": 1980, "max_rated": 1980}, "gpu_other_procs": 2},
         "2 other process(es) on the GPU"),
        ({"samples": 3, "others_cores": {"mean": 0.1, "max": 0.2}, "steal_pct": {"mean": 0.0, "max": 0.0}}, None),
    ],
)  # fmt: skip
def test_busy_reason_names_what_disturbed_a_timing(summary, said):
    got = mach.busy_reason(summary)
    assert got is None if said is None else said in got
    assert mach.brief(summary).startswith("machine: ")


def test_other_work_is_judged_against_the_hosts_cores(monkeypatch):
    summary = {"samples": 9, "others_cores": {"mean": 1.6, "max": 1.9}}  # one busy core and a bit
    assert "other work used 1.6 cores" in mach.busy_reason({**summary, "cpus": 2})  # most of a 2-core laptop
    assert mach.busy_reason({**summary, "cpus": 16}) is None  # a tenth of a 16-core GPU host
    monkeypatch.setattr(mach.os, "cpu_count", lambda: 2)  # samples from before hosts were recorded: this host's
    assert "other work used" in mach.busy_reason(summary)


def test_quiet_check_waits_for_a_quiet_window_and_says_what_it_saw_when_none_came(monkeypatch):
    seen = iter(["other work used 1.2 cores on average", None])
    monkeypatch.setattr(mach, "busy_reason", lambda summary: next(seen))
    assert mach.wait_quiet(timeout_s=5, window_s=0.1) is None  # busy, then quiet: go
    monkeypatch.setattr(mach, "busy_reason", lambda summary: "1 other process(es) on the GPU")
    assert mach.wait_quiet(timeout_s=0.3, window_s=0.1) == "1 other process(es) on the GPU"


def test_bench_quiet_check_refuses_to_measure_on_a_busy_host_in_one_line(tmp_path, monkeypatch):
    from kit.findings import KitInputError
    from kit.measure.bench import BenchConfig, run_bench
    from kit.tests.sglang_stub import StubThread

    monkeypatch.setattr(mach, "wait_quiet", lambda: "other work used 1.0 cores on average")
    with StubThread() as s, pytest.raises(KitInputError, match="--quiet-check: the machine stayed busy"):
        run_bench(BenchConfig(url=s.url, quiet_check=True, out_dir=str(tmp_path / "b"), progress=False))
    assert not (tmp_path / "b").exists()  # nothing written
