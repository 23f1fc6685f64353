"""The reference server under bad input, floods and abandoned work (tiny target + EAGLE-3 draft built in code).

Every bad body is a 400 naming its field (SGLang's words where it has them), admission by context, a bounded
queue (503 + Retry-After), clients that leave get their work stopped, chunked prefill keeps greedy equality,
and a hypothesis fuzz of request bodies against the real server on loopback: never a 5xx, never a dropped
connection, and a normal request answered after.
Run: python -m pytest kit/tests/serving/test_server_robust.py -q
"""

import json
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.findings import KitInputError
from kit.serving.launch import LaunchSpec
from kit.serving.process import free_port
from kit.tests.request_table import bad_rows, table
from kit.tests.tinyserve import VOCAB, build_pair, in_process_server

CTX = 96  # --context-length of the servers here: every admitted request is short


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_pair(tmp_path_factory.mktemp("tiny"))


def serving(pair, **kw):
    spec = LaunchSpec(
        model_path=str(pair[0]),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(pair[1]),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        port=free_port(),
        context_length=CTX,
        **kw,
    )
    return in_process_server(spec)


@pytest.fixture(scope="module")
def srv(pair):
    with serving(pair, chunked_prefill_size=16) as s:
        yield s


def settle(url: str, deadline_s: float = 30.0) -> dict:
    """/get_load once nothing is running or waiting (or what is left at the deadline)."""
    end = time.monotonic() + deadline_s
    while True:
        load = httpx.get(url + "/get_load").json()
        if not any(load.values()) or time.monotonic() > end:
            return load
        time.sleep(0.05)


# the table of bad requests (kit.tests.request_table: also what bench/serve_table.py sends SGLang), built for
# this server's context: each row the field its one-line 400 names and words it contains
BAD = bad_rows(CTX, VOCAB)


@pytest.mark.parametrize("row", BAD, ids=[r.name for r in BAD])
def test_bad_request_is_400_naming_its_field(srv, row):
    url, _ = srv
    if isinstance(row.body, bytes):
        r = httpx.post(url + row.endpoint, content=row.body, timeout=30)
    else:
        r = httpx.post(url + row.endpoint, json=row.body, timeout=30)
    assert r.status_code == row.expect == 400, r.text
    msg = r.json()["error"]["message"]
    assert "\n" not in msg and row.names in msg and row.words in msg, msg
    if isinstance(row.body, bytes):
        assert msg.startswith("body:"), msg


IN_STREAM = [r for r in table(CTX, VOCAB) if r.in_stream]


@pytest.mark.parametrize("row", IN_STREAM, ids=[r.name for r in IN_STREAM])
def test_streamed_generate_refuses_inside_its_stream(srv, row):
    """SGLang 0.5.17 srt/entrypoints/http_server.py generate_request: a streamed /generate runs
    TokenizerManager.generate_request inside `stream_results`, so its ValueError (context, empty prompt) comes
    after the 200 as one `{"error": {message, type: invalid_request_error, code: 400, retryable: false}}` event,
    then [DONE]. The reference server's message still names the field."""
    r = httpx.post(srv[0] + row.endpoint, json=row.body, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    events = [
        json.loads(ln[6:]) if ln != "data: [DONE]" else ln for ln in r.text.splitlines() if ln.startswith("data: ")
    ]
    assert events[-1] == "data: [DONE]" and len(events) == 2, r.text
    err = events[0]["error"]
    assert (err["type"], err["code"], err["retryable"]) == ("invalid_request_error", 400, False)
    assert row.names in err["message"] and row.words in err["message"], err


def sse_events(r: httpx.Response) -> list:
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]", r.text
    return [json.loads(x) for x in lines[:-1]]


