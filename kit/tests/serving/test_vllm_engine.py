"""vLLM as a serving engine (kit/serving/engines/vllm.py), hermetic: argv, answers, counters and log as vLLM writes them.

Its /metrics counters, per-request metrics and log line are in the exact text vLLM 0.33.0 writes them (each names the
source it is copied from), and `kit bench --engine vllm --url` runs against a stand-in server (`VllmStub`).

Run: python -m pytest kit/tests/serving/test_vllm_engine.py -q
"""

import json

import pytest

from kit.findings import KitInputError
from kit.measure.metrics import parse_prometheus
from kit.serving import logs
from kit.serving.engines import get_engine
from kit.serving.launch import LaunchSpec
from kit.tests.sglang_stub import Stub, StubConfig, StubThread

# vllm 0.33.0 vllm/v1/spec_decode/metrics.py:SpecDecodingProm.__init__ (counters; labels from
# vllm/v1/metrics/loggers.py:PrometheusStatLogger.__init__: model_name, engine), as prometheus_client writes them
# (HELP/TYPE, `_total` and `_created` samples; the `_created` lines of the last two left out)
MODEL = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'


def metrics_text(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]) -> str:
    pos = "".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{MODEL},position="{i}"}} {float(n)}\n'
        for i, n in enumerate(per_pos)
    )
    return f"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{MODEL}}} {float(drafts)}
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{{{MODEL}}} 1.796612568474794e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{MODEL}}} {float(draft_tokens)}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{MODEL}}} {float(accepted)}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
{pos}"""


METRICS = metrics_text(40, 120, 61, [30, 20, 11])  # 40 drafts of 3 tokens, 61 accepted
# vllm 0.33.0 vllm/v1/spec_decode/metrics.py:SpecDecodingLogging.log (its format string, verbatim), behind
# vllm/logger.py's _FORMAT `(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] `
SPEC_FORMAT = (
    "SpecDecoding metrics: "
    "Mean acceptance length: %.2f, "
    "Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, "
    "Accepted: %d tokens, "
    "Drafted: %d tokens, "
    "Per-position acceptance rate: %s, "
    "Avg Draft acceptance rate: %.1f%%"
)
PREFIX = "(APIServer pid=4242) INFO 11-01 09:25:07 [metrics.py:120] "


def spec_line(drafts: int, drafted: int, accepted: int, per_pos: list[int]) -> str:
    rates = ", ".join(f"{p / drafts:.3f}" for p in per_pos)
    args = (1 + accepted / drafts, accepted / 10, drafted / 10, accepted, drafted, rates, accepted / drafted * 100)
    return PREFIX + SPEC_FORMAT % args


def test_accept_length_from_the_counters_is_one_plus_accepted_per_draft():
    vl = get_engine("vllm")
    before = parse_prometheus(METRICS)
    assert vl.accept_counters(before) == (40 + 61, 40)  # (tokens the verify steps emitted, verify steps)
    after = {k: v * 3 for k, v in before.items()}  # 80 more drafts, 122 more accepted
    from kit.measure.metrics import metrics_delta_accept_length

    assert metrics_delta_accept_length(before, after, vl) == pytest.approx(1 + 61 / 40)
    assert vl.accept_counters({"vllm:num_requests_running": 1.0}) is None  # no speculation: no counters


# vllm 0.33.0 vllm/entrypoints/openai/completion/serving.py:completion_stream_generator's final usage chunk:
# `metrics.speculative_decoding` is vllm/v1/metrics/stats.py:RequestSpecDecodeMetrics.to_dict (3 drafts per step)
FINAL_CHUNK = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": "m",
    "choices": [],
    "usage": {"prompt_tokens": 5, "total_tokens": 37, "completion_tokens": 32},
    "metrics": {
        "speculative_decoding": {
            "mean_acceptance_length": 1 + 18 / 13,
            "draft_acceptance_rate": 18 / 39,
            "acceptance_histogram": [4, 3, 3, 3],
            "num_spec_steps": 13,
            "num_accepted_draft_tokens": 18,
            "num_draft_tokens": 39,
            "num_spec_tokens": 3,
        }
    },
}


def test_per_request_acceptance_is_read_from_the_answers_metrics():
    vl = get_engine("vllm")
    r = vl.read_response(FINAL_CHUNK, "completions")
    assert r.completion_tokens == 32 and r.spec == {
        "verify_ct": 13,
        "accept_rate": 18 / 39,
        "num_correct": 18,
        "num_proposed": 39,
        "histogram": [4, 3, 3, 3],
    }
    assert vl.spec_fields({"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}}, "completions") == {}


def test_the_spec_decoding_log_line_is_a_decode_row():
    line = spec_line(40, 120, 61, [30, 20, 11])
    assert "Mean acceptance length: 2.52, " in line and line.endswith("Avg Draft acceptance rate: 50.8%")
    text = "\n".join(
        [
            "(APIServer pid=4242) INFO 11-01 09:24:50 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
            "(APIServer pid=4242) INFO 11-01 09:25:07 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 "
            "tokens/s, Avg generation throughput: 18.3 tokens/s, Running: 1 reqs, Waiting: 0 reqs",
            line,
        ]
    )
    df = logs.parse_log(text, engine="vllm")
    assert list(df["kind"]) == ["ready", "decode"]
    row = df.iloc[1]
    assert row["accept_len"] == 2.52 and row["accept_rate"] == pytest.approx(61 / 120)
    assert row["rank"] == "APIServer" and row["time"] == "11-01 09:25:07"


def test_startup_failure_names_the_root_cause():
    vl = get_engine("vllm")
    tail = [
        "(EngineCore pid=77) ERROR 11-01 09:25:01 [core.py:1584] EngineCore failed to start.",
        "(EngineCore pid=77) ERROR 11-01 09:25:01 [core.py:1584] Traceback (most recent call last):",
        "(EngineCore pid=77) ERROR 11-01 09:25:01 [core.py:1584] ValueError: No available memory for the cache blocks.",
        "Traceback (most recent call last):",
        # vllm 0.33.0 vllm/v1/engine/utils.py:1473 (wait_for_engine_startup)
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
    ]
    assert vl.startup_failure(tail[2], tail[:3]) is None
    assert vl.startup_failure(tail[-1], tail) == "ValueError: No available memory for the cache blocks."


def test_a_model_that_fails_inspection_is_named_by_the_registrys_own_traceback():
    """vLLM 0.24.0 on an H100 without its FlashAttention libraries (the kit's bundle before FA3 travelled): the API
    server's pydantic error says only "failed to be inspected"; the cause is the registry's logged traceback above."""
    at = "(APIServer pid=1720) ERROR 12-08 00:50:02 [registry.py:975] "
    tail = [
        at + "Error in inspecting model architecture 'LlamaForCausalLM'",
        at + "Traceback (most recent call last):",
        at + "RuntimeError: Error raised in subprocess:",
        at + "ImportError: vllm.vllm_flash_attn requires the CUDA flash attention extensions (_vllm_fa2_C or "
        "_vllm_fa3_C). On ROCm, use upstream flash_attn.",
        at,
        "(APIServer pid=1720) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "(APIServer pid=1720)   Value error, Model architectures ['LlamaForCausalLM'] failed to be inspected. Please "
        "check the logs for more details. [type=value_error, input_value=ArgsKwargs((), {'model': ...})]",
    ]
    why = get_engine("vllm").startup_failure(tail[-1], tail)
    assert why.startswith("ImportError: vllm.vllm_flash_attn requires the CUDA flash attention extensions")


SPEC = LaunchSpec(
    model_path="meta-llama/Llama-3.1-8B-Instruct",
    speculative_algorithm="EAGLE3",
    speculative_draft_model_path="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    speculative_num_steps=3,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=4,
    tp_size=2,
    host="0.0.0.0",
    port=8000,
    enable_metrics=True,
    decode_log_interval=40,
)


def test_argv_is_vllm_serve_with_a_speculative_config():
    vl = get_engine("vllm")
    argv = SPEC.argv("vllm")
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert argv[3] == "--speculative-config"
    assert json.loads(argv[4]) == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1,
    }
    assert argv[5:7] == ["--per-request-spec-decode-metrics", "summary"]  # acceptance in each answer
    assert argv[7:] == ["--tensor-parallel-size", "2", "--host", "0.0.0.0", "--port", "8000"]
    assert vl.ignored_flags(SPEC) == ["--decode-log-interval"]  # /metrics is always on: --enable-metrics is not
    baseline = SPEC.replace(speculative_algorithm=None, speculative_draft_model_path=None, speculative_num_steps=None)
    assert baseline.argv("vllm")[3:5] == ["--tensor-parallel-size", "2"]  # no speculation, no per-request metrics
    eagle = json.loads(SPEC.replace(speculative_algorithm="EAGLE", speculative_num_steps=None).argv("vllm")[4])
    assert (eagle["method"], eagle["num_speculative_tokens"]) == ("eagle", 3)  # draft tokens - 1


def test_per_request_metrics_are_asked_only_of_a_release_whose_parser_takes_them(monkeypatch):
    import kit.vllm.rules as vr
    from kit.serving.engines.vllm import PER_REQUEST, answers_carry_metrics

    assert [answers_carry_metrics(v) for v in ("0.24.0", "0.28.0", "0.29.0", "0.33.0")] == [False, False, True, True]
    monkeypatch.setattr(vr, "installed_release", lambda: "0.24.0")  # `vllm serve` 0.24.0 exits on the unknown flag
    argv = SPEC.argv("vllm")
    assert argv[3] == "--speculative-config" and PER_REQUEST[0] not in argv
    assert argv[5:7] == ["--tensor-parallel-size", "2"]


def test_untyped_flags_reach_vllm_where_its_parser_takes_them():
    spec = SPEC.replace(extra_args=["--load-format", "dummy", "--disable-cuda-graph", "--enforce-eager"])
    spec = spec.replace(extra_args=[*spec.extra_args, "--cuda-graph-max-bs", "4", "--max-num-batched-tokens=512"])
    argv = spec.argv("vllm")
    assert argv[-4:] == ["--load-format", "dummy", "--enforce-eager", "--max-num-batched-tokens=512"]
    assert "--disable-cuda-graph" not in argv and "4" not in argv[7:]  # SGLang's, with its value
    ignored = get_engine("vllm").ignored_flags(spec)
    assert ignored == ["--decode-log-interval", "--disable-cuda-graph", "--cuda-graph-max-bs"]


def test_kit_launch_names_the_sglang_flags_the_vllm_line_drops(capsys):
    from kit.cli import main

    argv = ["launch", "--engine", "vllm", "--dry-run", "--json", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
    main([*argv, "--extra-args", "--cuda-graph-max-bs 8 --enforce-eager", "--decode-log-interval", "10"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [f] = [f for f in doc["findings"] if f["code"] == "launch.engine"]
    assert f["evidence"]["ignored"] == ["--decode-log-interval", "--cuda-graph-max-bs"]
    assert doc["argv"][-1] == "--enforce-eager"  # vLLM's own flag reaches it


def test_a_vllm_from_the_kits_bundle_gets_its_launch_flags(monkeypatch, tmp_path):
    import json as _json

    from kit.sglang.bundle import VLLM_RELEASES
    from kit.sglang.bundle_site import MANIFEST_MEMBER

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    flags = list(VLLM_RELEASES["0.24.0"].launch_flags)
    (tmp_path / MANIFEST_MEMBER).write_text(_json.dumps({"launch_flags": flags}))
    monkeypatch.syspath_prepend(str(tmp_path))  # the bundle's site first on the path, as PYTHONPATH puts it
    argv = SPEC.argv("vllm")
    i = argv.index("--attention-backend")
    assert argv[i + 1] == "TRITON_ATTN" and argv.count("--attention-backend") == 1
    fa = SPEC.replace(extra_args=["--attention-backend", "FLASH_ATTN"]).argv("vllm")
    assert fa[-2:] == ["--attention-backend", "TRITON_ATTN"]  # the last wins in argparse: the bundle carries no FA


def test_the_argv_reads_back_as_the_same_deployment():
    from kit.vllm.cmdline import read_argv

    fields = read_argv(SPEC.argv("vllm")).spec_fields()
    for name in ("model_path", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps"):
        assert fields[name] == getattr(SPEC, name), name
    assert (fields["speculative_num_draft_tokens"], fields["tp_size"], fields["port"]) == (4, 2, 8000)


@pytest.mark.parametrize(
    "change,match",
    [
        ({"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}, "topk 4: vLLM's EAGLE drafts a chain"),
        ({"speculative_algorithm": "NGRAM"}, "runs EAGLE3 or EAGLE"),
        ({"speculative_draft_model_path": None}, "needs --speculative-draft-model-path"),
        ({"speculative_num_draft_tokens": 6}, "draft tokens 6: vLLM needs a chain"),
        ({"speculative_num_steps": None, "speculative_num_draft_tokens": None}, "vLLM needs a chain"),
    ],
)
def test_a_launch_vllm_cannot_run_is_one_line(change, match):
    with pytest.raises(KitInputError, match=match):
        SPEC.replace(**change).argv("vllm")


class VllmStub(Stub):
    """Stands in for `vllm serve` (vLLM cannot run on this CPU): the stub's OpenAI endpoints and token stream, with
    what vLLM 0.33.0 differs in: no /server_info, /flush_cache or /generate; `metrics.speculative_decoding` on the
    answer (a stream's final usage chunk); its spec-decode counters on /metrics (none without speculation: vLLM
    registers none); its SpecDecoding log line. A verify step that emits k tokens is one draft with k - 1 accepted."""

    vllm_log: str | None = None
    per_request = True  # launched with --per-request-spec-decode-metrics
    last: dict | None = None  # the request just finished: its answer's metrics (written before the next await)

    async def route(self, method, path, body, writer):
        if path in ("/server_info", "/get_server_info", "/flush_cache", "/generate"):
            self._send(writer, 404, {"detail": "Not Found"})
            await writer.drain()
        elif path == "/metrics":
            st, k = self.state, self.cfg.speculative_num_draft_tokens - 1
            drafts, accepted = st.verify_calls, st.decode_tokens - st.verify_calls
            txt = metrics_text(drafts, k * drafts, accepted, [accepted]) if self.cfg.spec else ""
            self._send(writer, 200, txt + f"vllm:num_requests_running{{{MODEL}}} 0.0\n", "text/plain; version=0.0.4")
            await writer.drain()
        else:
            await super().route(method, path, body, writer)

    def _account(self, steps, spec):
        super()._account(steps, spec)
        drafts, k = len(steps) - 1, self.cfg.speculative_num_draft_tokens - 1
        accepted = sum(steps[1:]) - drafts
        self.last = None
        if spec and drafts and self.per_request:
            hist = [sum(1 for n in steps[1:] if n == j + 1) for j in range(k + 1)]
            sd = {"mean_acceptance_length": 1 + accepted / drafts, "draft_acceptance_rate": accepted / (k * drafts)}
            sd |= {"acceptance_histogram": hist, "num_spec_steps": drafts, "num_accepted_draft_tokens": accepted}
            self.last = {"speculative_decoding": {**sd, "num_draft_tokens": k * drafts, "num_spec_tokens": k}}
        if self.vllm_log and spec:  # one SpecDecoding line per request
            with open(self.vllm_log, "a") as f:
                f.write(spec_line(drafts, k * drafts, accepted, [accepted]) + "\n")

    def _with_metrics(self, obj):
        return {**obj, "metrics": self.last} if isinstance(obj, dict) and "usage" in obj and self.last else obj

    def _send(self, writer, status, payload, ctype="application/json"):
        Stub._send(writer, status, self._with_metrics(payload), ctype)

    def _chunk(self, writer, text):
        if text.startswith("data: {"):
            text = "data: " + json.dumps(self._with_metrics(json.loads(text[6:]))) + "\n\n"
        Stub._chunk(writer, text)


def stub(cfg: StubConfig, log: str | None = None, per_request: bool = True) -> StubThread:
    th = StubThread(cfg)
    th.stub = VllmStub(cfg)
    th.stub.vllm_log, th.stub.per_request = log, per_request
    return th


def test_kit_bench_reads_acceptance_from_vllms_answers_and_counters(tmp_path, capsys):
    from kit.cli import main
    from kit.measure.bench import load_result

    log = tmp_path / "vllm.log"
    log.write_text("")
    with stub(StubConfig(), str(log)) as s, stub(StubConfig(spec=False)) as b:
        argv = ["bench", "--engine", "vllm", "--url", s.url, "--baseline-url", b.url, "--api", "completions"]
        argv += ["--num-prompts", "3", "--max-new-tokens", "32", "--warmup", "0", "--log-path", str(log)]
        argv += ["--expected-accept-length", "2.5", "--out-dir", str(tmp_path / "run"), "--no-progress"]
        rc = main(argv)
        assert not any(body.get("return_spec_tokens_details") for body in s.state.bodies)  # SGLang's ask, not sent
    out = capsys.readouterr().out
    assert rc in (0, 1) and "Accept length, metrics_delta:" in out
    res = load_result(tmp_path / "run", expected_accept_length=2.5)
    # 32 tokens: 1 from prefill, then 13 verify steps emitting [3, 2, 1, 4, ...] (31 tokens): 18 drafts accepted
    assert res.summary["labels"]["spec"]["accept_length"] == pytest.approx(32 / 13)  # the kit's: tokens / steps
    src = res.summary["accept_sources"]["spec"]
    assert src["meta_decode"]["value"] == pytest.approx(1 + 18 / 13)  # the prefill token left out
    assert src["metrics_delta"]["value"] == pytest.approx(1 + 18 / 13)  # vLLM's: 1 + accepted / drafts
    assert src["log"]["value"] == pytest.approx(1 + 18 / 13, abs=0.005)  # the SpecDecoding lines (2 decimals)
    assert "metrics_delta" not in res.summary["accept_sources"]["baseline"]  # no speculation, no counters
    assert "spec" in res.summary["speedup"]  # the same speedup logic as for SGLang
    codes = res.report.codes()
    assert "verdict.healthy" in codes  # observed 2.46 against the expected 2.5: the oracle's verdict
    assert not {"bench.accept_mismatch", "bench.no_acceptance", "bench.baseline_is_speculative"} & set(codes)


def test_a_server_without_per_request_metrics_still_has_its_counters(tmp_path):
    from kit.measure.bench import BenchConfig, run_bench

    with stub(StubConfig(), per_request=False) as s:
        kw = dict(engine="vllm", api="chat", num_prompts=2, max_new_tokens=32, warmup=0, progress=False)
        res = run_bench(BenchConfig(url=s.url, out_dir=str(tmp_path / "r"), **kw))
    assert res.summary["accept_sources"]["spec"]["metrics_delta"]["value"] == pytest.approx(1 + 18 / 13)
    assert "bench.no_acceptance" in res.report.codes()  # the answers carry none: the counters are the source


def test_bench_without_api_asks_the_engine_its_endpoint():
    from kit.measure.bench import BenchConfig

    assert (BenchConfig(engine="vllm").api, BenchConfig().api, BenchConfig(engine="vllm", api="chat").api) == (
        "completions",
        "sglang",
        "chat",
    )
