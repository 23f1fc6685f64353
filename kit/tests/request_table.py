"""The table of bad (and a few good) requests to an SGLang-API server: what each row tests, what the kit's
reference server answers, the table sent to a live server, and two servers' answers lined up.

Why: `kit serve` speaks SGLang's HTTP API and must refuse every bad request with a 4xx that names its field,
never a 5xx or a dropped connection (issue 44). One list of rows serves the reference server's tests
(kit/tests/serving/test_server_robust.py checks each 400 names its field), the soak benchmark's bad bodies
(bench/serve_soak.py), and `bench/serve_table.py`, which sends the whole table to a server (the reference one
or real SGLang) with the kit's client (`kit.measure.client.post_body`) and records per row the status, the
first line of the error, whether the connection dropped and the time; then the abandoned-prompt case (a long
prompt whose client gives up, then a 4-token request's latency) and a normal request after it all.
`compare` lines up two such runs row by row (code and message) as markdown. Test and bench machinery, beside the
package like the SGLang stub (kit/tests/sglang_stub.py): only tests and bench scripts import it.

    rows = table(context_length=2048)                  # [Row(name, endpoint, body, tests, expect, names, words)]
    doc = run_sync(run_table("http://127.0.0.1:30000", TableConfig(context_length=2048)))
    print(compare(doc_reference, doc_sglang))          # markdown: the rows whose code or message differ

Row bodies that depend on the served context (a prompt longer than it, max_new_tokens beyond what it leaves)
are built from `context_length`; token ids are small (< 100), inside any vocabulary.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

# a body: a JSON object (sent as JSON) or raw bytes (sent as they are: malformed JSON)
Body = dict | bytes

GENERATE, COMPLETIONS, CHAT = "/generate", "/v1/completions", "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Row:
    """One request of the table."""

    name: str  # unique, stable: the key two runs are lined up by
    endpoint: str
    body: Body
    tests: str  # what it tests, in words
    expect: int = 400  # the status the kit's reference server answers
    in_stream: bool = False  # a 200 whose stream carries the refusal (SGLang's streamed /generate checks)
    names: str = ""  # the field the reference server's one-line message names ("" for a 200)
    words: str = ""  # words the reference server's message contains

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    def describe(self) -> dict:
        body = self.body.decode("latin-1") if isinstance(self.body, bytes) else _short(self.body)
        return {"name": self.name, "endpoint": self.endpoint, "stream": self.stream, "tests": self.tests, "body": body}


def _short(body: dict) -> Any:
    """The body as recorded: long token lists and strings abbreviated, so the JSON stays readable."""

    def cut(v):
        if isinstance(v, list) and len(v) > 12:
            return [*map(cut, v[:4]), f"... {len(v)} items"]
        if isinstance(v, str) and len(v) > 60:
            return v[:24] + f"... {len(v)} chars"
        if isinstance(v, dict):
            return {k: cut(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cut(x) for x in v]
        return v

    return cut(body)


def table(context_length: int, vocab_size: int | None = None) -> list[Row]:
    """Every row, its context-dependent bodies built for `context_length` (the server's --context-length).
    `vocab_size` only sharpens the words expected of the reference server's out-of-vocabulary message."""
    ctx = context_length
    over = " x" * (ctx + 8)  # a text prompt over the context: " x" is at least one token in any tokenizer
    near = [7 + i % 90 for i in range(ctx - 20)]  # a prompt that leaves the context 20 tokens
    vocab = f"valid range is [0, {vocab_size})" if vocab_size else "valid range is [0, "
    total = f"total of {len(near) + 40} tokens"
    g, c, ch = GENERATE, COMPLETIONS, CHAT
    rows = [
        # -- controls: well-formed requests every server answers 200 ----------------------------
        Row("ok.generate", g, {"text": "Hello", "sampling_params": {"max_new_tokens": 4}}, "control", 200),
        Row("ok.generate.stream", g, {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 4}},
            "control, streamed", 200),
        Row("ok.generate.ids", g, {"input_ids": [7, 8, 9], "sampling_params": {"max_new_tokens": 4}},
            "control, token ids", 200),
        Row("ok.generate.zero_new", g, {"text": "Hello", "sampling_params": {"max_new_tokens": 0}},
            "max_new_tokens 0 (allowed: at least 0)", 200),
        Row("ok.generate.near_context", g, {"input_ids": near},
            "a prompt 20 tokens short of the context, no max_new_tokens: gets what the context leaves", 200),
        Row("ok.completions", c, {"prompt": "Hello", "max_tokens": 4}, "control", 200),
        Row("ok.completions.stream", c, {"prompt": "Hello", "max_tokens": 4, "stream": True},
            "control, streamed", 200),
        Row("ok.chat", ch, {"messages": HI, "max_tokens": 4}, "control", 200),
        Row("ok.chat.stream", ch, {"messages": HI, "max_tokens": 4, "stream": True}, "control, streamed", 200),
        # -- the table -------------------------------------------------------------------
        Row("generate.max_new_tokens.huge", g, {"text": "hi", "sampling_params": {"max_new_tokens": 100000000}},
            "max_new_tokens 100000000 (over any context)", names="max_new_tokens", words="context length"),
        Row("generate.text.int", g, {"text": 12345}, "text: 12345 (not a string)", names="text",
            words="must be a string"),
        Row("generate.text.empty", g, {"text": ""}, 'text: "" (empty prompt)', names="text", words="empty prompt"),
        Row("generate.text.over_context", g, {"text": over}, "a text prompt longer than the context",
            names="text", words=f"is longer than the model's context length ({ctx} tokens)"),
        Row("generate.ids.over_context", g, {"input_ids": [7] * (ctx + 10)}, "token ids longer than the context",
            names="input_ids", words="longer than the model's context length"),
        Row("generate.max_new_tokens.over_left", g, {"input_ids": near, "sampling_params": {"max_new_tokens": 40}},
            "max_new_tokens beyond what the context leaves", names="max_new_tokens", words=total),
        Row("generate.max_new_tokens.negative", g, {"text": "hi", "sampling_params": {"max_new_tokens": -5}},
            "max_new_tokens -5", names="max_new_tokens", words="at least 0, got -5"),
        Row("generate.max_new_tokens.string", g, {"text": "hi", "sampling_params": {"max_new_tokens": "8"}},
            "max_new_tokens as a string", names="max_new_tokens", words="integer"),
        Row("generate.temperature.string", g, {"text": "hi", "sampling_params": {"temperature": "hot"}},
            "non-numeric temperature", names="temperature", words="number"),
        Row("generate.temperature.negative", g, {"text": "hi", "sampling_params": {"temperature": -1}},
            "negative temperature", names="temperature", words="non-negative finite"),
        Row("generate.top_p.range", g, {"text": "hi", "sampling_params": {"top_p": 5}}, "top_p 5",
            names="top_p", words="(0, 1]"),
        Row("generate.top_k.zero", g, {"text": "hi", "sampling_params": {"top_k": 0}}, "top_k 0", names="top_k",
            words="-1 (disable)"),
        Row("generate.min_p.range", g, {"text": "hi", "sampling_params": {"min_p": 2}}, "min_p 2", names="min_p",
            words="[0, 1]"),
        Row("generate.frequency_penalty.range", g, {"text": "hi", "sampling_params": {"frequency_penalty": 9}},
            "frequency_penalty 9", names="frequency_penalty", words="[-2, 2]"),
        Row("generate.repetition_penalty.zero", g, {"text": "hi", "sampling_params": {"repetition_penalty": 0}},
            "repetition_penalty 0", names="repetition_penalty", words="(0, 2]"),
        Row("generate.stop.ints", g, {"text": "hi", "sampling_params": {"stop": [1]}}, "stop: [1] (not strings)",
            names="stop", words="strings"),
        Row("generate.stop.too_many", g, {"text": "hi", "sampling_params": {"stop": ["a"] * 40}},
            "40 stop strings (the release the reference speaks caps them at 32, kit.sglang.http_api; older ones serve them)",
            names="stop", words="at most 32"),
        Row("generate.ignore_eos.string", g, {"text": "hi", "sampling_params": {"ignore_eos": "yes"}},
            "ignore_eos as a string (served: SamplingParams keeps the value, its truth counts)", 200),
        Row("generate.sampling_params.int", g, {"text": "hi", "sampling_params": 3}, "sampling_params: 3",
            names="sampling_params", words="object"),
        Row("generate.input_ids.empty", g, {"input_ids": []}, "input_ids: []", names="input_ids",
            words="cannot be empty"),
        Row("generate.input_ids.string_item", g, {"input_ids": [1, "a"]}, "a string among the token ids",
            names="input_ids", words="integers"),
        Row("generate.input_ids.empty_in_batch", g, {"input_ids": [[1, 2], []]},
            "an empty prompt in a batch (served: SGLang admits it; the reference answers that entry aborted)", 200),
        Row("generate.text.empty_batch", g, {"text": []}, "text: [] (a batch of none: answered [])", 200),
        Row("generate.stream.string", g, {"text": "hi", "stream": "yes"},
            'stream as a string ("yes": pydantic coerces it to true, streamed)', 200),
        Row("generate.stream.batch", g, {"text": ["a", "b"], "stream": True},
            "a streamed batch (each chunk carries its prompt's index)", 200),
        Row("generate.rid.int", g, {"text": "hi", "rid": 5}, "rid: 5 (not a string)", names="rid", words="string"),
        Row("generate.no_prompt", g, {}, "no text, no input_ids", names="text", words="Either text, input_ids"),
        # -- /generate streamed ------------------------------------------------------------------
        Row("generate.stream.max_new_tokens.huge", g,
            {"text": "hi", "stream": True, "sampling_params": {"max_new_tokens": 10**9}},
            "streamed: max_new_tokens 10^9 (refused inside the 200 stream, as SGLang's TokenizerManager checks are)",
            200, in_stream=True, names="max_new_tokens", words="context length"),
        Row("generate.stream.text.empty", g, {"text": "", "stream": True}, "streamed: empty prompt (in the stream)",
            200, in_stream=True, names="text", words="empty prompt"),
        Row("generate.stream.over_context", g, {"input_ids": [7] * (ctx + 10), "stream": True},
            "streamed: a prompt over the context (in the stream)", 200, in_stream=True, names="input_ids",
            words="context length"),
        Row("generate.stream.temperature.string", g,
            {"text": "hi", "stream": True, "sampling_params": {"temperature": "hot"}},
            "streamed: non-numeric temperature", names="temperature", words="number"),
        # -- /v1/completions ---------------------------------------------------------------------
        Row("completions.no_prompt", c, {}, "no prompt", names="prompt", words="field required"),
        Row("completions.prompt.int", c, {"prompt": 5}, "prompt: 5", names="prompt", words="string"),
        Row("completions.prompt.empty", c, {"prompt": ""}, 'prompt: ""', names="prompt", words="empty prompt"),
        Row("completions.prompt.batch", c, {"prompt": ["a", "b"]},
            "two prompts in one request (one choice per prompt)", 200),
        Row("completions.prompt.over_context", c, {"prompt": over, "max_tokens": 4}, "a prompt over the context",
            names="prompt", words="longer than the model's context length"),
        Row("completions.max_tokens.huge", c, {"prompt": "hi", "max_tokens": 10**8}, "max_tokens 10^8",
            names="max_tokens", words="maximum context length"),
        Row("completions.max_tokens.over_left", c, {"prompt": near, "max_tokens": 40},
            "max_tokens beyond what the context leaves", names="max_tokens", words=total),
        Row("completions.max_tokens.negative", c, {"prompt": "hi", "max_tokens": -5}, "max_tokens -5",
            names="max_tokens", words="at least 0"),
        Row("completions.max_tokens.string", c, {"prompt": "hi", "max_tokens": "x"}, "max_tokens as a string",
            names="max_tokens", words="integer"),
        Row("completions.top_p.string", c, {"prompt": "hi", "temperature": None, "top_p": "a"},
            "non-numeric top_p", names="top_p", words="number"),
        Row("completions.temperature.string", c, {"prompt": "hi", "temperature": "hot"},
            "non-numeric temperature", names="temperature", words="number"),
        Row("completions.stream_options.list", c, {"prompt": "hi", "stream_options": []}, "stream_options: []",
            names="stream_options", words="object"),
        Row("completions.model.int", c, {"prompt": "hi", "model": 3}, "model: 3", names="model", words="string"),
        Row("completions.stream.temperature.negative", c, {"prompt": "hi", "stream": True, "temperature": -3},
            "streamed: negative temperature", names="temperature", words="non-negative"),
        Row("completions.stream.max_tokens.huge", c, {"prompt": "hi", "stream": True, "max_tokens": 10**8},
            "streamed: max_tokens 10^8", names="max_tokens", words="maximum context length"),
        Row("completions.stream.over_context", c, {"prompt": over, "stream": True, "max_tokens": 4},
            "streamed: a prompt over the context", names="prompt", words="context length"),
        # -- /v1/chat/completions ----------------------------------------------------------------
        Row("chat.no_messages", ch, {}, "no messages", names="messages", words="non-empty list"),
        Row("chat.messages.empty", ch, {"messages": []}, "messages: []", names="messages", words="non-empty list"),
        Row("chat.messages.string", ch, {"messages": "hi"}, 'messages: "hi"', names="messages",
            words="non-empty list"),
        Row("chat.role.unknown", ch, {"messages": [{"role": "wizard", "content": "x"}]}, "an unknown chat role",
            names="messages[0].role", words="unknown role"),
        Row("chat.content.int", ch, {"messages": [{"role": "user", "content": 5}]}, "content: 5",
            names="messages[0].content", words="string"),
        Row("chat.content.image", ch, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "an image part without its URL (text-only model)", names="content[0]", words="text"),
        Row("chat.message.string", ch, {"messages": ["x"]}, "a message that is a string", names="messages[0]",
            words="object"),
        Row("chat.over_context", ch, {"messages": [{"role": "user", "content": over}]},
            "a chat prompt over the context", names="messages", words="context length"),
        Row("chat.max_completion_tokens.negative", ch, {"messages": HI, "max_completion_tokens": -1},
            "max_completion_tokens -1", names="max_", words="0"),
        Row("chat.max_tokens.huge", ch, {"messages": HI, "max_tokens": 10**8}, "max_tokens 10^8",
            names="max_tokens", words="maximum context length"),
        Row("chat.temperature.string", ch, {"messages": HI, "temperature": "hot"}, "non-numeric temperature",
            names="temperature", words="number"),
        Row("chat.stream.stop.int", ch, {"messages": [{"role": "user", "content": "x"}], "stream": True, "stop": 3},
            "streamed: stop: 3", names="stop"),
        Row("chat.stream.role.unknown", ch, {"messages": [{"role": "wizard", "content": "x"}], "stream": True},
            "streamed: an unknown chat role", names="role", words="unknown role"),
        Row("chat.stream.over_context", ch, {"messages": [{"role": "user", "content": over}], "stream": True},
            "streamed: a chat prompt over the context", names="messages", words="context length"),
    ]  # fmt: skip
    # -- malformed bodies, on every endpoint ------------------------------------------------------
    raw = {"not_json": b"{not json", "array": b"[1, 2]", "string": b'"text"', "not_utf8": b"\xff\xfe", "null": b"null"}
    for ep, short in ((g, "generate"), (c, "completions"), (ch, "chat")):
        for what, body in raw.items():
            rows.append(Row(f"{short}.body.{what}", ep, body, f"malformed body: {body!r}", names="body", words=""))
    # -- last: token ids outside the vocabulary. A server that indexes its embedding with them unchecked may crash
    # (a device-side assert on a GPU), and every row after would show only that ---------------------------------
    rows += [
        Row("generate.stop_token_ids.out_of_vocab", g, {"text": "hi", "sampling_params": {"stop_token_ids": [99999999]}},
            "a stop token id outside the vocabulary (served: it never matches)", 200),
        Row("generate.input_ids.out_of_vocab", g, {"input_ids": [99999999, -1]},
            "input_ids outside the vocabulary (and negative)", names="input_ids",
            words="out-of-vocabulary token id 99999999"),
        Row("generate.input_ids.negative", g, {"input_ids": [5, -1]}, "a negative token id", names="input_ids",
            words=vocab),
        Row("generate.stream.out_of_vocab", g, {"input_ids": [99999999, -1], "stream": True},
            "streamed: ids outside the vocabulary", names="input_ids", words="out-of-vocabulary"),
        Row("completions.prompt.out_of_vocab", c, {"prompt": [1, 99999999]}, "prompt ids outside the vocabulary",
            names="prompt", words="out-of-vocabulary"),
    ]  # fmt: skip
    return rows


