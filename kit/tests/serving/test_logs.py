"""Log parsing on lines rendered from SGLang's OWN source (0.5.23 and the older 0.4.6.post5).

The f-strings that build "Decode batch ..." are pulled out of each release's source
(`kit.sglang.source`, cached wheel text) and filled with known values; the parser must read those
values back. If SGLang changes its line format, these tests break instead of users' dashboards.
Run: python -m pytest kit/tests/test_logs.py -q
"""

import re

import pytest

from kit.serving.logs import LogWatcher, parse_lines, parse_log, summarize
from kit.sglang.log_format import parse_line

VALUES = {
    "num_running_reqs": 3,
    "spec_accept_length": 2.3456,
    "spec_accept_rate": 0.4444,
    "self.last_gen_throughput": 91.234,
    "len(self.scheduler.waiting_queue)": 2,
    "len(self.waiting_queue)": 2,
    "can_run_cuda_graph": True,
    "self._graph_backend_label": "cuda graph",
    "iter_msg": "",
    "token_usage_msg": "#token: 88, token usage: 0.01, ",
    "num_used": 88,
    "num_used / self.max_total_num_tokens": 0.0123,
}
SKIP = (
    "pre-allocated",
    "prealloc",
    "transfer-req",
    "retracted",
    "waiting-image",
    "host-receive",
    "cap len",
    "block accept",
    "TFLOPS",
    "read BW",
    "write BW",
    "estimate_suffix",
)


def source(version, rel):
    from kit.findings import KitInputError
    from kit.sglang.source import source_text

    try:
        text = source_text(version, rel)
    except KitInputError as e:
        pytest.skip(f"sglang {version} source unavailable offline: {e}")
    assert text, f"{rel} missing in sglang {version}"
    return text


def render(fstrings):
    def sub(m):
        expr = m.group(1)
        v = VALUES[expr]
        return format(v, m.group(2)[1:]) if m.group(2) else str(v)

    return "".join(re.sub(r"\{([^{}:]+)(:[^{}]*)?\}", sub, f) for f in fstrings)


def decode_fstrings(text, start, end):
    body = text[text.index(start) :]
    body = body[: body.index(end)]
    return [f for f in re.findall(r'f"([^"]*)"', body) if not any(s in f for s in SKIP)]


@pytest.mark.interop
def test_sglang_0_5_23_decode_line():
    text = source("0.5.23", "srt/managers/scheduler_components/metrics_reporter.py")
    fs = decode_fstrings(text, 'msg = f"Decode batch{iter_msg}', "if self.enable_mfu_metrics and gap_latency")
    assert len(fs) == 5 and "accept rate" in fs[1], fs
    line = "[2026-05-01 12:00:00 TP0] " + render(fs)
    r = parse_line(line)
    assert r["kind"] == "decode" and r["rank"] == "TP0", line
    assert (r["running_req"], r["tokens"], r["accept_len"], r["accept_rate"]) == (3, 88, 2.35, 0.44), line
    assert (r["graph"], r["gen_throughput"], r["queue_req"]) == (True, 91.23, 2), line


@pytest.mark.interop
def test_sglang_0_4_6_decode_line_has_no_accept_rate():
    text = source("0.4.6.post5", "srt/managers/scheduler.py")
    fs = decode_fstrings(text, 'f"Decode batch. "', "logger.info(msg)")
    assert not any("accept rate" in f for f in fs)
    line = "[2025-01-01 10:00:00] " + render(fs)
    r = parse_line(line)
    assert r["kind"] == "decode" and r["accept_len"] == 2.35 and r.get("accept_rate") is None, line
    assert (r["running_req"], r["tokens"], r["queue_req"]) == (3, 88, 2)


@pytest.mark.interop
def test_event_lines_from_source():
    ready = re.search(
        r'logger\.info\("(The server is fired up[^"]*)"\)', source("0.5.23", "srt/entrypoints/http_server.py")
    )[1]
    warn = re.search(
        r'"(Eagle3 MLA: skipping unexpected weight) %s"', source("0.5.23", "srt/models/kimi_k25_eagle3.py")
    )[1]
    arch = re.search(
        r'f"Model architectures \{architectures\} (are not supported for now)\. "',
        source("0.5.23", "srt/models/registry.py"),
    )[1]
    rows = parse_lines(
        [
            f"[2026-05-01 12:00:01] {ready}",
            f"[2026-05-01 12:00:00 TP0] {warn} fc.weight",
            f"ValueError: Model architectures ['Eagle3Speculator'] {arch}. Supported: ...",
        ]
    )
    assert [r["kind"] for r in rows] == ["ready", "load_warning", "arch_error"]


def test_variants_and_frame(tmp_path):
    log = tmp_path / "s.log"
    log.write_text(
        "\n".join(
            [
                "noise",
                "[2026-05-01 12:00:00.123 DP0 TP3] Decode batch [12], #running-req: 2, #full token: 5, full token usage: 0.01, "
                "accept len: 3.10, accept rate: 0.70, cpu graph: False, gen throughput (token/s): 5.00, #queue-req: 0, "
                "est. decode TFLOPS/s (per GPU): 1.00",
                "[2026-05-01 12:00:01 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, accept len: 1.00, "
                "accept rate: 0.00, cuda graph: True, gen throughput (token/s): 7.00, #queue-req: 1,",
                "[2026-05-01 12:00:02 TP0] Prefill batch, #new-seq: 1, #new-token: 35, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0",
                "Traceback (most recent call last):",
            ]
        )
    )
    df = parse_log(str(log))
    assert list(df["kind"]) == ["decode", "decode", "prefill", "error"]
    assert df["accept_len"].tolist()[:2] == [3.1, 1.0] and df["graph_device"].tolist()[:2] == ["cpu", "cuda"]
    assert df.loc[2, "new_token"] == 35
    s = summarize(parse_lines(log.read_text().splitlines()))
    assert s["decode_lines"] == 2 and abs(s["accept_len_mean"] - 2.05) < 1e-9 and s["errors"] == 1
    w = LogWatcher()
    for line in log.read_text().splitlines():
        w(line)
    assert len(w.frame()) == 4 and w.summary()["gen_throughput_last"] == 7.0 and not w.ready


@pytest.mark.interop
@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_startup_failure_lines_from_source(version):
    """The parent's SIGQUIT lines, as each release writes them, end a startup (kit.sglang.log_format)."""
    from kit.serving.engines import get_engine
    from kit.sglang.log_format import STARTUP_FAILED

    tm = re.search(r'f"(SIGQUIT received\. [^"]*)"', source(version, "srt/managers/tokenizer_manager.py"))[1]
    eng = re.search(r'"(Received sigquit from a child process\.[^"]*)"', source(version, "srt/entrypoints/engine.py"))[
        1
    ]
    line = tm.replace("{signum=}", "signum=None").replace("{frame=}", "frame=None")
    assert STARTUP_FAILED.search(line) and STARTUP_FAILED.search(eng)
    tail = ["Traceback (most recent call last):", "RuntimeError: shapes cannot be multiplied", "", line]
    assert get_engine("sglang").startup_failure(line, tail) == "RuntimeError: shapes cannot be multiplied"
    assert get_engine("sglang").startup_failure("[x] Load weight end.", tail) is None
