"""kit.measure.bench against a STUB of SGLang's HTTP API (kit/tests/sglang_stub.py).

The stub is used because these tests check protocol handling with exact known answers in
milliseconds; the real-server tests are tests/test_llamacpp_server.py (llama-cpp-python's
OpenAI server) and the reference-server tests. The stub's accept pattern [3, 2, 1, 4] on 32
tokens gives 13 verify steps, so the expected accept length is 32/13 exactly.
"""

import json
import re
from pathlib import Path

import pytest

from kit.findings import KitInputError
from kit.measure.bench import BenchConfig, RecordLog, load_result, request_list, run_bench
from kit.tests.sglang_stub import StubConfig, StubThread

PROMPTS = [{"id": f"q{i}", "kind": "chat", "text": f"say something about {i}"} for i in range(3)]
AL_32 = 32 / 13


def _cfg(tmp_path, url, **kw):
    base = dict(
        url=url, num_prompts=6, max_new_tokens=32, concurrency=3, warmup=2, out_dir=str(tmp_path / "b"), progress=False
    )
    return BenchConfig(**{**base, **kw})


@pytest.mark.parametrize(
    "api,stream", [("sglang", True), ("sglang", False), ("completions", True), ("chat", True), ("chat", False)]
)
def test_every_api_counts_tokens_and_acceptance(tmp_path, api, stream):
    with StubThread() as s:
        res = run_bench(_cfg(tmp_path, s.url, api=api, stream=stream), prompts=PROMPTS)
    agg = res.summary["labels"]["spec"]
    assert agg["requests"] == 6 and agg["output_tokens"] == 6 * 32
    # /generate carries meta_info; the OpenAI endpoints get it via return_spec_tokens_details
    assert agg["accept_length"] == pytest.approx(AL_32)
    if stream:
        assert agg["ttft_p50_s"] > 0 and agg["itl_p50_s"] >= 0
    assert not res.report.errors


def test_warmup_excluded_and_flush_called(tmp_path):
    with StubThread() as s:
        res = run_bench(_cfg(tmp_path, s.url, warmup=3), prompts=PROMPTS)
        assert s.state.requests == 6 + 3  # warmup requests were sent ...
        assert s.state.flushes == 2  # before warmup and before the measured run
    recs = res.records
    assert sum(r.warmup for r in recs) == 3
    assert res.summary["labels"]["spec"]["requests"] == 6  # ... but not counted


def test_warmup_requests_can_be_shorter_than_the_measured_ones(tmp_path):
    with StubThread() as s:
        res = run_bench(_cfg(tmp_path, s.url, warmup=2, warmup_max_new_tokens=4), prompts=PROMPTS)
    warm = [r.completion_tokens for r in res.records if r.warmup]
    measured = [r.completion_tokens for r in res.records if not r.warmup]
    assert warm == [4, 4] and set(measured) == {32}
    assert res.summary["labels"]["spec"]["output_tokens"] == 6 * 32
    with pytest.raises(KitInputError, match="--warmup-max-new-tokens must be >= 1"):
        _cfg(tmp_path, s.url, warmup_max_new_tokens=0)