def bad_rows(context_length: int, vocab_size: int | None = None) -> list[Row]:
    """The rows the reference server refuses (every one a 400)."""
    return [r for r in table(context_length, vocab_size) if r.expect >= 400]


# ---------------------------------------------------------------------------------------------
# one run against a live server
# ---------------------------------------------------------------------------------------------
@dataclass
class TableConfig:
    context_length: int | None = None  # the server's context (None: read from its /v1/models max_model_len)
    row_timeout_s: float = 60.0  # one row's answer, read to its end
    deadline_s: float = 150.0  # the whole table: rows after it are recorded as skipped
    abandon_after_s: float = 3.0  # the abandoned-prompt case: the long prompt's client gives up after this
    abandoned_prompt_tokens: int = 6000  # its length (at most what the context leaves for 64 new tokens)


def message_line(status: int | None, body: bytes) -> str | None:
    """The first line of a server's error message, from the shapes SGLang and the reference server answer:
    {"error": {"message"}}, OpenAI's {"message"}, FastAPI's {"detail"}; else the body's first line."""
    if status is None:
        return None
    text = body.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    msg: Any = None
    if isinstance(obj, dict):
        err = obj.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if msg is None:
            msg = obj.get("message", obj.get("detail"))
    if isinstance(msg, list | dict):
        msg = json.dumps(msg)
    msg = text if msg is None else str(msg)
    lines = msg.strip().splitlines()
    return lines[0][:300] if lines else ""


