"""Benchmark metrics: latency/throughput summaries, acceptance from every source, speedup CIs.

Pure functions over request records (`kit.measure.records.RequestRecord`, one line of `records.jsonl` each):
no HTTP, no pandas at import time, so a live run, a resumed JSONL file and a hand-built test set score alike.
What a server snapshot means (/metrics names, the server-info field) is the engine's (`kit.serving.engines`).

Acceptance length (AL) is "tokens emitted per target verify step, bonus token included" (SGLang's; one
request's: `RequestRecord.accept_length`). SGLang exposes it several ways that do NOT measure the same thing:

  source            scope                     formula
  meta              this run, per request     `Acceptance.length` (pooled over the requests)
  meta_decode       this run, per request     `Acceptance.length_decode` (the prefill token left out)
  meta_req_mean     this run, per request     `Acceptance.length_req_mean` (unweighted mean of requests)
  meta_field        this run, per request     `Acceptance.length_field_mean` (the server's own field)
  metrics_delta     this run, server counters delta generation_tokens_total / delta spec_verify_calls_total
  server_info       server lifetime           internal_states[0].avg_spec_accept_length
  log               decode-log intervals      mean "accept len" of the decode log lines (decode only)
  stream            client side               mean tokens per streamed chunk after the first
                                              (one chunk per verify step when --stream-interval 1)

`reconcile_acceptance` returns a `bench.accept_mismatch` finding for each source that disagrees with the meta
value of its scope, saying why it can differ (`explain_mismatch`). `serving_block` prints one arm's summary as
`python -m sglang.bench_serving` does, then `acceptance_block`: every source, its scope, whether it agrees.
"""

from __future__ import annotations

import math
import random
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from kit.findings import Code, Finding
from kit.measure.records import JsonRecord, RequestRecord, RunRecord
from kit.serving.engines import Engine, get_engine

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "bench/verdict: notebook 05"
ACCEPT_MISMATCH = Code(
    "bench.accept_mismatch",
    SECTION,
    "warning",
    "two acceptance sources for the same run disagree beyond tolerance (per-request meta_info vs /metrics"
    " deltas, /server_info lifetime, decode log lines, streamed chunk sizes)",
    "trust per-request meta_info; restart the server per configuration for cumulative sources; check "
    "--stream-interval / --decode-log-interval",
)
SPEEDUP_SINGLE_RUN = Code(
    "bench.speedup_single_run",
    SECTION,
    "warning",
    "speedup computed from one run per arm: no confidence interval",
    "repeat both arms (`--repeats 3`+)",
)
SPEEDUP_UNCERTAIN = Code(
    "bench.speedup_uncertain",
    SECTION,
    "warning",
    "the run cannot support a speedup headline (shown inconclusive, with what the machine did while each arm ran:"
    " `kit.measure.machine`): the paired interval is missing or wider than 1.5x (high/low), the paired median and"
    " the pooled tok/s ratio over the same requests lie on opposite sides of 1.0, or the speedup exceeds the accept"
    " length (each verify costs at least one target step); unpaired runs: an interval straddling 1.0 or wider than half the speedup",
    "more prompts or repeats, `--quiet-check` (wait for a quiet machine), a machine of its own; the accept length stands either way",
)


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]; nan when empty."""
    xs = sorted(x for x in xs if x is not None and not math.isnan(x))
    if not xs:
        return math.nan
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else math.nan


def busy_time(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals: throughput divides by it, so a run resumed an hour
    later does not count the hour it was not running."""
    total, covered = 0.0, -math.inf
    for s, e in sorted(intervals):
        total += max(0.0, e - max(s, covered))
        covered = max(covered, e)
    return total


def itls(rec: RequestRecord) -> list[float]:
    """Inter-token latencies of one streamed request: a chunk of k tokens (one verify step's) is k gaps of
    (chunk gap / k), sglang.bench_serving's convention, so ITL stays per token across baseline and spec."""
    ts, ks = rec.chunk_t, rec.chunk_tok
    out: list[float] = []
    for i in range(1, len(ts)):
        k = ks[i] if i < len(ks) else 1
        if k <= 0:
            continue
        out += [(ts[i] - ts[i - 1]) / k] * k
    return out


def measured(records: Iterable[RequestRecord], label: str | None = None) -> list[RequestRecord]:
    """Records that count: successful, not warmup, optionally of one run label."""
    return [r for r in records if r.ok and not r.warmup and (label is None or r.label == label)]


