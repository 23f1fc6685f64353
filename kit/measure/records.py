"""The records of a benchmark, typed: one `RequestRecord` per request (`kit.measure.client.send_one` builds it,
`kit.measure.bench` tags and writes it, `kit.measure.metrics` scores it) and one `RunRecord` per arm x repeat x
session (what the server said around those requests: its snapshots, its log).

A record is one line of a run's `records.jsonl` (`runs.jsonl`): `to_dict` writes the fields in order, the
optional ones only when set, and `from_dict` reads any kit version's line back (unknown keys ignored, missing
ones defaulted). What a request's own `output_tokens` and `accept_length` mean is stated here once; how many
requests' figures are pooled is `kit.measure.metrics.Acceptance`.

    rec = RequestRecord(api="sglang", ok=True, completion_tokens=12, spec={"verify_ct": 5})
    rec.accept_length                                   # 2.4
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Self


class JsonRecord:
    """A slots dataclass written as one JSON object (a JSONL line, a summary entry); the fields named in
    `_UNSET_OMITTED` are left out while they hold their default."""

    __slots__ = ()
    _UNSET_OMITTED: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        names, _, values, omitted = _layout(type(self))
        return {k: v for k, v in zip(names, values(self)) if k not in omitted or v != omitted[k]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """A record from any kit version's line: unknown keys ignored, missing defaulted, a null list/dict empty."""
        known = _layout(cls)[1]
        kw = d if known.issuperset(d) else {k: v for k, v in d.items() if k in known}
        if any(kw.get(k, ()) is None for k in _EMPTY_WHEN_NULL):
            kw = {k: v for k, v in kw.items() if not (v is None and k in _EMPTY_WHEN_NULL)}
        return cls(**kw)


_EMPTY_WHEN_NULL = frozenset({"chunk_t", "chunk_tok", "spec"})


@functools.cache
def _layout(cls) -> tuple[tuple[str, ...], frozenset[str], Any, dict[str, Any]]:
    """(field names in order, as a set, a getter of all their values at once, {omitted-while-unset field: default})."""
    fs = fields(cls)
    names = tuple(f.name for f in fs)
    omitted = {f.name: f.default for f in fs if f.name in cls._UNSET_OMITTED}
    return names, frozenset(names), attrgetter(*names), omitted


@dataclass(slots=True)
class RequestRecord(JsonRecord):
    """One request of a benchmark: timings, token counts, the server's speculative fields, and its tags."""

    _UNSET_OMITTED = ("output_ids", "warmup")

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


@dataclass(slots=True)
class RunRecord(JsonRecord):
    """One arm x repeat x session of a benchmark (a line of runs.jsonl): the server around its requests."""

    _UNSET_OMITTED = ("log_accept_lengths",)

    label: str | None = None  # the arm
    repeat: int | None = None
    session: str | None = None  # the requests of this session carry the same `session`
    url: str | None = None  # the server's base URL
    api: str | None = None  # the endpoint the requests spoke (RequestRecord.api)
    model: str | None = None  # the model name sent to OpenAI endpoints (the server's first, unless given)
    t_start: float = 0.0  # unix seconds: after warmup and the cache flush, before the first measured request
    t_end: float = 0.0  # unix seconds: after the last measured request
    requests: int = 0  # measured requests sent in this session
    resumed: bool = False  # the session continued a run that already had requests of this arm and repeat
    flushed: bool = False  # the server's cache was flushed after warmup
    sglang: bool = False  # the engine's server info answered (its speculative fields were asked for)
    engine: str | None = None  # the engine that reads the snapshots (kit.serving.engines; None: SGLang)
    metrics_before: dict[str, float] | None = None  # /metrics before the measured requests (parse_prometheus)
    metrics_after: dict[str, float] | None = None  # ... and after them
    server_info_after: dict[str, Any] | None = None  # the engine's server info after them, as it answered
    log_accept_lengths: list[float] | None = None  # accept lengths of the server log's decode lines meanwhile
