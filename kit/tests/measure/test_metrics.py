"""kit.measure.metrics on hand-built records: exact expected numbers, no server."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.measure import metrics as km
from kit.measure.records import RequestRecord, RunRecord
from kit.serving.engines import get_engine
from kit.serving.engines.sglang import SGLang
from kit.sglang.http_api import http_api


def rec(t0, e2e, chunks, toks, spec=None, **kw):
    return RequestRecord(
        ok=True,
        label="spec",
        repeat=0,
        api="sglang",
        t_start=t0,
        e2e=e2e,
        ttft=chunks[0],
        chunk_t=chunks,
        chunk_tok=toks,
        completion_tokens=sum(toks),
        client_tokens=sum(toks),
        spec=spec or {},
        **kw,
    )


def test_summary_throughput_latency_and_acceptance():
    spec = {"verify_ct": 3, "accept_length": 7 / 3, "num_correct": 3, "num_proposed": 9, "histogram": [1, 1, 1, 0]}
    r1 = rec(100.0, 1.0, [0.2, 0.4, 0.6, 1.0], [1, 2, 1, 3], spec)
    r2 = rec(100.5, 1.0, [0.1, 0.5, 0.7, 0.9], [1, 3, 2, 1], spec)
    warm = rec(90.0, 5.0, [1.0], [50], warmup=True)
    bad = RequestRecord(ok=False, label="spec", repeat=0, error="x")
    s = km.summarize([r1, r2, warm, bad])
    assert s.requests == 2 and s.failed == 1 and s.output_tokens == 14
    assert s.duration_s == pytest.approx(1.5)  # union of [100,101] and [100.5,101.5]
    assert s.output_tok_s == pytest.approx(14 / 1.5)
    assert s.ttft_p50_s == pytest.approx(0.15)
    assert s.accept_length == pytest.approx(14 / 6)
    assert s.accept_length_decode == pytest.approx(12 / 6)
    assert s.accept_rate == pytest.approx(6 / 18)
    assert s.accept_histogram == [2, 2, 2, 0]
    # ITL: a chunk of k tokens contributes k gaps of gap/k
    assert km.itls(r1) == pytest.approx([0.1, 0.1, 0.2, 0.4 / 3, 0.4 / 3, 0.4 / 3])


def test_per_position_acceptance_from_histogram():
    # 10 verify steps: 4 accepted 0 drafts, 3 accepted 1, 2 accepted 2, 1 accepted 3
    assert km.per_position_acceptance([4, 3, 2, 1]) == pytest.approx([0.6, 0.3, 0.1])
    assert km.per_position_acceptance([]) == []


def test_spec_field_aliases_old_and_new():
    spec_fields = http_api().spec_fields
    new = spec_fields({"spec_verify_ct": 4, "spec_num_correct_drafts": 3, "spec_correct_drafts_histogram": [1]})
    old = spec_fields({"spec_verify_ct": 4, "spec_accept_token_num": 3, "spec_accept_histogram": [1]})
    assert new == old == {"verify_ct": 4, "num_correct": 3, "histogram": [1]}
    assert spec_fields(None) == {} and spec_fields({"completion_tokens": 3}) == {}


def test_sglang_engine_reads_spec_fields_where_each_api_puts_them():
    sg = get_engine("sglang")
    assert sg.spec_fields({"meta_info": {"spec_verify_ct": 4}}, "sglang") == {"verify_ct": 4}
    chunk = {"sglext": {"spec_tokens_details": [{"spec_verify_ct": 5, "spec_accept_length": 2.0}]}}
    assert sg.spec_fields(chunk, "chat") == {"verify_ct": 5, "accept_length": 2.0}
    assert sg.spec_fields({"usage": {}}, "chat") == {}


def test_openai_spec_details_per_release():
    """0.5.17's OpenAI endpoints carry no speculative fields: the kit does not ask them for any."""
    assert not http_api("0.5.17").openai_spec_details and http_api("0.5.23").openai_spec_details
    assert SGLang("0.5.17").request_extra("chat") is None
    assert SGLang("0.5.23").request_extra("chat") == {"return_spec_tokens_details": True}
    assert SGLang("0.5.23").request_extra("sglang") is None  # /generate meta_info always has them


