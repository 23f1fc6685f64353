"""kit.measure.bench against a REAL third-party server: llama-cpp-python's OpenAI-compatible server on the
embedded SmolLM2 GGUF (2 threads). No stub: the client's token counts must equal what the server
reports (`usage.completion_tokens` of the same greedy request, non-streamed), and the client's
timings must fit llama.cpp's own `llama_perf_context_print` timings from the server log (the server's
total inside the client's end-to-end time, the last chunk read after llama.cpp's decode steps, the
client's decode span inside the server's total).

llama-cpp-python streams one token per chunk and has no /flush_cache, /server_info or /metrics,
so this also checks the client degrades cleanly on a non-SGLang server.
"""

import os
import time

import pytest

try:
    import httpx
    import llama_cpp  # noqa: F401
    import sse_starlette  # noqa: F401
    import starlette_context  # noqa: F401
except ImportError as e:  # a third-party peer, optional for users; .ci/run installs it
    if os.environ.get("CI") == "true":
        pytest.fail(f"llama.cpp's server is not installed ({e}); pip install -r requirements-peers.txt", pytrace=False)
    pytest.skip(
        f"llama.cpp's server is not installed ({e}): pip install -r requirements-peers.txt", allow_module_level=True
    )

from kit.measure.bench import BenchConfig, run_bench  # noqa: E402
from kit.serving.process import ServerProcess, free_port  # noqa: E402
from kit.tests.peers import llamacpp_timings  # noqa: E402

pytestmark = pytest.mark.slow

PROMPTS = [
    {"id": "a", "kind": "chat", "text": "The capital of France is"},
    {"id": "b", "kind": "code", "text": "def fibonacci(n):"},
    {"id": "c", "kind": "math", "text": "Question: what is 12 plus 30? Answer:"},
]


@pytest.fixture(scope="module")
def server():
    from kit.models import gguf_path
    from kit.tests.peers import llama_cpp_server_argv

    port = free_port()
    lines: list[str] = []
    srv = ServerProcess(
        llama_cpp_server_argv(gguf_path(), port),
        port=port,
        on_line=lines.append,
        tail_lines=10,
    )
    srv.start()
    try:
        deadline = time.monotonic() + 120
        while True:  # llama-cpp-python has no /health: poll /v1/models
            assert srv.returncode is None, "llama.cpp server exited: " + "\n".join(lines[-20:])
            try:
                if httpx.get(srv.base_url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "llama.cpp server not ready in 120 s"
            time.sleep(0.5)
        srv.log_lines = lines
        yield srv
    finally:
        srv.stop()


def _usage_tokens(url, api, text, n):
    body = {"max_tokens": n, "temperature": 0.0}
    if api == "chat":
        r = httpx.post(
            url + "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": text}]}, timeout=60
        )
    else:
        r = httpx.post(url + "/v1/completions", json={**body, "prompt": text}, timeout=60)
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_token_counts_and_timings_agree_with_llamacpp(server, tmp_path, api):
    assert server.catch_up()  # the last test's requests' perf lines are behind us, not in this window
    n_before = len(server.log_lines)
    cfg = BenchConfig(
        url=server.base_url,
        api=api,
        num_prompts=3,
        max_new_tokens=12,
        concurrency=1,
        warmup=1,
        out_dir=str(tmp_path / api),
        progress=False,
    )
    res = run_bench(cfg, prompts=PROMPTS)
    assert server.catch_up()  # llama.cpp prints a request's perf block before its reply
    recs = [r for r in res.records if not r.warmup]
    assert len(recs) == 3 and all(r.ok for r in recs), [r.error for r in recs]
    assert not res.report.errors
    # no SGLang endpoints: nothing flushed, no acceptance, and the client said so
    assert all(not ri.flushed and not ri.sglang for ri in res.runs)
    assert "bench.no_acceptance" in res.report.codes()

    # token counts: streamed chunks == the server's usage for the same greedy request
    by_id = {p["id"]: p["text"] for p in PROMPTS}
    for r in recs:
        assert r.client_tokens == _usage_tokens(server.base_url, api, by_id[r.rid.split("#")[0]], 12)

    # timings: llama.cpp prints one perf block per generation (concurrency 1 -> in order)
    perf = llamacpp_timings(server.log_lines[n_before:])
    assert len(perf) >= 4, "expected a perf block per request (warmup + 3)"
    for r, p in zip(recs, perf[1:4]):
        server_total, ev_s, runs = p["total_s"], p["eval_s"], p["eval_runs"]
        # the server's generation time sits inside the client's end-to-end latency,
        # and HTTP + SSE framing adds little on top
        assert server_total <= r.e2e + 0.005
        assert r.e2e - server_total < 0.5
        # the client's chunk times against llama.cpp's clocks, both wall time of the same generation, so the
        # bounds hold on a busy host too. Causality: the last token is read after the decode steps that made it
        # (every eval run but at most one after it). Chunks may reach the client together (a busy server or
        # client reads several at once), so the span has no lower bound, only the server's total above it.
        assert r.chunk_t == sorted(r.chunk_t) and r.ttft == (r.chunk_t[0] if r.chunk_t else None)
        if runs >= 4 and len(r.chunk_t) >= 4:
            assert r.chunk_t[-1] >= ev_s * (runs - 1) / runs
            assert r.chunk_t[-1] <= r.e2e
            assert r.chunk_t[-1] - r.chunk_t[0] <= server_total + 0.25  # the last chunk still has to be sent and read
    summ = res.summary["labels"]["spec"]
    assert summ["output_tokens"] == sum(r.client_tokens for r in recs)
    assert summ["ttft_p50_s"] > 0 and summ["itl_p50_s"] > 0