@dataclass(slots=True)
class ServingSummary(JsonRecord):
    """Throughput, latency and acceptance of one set of measured requests (`summarize`), seconds throughout;
    `to_dict` is summary.json's per-arm and per-run entry. Latency percentiles are over requests, ITL's over tokens."""

    _UNSET_OMITTED = ("accept_length", "accept_length_decode", "accept_length_req_mean", "accept_length_field_mean",
                      "accept_rate")  # fmt: skip

    requests: int = 0
    failed: int = 0  # failed requests, warmup excluded
    output_tokens: int = 0  # sum of RequestRecord.output_tokens
    prompt_tokens: int = 0  # sum of the server's prompt token counts
    duration_s: float = math.nan  # busy time: the union of the requests' [start, end] intervals (`busy_time`)
    output_tok_s: float = math.nan  # output_tokens / duration_s
    input_tok_s: float = math.nan  # prompt_tokens / duration_s
    total_tok_s: float = math.nan  # (prompt_tokens + output_tokens) / duration_s
    req_s: float = math.nan  # requests / duration_s
    concurrency: float = math.nan  # requests in flight on average: sum(e2e) / duration_s (sglang.bench_serving's)
    # TTFT: send to the first chunk that carried a token (streams only)
    ttft_mean_s: float = math.nan
    ttft_p50_s: float = math.nan
    ttft_p90_s: float = math.nan
    ttft_p95_s: float = math.nan
    ttft_p99_s: float = math.nan
    # ITL: per token; a chunk of k tokens is k gaps of (chunk gap / k) (`itls`)
    itl_mean_s: float = math.nan
    itl_p50_s: float = math.nan
    itl_p90_s: float = math.nan
    itl_p95_s: float = math.nan
    itl_p99_s: float = math.nan
    # TPOT: per request, (e2e - ttft) / (output tokens - 1), first token excluded
    tpot_mean_s: float = math.nan
    tpot_p50_s: float = math.nan
    tpot_p90_s: float = math.nan
    tpot_p95_s: float = math.nan
    tpot_p99_s: float = math.nan
    # E2E: send to the end of the answer
    e2e_mean_s: float = math.nan
    e2e_p50_s: float = math.nan
    e2e_p90_s: float = math.nan
    e2e_p95_s: float = math.nan
    e2e_p99_s: float = math.nan
    itl_max_s: float = math.nan
    # acceptance: the fields of `Acceptance`, prefixed (absent from the dict while None)
    accept_requests_with_spec: int = 0
    accept_length: float | None = None
    accept_length_decode: float | None = None
    accept_length_req_mean: float | None = None
    accept_length_field_mean: float | None = None
    accept_rate: float | None = None
    accept_histogram: list[int] | None = None


def summarize(records: Iterable[RequestRecord]) -> ServingSummary:
    """Throughput, latency and acceptance of one set of records (typically one label+repeat)."""
    allrec = list(records)
    recs = measured(allrec)
    failed = [r for r in allrec if not r.ok and not r.warmup]
    toks = [r.output_tokens for r in recs]
    dur = busy_time((r.t_start, r.t_start + r.e2e) for r in recs)
    ttft = [r.ttft for r in recs if r.ttft is not None]
    e2e = [r.e2e for r in recs]
    itl = [x for r in recs for x in itls(r)]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in recs if r.ttft is not None and r.output_tokens > 1]
    ptoks = sum(int(r.prompt_tokens or 0) for r in recs)
    per_s = (lambda n: n / dur) if dur > 0 else (lambda n: math.nan)
    kw: dict[str, Any] = {}
    for name, xs in (("ttft", ttft), ("itl", itl), ("tpot", tpot), ("e2e", e2e)):
        kw[f"{name}_mean_s"] = _mean(xs)
        for q in (50, 90, 95, 99):
            kw[f"{name}_p{q}_s"] = percentile(xs, q)
    acc = acceptance_from_records(recs)
    return ServingSummary(
        requests=len(recs),
        failed=len(failed),
        output_tokens=sum(toks),
        prompt_tokens=ptoks,
        duration_s=dur,
        output_tok_s=per_s(sum(toks)),
        input_tok_s=per_s(ptoks),
        total_tok_s=per_s(ptoks + sum(toks)),
        req_s=per_s(len(recs)),
        concurrency=per_s(sum(e2e)),
        itl_max_s=max(itl) if itl else math.nan,
        **kw,
        **{f"accept_{k}": v for k, v in acc.present().items()},
    )


