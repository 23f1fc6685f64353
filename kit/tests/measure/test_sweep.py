"""kit.measure.sweep with a fake launcher that starts a STUB of SGLang's HTTP API per point.

The stub (kit/tests/sglang_stub.py) stands in for a server relaunch: the sweep logic (grid
validity, one launch per point, resumability, speedup join, verdicts) is what is tested here;
the real launcher path (kit.serving.launch + kit.serving.process) is exercised with the reference server in
tests/. The fake server accepts min(speculative_num_draft_tokens, 3) tokens per verify step and sleeps
per step, so more draft tokens -> higher accept length -> fewer steps -> faster.
"""

import contextlib
import os
from dataclasses import replace

import pytest

from kit.measure.sweep import (
    Point,
    SpecGrid,
    SweepConfig,
    bench_config,
    grid,
    load_rows,
    panel,
    point_fields,
    point_label,
    run_sweep,
    sweep_findings,
)
from kit.sglang.params import max_draft_tokens
from kit.tests.sglang_stub import StubConfig, StubThread

PROMPTS = [{"id": f"q{i}", "kind": "chat", "text": f"prompt {i}"} for i in range(2)]


class FakeLauncher:
    def __init__(self):
        self.launched = []

    @contextlib.contextmanager
    def __call__(self, point: Point):
        self.launched.append(point_label(point))
        cfg = StubConfig(
            spec=point is not None,
            accept_pattern=[min(point_fields(point)["speculative_num_draft_tokens"], 3) or 1],
            speculative_num_draft_tokens=max(point_fields(point)["speculative_num_draft_tokens"], 2),
            step_delay=0.002,
        )
        with StubThread(cfg) as s:
            yield s.url


def test_grid_follows_sglang_rules():
    pts = grid([1, 3], [1, 4], [0, 4, 20])
    labels = [point_label(p) for p in pts]
    assert labels[0] == "baseline"
    assert "3-1-4" in labels and "1-1-2" in labels  # topk 1 -> steps + 1
    assert "3-4-37" in labels and "3-4-4" in labels and "3-4-20" in labels  # 0 -> 4 + 2 * 16 + 1
    assert not any(
        p.speculative_num_draft_tokens > max_draft_tokens(p.speculative_num_steps, p.speculative_eagle_topk)
        for p in pts[1:]
    )
    # SGLang serves 2-2-6 and 2-2-7 (2 + 1 * 4 candidates + the root), but not 2-2-8
    assert [point_label(p) for p in grid([2], [2], [6, 7, 8], baseline=False)] == ["2-2-6", "2-2-7"]
    assert len(labels) == len(set(labels))
    assert grid([0], [1], [4], baseline=False) == []


def test_sweep_runs_resumes_and_joins(tmp_path):
    cfg = SweepConfig(
        spec=SpecGrid(speculative_num_steps=[1, 3], speculative_eagle_topk=[1]),
        concurrency=[1, 2],
        num_prompts=2,
        max_new_tokens=16,
        warmup=0,
        out_dir=str(tmp_path),
        progress=False,
    )
    fl = FakeLauncher()
    seen = []
    rows = run_sweep(cfg, fl, expected=lambda p: 2.5, prompts=PROMPTS, on_row=lambda n, t, r: seen.append((n, t)))
    assert fl.launched == ["baseline", "1-1-2", "3-1-4"]  # one launch per point, not per concurrency
    assert len(rows) == 6 and seen[-1] == (6, 6)
    by = {(r["label"], r["concurrency"]): r for r in load_rows(tmp_path)}
    assert by[("3-1-4", 1)]["accept_length"] > by[("1-1-2", 1)]["accept_length"] > 1.0
    assert by[("baseline", 1)]["accept_length"] is None
    # the speedup is joined against the baseline at the same concurrency (its size is timing: a benchmark's job)
    assert by[("3-1-4", 2)]["speedup"] > 0 and by[("1-1-2", 1)]["speedup"] > 0
    assert "speedup" not in by[("baseline", 2)] or by[("baseline", 2)].get("speedup") is None
    assert (tmp_path / "results.csv").read_text().count("\n") == 7
    # resume: nothing left to measure -> no launch at all; a new concurrency launches each point once
    fl2 = FakeLauncher()
    assert len(run_sweep(cfg, fl2, prompts=PROMPTS)) == 6 and fl2.launched == []
    cfg.concurrency = [1, 2, 3]
    rows = run_sweep(cfg, fl2, prompts=PROMPTS)
    assert len(rows) == 9 and fl2.launched == ["baseline", "1-1-2", "3-1-4"]
    codes = [f.code for f in sweep_findings(rows).findings]
    assert "verdict.below_expected" in codes or "verdict.healthy" in codes


