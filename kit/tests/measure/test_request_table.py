"""The request table (kit.tests.request_table) sent to the reference server in process (tiny target + EAGLE-3
draft built in code): every row answered as the table says (no 5xx, no dropped connection, no timeout), the
abandoned-prompt case and a normal request after it answered; two runs lined up; the error shapes read.

Run: python -m pytest kit/tests/measure/test_request_table.py -q
"""

import json

import httpx
import pytest

from kit.measure.client import post_body, run_sync
from kit.serving.launch import LaunchSpec
from kit.serving.process import free_port
from kit.tests.request_table import TableConfig, compare, message_line, run_table, sse_error, table
from kit.tests.tinyserve import build_pair, in_process_server

CTX = 128


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    target, draft = build_pair(tmp_path_factory.mktemp("tiny"))
    spec = LaunchSpec(
        model_path=str(target),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        port=free_port(),
        context_length=CTX,
        chunked_prefill_size=16,
    )
    with in_process_server(spec) as (url, eng):
        doc = run_sync(run_table(url, TableConfig(abandon_after_s=1.0)))
        yield doc, url, eng


def test_rows_are_named_once_and_cover_every_endpoint():
    rows = table(2048)
    assert len({r.name for r in rows}) == len(rows)
    for ep in ("/generate", "/v1/completions", "/v1/chat/completions"):
        kinds = {(r.expect, r.stream, isinstance(r.body, bytes)) for r in rows if r.endpoint == ep}
        assert {
            (200, False, False),
            (200, True, False),
            (400, False, False),
            (400, True, False),
            (400, False, True),
        } <= kinds


def test_reference_server_answers_the_table_as_written(run):
    doc, _, _ = run
    s = doc["summary"]
    assert doc["context_length"] == CTX  # read from /v1/models: the served --context-length
    assert s["sent"] == s["rows"] == len(table(CTX)) and s["skipped"] == 0
    assert s["5xx"] == s["dropped"] == s["timed_out"] == []
    assert s["not_as_reference"] == [] and s["answers_after"]
    in_stream = {r.name: r for r in table(CTX) if r.in_stream}  # SGLang's streamed /generate refusals
    assert s["stream_errors_in_200"] == list(in_stream)
    for r in doc["rows"]:
        if r["status"] == 400:
            assert r["message"] and "\n" not in r["message"], r
        if r["name"] in in_stream:
            row = in_stream[r["name"]]
            assert row.names in r["stream_error"] and row.words in r["stream_error"], r
    ab = doc["abandoned_prompt"]
    assert ab["prompt_tokens"] == CTX - 64 and ab["next_request_status"] == 200
    assert doc["server"]["context_length"] == CTX and doc["server"]["version"].startswith("kit-reference")


def test_nothing_left_running_after_the_table(run):
    _, url, _ = run
    assert httpx.get(url + "/get_load").json() == {"num_running_reqs": 0, "num_queue_reqs": 0}


def test_compare_lists_the_rows_that_differ(run):
    doc = run[0]
    other = json.loads(json.dumps(doc))
    rows = {r["name"]: r for r in other["rows"]}
    rows["generate.text.empty"].update(status=200, message=None, stream_error="empty prompt")
    rows["generate.text.int"]["message"] = "text: Input should be a valid string"
    rows["ok.chat"].update(status=None, dropped=True)
    md = compare(doc, other)
    assert md.startswith(f"{len(doc['rows'])} rows: {len(doc['rows']) - 2} with the same code (1 of them")
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| row")]
    assert [ln.split(" | ")[0][2:] for ln in lines] == ["ok.chat", "generate.text.int", "generate.text.empty"]
    assert "| 400 | 200 (stream error) |" in md and "| 200 | dropped |" in md
    assert compare(doc, doc).startswith(f"{len(doc['rows'])} rows: {len(doc['rows'])} with the same code (0")


@pytest.mark.parametrize(
    "status,body,line",
    [
        (400, {"error": {"message": "text: bad\nmore", "code": 400}}, "text: bad"),  # SGLang /generate, reference
        (
            400,
            {"object": "error", "message": "Invalid request", "type": "BadRequestError", "code": 400},
            "Invalid request",
        ),
        (422, {"detail": [{"loc": ["body", "prompt"], "msg": "Field required"}]}, '[{"loc": ["body", "prompt"]'),
        (500, b"Internal Server Error", "Internal Server Error"),
        (None, b"", None),
    ],
)
def test_message_line_reads_each_error_shape(status, body, line):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got = message_line(status, raw)
    if line is not None and line.startswith("["):  # FastAPI's list of problems, as JSON
        assert got.startswith(line), got
    else:
        assert got == line


def test_sse_error_finds_an_error_event_in_a_200_stream():
    ok = b'data: {"text": "a"}\n\ndata: [DONE]\n\n'
    bad = b'data: {"text": "a"}\n\ndata: {"error": {"message": "The input (9 tokens) is longer"}}\n\ndata: [DONE]\n\n'
    assert sse_error(ok) is None and sse_error(bad) == "The input (9 tokens) is longer"


def test_post_body_reports_a_refused_connection_as_dropped():
    async def go():
        async with httpx.AsyncClient() as c:
            return await post_body(c, f"http://127.0.0.1:{free_port()}/generate", b"{", 10)

    ans = run_sync(go())
    assert ans.dropped and ans.status is None and not ans.timed_out and ans.error


def test_a_server_that_dies_ends_the_table_with_the_row_that_killed_it():
    """Nothing answers: the first row drops, the ready path fails, every later row is skipped naming it."""
    url = f"http://127.0.0.1:{free_port()}"
    doc = run_sync(run_table(url, TableConfig(context_length=CTX)))
    first, *rest = doc["rows"]
    assert first["name"] == "ok.generate" and first["dropped"]
    assert rest and {r["skipped"] for r in rest} == {"server gone after ok.generate"}
    assert doc["summary"]["server_gone_after"] == "ok.generate" and "abandoned_prompt" not in doc
