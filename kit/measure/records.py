"""The per-request record of a benchmark: one `RequestRecord` per request, typed, as `kit.measure.client.send_one`
builds it, `kit.measure.bench` tags and writes it and `kit.measure.metrics` scores it.

A record is one line of a run's `records.jsonl`. `to_dict` is what is written (the fields in declaration order,
the optional ones only when set), so files written before the record was typed and after it are the same;
`from_dict` reads any such line back, ignoring keys it does not know and defaulting the ones it lacks.

What a request's own figures mean is stated here once: `output_tokens` (which count wins) and `accept_length`
(tokens per verify step of this one request); how the figures of many requests are pooled is
`kit.measure.metrics.Acceptance`.

    rec = RequestRecord(api="sglang", ok=True, completion_tokens=12, spec={"verify_ct": 5})
    rec.accept_length                                   # 2.4
    RequestRecord.from_dict(json.loads(line)).to_dict() == json.loads(line)   # for a line the kit wrote
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request of a benchmark: timings, token counts, the server's speculative fields, and its tags."""

    # written by kit.measure.client.send_one
    api: str = ""  # the endpoint it spoke: "sglang" (the engine's native /generate), "completions" or "chat"
    t_start: float = 0.0  # unix seconds when it was sent
    ok: bool = False  # an answer came back complete; a failed request keeps `error` and counts nowhere else
    error: str | None = None  # "ExceptionType: message" (500 characters at most)
    ttft: float | None = None  # seconds from send to the first chunk that carried a token (streams only)
    chunk_t: list[float] = field(default_factory=list)  # arrival of every token-carrying chunk, s after send
    chunk_tok: list[int] = field(default_factory=list)  # tokens in each of those chunks (exact for /generate)
    completion_tokens: int | None = None  # the server's count of generated tokens, when it sends one
    prompt_tokens: int | None = None  # the server's count of prompt tokens, when it sends one
    client_tokens: int = 0  # tokens counted here: the sum of chunk_tok (OpenAI streams: content chunks)
    spec: dict[str, Any] = field(default_factory=dict)  # speculative fields, kit.serving.engines.base.SPEC_KEYS
    finish_reason: str | None = None  # "stop", "length", ...
    output_ids: list[int] | None = None  # generated token ids (native API, unstreamed, when the server sends them)
    e2e: float = 0.0  # seconds from send to the end of the answer (or of the failure)
    # tags kit.measure.bench adds: the arm, its repeat and session, the request id (the resume key)
    label: str | None = None
    repeat: int | None = None
    session: str | None = None
    warmup: bool = False  # a warmup request: written, excluded from every total
    rid: str | None = None
    kind: str | None = None  # the prompt's kind: chat, code, math, user

    @property
    def output_tokens(self) -> int:
        """Tokens this request generated: the server's count when it sent one, else the client's."""
        return int(self.completion_tokens if self.completion_tokens is not None else self.client_tokens or 0)

    @property
    def verify_ct(self) -> int | None:
        """Target verify steps the server reports for this request (None: no speculative fields)."""
        return self.spec.get("verify_ct") or None

    @property
    def accept_length(self) -> float | None:
        """This request's accept length: output tokens per verify step, the bonus token and the first token
        (from prefill) included, SGLang's definition. None without verify steps."""
        v = self.verify_ct
        return self.output_tokens / v if v else None

    def to_dict(self) -> dict[str, Any]:
        """The line written to records.jsonl: every field in order, `output_ids` and `warmup` only when set."""
        out = dict(zip(_FIELDS, _VALUES(self)))
        if self.output_ids is None:
            del out["output_ids"]
        if not self.warmup:
            del out["warmup"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        """A record from one records.jsonl line (any kit version): unknown keys ignored, missing ones defaulted."""
        kw = {k: v for k, v in d.items() if k in _FIELD_SET}
        for k in ("chunk_t", "chunk_tok", "spec"):  # null in a hand-written line: empty
            if k in kw and kw[k] is None:
                del kw[k]
        return cls(**kw)


_FIELDS = tuple(f.name for f in fields(RequestRecord))
_FIELD_SET = frozenset(_FIELDS)
_VALUES = attrgetter(*_FIELDS)  # every field's value at once, in order (one call per written record)