def sse_error(body: bytes) -> str | None:
    """The message of an SSE error event in a 200 stream (how a server refuses after its headers), or None."""
    for line in body.split(b"\n"):
        if line.startswith(b"data:") and b'"error"' in line:
            try:
                obj = json.loads(line[5:].strip())
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("error") is not None:
                return message_line(200, line[5:].strip())
    return None


def _record(row: Row, ans) -> dict:
    rec = {**row.describe(), "expect_reference": row.expect}
    rec.update(status=ans.status, dropped=ans.dropped, timed_out=ans.timed_out, seconds=round(ans.seconds, 3))
    rec["message"] = message_line(ans.status, ans.body) if ans.status and ans.status >= 400 else None
    rec["stream_error"] = sse_error(ans.body) if ans.status == 200 else None
    if ans.error:
        rec["error"] = ans.error
    return rec


# what a run records of the server it asked (its server info): which server, model and limits answered
SERVER_KEYS = ("version", "model_path", "context_length", "speculative_algorithm", "chunked_prefill_size",
               "max_queued_requests", "max_running_requests")  # fmt: skip


async def _alive(client, url: str) -> bool:
    """Does the server still answer its ready path (after a row it dropped or answered 5xx)?"""
    import httpx

    from kit.serving.engines import get_engine

    for _ in range(3):
        try:
            if (await client.get(url + get_engine(None).ready_path, timeout=5)).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        await asyncio.sleep(1)
    return False