def test_prometheus_and_metrics_delta():
    text = (
        '# HELP x\nsglang:generation_tokens_total{model_name="a"} 100\n'
        'sglang:generation_tokens_total{model_name="b"} 20\nsglang:spec_verify_calls_total 40\n'
        'sglang:spec_accept_length{model_name="a"} 2.5\n'
    )
    m = km.parse_prometheus(text)
    assert m["sglang:generation_tokens_total"] == 120 and m["sglang:spec_accept_length"] == 2.5
    after = {"sglang:generation_tokens_total": 220.0, "sglang:spec_verify_calls_total": 80.0}
    assert km.metrics_delta_accept_length(m, after) == pytest.approx(100 / 40)
    assert km.metrics_delta_accept_length(m, m) is None  # no verify calls in between


def test_reconcile_flags_only_disagreeing_sources():
    recs = [rec(0, 1, [0.1, 0.3, 0.5, 0.7, 0.9], [1, 2, 3, 2, 2], {"verify_ct": 4, "accept_length": 2.5})]
    info = RunRecord(
        metrics_before={"sglang:generation_tokens_total": 0, "sglang:spec_verify_calls_total": 0},
        metrics_after={"sglang:generation_tokens_total": 10, "sglang:spec_verify_calls_total": 4},
        server_info_after={"internal_states": [{"avg_spec_accept_length": 4.0}]},
        log_accept_lengths=[2.2, 2.3],
    )
    src = km.acceptance_sources(recs, info)
    assert src["meta"].value == 2.5 and src["metrics_delta"].value == 2.5
    assert src["meta_decode"].value == src["stream"].value == pytest.approx(9 / 4)
    found = km.reconcile_acceptance(src, "x")
    assert [f.evidence["source"] for f in found] == ["server_info"]
    assert found[0].code == "bench.accept_mismatch" and "x:" in found[0].title


def test_stream_of_one_token_chunks_is_explained_in_the_finding():
    # a server that streams token by token: chunks say 1.0 while 3 verify steps emitted 7 decode tokens
    recs = [rec(0, 1, [0.1 * i for i in range(1, 9)], [1] * 8, {"verify_ct": 3})]
    src = km.acceptance_sources(recs)
    assert src["stream"].value == 1.0 and src["meta_decode"].value == pytest.approx(7 / 3)
    (f,) = km.reconcile_acceptance(src, "spec#0")
    assert f.evidence["source"] == "stream" and f.title.endswith("every streamed chunk carried one token")
    assert "token by token" in f.evidence["why"] and "--stream-interval 1" in f.fix
    assert f.fix.startswith("trust meta")


def test_acceptance_block_says_which_sources_agree_and_why_not():
    # the reference server's case: meta 8/7 counts the prefill token, meta_decode and stream do not (1.0)
    recs = [rec(0, 1, [0.1 * i for i in range(1, 9)], [1] * 8, {"verify_ct": 7})]
    lines = km.acceptance_block(km.acceptance_sources(recs))
    meta = next(x for x in lines if x.startswith("Accept length, meta:"))
    stream = next(x for x in lines if x.startswith("Accept length, stream:"))
    assert "1.14" in meta and "prefill token included" in meta
    assert "1.00" in stream and "agrees with meta_decode" in stream
    bad = [rec(0, 1, [0.1 * i for i in range(1, 9)], [1] * 8, {"verify_ct": 3})]
    stream = next(x for x in km.acceptance_block(km.acceptance_sources(bad)) if x.startswith("Accept length, stream:"))
    assert "57% off meta_decode: every streamed chunk carried one token" in stream


def test_every_source_has_its_own_explanation():
    whys = {
        n: km.explain_mismatch(n, 2.0, 1.5)[1] for n in ("stream", "server_info", "log", "metrics_delta", "meta_field")
    }
    assert len(set(whys.values())) == len(whys)
    assert "sglang.bench_serving" in whys["server_info"]