@dataclass(slots=True)
class Acceptance:
    """Acceptance of a set of requests from their own speculative fields (`RequestRecord.spec`); only requests
    that report verify steps count. Each field's `scope` (metadata) is what `acceptance_sources` says of it."""

    requests_with_spec: int = 0  # requests that report verify steps (spec["verify_ct"] > 0)
    # pooled, SGLang's (token-weighted): sum(output tokens) / sum(verify steps); the first token comes from
    # prefill, not a verify step, and is counted
    length: float | None = field(
        default=None, metadata={"scope": "run, completion_tokens/spec_verify_ct (prefill token included)"}
    )
    # pooled, decode only: sum(output tokens - 1) / sum(verify steps)
    length_decode: float | None = field(
        default=None, metadata={"scope": "run, (completion_tokens-1)/spec_verify_ct (decode only)"}
    )
    # unweighted mean over requests of each one's RequestRecord.accept_length
    length_req_mean: float | None = field(default=None, metadata={"scope": "run, mean per request"})
    # unweighted mean over requests of the server's own per-request accept length (spec["accept_length"])
    length_field_mean: float | None = field(default=None, metadata={"scope": "run, mean of server spec_accept_length"})
    # share of drafted tokens accepted, pooled: sum(num_correct) / sum(num_proposed), when every request says
    rate: float | None = None
    # verify steps by accepted drafts (bucket k: k drafts accepted), summed over requests (`merge_histograms`)
    histogram: list[int] | None = None

    def present(self) -> dict[str, Any]:
        """The fields that have a value, in order (what a `ServingSummary` carries as `accept_<name>`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @staticmethod
    def scope(name: str) -> str:
        """What the field `name` counts, in a few words (its `scope` metadata)."""
        return next(f.metadata["scope"] for f in fields(Acceptance) if f.name == name)


def acceptance_from_records(recs: Sequence[RequestRecord]) -> Acceptance:
    """Per-request acceptance, aggregated the SGLang way (token-weighted); the definitions are `Acceptance`'s."""
    with_spec = [r for r in recs if r.verify_ct]
    out = Acceptance(requests_with_spec=len(with_spec))
    if not with_spec:
        return out
    toks = sum(r.output_tokens for r in with_spec)
    ver = sum(r.verify_ct for r in with_spec)
    out.length = toks / ver
    out.length_decode = (toks - len(with_spec)) / ver
    out.length_req_mean = _mean([r.accept_length for r in with_spec])
    fields_ = [r.spec["accept_length"] for r in with_spec if r.spec.get("accept_length") is not None]
    if fields_:
        out.length_field_mean = _mean(fields_)
    corr = [r.spec.get("num_correct") for r in with_spec]
    prop = [r.spec.get("num_proposed") for r in with_spec]
    if all(c is not None for c in corr) and all(p for p in prop):
        out.rate = sum(corr) / sum(prop)
    out.histogram = merge_histograms(r.spec.get("histogram") for r in with_spec) or None
    return out


def merge_histograms(hists: Iterable[Sequence[int] | None]) -> list[int]:
    """Element-wise sum of per-request correct-drafts histograms (bucket k = k drafts accepted)."""
    out: list[int] = []
    for h in hists:
        out += [0] * (len(h or ()) - len(out))
        for i, c in enumerate(h or ()):
            out[i] += int(c)
    return out


def per_position_acceptance(hist: Sequence[int]) -> list[float]:
    """P(draft position i is accepted), i = 1..K, from a correct-drafts histogram: verification accepts a
    prefix, so position i is accepted in every verify step that accepted >= i drafts: sum(h[i:]) / sum(h)."""
    total = sum(hist)
    if not total:
        return []
    return [sum(hist[i:]) / total for i in range(1, len(hist))]


def stream_accept_length(recs: Sequence[RequestRecord]) -> float | None:
    """Client-side AL: mean tokens per streamed chunk after the first (which holds the prefill token); exact
    only for /generate streams, over-estimated when the server coalesces chunks for a slow reader."""
    ks = [k for r in recs if r.api == "sglang" for k in r.chunk_tok[1:] if k > 0]
    return sum(ks) / len(ks) if ks else None


# --- server-side sources ---