async def _context_of(client, url: str) -> int:
    from kit.findings import KitInputError
    from kit.serving.engines import get_engine

    r = await client.get(url + get_engine(None).models_path)
    try:
        return int(r.json()["data"][0]["max_model_len"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise KitInputError(f"--url {url}: /v1/models gives no max_model_len; give --context-length")


async def run_table(url: str, cfg: TableConfig) -> dict:
    """Every row sent in turn, then the abandoned-prompt case, then a normal request."""
    import httpx

    from kit.measure.client import post_body, server_info

    t_all = time.perf_counter()
    out: dict[str, Any] = {"url": url, "config": asdict(cfg), "rows": []}
    async with httpx.AsyncClient(trust_env=False, timeout=cfg.row_timeout_s) as client:
        ctx = cfg.context_length or await _context_of(client, url)
        out["context_length"] = ctx
        info = await server_info(client, url) or {}
        out["server"] = {k: info.get(k) for k in SERVER_KEYS if info.get(k) is not None}
        deadline = time.monotonic() + cfg.deadline_s
        gone = None  # the row after which the server stopped answering its ready path
        for row in table(ctx):
            why = "deadline" if time.monotonic() > deadline else f"server gone after {gone}" if gone else None
            if why:
                out["rows"].append({**row.describe(), "expect_reference": row.expect, "skipped": why})
                continue
            ans = await post_body(client, url + row.endpoint, row.body, cfg.row_timeout_s)
            out["rows"].append(_record(row, ans))
            if (ans.dropped or (ans.status or 0) >= 500) and not await _alive(client, url):
                gone = out["server_gone_after"] = row.name
        if gone:  # nothing left to ask
            out["summary"] = summarize(out)
            out["wall_s"] = round(time.perf_counter() - t_all, 1)
            return out
        out["abandoned_prompt"] = await abandoned_prompt(client, url, ctx, cfg)
        ok = await post_body(client, url + GENERATE, {"text": "Hello", "sampling_params": {"max_new_tokens": 4}}, 30)
        out["after"] = {"status": ok.status, "dropped": ok.dropped, "seconds": round(ok.seconds, 3)}
    out["summary"] = summarize(out)
    out["wall_s"] = round(time.perf_counter() - t_all, 1)
    return out


async def abandoned_prompt(client, url: str, ctx: int, cfg: TableConfig) -> dict:
    """A long prompt whose client leaves after `abandon_after_s`, then a 4-token request: how long it waits
    (work left running by the server shows here). Bounded: abandon_after_s + 25 s."""
    from kit.measure.client import post_body

    n = max(1, min(cfg.abandoned_prompt_tokens, ctx - 64))
    long = {"input_ids": [7 + i % 90 for i in range(n)], "sampling_params": {"max_new_tokens": min(64, ctx - n)}}
    gone = await post_body(client, url + GENERATE, long, cfg.abandon_after_s)
    nxt = await post_body(client, url + GENERATE, {"text": "Hello", "sampling_params": {"max_new_tokens": 4}}, 25)
    return {
        "prompt_tokens": n,
        "abandoned_after_s": cfg.abandon_after_s,
        "long_prompt_finished_first": gone.status,  # a status: the server answered before the client left
        "next_request_status": nxt.status,
        "next_request_dropped": nxt.dropped,
        "next_request_timed_out": nxt.timed_out,
        "next_request_s": round(nxt.seconds, 3),
    }


def summarize(doc: dict) -> dict:
    rows = [r for r in doc["rows"] if "skipped" not in r]
    by: dict[str, int] = {}
    for r in rows:
        k = "dropped" if r["dropped"] else "timeout" if r["timed_out"] else str(r["status"])
        by[k] = by.get(k, 0) + 1
    return {
        "rows": len(doc["rows"]),
        "sent": len(rows),
        "skipped": len(doc["rows"]) - len(rows),
        "by_status": dict(sorted(by.items())),
        "5xx": [r["name"] for r in rows if (r["status"] or 0) >= 500],
        "dropped": [r["name"] for r in rows if r["dropped"]],
        "timed_out": [r["name"] for r in rows if r["timed_out"]],
        "stream_errors_in_200": [r["name"] for r in rows if r.get("stream_error")],
        "not_as_reference": [r["name"] for r in rows if r["status"] != r["expect_reference"]],
        "answers_after": doc.get("after", {}).get("status") == 200,
        "server_gone_after": doc.get("server_gone_after"),
    }


# ---------------------------------------------------------------------------------------------
# two runs lined up
# ---------------------------------------------------------------------------------------------
def _code(r: dict | None) -> str:
    if r is None:
        return "(no row)"
    if r.get("skipped"):
        return "skipped"
    if r.get("dropped"):
        return "dropped"
    if r.get("timed_out"):
        return "timeout"
    return f"{r['status']} (stream error)" if r.get("stream_error") else str(r["status"])


def _msg(r: dict | None) -> str:
    m = (r or {}).get("message") or (r or {}).get("stream_error") or ""
    return m.replace("|", "\\|")[:160]


def compare(a: dict, b: dict, a_name: str = "reference", b_name: str = "sglang") -> str:
    """Markdown: per row where the two runs differ in code (or, both refusing, in message), both answers."""
    rows_a = {r["name"]: r for r in a["rows"]}
    rows_b = {r["name"]: r for r in b["rows"]}
    names = list(rows_a) + [n for n in rows_b if n not in rows_a]
    same_code = diff_msg = 0
    lines = [
        f"| row | {a_name} | {b_name} | {a_name} message | {b_name} message |",
        "|---|---|---|---|---|",
    ]
    for n in names:
        ra, rb = rows_a.get(n), rows_b.get(n)
        ca, cb = _code(ra), _code(rb)
        if ca == cb:
            same_code += 1
            if _msg(ra) == _msg(rb):
                continue
            diff_msg += 1
        lines.append(f"| {n} | {ca} | {cb} | {_msg(ra)} | {_msg(rb)} |")
    head = (
        f"{len(names)} rows: {same_code} with the same code ({diff_msg} of them with different words), "
        f"{len(names) - same_code} with different codes."
    )
    return "\n".join([head, "", *lines]) + "\n"