def test_batched_generate_answers_sglangs_shape(srv):
    """A list `text` / `input_ids` is a batch (SGLang 0.5.17 io_struct.GenerateReqInput._determine_batch_size);
    tokenizer_manager._handle_batch_request serves each prompt as its own request and, unstreamed, answers
    `_collect_batch_responses`: the list of results in prompt order ({"text": []}: []); streamed,
    `_stream_batch_responses` yields each result's chunks as they come with `result["index"]` its prompt's place.
    An empty token list inside a batch passes SGLang's checks (_validate_one_request counts 0 tokens): served,
    its entry aborted here. Each entry equals the prompt asked alone (greedy)."""
    url = srv[0]
    sp = {"max_new_tokens": 6, "ignore_eos": True}
    alone = [httpx.post(url + "/generate", json={"input_ids": p, "sampling_params": sp}).json() for p in ([5, 6], [9])]
    res = httpx.post(url + "/generate", json={"input_ids": [[5, 6], [9]], "sampling_params": sp}, timeout=60).json()
    assert isinstance(res, list) and len(res) == 2 and all("index" not in r for r in res)
    assert [r["output_ids"] for r in res] == [a["output_ids"] for a in alone]
    assert [r["meta_info"]["prompt_tokens"] for r in res] == [2, 1]
    assert httpx.post(url + "/generate", json={"text": []}).json() == []
    mixed = httpx.post(url + "/generate", json={"input_ids": [[5, 6], []], "sampling_params": sp}).json()
    assert mixed[0]["output_ids"] == alone[0]["output_ids"]
    assert mixed[1]["meta_info"]["finish_reason"]["type"] == "abort" and mixed[1]["output_ids"] == []
    r = httpx.post(url + "/generate", json={"input_ids": [[5, 6], [9]], "sampling_params": sp, "stream": True})
    chunks = sse_events(r)
    assert {c["index"] for c in chunks} == {0, 1}
    last = {c["index"]: c for c in chunks}  # each prompt's final chunk: cumulative, finished
    assert [last[i]["output_ids"] for i in (0, 1)] == [a["output_ids"] for a in alone]
    assert all(last[i]["meta_info"]["finish_reason"]["type"] == "length" for i in (0, 1))


