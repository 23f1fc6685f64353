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

from kit.measure.request_table import bad_rows
from kit.serving.launch import LaunchSpec
from kit.serving.process import free_port
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


# the table of bad requests (kit.measure.request_table: also what bench/serve_table.py sends SGLang), built for
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
            assert events[-1] == "data: [DONE]" and all('"error"' not in e for e in events), r.text
        else:
            r.json()

    one()
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    assert settle(srv[0]) == {"num_running_reqs": 0, "num_queue_reqs": 0}
