"""The CPU reference server over real HTTP, with a tiny random target + EAGLE-3 draft built in code.

One server runs in-process (EAGLE3, tree drafting 3-2-4, metrics, API key); one runs as
`python -m kit serve` under kit.serving.process (EAGLE: the seed's launch), whose log is parsed by kit.logs.
Run: python -m pytest kit/tests/test_server.py -q
"""

import json
import threading
import time

import httpx
import pytest

from kit.measure.metrics import parse_prometheus
from kit.serving.engines import get_engine
from kit.serving.launch import LaunchSpec
from kit.serving.process import ServerProcess, free_port
from kit.tests.tinyserve import build_pair, in_process_server

KEY = "sekret"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def target(pair):
    from kit.models import load_target

    return load_target(pair[0])


@pytest.fixture(scope="module")
def srv3(pair):
    spec = LaunchSpec(
        model_path=str(pair[0]),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(pair[1]),
        speculative_num_steps=3,
        speculative_eagle_topk=2,
        speculative_num_draft_tokens=4,
        port=free_port(),
        api_key=KEY,
        enable_metrics=True,
        decode_log_interval=4,
    )
    with in_process_server(spec) as s:
        yield s


def post(url, body, **kw):
    r = httpx.post(url, json=body, headers=AUTH, timeout=120, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def sse(url, body):
    with httpx.stream("POST", url, json=body, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["server"] == "uvicorn"
        data = [l[6:] for l in r.iter_lines() if l.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_generate_equals_plain_greedy_and_meta(srv3, target):
    from kit.reference.target import reference_greedy

    url, eng = srv3
    model, _ = target
    for ids in ([5, 9, 77, 3, 100], [42] * 7):
        res = post(url + "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}})
        assert res["output_ids"] == reference_greedy(model, ids, 24)
        m = res["meta_info"]
        assert m["completion_tokens"] == 24 and m["prompt_tokens"] == len(ids) and m["e2e_latency"] > 0
        assert m["finish_reason"] == {"type": "length", "length": 24}
        v = m["spec_verify_ct"]
        assert 0 < v <= 23 and m["spec_accept_length"] == pytest.approx(24 / v)
        assert m["spec_num_proposed_drafts"] == v * 3 and sum(m["spec_correct_drafts_histogram"]) == v
        assert m["spec_accept_rate"] == pytest.approx(m["spec_num_correct_drafts"] / (v * 3))


def test_generate_stream_is_cumulative(srv3):
    url, _ = srv3
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}}
    chunks = sse(url + "/generate", {**body, "stream": True})
    done = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert done == sorted(done) and done[0] == 1 and done[-1] == 12
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert len(chunks) == last["spec_verify_ct"] + 1  # prefill chunk + one per verify step
    full = post(url + "/generate", body)
    assert chunks[-1]["output_ids"] == full["output_ids"] and chunks[-1]["text"] == full["text"]


def test_openai_endpoints(srv3):
    url, _ = srv3
    c = post(
        url + "/v1/completions",
        {"prompt": "abc", "max_tokens": 8, "return_spec_tokens_details": True, "ignore_eos": True},
    )
    assert c["object"] == "text_completion" and c["usage"]["completion_tokens"] == 8
    assert c["sglext"]["spec_tokens_details"]["spec_verify_ct"] > 0
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
    chat = post(url + "/v1/chat/completions", body)
    chunks = sse(url + "/v1/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
    assert text == chat["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == chat["usage"]
    assert chunks[-2]["choices"][0]["finish_reason"] == chat["choices"][0]["finish_reason"]


def test_info_metrics_auth_and_batch(srv3):
    url, eng = srv3
    assert httpx.get(url + "/health").status_code == 200  # health needs no key, like SGLang
    assert httpx.get(url + "/get_server_info").status_code == 401
    res = post(url + "/generate", {"text": ["a", "bb"], "sampling_params": {"max_new_tokens": 9, "ignore_eos": True}})
    assert isinstance(res, list) and [r["meta_info"]["completion_tokens"] for r in res] == [9, 9]
    info = httpx.get(url + "/get_server_info", headers=AUTH).json()
    assert (info["speculative_algorithm"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (
        "EAGLE3",
        2,
        4,
    )
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1.0
    assert httpx.get(url + "/v1/models", headers=AUTH).json()["data"][0]["id"] == eng.model_name
    m = httpx.get(url + "/metrics", headers=AUTH).text
    verify = float(next(l for l in m.splitlines() if l.startswith("sglang:spec_verify_calls_total")).split()[-1])
    assert verify == eng.counters["spec_verify_calls_total"] > 0 and "sglang:spec_accept_length{" in m
    proto = get_engine("reference")  # what the server writes is what the measuring side reads back
    assert proto.accept_counters(parse_prometheus(m)) == (
        eng.counters["generation_tokens_total"],
        eng.counters["spec_verify_calls_total"],
    )
    assert proto.server_info_accept_length(info) == info["internal_states"][0]["avg_spec_accept_length"]
    assert httpx.post(url + "/flush_cache", headers=AUTH).status_code == 200
    stop = post(url + "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}})
    assert stop["meta_info"]["completion_tokens"] == 1 and "spec_verify_ct" not in stop["meta_info"]


def test_reference_protocol_has_one_home():
    """The server's failed-load line and /metrics names come from the engine object that parses them."""
    proto = get_engine("reference")
    assert proto.startup_failure(proto.error_line("fc.weight: bad shape"), []) == "fc.weight: bad shape"
    assert proto.metric_name("generation_tokens_total") == proto.api.generation_tokens_metric + "_total"
    assert proto.metric_name("spec_verify_calls_total") == proto.api.verify_calls_metric + "_total"
    assert proto.metric_name("num_running_reqs") == proto.api.metric_prefix + "num_running_reqs"


def test_seed_launch_as_subprocess_reproduces_eagle_wiring(pair):
    """`--speculative-algorithm EAGLE` with an EAGLE-3 draft: no aux capture, fc bypassed (the seed)."""
    from kit.serving.logs import LogWatcher

    spec = LaunchSpec(
        model_path=str(pair[0]),
        speculative_algorithm="EAGLE",
        speculative_draft_model_path=str(pair[1]),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        port=free_port(),
        decode_log_interval=5,
        tp_size=8,
    )
    w = LogWatcher()
    with ServerProcess.from_spec(spec, engine="reference", on_line=w, grace=2) as s:
        info = s.wait_ready(timeout=120, poll=0.2)
        assert "fc bypassed" in info["server_info"]["wiring"]
        r = httpx.post(
            s.base_url + "/generate",
            json={"input_ids": [7, 8, 9], "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}},
            timeout=120,
        ).json()
        assert r["meta_info"]["completion_tokens"] == 30
        with pytest.raises(Exception, match="in use"):
            ServerProcess.from_spec(spec, engine="reference").start()
    df = w.frame()
    dec = df[df["kind"] == "decode"]
    assert w.ready and len(dec) == r["meta_info"]["spec_verify_ct"] // 5
    assert dec["accept_len"].notna().all() and dec["accept_rate"].notna().all()


def test_launch_verb_starts_watches_and_stops(pair, tmp_path):
    """`python -m kit launch --engine reference ...`: lint, start, ready, Ctrl-C stops the group."""
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "KIT_VENV_DIR": str(tmp_path), "KIT_NO_VENV_BUILD": "1"}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kit",
            "launch",
            "--engine",
            "reference",
            "--model-path",
            str(pair[0]),
            "--port",
            str(port),
            "--log-file",
            str(tmp_path / "s.log"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a shell's background job (CI run with `&`) ignores SIGINT and its children inherit that: Ctrl-C
        # is what this test plays, so the verb starts with the default disposition a terminal gives it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not _up(port):
            time.sleep(0.3)
        time.sleep(2)  # the verb's own readiness poll (0.5 s) prints "ready at"
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == str(pair[0])
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0 and "ready at" in err and "fired up" in out
    assert "fired up" in (tmp_path / "s.log").read_text() and not _up(port)


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_context_length_is_enforced_with_sglangs_words(pair):
    spec = LaunchSpec(model_path=str(pair[0]), port=free_port(), context_length=12)
    with in_process_server(spec) as (base, _):
        url = base + "/generate"
        ok = httpx.post(url, json={"input_ids": [5] * 4, "sampling_params": {"max_new_tokens": 8}}, timeout=60)
        assert ok.status_code == 200
        long = httpx.post(url, json={"input_ids": [5] * 12, "sampling_params": {"max_new_tokens": 1}}, timeout=60)
        assert long.status_code == 400 and "longer than the model's context length (12 tokens)" in long.text
        over = httpx.post(url, json={"input_ids": [5] * 4, "sampling_params": {"max_new_tokens": 9}}, timeout=60)
        assert over.status_code == 400 and "maximum context length of 12 tokens" in over.text


def test_concurrent_requests_share_decode_steps_and_equal_plain_greedy(srv3, target):
    """Four requests at once: each output == the target's plain greedy output, decoded in shared steps."""
    from concurrent.futures import ThreadPoolExecutor

    from kit.reference.target import reference_greedy

    url, eng = srv3
    model, _ = target
    prompts = [[5, 9, 77, 3, 100], [42] * 7, [1, 2, 3], [200, 17, 64, 9, 9, 31]]
    seen = []
    step = eng.decoder.step
    eng.decoder.step = lambda seqs: seen.append(len(seqs)) or step(seqs)
    try:
        body = lambda ids: {"input_ids": ids, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
        with ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda ids: post(url + "/generate", body(ids)), prompts))
    finally:
        eng.decoder.step = step
    for ids, res in zip(prompts, outs):
        assert res["output_ids"] == reference_greedy(model, ids, 40)
    assert max(seen) > 1  # requests were batched into one step, not queued one after another


def test_engine_hands_out_each_verify_steps_tokens_at_once(srv3):
    """The stream's source: one update per step (prefill token, then accepted drafts + bonus), before the end."""
    _, eng = srv3
    updates, done = [], threading.Event()

    def on_update(tokens, outcome):
        updates.append((list(tokens), outcome))
        if outcome is not None:
            done.set()

    eng.submit([7, 8, 9, 10], 30, ignore_eos=True, on_update=on_update)
    assert done.wait(60)
    *early, (last_tokens, out) = updates
    assert all(o is None for _, o in early) and len(updates) == out.verify_ct + 1
    assert [len(t) for t, _ in updates] == [1] + out.accept_lengths
    assert sum((t for t, _ in updates), []) == out.tokens


def test_ask_takes_acceptance_from_generate_meta_info(srv3):
    """`ask` renders the chat template itself (the server's tokenizer path is local) and reads per-request
    acceptance from /generate meta_info, the source every release serves; its text is the chat endpoint's."""
    from kit.measure.client import ask

    url, _ = srv3
    df = ask(url, ["hi", "abc"], max_tokens=10, api_key=KEY)
    assert (df["spec_verify_ct"] > 0).all() and df["spec_accept_length"].notna().all()
    chat = post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10})
    assert df["text"][0] == chat["choices"][0]["message"]["content"][:60]
    assert df["completion_tokens"][0] == chat["usage"]["completion_tokens"]


def test_server_accept_length_reads_the_engines_server_info_field(srv3):
    """`server_accept_length` (notebook 04) is the engine's reading of the server info the first path answers;
    without the API key the server refuses and there is nothing to read."""
    from kit.measure.client import server_accept_length, server_info_now

    url, _ = srv3
    post(url + "/generate", {"input_ids": [5, 9, 77], "sampling_params": {"max_new_tokens": 12}})
    info = server_info_now(url, KEY)
    got = server_accept_length(url, KEY)
    assert info is not None and got is not None and got == get_engine("sglang").server_info_accept_length(info)
    assert server_info_now(url) is None and server_accept_length(url) is None