_PROM = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format -> {metric name: value summed over label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if m := _PROM.match(line.strip()):  # comments (# HELP, # TYPE) do not match
            try:
                out[m[1]] = out.get(m[1], 0.0) + float(m[3])
            except ValueError:
                continue
    return out


def metrics_delta_accept_length(
    before: dict | None, after: dict | None, engine: str | Engine | None = None
) -> float | None:
    """AL over one run from the server's lifetime counters (generated tokens / verify steps), as the
    engine names them (`Engine.accept_counters`)."""
    eng = get_engine(engine)
    c0, c1 = eng.accept_counters(before), eng.accept_counters(after)
    if c0 is None or c1 is None or c1[1] - c0[1] <= 0:
        return None
    return (c1[0] - c0[0]) / (c1[1] - c0[1])


def server_info_accept_length(info: dict | None, engine: str | Engine | None = None) -> float | None:
    """The server-lifetime accept length of its server info (SGLang: `avg_spec_accept_length`)."""
    return get_engine(engine).server_info_accept_length(info)


@dataclass(slots=True)
class AcceptSource:
    """One source's accept length over one run (`acceptance_sources`)."""

    value: float
    scope: str  # what it counts, in a few words
    compare_to: str | None = None  # the source of the same scope it should agree with (None: it is a reference)


def acceptance_sources(records: Sequence[RequestRecord], run_info: RunRecord | None = None) -> dict[str, AcceptSource]:
    """Every AL source we can compute for one run -> {name: AcceptSource}; `run_info` (kit.measure.bench's run
    record) holds the server snapshots, the decode log's accept lengths and the engine that reads them."""
    recs = measured(records)
    acc = acceptance_from_records(recs)
    run_info = run_info or RunRecord()
    eng = get_engine(run_info.engine)
    src: dict[str, AcceptSource] = {}

    def put(name, value, scope, compare_to):
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            src[name] = AcceptSource(float(value), scope, compare_to)

    put("meta", acc.length, Acceptance.scope("length"), None)
    put("meta_decode", acc.length_decode, Acceptance.scope("length_decode"), None)
    put("meta_req_mean", acc.length_req_mean, Acceptance.scope("length_req_mean"), None)
    put("meta_field", acc.length_field_mean, Acceptance.scope("length_field_mean"), "meta_req_mean")
    delta = metrics_delta_accept_length(run_info.metrics_before, run_info.metrics_after, eng)
    put("metrics_delta", delta, "run, /metrics counter deltas", "meta")
    lifetime = server_info_accept_length(run_info.server_info_after, eng)
    put("server_info", lifetime, "server lifetime (includes warmup and earlier runs)", "meta_decode")
    logs = run_info.log_accept_lengths or []
    put("log", _mean(logs) if logs else None, f"decode log lines ({len(logs)})", "meta_decode")
    put("stream", stream_accept_length(recs), "client, tokens per streamed chunk", "meta_decode")
    return src


# relative tolerance per source: exact-by-construction sources get a tight one
TOLERANCE = {"meta_field": 0.02, "metrics_delta": 0.05, "server_info": 0.15, "log": 0.15, "stream": 0.15}


# why a source other than `stream` can disagree with the per-request value: (short reason, why, fix after "trust meta")
_MISMATCH = {
    "server_info": (
        "server_info is a lifetime average",
        "avg_spec_accept_length covers the server's lifetime (warmup, earlier runs and other clients "
        "included); it is the 'Accept length' sglang.bench_serving prints",
        "; restart the server per configuration when server_info should match one run",
    ),
    "log": (
        "decode-log lines sample batch means",
        "decode log lines average only the decode batches inside --decode-log-interval windows, one "
        "batch mean per line, not a per-token mean over these requests",
        "; a lower --decode-log-interval or longer outputs give the log more lines",
    ),
    "metrics_delta": (
        "the /metrics counters saw other traffic",
        "the Prometheus counters count every request the server ran between the two snapshots "
        "(other clients, retries, warmup still finishing)",
        "; measure on a server no one else is using",
    ),
    "meta_field": (
        "the server defines accept length differently",
        "the server's own per-request spec_accept_length differs from completion_tokens / spec_verify_ct "
        "of the same requests: it counts differently (e.g. without the bonus token)",
        "",
    ),
}


def explain_mismatch(name: str, value: float, reference: float) -> tuple[str, str, str]:
    """(short reason, why, fix) for an acceptance source that disagrees with the per-request value."""
    trust = "trust meta (completion_tokens / spec_verify_ct of these requests) for this run"
    if name != "stream":
        short, why, fix = _MISMATCH.get(
            name, ("a different scope", f"{name} measures a different scope than the per-request value", "")
        )
        return short, why, trust + fix
    if abs(value - 1.0) < 0.02 and reference > 1.05:
        return (
            "every streamed chunk carried one token",
            "the server streams token by token rather than one chunk per verify step, so chunk sizes "
            "cannot show how many tokens a verify step accepted",
            f"{trust}; the stream source measures acceptance only where a chunk is one verify step (SGLang with --stream-interval 1)",
        )
    if value > reference:
        return (
            "chunks held several verify steps",
            "chunks carried more tokens than one verify step emits: the server batched steps into one "
            "chunk (--stream-interval > 1) or the client read slower than the server wrote",
            f"{trust}; for a stream figure launch with --stream-interval 1 and use a lower --concurrency",
        )
    return (
        "verify steps were split across chunks",
        "chunks carried fewer tokens than a verify step emits: the server split steps across chunks "
        "(e.g. the detokenizer held back an incomplete character)",
        trust,
    )


def _off(sources: dict[str, AcceptSource], name: str) -> tuple[str, float, float, float, bool] | None:
    """(reference, value, reference value, relative gap, within TOLERANCE?) of the source `name` against the
    source it should agree with, None when there is none."""
    ref = sources[name].compare_to
    if ref not in sources:
        return None
    a, b = sources[name].value, sources[ref].value
    rel = abs(a - b) / max(abs(b), 1e-9)
    return ref, a, b, rel, rel <= TOLERANCE.get(name, 0.1)


def reconcile_acceptance(sources: dict[str, AcceptSource], label: str = "") -> list[Finding]:
    """`bench.accept_mismatch` for each source that disagrees with the per-request value; the
    finding says why that source can differ (`explain_mismatch`) and which value to trust."""
    out = []
    for name, s in sources.items():
        off = _off(sources, name)
        if off is None or off[4]:
            continue
        ref, a, b, rel, _ = off
        short, why, fix = explain_mismatch(name, a, b)
        ev = {"source": name, "scope": s.scope, "value": round(a, 4), "reference": ref, "reference_value": round(b, 4)}
        ev.update(why=why, all_sources={k: round(v.value, 4) for k, v in sources.items()})
        title = f"accept length from {name} ({a:.3f}) disagrees with {ref} ({b:.3f}) by {rel:.0%}: {short}"
        out.append(ACCEPT_MISMATCH(f"{label}: {title}" if label else title, evidence=ev, fix=fix))
    return out


# --- the result block, in the shape of `python -m sglang.bench_serving` ---

# bench_serving's sections: (heading, summary key, metric name in its lines)
_LATENCY_SECTIONS = (
    ("End-to-End Latency", "e2e", "E2E Latency"),
    ("Time to First Token", "ttft", "TTFT"),
    ("Time per Output Token (excl. 1st token)", "tpot", "TPOT"),
    ("Inter-Token Latency", "itl", "ITL"),
)


def _ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds; None (a summary read back from JSON, where nan is null) stays None."""
    return None if seconds is None else seconds * 1000.0


def _line(name: str, value: Any) -> str:
    if isinstance(value, float):
        value = "n/a" if math.isnan(value) else f"{value:.2f}"
    return "{:<40} {:<10}".format(name, "n/a" if value is None else value)


def serving_block(
    s: dict[str, Any],
    title: str,
    backend: str,
    max_concurrency: int | None,
    sources: dict[str, AcceptSource] | None = None,
) -> list[str]:
    """One result block of a `summarize` result in `python -m sglang.bench_serving`'s names, order, units (ms) and
    format, then every acceptance source. Lines the kit does not measure (retokenized counts, goodput) are left
    out, 'Failed requests' is added, and 'Accept length' is the per-request value (meta), not /server_info's."""
    lines = [
        "{s:{c}^{n}}".format(s=f" Serving Benchmark Result: {title} ", n=50, c="="),
        _line("Backend:", backend),
        _line("Max request concurrency:", max_concurrency or "not set"),
        _line("Successful requests:", s.requests),
        _line("Failed requests:", s.failed),
        _line("Benchmark duration (s):", s.duration_s),
        _line("Total input tokens:", s.prompt_tokens),
        _line("Total generated tokens:", s.output_tokens),
        _line("Request throughput (req/s):", s.req_s),
        _line("Input token throughput (tok/s):", s.input_tok_s),
        _line("Output token throughput (tok/s):", s.output_tok_s),
        _line("Total token throughput (tok/s):", s.total_tok_s),
        _line("Concurrency:", s.concurrency),
    ]
    if s.accept_length is not None:
        lines.append(_line("Accept length:", s.accept_length))
    for heading, key, name in _LATENCY_SECTIONS:
        lines.append("{s:{c}^{n}}".format(s=heading, n=50, c="-"))
        lines.append(_line(f"Mean {name} (ms):", _ms(getattr(s, f"{key}_mean_s"))))
        for q in (50, 90, 95, 99):
            lines.append(_line(f"{'Median' if q == 50 else f'P{q}'} {name} (ms):", _ms(getattr(s, f"{key}_p{q}_s"))))
        if key == "itl":
            lines.append(_line("Max ITL (ms):", _ms(s.itl_max_s)))
    if sources:
        lines += acceptance_block(sources)
    lines.append("=" * 50)
    return lines


def acceptance_block(sources: dict[str, AcceptSource]) -> list[str]:
    """Every acceptance source of one run: its value, what it counts, and whether it agrees with the
    per-request value of the same scope (and if not, why not, in a few words)."""
    lines = ["{s:{c}^{n}}".format(s="Acceptance (tokens per verify step)", n=50, c="-")]
    for name, src in sources.items():
        note = src.scope
        if off := _off(sources, name):
            ref, a, b, rel, agrees = off
            note += f"; agrees with {ref}" if agrees else f"; {rel:.0%} off {ref}: {explain_mismatch(name, a, b)[0]}"
        lines.append(_line(f"Accept length, {name}:", src.value) + f" {note}")
    return lines


# --- speedup with a confidence interval from repeated runs ---


def _t_quantile(p: float, df: float) -> float:
    try:
        from scipy import stats

        return float(stats.t.ppf(p, df))
    except ImportError:  # normal approximation; only hit without scipy
        return statistics.NormalDist().inv_cdf(p)


def speedup_ci(
    baseline: Sequence[float], spec: Sequence[float], level: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Speedup = mean(spec) / mean(baseline) of a per-run figure (e.g. output tok/s), with two intervals over
    the repeated runs: `t_*`, Welch's on log throughput (Satterthwaite df), honest with the 2-5 runs a GPU
    budget allows, and `boot_*`, a percentile bootstrap of runs within each arm. With one run per arm (where
    one unlucky baseline can inflate a speedup severalfold) the intervals are nan."""
    b = [x for x in baseline if x and x > 0]
    s = [x for x in spec if x and x > 0]
    speedup = (_mean(s) / _mean(b)) if b and s else math.nan
    out: dict[str, Any] = {"n_baseline": len(b), "n_spec": len(s), "level": level, "speedup": speedup}
    out.update(dict.fromkeys(("t_low", "t_high", "boot_low", "boot_high"), math.nan))
    if len(b) < 2 or len(s) < 2:
        return out
    lb, ls = [math.log(x) for x in b], [math.log(x) for x in s]
    vb, vs = statistics.variance(lb) / len(lb), statistics.variance(ls) / len(ls)
    d = _mean(ls) - _mean(lb)
    se = math.sqrt(vb + vs)
    if se > 0:
        df = (vb + vs) ** 2 / ((vb**2) / (len(lb) - 1) + (vs**2) / (len(ls) - 1))
        t = _t_quantile(0.5 + level / 2, df)
        out["t_low"], out["t_high"] = math.exp(d - t * se), math.exp(d + t * se)
    else:
        out["t_low"] = out["t_high"] = math.exp(d)
    rng = random.Random(seed)
    out["boot_low"], out["boot_high"] = _bootstrap(
        lambda: _mean(rng.choices(s, k=len(s))) / _mean(rng.choices(b, k=len(b))), n_boot, level
    )
    return out


def _bootstrap(resample: Callable[[], float], n_boot: int, level: float) -> tuple[float, float]:
    """Percentile-bootstrap interval of `n_boot` draws of `resample()` (one statistic of one resample)."""
    boots = sorted(resample() for _ in range(n_boot))
    return boots[int((1 - level) / 2 * (n_boot - 1))], boots[int((0.5 + level / 2) * (n_boot - 1))]


def speedup_findings(ci: dict[str, Any], label: str = "") -> list[Finding]:
    """Flag a speedup the repeats cannot support: one run per arm, or an interval that is wide or straddles 1.0."""
    pre = f"{label}: " if label else ""
    if ci["n_baseline"] < 2 or ci["n_spec"] < 2:
        ev = {k: ci[k] for k in ("speedup", "n_baseline", "n_spec")}
        fix = "repeat both arms (--repeats 3 or more); a single unlucky baseline can inflate a speedup severalfold"
        return [SPEEDUP_SINGLE_RUN(f"{pre}speedup {ci['speedup']:.2f}x rests on a single run per arm", ev, fix=fix)]
    lo, hi = ci["t_low"], ci["t_high"]
    if lo <= 1.0 <= hi or (hi - lo) > 0.5 * ci["speedup"]:
        title = f"{pre}speedup {ci['speedup']:.2f}x has a wide {ci['level']:.0%} interval [{lo:.2f}, {hi:.2f}]"
        ev = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in ci.items()}
        fix = "add repeats, more prompts or longer outputs until the interval excludes 1.0 and is narrow"
        return [SPEEDUP_UNCERTAIN(title, ev, fix=fix)]
    return []


def paired_speedup(
    ratios: Sequence[float], level: float = 0.95, target_half_width: float = 0.2, n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Speedup from paired ratios (spec tok/s over baseline tok/s of the same prompt, or repeat): the median
    with a seeded percentile-bootstrap interval (`median_low`/`median_high`) and the geometric mean with a t
    interval on the log ratios (`low`/`high`); pairing removes the prompt-to-prompt spread. When the t half
    width exceeds `target_half_width`, `note` says how many requests would narrow it (it shrinks as 1/sqrt(n))."""
    ok = [r for r in ratios if r and r > 0]
    logs = [math.log(r) for r in ok]
    n = len(logs)
    out: dict[str, Any] = {"n": n, "level": level, "median": statistics.median(ok) if ok else math.nan,
                           "median_low": math.nan, "median_high": math.nan,
                           "geomean": math.exp(_mean(logs)) if logs else math.nan, "low": math.nan,
                           "high": math.nan, "half_width_rel": math.nan}  # fmt: skip
    if n < 2:
        out["note"] = "one request: no interval; repeat the pair"
        return out
    rng = random.Random(seed)
    out["median_low"], out["median_high"] = _bootstrap(lambda: statistics.median(rng.choices(ok, k=n)), n_boot, level)
    m, se = _mean(logs), statistics.stdev(logs) / math.sqrt(n)
    t = _t_quantile(0.5 + level / 2, n - 1)
    out["low"], out["high"] = math.exp(m - t * se), math.exp(m + t * se)
    out["half_width_rel"] = (out["high"] - out["low"]) / 2 / math.exp(m)
    if out["half_width_rel"] > target_half_width:
        need = math.ceil(n * (out["half_width_rel"] / target_half_width) ** 2)
        out["note"] = (
            f"the {level:.0%} interval is wider than +-{target_half_width:.0%}: about {need} paired requests "
            f"({need - n} more) would narrow it to +-{target_half_width:.0%}"
        )
    return out


def repeat_ratios(runs: Iterable[dict[str, Any]], baseline_label: str, label: str) -> list[float]:
    """Per-repeat speedups: `label`'s output tok/s over `baseline_label`'s in the same repeat (`runs`: summary.json's
    rows, one per arm x repeat)."""
    rows = list(runs)
    base = {r["repeat"]: r.get("output_tok_s") for r in rows if r.get("label") == baseline_label}
    spec = {r["repeat"]: r.get("output_tok_s") for r in rows if r.get("label") == label}
    return [spec[k] / base[k] for k in sorted(base) if spec.get(k) and base[k]]


def launch_speedup(
    runs: Iterable[dict[str, Any]],
    records: Iterable[RequestRecord],
    baseline_label: str,
    label: str,
    accept_length: float | None = None,
    busy: str | None = None,
) -> dict[str, Any] | None:
    """THE speedup of a launch over no speculation (what a run's summary, its figures and notebook 05 show):
    `paired_speedup` of the per-repeat ratios when both arms ran two or more repeats, else of the per-request
    ones, plus `ci95`, `pairing` ("repeat" / "request"), the ratios, the label, `tok_s_ratio` (`pooled_ratio`)
    and `inconclusive` (why no headline, else None). None without a paired ratio."""
    records = list(records)
    ratios, pairing = repeat_ratios(runs, baseline_label, label), "repeat"
    if len(ratios) < 2:
        ratios, pairing = paired_ratios(records, baseline_label, label), "request"
    if not ratios:
        return None
    p = paired_speedup(ratios)
    tok = pooled_ratio(records, baseline_label, label)
    why = inconclusive(p["median"], (p["median_low"], p["median_high"]), tok, accept_length, busy)
    return {**p, "ci95": [p["median_low"], p["median_high"]], "pairing": pairing, "label": label, "ratios": ratios,
            "tok_s_ratio": tok, "inconclusive": why}  # fmt: skip


# a headline needs an interval no wider than this (high / low); wider, the run cannot tell 1.2x from 1.8x
MAX_CI_SPREAD = 1.5


def inconclusive(
    median: float,
    ci95: tuple[float, float],
    tok_s_ratio: float | None,
    accept_length: float | None = None,
    busy: str | None = None,
) -> str | None:
    """Why a paired speedup cannot be a headline, or None when it can: the machine was busy (`busy`,
    `kit.measure.machine.busy_reason`: other work changes the arms' relative costs, which pairing cannot
    cancel); its interval is missing or wider than `MAX_CI_SPREAD`; the pooled tok/s ratio points the other way
    from 1.0 (one of them over 5% off it); or it beats the accept length (each verify costs at least one
    target step, so accepting A tokens per verify runs at most about A times as fast)."""
    lo, hi = ci95
    said = [f"the machine was busy ({busy})"] if busy else []
    if not (lo == lo and hi == hi and lo > 0):
        said.append("no interval (too few paired requests)")
    elif hi / lo > MAX_CI_SPREAD:
        said.append(f"its 95% interval [{lo:.2f}, {hi:.2f}] is {hi / lo:.1f}x wide")
    if tok_s_ratio and median == median and (median - 1) * (tok_s_ratio - 1) < 0:
        if max(abs(math.log(median)), abs(math.log(tok_s_ratio))) > math.log(1.05):
            said.append(f"the paired median {median:.2f}x and the arms' tok/s ratio {tok_s_ratio:.2f}x disagree")
    if accept_length and median == median and median > 1.05 * max(1.0, accept_length):
        said.append(f"{median:.2f}x exceeds what accept length {accept_length:.2f} allows")
    if not said:
        return None
    quiet = "" if busy else " (no outside load was observed)"
    return f"{'; '.join(said)}{quiet}; rerun with more prompts or repeats, `--quiet-check`, on a quieter machine"


def pooled_ratio(records: Iterable[RequestRecord], baseline_label: str, label: str) -> float | None:
    """`label`'s output tok/s over `baseline_label`'s, each pooled (tokens over seconds) over the requests both
    arms answered (same id and repeat), so an arm that ran fewer or other prompts is not compared with more."""
    recs = [r for r in measured(list(records)) if r.label in (baseline_label, label) and r.e2e]
    keys = {lab: {(r.rid, r.repeat) for r in recs if r.label == lab} for lab in (baseline_label, label)}
    both = keys[baseline_label] & keys[label]
    tok = {lab: [0, 0.0] for lab in (baseline_label, label)}
    for r in recs:
        if (r.rid, r.repeat) in both:
            tok[r.label][0] += r.output_tokens
            tok[r.label][1] += r.e2e
    (bt, bs), (st, ss) = tok[baseline_label], tok[label]
    return (st / ss) / (bt / bs) if bs and ss and bt else None


def brief(speedup: dict[str, Any] | None) -> dict[str, Any] | None:
    """`{median, ci95: [low, high], n}` of a `paired_speedup` result (None stays None), plus a launch speedup's
    `pairing`, `tok_s_ratio` and `inconclusive`: what a run summary carries."""
    if not speedup or not speedup.get("n"):
        return None
    r = lambda v: None if v is None or v != v else round(v, 3)  # noqa: E731  (NaN -> None)
    out = {"median": r(speedup["median"]), "ci95": [r(speedup["median_low"]), r(speedup["median_high"])],
           "n": speedup["n"]}  # fmt: skip
    for k in ("pairing", "tok_s_ratio", "inconclusive"):
        if k in speedup:
            out[k] = r(speedup[k]) if k == "tok_s_ratio" else speedup[k]
    return out


def request_rate(rec: RequestRecord) -> float:
    """One request's output tok/s: its tokens over its end-to-end latency (prefill included)."""
    return rec.output_tokens / rec.e2e if rec.e2e else math.nan


def paired_ratios(records: Iterable[RequestRecord], baseline_label: str, label: str) -> list[float]:
    """Per-request speedups: `label`'s tok/s over `baseline_label`'s for the same request id and repeat
    (measured records only; a request without its baseline twin is left out)."""
    recs = list(records)
    base = {(r.rid, r.repeat): request_rate(r) for r in measured(recs, baseline_label)}
    twins = [(r, base.get((r.rid, r.repeat))) for r in measured(recs, label)]
    return [request_rate(r) / b for r, b in twins if b and b == b and b > 0]
