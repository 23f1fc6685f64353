"""The engine seam, walked by an engine that is not SGLang-shaped (kit/tests/serving/toy_engine.py).

One module plus this test: its flags, readiness, server info, metrics, log format, per-request acceptance
and startup failure all reach the kit's launcher, process lifecycle, client, metrics and bench through
`kit.serving.engines` alone — no kit module names it.
Run: python -m pytest kit/tests/serving/test_toy_engine.py -q
"""

import pytest

from kit.findings import KitInputError
from kit.serving import engines, logs
from kit.serving.launch import LaunchSpec
from kit.serving.process import ServerExited, ServerProcess, free_port
from kit.tests.serving.toy_engine import ToyEngine


@pytest.fixture(scope="module")
def toy():
    engine = engines.register(ToyEngine())
    yield engine
    engines.ENGINES.pop("toy")


def test_unknown_engine_is_one_line():
    with pytest.raises(KitInputError, match="--engine 'nope'"):
        engines.get_engine("nope")


def test_argv_is_translated_to_the_engines_flags(toy):
    spec = LaunchSpec(
        model_path="m", speculative_draft_model_path="d", speculative_num_draft_tokens=4, port=9, tp_size=8
    )
    argv = spec.argv("toy")
    assert argv[1:] == ["-m", "kit.tests.serving.toy_engine", "--model", "m", "--draft", "d", "--lookahead", "4"] + [
        "--listen-port",
        "9",
    ]
    assert toy.ignored_flags(spec) == ["--tp-size"]
    assert spec.argv("sglang")[3:5] == ["--model-path", "m"]  # SGLang's flags are untouched


def test_launch_engine_finding_names_the_dropped_flags(toy):
    from kit.serving.checks import engine_findings

    (f,) = engine_findings(LaunchSpec(model_path="m", tp_size=8, extra_args=["--chunked-prefill-size", "512"]), "toy")
    assert f.code == "launch.engine" and f.evidence["ignored"] == ["--tp-size", "--chunked-prefill-size"]
    assert engine_findings(LaunchSpec(model_path="m", port=1), "toy") == []


def test_log_lines_are_read_by_the_engines_parser(toy):
    text = "ts=12:00:00 event=listening port=1\nts=12:00:01 event=step accepted=2.50\nnot a line\n"
    df = logs.parse_log(text, engine="toy")
    assert list(df["kind"]) == ["ready", "decode"] and df["accept_len"].iloc[1] == 2.5
    assert logs.parse_log(text)["kind"].tolist() == []  # SGLang's parser sees none of it


def test_launch_bench_and_every_acceptance_source(toy, tmp_path):
    from kit.measure.bench import BenchConfig, run_bench

    log = tmp_path / "toy.log"
    spec = LaunchSpec(model_path="toy-model", speculative_draft_model_path=str(tmp_path), port=free_port())
    spec = spec.replace(speculative_num_draft_tokens=3, log_file=str(log))
    with ServerProcess.from_spec(spec, engine="toy") as srv:
        info = srv.wait_ready(30)
        assert info["model"] == "toy-model" and info["server_info"] == {"lifetime_mean_accepted": None}
        cfg = BenchConfig(
            url=srv.base_url,
            engine="toy",
            api="completions",
            stream=False,
            num_prompts=4,
            max_new_tokens=8,
            warmup=0,
            concurrency=2,
            log_path=str(log),
            out_dir=str(tmp_path / "bench"),
            progress=False,
        )
        res = run_bench(cfg)
    src = res.summary["accept_sources"]["spec"]
    expected = 8 / 3  # 8 tokens in ceil(8/3) = 3 steps
    assert src["meta"]["value"] == pytest.approx(expected)
    assert src["meta_field"]["value"] == pytest.approx(expected)  # usage.toy_mean_accepted
    assert src["metrics_delta"]["value"] == pytest.approx(expected)  # toy_tokens_out_total / toy_steps_total
    assert src["server_info"]["value"] == pytest.approx(expected)  # /stats
    assert src["log"]["value"] == pytest.approx(2.67)  # the `event=step accepted=2.67` lines
    assert "bench.accept_mismatch" not in res.report.codes()


def test_startup_failure_is_read_from_the_log(toy, tmp_path):
    """The toy hangs after its fatal line: only the engine's log parser can tell (not a timeout)."""
    spec = LaunchSpec(model_path="m", speculative_draft_model_path=str(tmp_path / "missing"), port=free_port())
    srv = ServerProcess.from_spec(spec, engine="toy")
    with pytest.raises(ServerExited, match=r"^server failed to start: draft not found: .*missing"):
        srv.wait_ready(120)
    assert srv.returncode is not None  # stopped