class FailingLauncher(FakeLauncher):
    """Like FakeLauncher, but the launch of `fail` raises (a server that dies before it is ready)."""

    def __init__(self, fail: str):
        super().__init__()
        self.fail = fail

    @contextlib.contextmanager
    def __call__(self, point: Point):
        if point_label(point) == self.fail:
            self.launched.append(point_label(point))
            raise RuntimeError("server exited with code 137 before it was ready; last log lines:\nKilled")
        with super().__call__(point) as url:
            yield url


def _cfg(tmp_path, steps=(1, 2)):
    return SweepConfig(
        spec=SpecGrid(speculative_num_steps=list(steps), speculative_eagle_topk=[1]),
        concurrency=[1],
        num_prompts=1,
        max_new_tokens=4,
        warmup=0,
        out_dir=str(tmp_path),
        progress=False,
    )


def test_a_failed_point_is_reported_and_the_sweep_goes_on(tmp_path):
    fl, errors = FailingLauncher("1-1-2"), []
    rows = run_sweep(_cfg(tmp_path), fl, prompts=PROMPTS, on_error=lambda p, e: errors.append((point_label(p), str(e))))
    assert fl.launched == ["baseline", "1-1-2", "2-1-3"]
    assert [r["label"] for r in rows] == ["baseline", "2-1-3"]
    assert errors == [("1-1-2", "server exited with code 137 before it was ready; last log lines:\nKilled")]
    with pytest.raises(RuntimeError, match="code 137"):  # without on_error the failure propagates
        run_sweep(_cfg(tmp_path), FailingLauncher("1-1-2"), prompts=PROMPTS)


def test_stop_ends_the_sweep_before_the_next_measurement(tmp_path):
    fl, seen = FakeLauncher(), []
    rows = run_sweep(
        _cfg(tmp_path), fl, prompts=PROMPTS, on_row=lambda n, t, r: seen.append(r["label"]), stop=lambda: bool(seen)
    )
    assert fl.launched == ["baseline"] and [r["label"] for r in rows] == ["baseline"]


def test_panel_runs_on_click_reports_failures_and_resumes(tmp_path):
    pytest.importorskip("ipywidgets")
    fl = FailingLauncher("1-1-2")
    p = panel(fl, tmp_path, _cfg(tmp_path), prompts=PROMPTS)
    assert fl.launched == [] and not (tmp_path / "results.jsonl").exists()  # inert until clicked
    assert "let SGLang choose" in p.widget.children[1].children[0].children[-1].value
    p.run_button.click()  # what a user does in Jupyter; the sweep runs in a background thread
    p.wait(60)
    assert fl.launched == ["baseline", "1-1-2", "2-1-3"]
    assert "1-1-2 failed: RuntimeError: server exited with code 137" in p.log.value
    assert "going on with the next point" in p.log.value and "its log ends: Killed" in p.log.value
    assert p.status.value.startswith("done in") and "failed: 1-1-2" in p.status.value
    assert p.table.value.count("<tr") == 3  # header + two measured rows
    assert p.heatmap.value[:4] == b"\x89PNG" and (tmp_path / "sweep_heatmaps.png").exists()
    assert not p.run_button.disabled and p.stop_button.disabled
    # rerunning the cell: a new panel on the same folder shows the rows and measures only what is missing
    fl2 = FakeLauncher()
    p2 = panel(fl2, tmp_path, _cfg(tmp_path), prompts=PROMPTS)
    assert "resuming: 2 rows" in p2.log.value and p2.table.value.count("<tr") == 3
    p2.run_button.click()
    p2.wait(60)
    assert fl2.launched == ["1-1-2"]


def test_panel_stop_leaves_no_server(tmp_path):
    pytest.importorskip("ipywidgets")
    fl = FakeLauncher()
    p = panel(fl, tmp_path, _cfg(tmp_path, steps=(1, 2, 3)), prompts=PROMPTS)
    p.run_button.click()
    p.request_stop()  # pressed at once: at most the first point is measured
    p.wait(60)
    assert len(fl.launched) <= 1
    assert "stopped after" in p.log.value and "no server left running" in p.log.value
    assert "press <b>Run sweep</b>" in p.status.value