def test_serving_block_has_bench_serving_names_in_ms():
    spec = {"verify_ct": 3, "histogram": [1, 1, 1, 0]}
    r1 = rec(100.0, 1.0, [0.2, 0.4, 0.6, 1.0], [1, 2, 1, 3], spec, prompt_tokens=10)
    r2 = rec(100.5, 1.0, [0.1, 0.5, 0.7, 0.9], [1, 3, 2, 1], spec, prompt_tokens=12)
    s = km.summarize([r1, r2])
    lines = km.serving_block(s, "spec", "sglang (/generate)", 4, km.acceptance_sources([r1, r2]))
    assert lines[0] == "{:=^50}".format(" Serving Benchmark Result: spec ")
    rows = {x[:40].strip(): x[41:].split()[0] for x in lines if len(x) > 41 and x[40] == " " and ":" in x[:40]}
    assert rows["Successful requests:"] == "2" and rows["Max request concurrency:"] == "4"
    assert rows["Benchmark duration (s):"] == "1.50"
    assert rows["Total input tokens:"] == "22" and rows["Total generated tokens:"] == "14"
    assert rows["Output token throughput (tok/s):"] == f"{14 / 1.5:.2f}"
    assert rows["Median TTFT (ms):"] == "150.00" and rows["Mean E2E Latency (ms):"] == "1000.00"
    assert rows["Concurrency:"] == f"{2 / 1.5:.2f}"
    assert rows["Accept length:"] == f"{14 / 6:.2f}" and rows["Accept length, meta:"] == f"{14 / 6:.2f}"
    for name in (
        "P99 TTFT (ms):",
        "Mean ITL (ms):",
        "Median ITL (ms):",
        "P95 ITL (ms):",
        "P99 ITL (ms):",
        "Max ITL (ms):",
        "Mean TPOT (ms):",
        "P99 E2E Latency (ms):",
        "Request throughput (req/s):",
    ):
        assert name in rows, name
    assert rows["Max ITL (ms):"] == "200.00"  # a 0.2 s gap carrying one token


def test_serving_block_of_no_successful_request_says_n_a():
    s = km.summarize([RequestRecord(ok=False, label="spec", repeat=0, error="x")])
    text = "\n".join(km.serving_block(s, "spec", "sglang", None))
    assert "nan" not in text and "Mean TTFT (ms):                          n/a" in text
    assert "Failed requests:                         1" in text


def test_speedup_ci_covers_truth_and_single_run_is_flagged():
    ci = km.speedup_ci([100, 102, 98], [200, 204, 196])
    assert ci["speedup"] == pytest.approx(2.0)
    assert ci["t_low"] < 2.0 < ci["t_high"] and ci["t_high"] - ci["t_low"] < 0.2
    assert ci["boot_low"] <= 2.0 <= ci["boot_high"]
    assert km.speedup_findings(ci) == []
    one = km.speedup_ci([50], [200])
    assert math.isnan(one["t_low"])
    assert km.speedup_findings(one)[0].code == "bench.speedup_single_run"
    # an unlucky baseline run makes the interval straddle 1 -> flagged
    wide = km.speedup_ci([100, 40, 100], [110, 112, 108])
    assert km.speedup_findings(wide)[0].code == "bench.speedup_uncertain"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy(xs, q):
    assert km.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), min_size=1, max_size=30))
def test_busy_time_bounds(pairs):
    iv = [(s, s + d) for s, d in pairs]
    bt = km.busy_time(iv)
    assert max(e - s for s, e in iv) - 1e-9 <= bt <= sum(e - s for s, e in iv) + 1e-9
    assert bt <= max(e for _, e in iv) - min(s for s, _ in iv) + 1e-9


def test_paired_ratios_pair_by_request_and_repeat_and_the_median_has_an_interval():
    def rec(label, rid, repeat, e2e, tokens=24):
        return RequestRecord(label=label, rid=rid, repeat=repeat, ok=True, e2e=e2e, completion_tokens=tokens)

    base = [rec("baseline", f"p{i}#0", 0, 2.0 + 0.1 * i) for i in range(8)]
    spec = [rec("spec", f"p{i}#0", 0, (2.0 + 0.1 * i) / (1.5 + 0.02 * i)) for i in range(8)]
    spec.append(rec("spec", "lonely#0", 0, 1.0))  # no baseline twin: left out
    ratios = km.paired_ratios(base + spec, "baseline", "spec")
    assert len(ratios) == 8 and ratios[0] == pytest.approx(1.5)
    sp = km.paired_speedup(ratios)
    assert sp["median_low"] <= sp["median"] <= sp["median_high"]
    assert 1.5 <= sp["median_low"] and sp["median_high"] <= 1.64
    short = km.brief(sp)
    assert short["n"] == 8 and short["ci95"] == [round(sp["median_low"], 3), round(sp["median_high"], 3)]
    assert km.brief(km.paired_speedup([])) is None


