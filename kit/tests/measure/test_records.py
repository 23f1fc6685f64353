"""kit.measure.records: a request record is typed, and records.jsonl files read back and are written byte for byte
as before the record was typed."""

import json

from kit.measure.bench import load_result, read_records
from kit.measure.records import RequestRecord, RunRecord

# lines `kit bench` wrote while records were plain dicts (stub server): a streamed /generate warmup and request,
# a failed request, an unstreamed answer with the generated ids, an OpenAI chat stream
OLD_LINES = [
    '{"api":"sglang","t_start":1796393591.730983,"ok":true,"error":null,"ttft":0.0037797240001964383,"chunk_t":[0.0037797240001964383,0.0037797240001964383,0.0037797240001964383],"chunk_tok":[1,3,2],"completion_tokens":6,"prompt_tokens":2,"client_tokens":6,"spec":{"verify_ct":2,"accept_length":3.0,"accept_rate":0.5,"num_correct":3,"num_proposed":6,"histogram":[0,1,1,0]},"finish_reason":"length","e2e":0.0038792089981143363,"label":"spec","repeat":0,"session":"730a0a10","warmup":true,"rid":"warmup0","kind":"chat"}',
    '{"api":"sglang","t_start":1796393591.7393706,"ok":true,"error":null,"ttft":0.003634690001490526,"chunk_t":[0.003634690001490526,0.003634690001490526,0.003634690001490526],"chunk_tok":[1,3,2],"completion_tokens":6,"prompt_tokens":2,"client_tokens":6,"spec":{"verify_ct":2,"accept_length":3.0,"accept_rate":0.5,"num_correct":3,"num_proposed":6,"histogram":[0,1,1,0]},"finish_reason":"length","e2e":0.0036987079947721213,"label":"spec","repeat":0,"session":"730a0a10","rid":"q0#0","kind":"chat"}',
    '{"api":"sglang","t_start":1796393591.7395809,"ok":false,"error":"RuntimeError: HTTP 500: {\\"error\\": \\"stub: injected failure\\"}","ttft":null,"chunk_t":[],"chunk_tok":[],"completion_tokens":null,"prompt_tokens":null,"client_tokens":0,"spec":{},"finish_reason":null,"e2e":0.003832625996437855,"label":"spec","repeat":0,"session":"730a0a10","rid":"q1#0","kind":"code"}',  # noqa: E501
    '{"api":"sglang","t_start":1796393591.8641932,"ok":true,"error":null,"ttft":null,"chunk_t":[0.0008486360020469874],"chunk_tok":[4],"completion_tokens":4,"prompt_tokens":2,"client_tokens":4,"spec":{"verify_ct":1,"accept_length":4.0,"accept_rate":0.6666666666666666,"num_correct":2,"num_proposed":3,"histogram":[0,0,1,0]},"finish_reason":"length","output_ids":[11,12,13,14],"e2e":0.0008493570057908073,"label":"spec","repeat":0,"session":"76c82a54","rid":"q0#0","kind":"chat"}',
    '{"api":"chat","t_start":1796393591.9794056,"ok":true,"error":null,"ttft":0.005853581998962909,"chunk_t":[0.005853581998962909,0.005853581998962909,0.005853581998962909],"chunk_tok":[1,1,1],"completion_tokens":3,"prompt_tokens":2,"client_tokens":3,"spec":{"verify_ct":1,"accept_length":3.0,"accept_rate":0.3333333333333333,"num_correct":1,"num_proposed":3,"histogram":[0,1,0,0]},"finish_reason":"length","e2e":0.005941912000707816,"label":"spec","repeat":0,"session":"2830f295","rid":"q0#0","kind":"chat"}',
]