def test_panel_display_has_a_restore_hint(tmp_path):
    pytest.importorskip("ipywidgets")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    p = panel(FakeLauncher(), tmp_path, _cfg(tmp_path), prompts=PROMPTS)
    with capture_output() as cap:
        from IPython.display import display

        display(p)
    hint, view = cap.outputs
    assert "run this cell to restore the panel" in hint.data["text/html"]
    assert "run this cell to restore the panel" in hint.data["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in view.data


def test_cli_needs_a_launch_command(tmp_path, capsys):
    from kit.cli import main

    assert main(["sweep", "--out-dir", str(tmp_path), "--no-progress"]) == 2
    assert "--launch" in capsys.readouterr().err


class _Slow:
    """A launch whose start takes a while (a server coming up); records when it was entered and left."""

    def __init__(self, name, log, fail=False):
        self.name, self.log, self.fail = name, log, fail

    def __enter__(self):
        import threading
        import time

        self.log.append(("start", self.name, threading.current_thread().name))
        time.sleep(0.2)
        if self.fail:
            raise RuntimeError(f"{self.name} did not come up")
        return self.name

    def __exit__(self, *exc):
        import time

        time.sleep(0.2)  # a server's exit is waited for
        self.log.append(("stop", self.name))


def test_launch_all_starts_together_only_where_the_engine_allows(monkeypatch):
    import contextlib
    import time

    from kit.measure.sweep import launch_all

    for engine, together in (("sglang", False), ("reference", True)):
        monkeypatch.setenv("KIT_OMP_WAIT_POLICY_AUTO", "1")  # restored after the test
        log = []
        with contextlib.ExitStack() as stack:
            t0 = time.perf_counter()
            got = launch_all(stack, [_Slow("a", log), None, _Slow("b", log)], engine)
            took = time.perf_counter() - t0
            assert got == ["a", None, "b"]
            assert (took < 0.35) == together  # two 0.2 s starts at once, or one after the other
            t0 = time.perf_counter()
        stopped = [e for e in log if e[0] == "stop"]
        assert (time.perf_counter() - t0 < 0.35) == together  # and stopped the same way
        # the stack stops them all: together at once, else the last started first
        assert sorted(stopped) == [("stop", "a"), ("stop", "b")] and (together or stopped[0] == ("stop", "b"))
        # servers started together keep this process's OpenMP policy instead of sampling each other
        assert (os.environ["KIT_OMP_WAIT_POLICY_AUTO"] == "pinned") == together


def test_launch_all_stops_the_started_ones_when_one_fails(monkeypatch):
    import contextlib

    import pytest

    from kit.measure.sweep import launch_all

    monkeypatch.setenv("KIT_OMP_WAIT_POLICY_AUTO", "1")
    log = []
    with contextlib.ExitStack() as stack, pytest.raises(RuntimeError, match="b did not come up"):
        launch_all(stack, [_Slow("a", log), _Slow("b", log, fail=True)], "reference")
    assert ("stop", "a") in log and ("stop", "b") not in log
    log.clear()  # one after another (SGLang): after a failure the rest are not started
    with contextlib.ExitStack() as stack, pytest.raises(RuntimeError, match="a did not come up"):
        launch_all(stack, [_Slow("a", log, fail=True), _Slow("b", log)], "sglang")
    assert [e[:2] for e in log] == [("start", "a")]


def test_panel_without_ipywidgets_says_so_and_names_the_shell_twin(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    msg = panel(lambda point: None, tmp_path)
    assert isinstance(msg, str) and "ipywidgets" in msg and "kit sweep" in msg
    assert not any(tmp_path.iterdir())


def test_a_warmup_sends_a_full_batch(tmp_path):
    """The first batch of a shape pays for its kernels' compile or capture: a warm-up is at least one full batch,
    none when --warmup 0."""
    cfg = replace(_cfg(tmp_path), warmup=1)
    assert bench_config(cfg, tmp_path / "a", url="http://x", concurrency=16).warmup == 16
    assert bench_config(replace(cfg, warmup=20), tmp_path / "b", url="http://x", concurrency=16).warmup == 20
    assert bench_config(replace(cfg, warmup=0), tmp_path / "c", url="http://x", concurrency=16).warmup == 0