def test_batched_completions_give_one_choice_per_prompt(srv):
    """A list `prompt` in /v1/completions is a batch (SGLang 0.5.17 serving_completions
    _convert_to_internal_request: `text` or `input_ids` of the GenerateReqInput); _build_completion_response
    gives one choice per result, `index=idx`, and UsageProcessor.calculate_response_usage sums the tokens.
    Streamed, each chunk's choice carries its prompt's index (`content.get("index", 0)`)."""
    url = srv[0]
    body = {"prompt": [[5, 6], [9]], "max_tokens": 5, "ignore_eos": True}
    res = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
    alone = [httpx.post(url + "/v1/completions", json={**body, "prompt": p}).json() for p in ([5, 6], [9])]
    assert [c["index"] for c in res["choices"]] == [0, 1]
    assert [c["text"] for c in res["choices"]] == [a["choices"][0]["text"] for a in alone]
    assert res["usage"]["prompt_tokens"] == 3 and res["usage"]["completion_tokens"] == 10
    r = httpx.post(url + "/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}})
    chunks = sse_events(r)
    texts = {0: "", 1: ""}
    for c in chunks[:-1]:
        (ch,) = c["choices"]
        texts[ch["index"]] += ch["text"]
    assert [texts[0], texts[1]] == [a["choices"][0]["text"] for a in alone]
    assert chunks[-1]["usage"]["completion_tokens"] == 10


def test_coercions_follow_sglang(srv):
    """SGLang 0.5.17: /generate's `stream: bool` is parsed by pydantic (lax: "yes" is true), and so are the
    OpenAI bodies' booleans; `sampling_params` is an untyped dict whose `ignore_eos` SamplingParams keeps and
    tests for truth (schedule_batch `if self.sampling_params.ignore_eos`); stop_token_ids is a set the sampled
    token is looked up in, so an id outside the vocabulary never matches."""
    from pydantic import TypeAdapter, ValidationError

    from kit.refserver.validate import _bool

    lax = TypeAdapter(bool)
    for v in ["yes", "NO", "t", "off", "1", "0", 1, 0, 1.0, 0.0, True, False]:
        assert _bool(v, "x") is lax.validate_python(v), v
    for v in ["maybe", "", 2, 0.5, [], {}]:
        with pytest.raises(ValidationError):
            lax.validate_python(v)
        with pytest.raises(KitInputError):
            _bool(v, "x")
    url = srv[0]
    r = httpx.post(url + "/generate", json={"text": "hi", "stream": "yes", "sampling_params": {"max_new_tokens": 2}})
    assert r.headers["content-type"].startswith("text/event-stream") and sse_events(r)
    sp = {"max_new_tokens": 7, "ignore_eos": "no", "stop_token_ids": [10**8]}  # "no" is a true string
    r = httpx.post(url + "/generate", json={"input_ids": [5], "sampling_params": sp})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 7


def test_context_admission_leaves_room(srv):
    """Without max tokens, a prompt near the context gets what the context leaves, not a refusal."""
    url, _ = srv
    r = httpx.post(url + "/generate", json={"input_ids": [7] * (CTX - 5), "sampling_params": {"ignore_eos": True}})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 5
    ok = {"input_ids": [7] * 60, "sampling_params": {"max_new_tokens": CTX - 60, "ignore_eos": True}}
    assert httpx.post(url + "/generate", json=ok, timeout=60).status_code == 200


def test_chunked_prefill_keeps_greedy_equality(pair):
    """A prompt prefilled 5 tokens a step (draft extended chunk by chunk) decodes exactly as in one step."""
    from kit.models import load_target
    from kit.reference.draft_io import load_draft
    from kit.reference.speculate import BatchDecoder, Sequence, decode_all
    from kit.reference.target import MODULE_PATH, reference_greedy

    target = load_target(pair[0])[0]
    draft = load_draft(pair[1], target_model=target)
    rows = [list(range(3, 40)), list(range(50, 61)), [9, 8, 7]]
    whole = decode_all(BatchDecoder(target, draft, plan=MODULE_PATH), rows, 12)
    dec = BatchDecoder(target, draft, plan=MODULE_PATH, chunked_prefill_size=5)
    chunked = decode_all(dec, rows, 12)
    assert [s.tokens for s in chunked] == [s.tokens for s in whole]
    assert chunked[0].tokens == reference_greedy(target, rows[0], 12)
    # the budget is over all sequences: one step of 5 prompt tokens gives no token to a 37-token prompt
    s = Sequence(rows[0], 4)
    assert dec.step([s]) == [[]] and s.prefilled == 5


def test_queue_bound_answers_503_with_retry_after(pair):
    """One slot, one queue place: with the slot busy (its step held) and one request waiting, the next is refused."""
    with serving(pair, max_running_requests=1, max_queued_requests=1) as (url, eng):
        gate, step = threading.Event(), eng.decoder.step
        eng.decoder.step = lambda seqs: gate.wait(60) and step(seqs)
        body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        answers = []

        def post():
            answers.append(httpx.post(url + "/generate", json=body, timeout=60).status_code)

        posters = [threading.Thread(target=post) for _ in range(2)]
        try:
            for k, t in enumerate(posters, 1):  # the first takes the slot, the second the queue place
                t.start()
                end = time.monotonic() + 30
                while sum(httpx.get(url + "/get_load").json().values()) < k and time.monotonic() < end:
                    time.sleep(0.01)
            over = httpx.post(url + "/generate", json=body, timeout=30)
        finally:
            gate.set()
            for t in posters:
                t.join(timeout=60)
        assert over.status_code == 503 and over.headers["retry-after"] == "1", over.text
        assert over.json()["error"]["message"] == "The request queue is full."
        assert answers == [200, 200]
        assert settle(url) == {"num_running_reqs": 0, "num_queue_reqs": 0}


@pytest.mark.parametrize("stream", [False, True])
def test_client_that_leaves_has_its_work_stopped(srv, stream):
    """A client gone mid-generation frees its slot (no 'finished' accounted); the others' requests go on."""
    url, eng = srv
    before = eng.counters["num_requests_total"]
    step = eng.decoder.step
    eng.decoder.step = lambda seqs: time.sleep(0.02) or step(seqs)  # ~2 s for the long request
    long = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": CTX - 3, "ignore_eos": True}}
    other = {"input_ids": [9, 10], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    if stream:
        with httpx.Client(timeout=60) as c, c.stream("POST", url + "/generate", json={**long, "stream": True}) as r:
            next(r.iter_lines())
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/generate", json=long, timeout=httpx.Timeout(60, read=0.05))
    try:
        r = httpx.post(url + "/generate", json=other, timeout=60)
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 4
        assert settle(url) == {"num_running_reqs": 0, "num_queue_reqs": 0}
    finally:
        eng.decoder.step = step
    assert eng.counters["num_requests_total"] == before + 1  # the abandoned one never finished


def test_cancel_mid_prefill_stops_within_a_chunk(pair):
    """A request cancelled while its prompt is prefilled chunk by chunk leaves the batch before its next chunk."""
    from kit.refserver.decoder import ReferenceEngine

    spec = LaunchSpec(model_path=str(pair[0]), chunked_prefill_size=4, max_running_requests=2)
    eng = ReferenceEngine(spec)
    try:
        got = threading.Event()
        r = eng.submit(list(range(3, 83)), 4, on_update=lambda t, o: got.set())
        end = time.monotonic() + 30
        while r.seq.prefilled == 0 and time.monotonic() < end:
            time.sleep(0.001)
        eng.cancel(r)
        out = eng.generate([5, 6], 3, ignore_eos=True)  # the loop took the cancellation before this request
        assert len(out.tokens) == 3 and not got.is_set()
        assert r.seq.prefilled < len(r.seq.prompt) and r not in eng.running
    finally:
        eng.stop()


# -- property-based fuzz ------------------------------------------------------------------------
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
values = st.recursive(
    scalars, lambda v: st.lists(v, max_size=4) | st.dictionaries(st.text(max_size=6), v, max_size=3), max_leaves=8
)
small_ids = st.lists(st.integers(min_value=-2, max_value=VOCAB + 2), max_size=8)
sampling = st.fixed_dictionaries(
    {},
    optional={
        "max_new_tokens": st.one_of(st.integers(-2, 12), values),
        "temperature": values,
        "top_p": values,
        "top_k": values,
        "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3), values),
        "stop_token_ids": st.one_of(small_ids, values),
        "ignore_eos": values,
    },
)
common = {"stream": st.one_of(st.booleans(), values), "stop": values, "temperature": values}
bodies = st.one_of(
    st.tuples(
        st.just("/generate"),
        st.fixed_dictionaries(
            {},
            optional={
                "text": st.one_of(st.text(max_size=20), st.lists(st.text(max_size=5), max_size=3), values),
                "input_ids": st.one_of(small_ids, st.lists(small_ids, max_size=3), values),
                "sampling_params": st.one_of(sampling, values),
                "stream": common["stream"],
                "rid": values,
            },
        ),
    ),
    st.tuples(
        st.just("/v1/completions"),
        st.fixed_dictionaries(
            {},
            optional={
                "prompt": st.one_of(st.text(max_size=20), small_ids, values),
                "max_tokens": st.one_of(st.integers(-2, 12), values),
                "stream_options": values,
                **common,
            },
        ),
    ),
    st.tuples(
        st.just("/v1/chat/completions"),
        st.fixed_dictionaries(
            {},
            optional={
                "messages": st.one_of(
                    st.lists(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "role": st.one_of(st.sampled_from(["user", "system", "assistant", "bot"]), values),
                                "content": st.one_of(st.text(max_size=10), values),
                            },
                        ),
                        max_size=3,
                    ),
                    values,
                ),
                "max_completion_tokens": st.one_of(st.integers(-2, 12), values),
                **common,
            },
        ),
    ),
    st.tuples(st.sampled_from(["/generate", "/v1/completions", "/v1/chat/completions"]), values),
)