def test_records_written_as_they_complete_and_resume_skips_done(tmp_path):
    cfg = _cfg(tmp_path, None, warmup=0)
    with StubThread(StubConfig(fail_every=4)) as s:
        cfg.url = s.url
        res = run_bench(cfg, prompts=PROMPTS)
        assert any(f.code == "bench.request_errors" for f in res.report.errors)
        first = s.state.requests
    lines = (tmp_path / "b" / "records.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(x)["rid"] for x in lines)
    failed = [json.loads(x) for x in lines if not json.loads(x)["ok"]]
    assert failed
    notes = []
    with StubThread() as s2:  # --resume: only the failed ids are sent again, to the new URL
        res2 = run_bench(
            BenchConfig(url=s2.url, resume=str(tmp_path / "b"), progress=False), prompts=PROMPTS, note=notes.append
        )
        assert s2.state.requests == len(failed)
    assert first == 6
    assert res2.summary["labels"]["spec"]["requests"] == 6
    assert res2.summary["resumed"]["reused"] == 6 - len(failed)
    assert len(notes) == 1 and f"reusing {6 - len(failed)} of 6" in notes[0] and f"sending {len(failed)}" in notes[0]
    assert not res2.report.by_code("bench.request_errors") or res2.summary["labels"]["spec"]["failed"] == len(
        failed
    )  # old failures stay on record


def test_every_run_gets_a_fresh_named_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with StubThread() as s:
        a = run_bench(
            BenchConfig(url=s.url, num_prompts=2, max_new_tokens=4, warmup=0, progress=False), prompts=PROMPTS
        )
        b = run_bench(
            BenchConfig(url=s.url, num_prompts=2, max_new_tokens=4, warmup=0, progress=False), prompts=PROMPTS
        )
    assert a.out_dir != b.out_dir
    for r in (a, b):
        assert r.out_dir.parent == Path("runs/bench") and re.fullmatch(r"\d{8}-\d{6}-spec(-\d+)?", r.out_dir.name)
        assert json.loads((r.out_dir / "config.json").read_text())["max_new_tokens"] == 4
        assert r.summary["labels"]["spec"]["requests"] == 2  # nothing carried over
    # what the run measured, in one line, for figure titles
    assert a.describe().startswith("model stub-model, prompts builtin x2, 4 new tokens, temperature 0.0, concurrency 4")


def test_existing_out_dir_is_refused_before_anything_is_sent(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "records.jsonl").write_text("{}\n")
    with StubThread() as s:
        with pytest.raises(KitInputError, match=r"--out-dir .*exists and is not empty.*--resume"):
            run_bench(_cfg(tmp_path, s.url), prompts=PROMPTS)
        assert s.state.requests == 0


def test_resume_refuses_a_changed_setting_and_a_non_run_directory(tmp_path):
    with StubThread() as s:
        run_bench(_cfg(tmp_path, s.url, warmup=0), prompts=PROMPTS)
        with pytest.raises(KitInputError, match=r"--max-new-tokens 16 \(the run used 32\)"):
            run_bench(BenchConfig(url=s.url, resume=str(tmp_path / "b"), max_new_tokens=16), prompts=PROMPTS)
        with pytest.raises(KitInputError, match="not a kit bench run directory"):
            run_bench(BenchConfig(url=s.url, resume=str(tmp_path)), prompts=PROMPTS)


def test_dead_url_is_one_error_before_any_directory(tmp_path, capsys):
    from kit.cli import main

    out = tmp_path / "never"
    rc = main(["bench", "--url", "http://127.0.0.1:9", "--out-dir", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("kit bench: error: --url http://127.0.0.1:9: no server answers")
    assert not out.exists()


def test_cli_prints_the_bench_serving_block(tmp_path, capsys):
    from kit.cli import main

    with StubThread() as s:
        rc = main(
            [
                "bench",
                "--url",
                s.url,
                "--out-dir",
                str(tmp_path / "c"),
                "--num-prompts",
                "3",
                "--max-new-tokens",
                "8",
                "--warmup",
                "0",
                "--no-progress",
            ]
        )
    out = capsys.readouterr().out
    assert rc in (0, 1)
    for name in (
        "Serving Benchmark Result",
        "Successful requests:",
        "Benchmark duration (s):",
        "Request throughput (req/s):",
        "Output token throughput (tok/s):",
        "Mean TTFT (ms):",
        "Median TTFT (ms):",
        "P99 TTFT (ms):",
        "Mean ITL (ms):",
        "P99 ITL (ms):",
        "Median E2E Latency (ms):",
        "Accept length:",
        "Accept length, meta:",
    ):
        assert name in out, name
    line = next(x for x in out.splitlines() if x.startswith("Successful requests:"))
    assert line.split() == ["Successful", "requests:", "3"]
    assert "e-0" not in out  # milliseconds with two decimals, never scientific notation


def test_truncated_last_line_is_ignored(tmp_path):
    log = RecordLog(tmp_path / "r.jsonl")
    log.append({"a": 1})
    with open(log.path, "a") as f:
        f.write('{"a": 2, "cut')  # a crash mid-write
    assert log.read() == [{"a": 1}]


def test_baseline_vs_spec_speedup_ci_and_interleaving(tmp_path, monkeypatch):
    # the stubs' arms share this host with the other test workers: judged as a quiet host, so the headline shows
    monkeypatch.setattr("kit.measure.machine.busy_reason", lambda summary: None)
    with StubThread(StubConfig(step_delay=0.002)) as s, StubThread(StubConfig(spec=False, step_delay=0.002)) as b:
        res = run_bench(
            _cfg(tmp_path, s.url, baseline_url=b.url, repeats=3, max_new_tokens=24, warmup=1), prompts=PROMPTS
        )
    order = [(r.label, r.repeat) for r in res.runs]
    assert order == [("baseline", 0), ("spec", 0), ("baseline", 1), ("spec", 1), ("baseline", 2), ("spec", 2)]
    ci = res.summary["speedup"]["spec"]
    # 24 tokens: baseline 23 decode steps, spec 10 verify steps -> ~2x fewer step delays
    assert 1.3 < ci["speedup"] < 3.5
    assert ci["t_low"] <= ci["speedup"] <= ci["t_high"]
    # the one speedup the run shows: its three repeats' tok/s ratios, paired
    launch = res.summary["launch_speedup"]["spec"]
    assert launch["pairing"] == "repeat" and launch["n"] == 3 and 1.3 < launch["median"] < 3.5
    assert f"Speedup spec vs baseline: {launch['median']:.3f}x paired median" in res.block()
    assert "(n 3 repeats)" in res.block() and "t-interval" not in res.block()
    assert res.summary["labels"]["baseline"].get("accept_length") is None
    assert (tmp_path / "b" / "summary.json").exists()
    # the same records on a busy host: no headline, the reason and the machine instead
    monkeypatch.setattr("kit.measure.machine.busy_reason", lambda summary: "other work used 1.0 cores on average")
    busy = load_result(tmp_path / "b")
    assert busy.summary["launch_speedup"]["spec"]["inconclusive"].startswith("the machine was busy (other work")
    assert "Speedup spec vs baseline: inconclusive: the machine was busy" in busy.block()
    assert "paired median" not in busy.block() and "machine: " in busy.block()
    assert busy.report.by_code("bench.speedup_uncertain")


def test_baseline_that_speculates_and_spec_without_acceptance_are_flagged(tmp_path):
    with StubThread() as s, StubThread(StubConfig(spec=False)) as b:
        # arms swapped on purpose: the "baseline" speculates, the "spec" server does not
        res = run_bench(_cfg(tmp_path, b.url, baseline_url=s.url), prompts=PROMPTS)
    codes = res.report.codes()
    assert "bench.baseline_is_speculative" in codes and "bench.no_acceptance" in codes
    # one run per arm, but every request ran under both: the paired interval stands in for the runs'
    assert "bench.speedup_single_run" not in codes
    assert res.summary["paired_speedup"]["spec"]["n"] == 6  # num_prompts requests, paired by id


def test_metrics_mismatch_and_log_source(tmp_path):
    logf = tmp_path / "server.log"
    logf.write_text("")
    with StubThread(StubConfig(metrics_scale=1.5, log_path=str(logf))) as s:
        res = run_bench(_cfg(tmp_path, s.url, log_path=str(logf)), prompts=PROMPTS)
    src = res.summary["labels"]["spec"]["accept_sources"]
    mism = res.report.by_code("bench.accept_mismatch")
    assert [f.evidence["source"] for f in mism] == ["metrics_delta"]
    assert src["metrics_delta"] == pytest.approx(1.5 * AL_32)
    if "log" in src:  # kit.serving.logs parses the decode lines when present
        assert src["log"] == pytest.approx(src["meta_decode"], rel=0.02)


def test_expected_accept_length_adds_verdict(tmp_path):
    with StubThread(StubConfig(accept_pattern=[1])) as s:
        res = run_bench(_cfg(tmp_path, s.url, expected_accept_length=2.2), prompts=PROMPTS)
    assert res.summary["labels"]["spec"]["accept_length"] == pytest.approx(32 / 31)  # prefill token
    assert "verdict.wiring_fault" in {f.code for f in res.report.errors}
    again = load_result(tmp_path / "b", expected_accept_length=2.2)  # rescoring needs no server
    assert again.report.codes() == res.report.codes()


def test_request_ids_stable_and_bad_config_rejected():
    ids = [r["rid"] for r in request_list(PROMPTS, 7)]
    assert ids[:4] == ["q0#0", "q1#0", "q2#0", "q0#1"] and len(set(ids)) == 7
    with pytest.raises(KitInputError):
        BenchConfig(url="http://x", concurrency=0)
    with pytest.raises(KitInputError):
        BenchConfig(url="http://x", api="grpc")
    with pytest.raises(KitInputError):
        BenchConfig().arms()


def test_cli_json_exit_codes(tmp_path, capsys):
    from kit.cli import main

    with StubThread() as s:
        (tmp_path / "p.jsonl").write_text("")
        rc = main(
            [
                "bench",
                "--url",
                s.url,
                "--out-dir",
                str(tmp_path / "c"),
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "8",
                "--no-progress",
                "--json",
                "--prompts",
                "/nonexistent.jsonl",
            ]
        )
    assert rc == 2  # unreadable prompts file: one-line error, no traceback
    assert "error" in capsys.readouterr().err


def test_interleave_alternates_arms_request_by_request(tmp_path):
    with StubThread(StubConfig(step_delay=0.001)) as s, StubThread(StubConfig(spec=False, step_delay=0.001)) as b:
        res = run_bench(
            _cfg(tmp_path, s.url, baseline_url=b.url, concurrency=1, warmup=1, interleave=True), prompts=PROMPTS
        )
    measured = [r for r in sorted(res.records, key=lambda r: r.t_start) if not r.warmup]
    # twins run back to back, the arms' order rotating turn by turn
    assert [r.label for r in measured] == ["baseline", "spec", "spec", "baseline"] * 3
    assert [r.rid for r in measured[::2]] == [r.rid for r in measured[1::2]]
    assert sorted(r.label for r in res.runs) == ["baseline", "spec"] and all(r.requests == 6 for r in res.runs)
    assert res.summary["paired_speedup"]["spec"]["n"] == 6
    assert res.summary["labels"]["spec"]["accept_length"] > 1.5  # per-arm acceptance still read per run


def test_installed_release_is_read_once_per_run_not_per_request(tmp_path, monkeypatch):
    """An unpinned SGLang engine reads the installed distribution's metadata (~1 ms, a sys.path scan, on the
    event loop) on each use; the request loop resolves it once, so those reads do not grow with requests."""
    calls = []
    monkeypatch.setattr("kit.sglang.versions.installed_version", lambda: calls.append(1))
    counts = {}
    with StubThread() as s:
        for n in (2, 12):
            calls.clear()
            run_bench(_cfg(tmp_path / str(n), s.url, num_prompts=n, warmup=0, concurrency=4), prompts=PROMPTS)
            counts[n] = len(calls)
    assert counts[2] == counts[12]


def test_next_request_starts_before_the_finished_one_is_written(tmp_path, monkeypatch):
    """A freed slot's next request is sent before the finished request's record is serialized and written."""
    import kit.measure.bench as kb

    started, seen = [], []
    send = kb.send_one

    async def counting_send(*a, **kw):
        started.append(1)
        return await send(*a, **kw)

    append = RecordLog.append

    def noting_append(self, obj):
        seen.append(len(started))
        append(self, obj)

    monkeypatch.setattr(kb, "send_one", counting_send)
    monkeypatch.setattr(RecordLog, "append", noting_append)
    with StubThread() as s:
        run_bench(_cfg(tmp_path, s.url, num_prompts=3, warmup=0, concurrency=1), prompts=PROMPTS)
    assert seen[:3] == [2, 3, 3]  # record k is written once request k+1 has started


def test_also_url_arm_answers_every_request_beside_its_twins_in_rotating_order(tmp_path):
    """A third arm (the seed's launch) answers the same requests as the others, each beside its twins, the
    order rotating so no arm always runs first; the server log stays the --url arm's."""
    logf = tmp_path / "spec.log"
    logf.write_text("")
    with (
        StubThread(StubConfig(step_delay=0.001, log_path=str(logf))) as s,
        StubThread(StubConfig(spec=False, step_delay=0.001)) as b,
        StubThread(StubConfig(accept_pattern=[1], step_delay=0.001)) as seed,
    ):
        cfg = _cfg(tmp_path, s.url, baseline_url=b.url, concurrency=1, warmup=1, interleave=True,
                   log_path=str(logf), also_url=[f"seed={seed.url}"])  # fmt: skip
        res = run_bench(cfg, prompts=PROMPTS)
    measured = [r for r in sorted(res.records, key=lambda r: r.t_start) if not r.warmup]
    turns = [measured[i : i + 3] for i in range(0, len(measured), 3)]
    assert [[r.label for r in t] for t in turns[:3]] == [
        ["baseline", "spec", "seed"], ["spec", "seed", "baseline"], ["seed", "baseline", "spec"]]  # fmt: skip
    assert all(len({r.rid for r in t}) == 1 for t in turns) and len(turns) == 6
    assert res.summary["paired_speedup"]["seed"]["n"] == 6 and res.summary["paired_speedup"]["spec"]["n"] == 6
    assert res.summary["labels"]["seed"]["accept_length"] == pytest.approx(32 / 31)
    assert "log" not in res.summary["labels"]["seed"]["accept_sources"]  # the spec server's lines are not its own
    assert not res.report.by_code("bench.accept_mismatch")
    # the seed's launch accepts nothing: whatever the clock said, it gets no headline above 1.0x
    seed_sp = res.summary["launch_speedup"]["seed"]
    assert seed_sp["median"] <= 1.05 * 32 / 31 or seed_sp["inconclusive"]
    assert res.summary["labels"]["seed"]["machine"]["samples"] >= 1  # the host was watched during its requests


@pytest.mark.parametrize(
    "kw",
    [
        dict(also_url=["no-equals-sign"]),
        dict(also_url=["spec=http://y"]),
        dict(also_url=["s=http://y"], warmup_max_new_tokens=0),
    ],
)
def test_bad_also_url_is_one_line_error(kw):
    with pytest.raises(KitInputError, match="also|label|warmup"):
        BenchConfig(url="http://x", **kw).arms()