def test_launch_speedup_pairs_repeats_when_there_are_several_else_requests():
    def rec(label, rid, repeat, e2e):
        return RequestRecord(label=label, rid=rid, repeat=repeat, ok=True, e2e=e2e, completion_tokens=24)

    # four repeats: each repeat's pooled tok/s over the baseline's in the same repeat, whatever the requests say
    runs = [{"label": "baseline", "repeat": k, "output_tok_s": 100.0} for k in range(4)]
    runs += [{"label": "spec", "repeat": k, "output_tok_s": v} for k, v in enumerate((80.0, 90.0, 95.0, 120.0))]
    records = [rec("baseline", "p0#0", 0, 1.0), rec("spec", "p0#0", 0, 0.5)]  # a per-request ratio of 2.0
    sp = km.launch_speedup(runs, records, "baseline", "spec")
    assert sp["pairing"] == "repeat" and sp["ratios"] == pytest.approx([0.8, 0.9, 0.95, 1.2])
    assert sp["median"] == pytest.approx(0.925) and sp["ci95"] == [sp["median_low"], sp["median_high"]]
    # the one request both arms answered says 2.0x where the repeats say 0.925x: the run cannot be headlined
    assert sp["tok_s_ratio"] == pytest.approx(2.0) and "disagree" in sp["inconclusive"]
    assert km.brief(sp) == {"median": 0.925, "ci95": [round(sp["median_low"], 3), round(sp["median_high"], 3)],
                            "n": 4, "pairing": "repeat", "tok_s_ratio": 2.0, "inconclusive": sp["inconclusive"]}  # fmt: skip
    # one repeat: each request over its own baseline twin
    one = km.launch_speedup(runs[:1] + runs[4:5], records, "baseline", "spec")
    assert one["pairing"] == "request" and one["ratios"] == [2.0] and one["median"] == 2.0
    assert km.launch_speedup(runs[:4], [], "baseline", "spec") is None  # the launch never ran


@pytest.mark.parametrize(
    "median, ci95, tok_s_ratio, accept_length, why",
    [
        (1.6, (1.4, 1.8), 1.55, 2.1, None),  # a run that supports its headline
        (0.98, (0.95, 1.02), 1.01, 1.05, None),  # both within 5% of 1.0: no direction to disagree on
        (9.48, (0.31, 30.86), 0.46, 1.05, "interval"),  # the seed's arm on a busy 2-core VM (issue 53)
        (1.3, (1.2, 1.4), 0.8, 2.0, "disagree"),  # paired median and pooled tok/s on opposite sides of 1.0
        (1.4, (1.3, 1.5), 1.4, 1.05, "accept length"),  # faster than a launch accepting nothing can run
        (1.5, (float("nan"), float("nan")), 1.5, 2.0, "no interval"),
    ],
)
def test_inconclusive_names_why_a_run_cannot_support_its_headline(median, ci95, tok_s_ratio, accept_length, why):
    got = km.inconclusive(median, ci95, tok_s_ratio, accept_length)
    if why is None:
        assert got is None
    else:
        assert why in got and "no outside load was observed" in got and "--quiet-check" in got
    busy = km.inconclusive(9.48, (0.31, 30.86), 0.46, 1.05, busy="other work used 1.0 cores on average")
    assert busy.startswith("the machine was busy (other work used 1.0 cores") and "no outside load" not in busy
    # a busy machine alone withholds a headline: a second job on the card changes the arms' relative costs
    tight = km.inconclusive(1.16, (1.15, 1.17), 1.16, 2.17, busy="1 other process(es) on the GPU")
    assert tight and tight.startswith("the machine was busy (1 other process(es) on the GPU)")


def test_pooled_ratio_compares_only_the_requests_both_arms_answered():
    def rec(label, rid, e2e, tokens=10):
        return RequestRecord(label=label, rid=rid, repeat=0, ok=True, e2e=e2e, completion_tokens=tokens)

    recs = [rec("baseline", "a", 1.0), rec("baseline", "b", 4.0), rec("seed", "a", 2.0)]  # seed skipped "b"
    assert km.pooled_ratio(recs, "baseline", "seed") == pytest.approx(0.5)  # not (10/2) / (20/5) = 1.25
    assert km.pooled_ratio(recs, "baseline", "nobody") is None