# runs.jsonl lines of that time: the session of the streamed requests above, and one that read a server log
OLD_RUN_LINES = [
    '{"label":"spec","repeat":0,"session":"730a0a10","url":"http://127.0.0.1:42823","api":"sglang","model":"stub-model","t_start":1796393591.7391102,"t_end":1796393591.7434788,"requests":2,"resumed":false,"flushed":true,"sglang":true,"engine":"sglang","metrics_before":{"sglang:generation_tokens_total":6.0,"sglang:spec_verify_calls_total":2.0},"metrics_after":{"sglang:generation_tokens_total":12.0,"sglang:spec_verify_calls_total":4.0},"server_info_after":{"version":"stub","speculative_algorithm":"EAGLE3","speculative_num_draft_tokens":4,"internal_states":[{"avg_spec_accept_length":2.5}]}}',
    '{"label":"spec","repeat":0,"session":"88696706","url":"http://127.0.0.1:44257","api":"sglang","model":"stub-model","t_start":1796393886.6348798,"t_end":1796393886.647572,"requests":1,"resumed":false,"flushed":true,"sglang":true,"engine":"sglang","metrics_before":{"sglang:generation_tokens_total":0.0,"sglang:spec_verify_calls_total":0.0},"metrics_after":{"sglang:generation_tokens_total":6.0,"sglang:spec_verify_calls_total":2.0},"server_info_after":{"version":"stub","speculative_algorithm":"EAGLE3","speculative_num_draft_tokens":4,"internal_states":[{"avg_spec_accept_length":2.5}]},"log_accept_lengths":[2.5]}',
]


def test_records_written_before_the_dataclass_read_back_and_write_the_same_bytes(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(OLD_LINES) + "\n")
    recs = read_records(path)
    assert [json.dumps(r.to_dict(), separators=(",", ":")) for r in recs] == OLD_LINES
    warm, ok, failed, unstreamed, chat = recs
    assert warm.warmup and not ok.warmup and ok.rid == "q0#0" and ok.chunk_tok == [1, 3, 2]
    assert not failed.ok and failed.error.startswith("RuntimeError: HTTP 500") and failed.output_tokens == 0
    assert unstreamed.output_ids == [11, 12, 13, 14] and unstreamed.ttft is None
    assert chat.api == "chat" and chat.spec["verify_ct"] == 1
    assert ok.accept_length == 3.0 and chat.accept_length == 3.0  # output tokens / verify steps, one request


def test_run_lines_written_before_the_dataclass_read_back_and_write_the_same_bytes():
    runs = [RunRecord.from_dict(json.loads(line)) for line in OLD_RUN_LINES]
    assert [json.dumps(r.to_dict(), separators=(",", ":")) for r in runs] == OLD_RUN_LINES
    assert runs[0].log_accept_lengths is None and runs[1].log_accept_lengths == [2.5]
    assert runs[0].session == "730a0a10" and runs[0].requests == 2 and runs[0].flushed and runs[0].engine == "sglang"


def test_an_old_run_directory_is_rescored(tmp_path):
    (tmp_path / "records.jsonl").write_text("\n".join(OLD_LINES) + "\n")
    (tmp_path / "runs.jsonl").write_text(OLD_RUN_LINES[0] + "\n")
    res = load_result(tmp_path)
    spec = res.summary["labels"]["spec"]
    assert spec["requests"] == 3 and spec["failed"] == 1  # the warmup counts nowhere
    assert spec["output_tokens"] == 6 + 4 + 3
    assert spec["accept_length"] == (6 + 4 + 3) / (2 + 1 + 1)  # pooled: tokens over verify steps
    assert spec["accept_length_req_mean"] == (3.0 + 4.0 + 3.0) / 3  # the requests' own, unweighted
    # the streamed session's sources: its requests and the server counters around them agree (6 tokens, 2 steps)
    assert spec["accept_sources"]["meta"] == spec["accept_sources"]["metrics_delta"] == 3.0
    assert spec["accept_sources"]["server_info"] == 2.5
    assert json.loads((tmp_path / "summary.json").read_text())["labels"]["spec"]["requests"] == 3


def test_unknown_keys_are_ignored_and_missing_ones_defaulted():
    r = RequestRecord.from_dict({"ok": True, "e2e": 2.0, "client_tokens": 7, "from_a_later_kit": 1, "chunk_t": None})
    assert r.ok and r.output_tokens == 7 and r.chunk_t == [] and r.spec == {} and r.label is None
    assert r.accept_length is None  # no verify steps reported
    assert "from_a_later_kit" not in r.to_dict() and "warmup" not in r.to_dict() and "output_ids" not in r.to_dict()
    assert list(RequestRecord(warmup=True).to_dict())[-3:] == ["warmup", "rid", "kind"]