@pytest.fixture(scope="module")
def client(srv):
    with httpx.Client(base_url=srv[0], timeout=60) as c:
        yield c


def test_fuzzed_bodies_never_5xx_then_a_normal_answer(srv, client):
    """Bounded (120 bodies, derandomized): every answer a 200 or a one-line 400, never a dropped connection;
    a normal request answered after, and nothing left running."""

    @settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case=bodies)
    def one(case):
        path, body = case
        raw = json.dumps(body).encode()  # NaN/Infinity as Python writes them: the server parses or refuses them
        r = client.post(path, content=raw, headers={"content-type": "application/json"})  # a dropped connection raises
        assert r.status_code in (200, 400), (path, body, r.status_code, r.text)
        if r.status_code == 400:
            assert "\n" not in r.json()["error"]["message"]
        elif r.headers["content-type"].startswith("text/event-stream"):
            events = [ln for ln in r.text.splitlines() if ln.startswith("data: ")]
            errors = [e for e in events if '"error"' in e]
            assert events[-1] == "data: [DONE]", r.text
            # only a streamed /generate refuses inside its stream (SGLang's TokenizerManager checks): once, first
            assert not errors or (path == "/generate" and events == [errors[0], "data: [DONE]"]), r.text
        else:
            r.json()

    one()
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    assert settle(srv[0]) == {"num_running_reqs": 0, "num_queue_reqs": 0}
