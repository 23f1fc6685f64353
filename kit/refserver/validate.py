"""Request bodies of the reference server -> typed, validated requests, or one KitInputError naming the field.

Every check a `/generate`, `/v1/completions` or `/v1/chat/completions` body goes through lives here, before
any work is queued: types, an empty prompt, token ids outside the vocabulary, sampling values outside
SGLang's ranges (`SamplingParams.verify`, in its words), unknown chat roles, and admission by context
(SGLang's `TokenizerManager._validate_one_request`: a prompt as long as the context, or a prompt plus
`max_new_tokens` beyond it, is refused with SGLang's message). The words, chat roles and stop-string limit are
SGLang's facts, read from `kit.sglang.http_api`. kit.refserver.server answers every KitInputError with a 400
carrying the message, so the KV cache a request will need (prompt + max_new_tokens) is bounded by the context
before it is admitted.

    limits = Limits(context_length=8192, vocab_size=49152, default_max_tokens=256)
    req = generate_request({"text": "Hi", "sampling_params": {"max_new_tokens": 8}}, tok, limits)
    req.prompts, req.max_new_tokens                      # [[...ids]], 8

A list `text` / `input_ids` in /generate and a list `prompt` in /v1/completions is a batch (SGLang's
`GenerateReqInput.normalize_batch_and_arguments`): `prompts` holds one entry per prompt, `None` for an empty
token list inside a batch (SGLang admits it and sends it on; the reference server answers that entry aborted).
Booleans of the OpenAI bodies and /generate's `stream` take pydantic's coercion ("yes" is true); /generate's
`sampling_params.ignore_eos` is Python truthiness (SGLang's SamplingParams keeps the raw value). A check SGLang's
TokenizerManager makes (empty or missing prompt, sampling ranges, context) raises RequestRefused, which a
streamed /generate answers inside its 200 stream (kit.refserver.server maps it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kit.findings import KitInputError
from kit.sglang.http_api import REQUEST_ERRORS as WORDS


@dataclass(frozen=True)
class Limits:
    context_length: int  # most tokens per request, prompt + output
    vocab_size: int
    default_max_tokens: int = 256  # /generate and chat without max tokens: this, or what the context leaves
    chat_roles: tuple[str, ...] = ("user", "system", "assistant")  # the served release's (kit.sglang.http_api)
    max_stop_strings: int | None = None  # None: no limit


class RequestRefused(KitInputError):
    """A body that parsed, refused by a check SGLang makes in its TokenizerManager (a ValueError there: an empty
    or missing prompt, a sampling value out of range, the context checks). `in_stream`: the body asked /generate
    to stream, and SGLang then refuses after its 200, as one SSE error event (srt/entrypoints/http_server.py,
    `generate_request.stream_results`)."""

    in_stream: bool = False


@dataclass
class GenRequest:
    """One validated generation request (several prompts for a batched /generate)."""

    prompts: list[list[int] | None]  # None: an empty token list inside a batch (answered aborted)
    max_new_tokens: int
    batch: bool = False
    stream: bool = False
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    temperature: float = 0.0
    rid: str | None = None
    # the OpenAI endpoints
    model: str | None = None
    include_usage: bool = False
    return_spec_tokens_details: bool = False


def _bad(name: str, problem: str) -> KitInputError:
    return KitInputError(f"{name}: {problem}")


def _refused(name: str, problem: str) -> RequestRefused:
    return RequestRefused(f"{name}: {problem}")


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(v: Any, name: str) -> int | None:
    if v is None:
        return None
    if _is_int(v):
        return v
    if isinstance(v, float) and v.is_integer():  # 16.0, as JSON clients sometimes send it
        return int(v)
    raise _bad(name, f"must be an integer, got {_show(v)}")


def _num(v: Any, name: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _bad(name, f"must be a number, got {_show(v)}")
    return float(v)


# pydantic's lax bool (what SGLang's request models apply): these strings (any case), 0/1 and 0.0/1.0
_TRUE, _FALSE = {"1", "on", "t", "true", "y", "yes"}, {"0", "off", "f", "false", "n", "no"}


def _bool(v: Any, name: str) -> bool:
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, str) and v.lower() in _TRUE | _FALSE:
        return v.lower() in _TRUE
    if isinstance(v, int | float) and v in (0, 1):
        return bool(v)
    raise _bad(name, f"must be true or false, got {_show(v)}")


def _obj(v: Any, name: str) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _bad(name, f"must be an object, got {_show(v)}")
    return v


def token_ids(v: Any, name: str, vocab_size: int) -> list[int]:
    """A non-empty list of token ids inside the vocabulary."""
    if not isinstance(v, list):
        raise _bad(name, f"must be a list of token ids, got {_show(v)}")
    if not v:
        raise _refused(name, WORDS["empty_input_ids"])
    for t in v:
        if not _is_int(t):
            raise _bad(name, f"must be a list of token ids (integers), got {_show(t)}")
        if not 0 <= t < vocab_size:
            raise _bad(name, WORDS["out_of_vocab"].format(t=t, vocab=vocab_size))
    return list(v)


def _encode(tok, text: Any, name: str) -> list[int]:
    if not isinstance(text, str):
        raise _bad(name, f"must be a string, got {_show(text)}")
    ids = tok.encode(text)
    if not ids:
        raise _refused(name, "empty prompt: give at least one input token")
    return ids


def _stops(v: Any, name: str, most: int | None) -> list[str]:
    if v is None:
        return []
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _bad(name, f"must be a string or a list of strings, got {_show(v)}")
    if most is not None and len(stops) > most:
        raise _bad(name, WORDS["stop_count"].format(most=most, n=len(stops)))
    return [s for s in stops if s]


def _sampling(sp: dict, prefix: str) -> float:
    """SGLang's SamplingParams.verify ranges (greedy only here: the values are checked, then ignored)."""

    def num(key):
        return _num(sp.get(key), prefix + key)

    t = num("temperature")
    if t is not None and (not math.isfinite(t) or t < 0.0):
        raise _refused(prefix + "temperature", WORDS["temperature"].format(v=t))
    p = num("top_p")
    if p is not None and not 0.0 < p <= 1.0:
        raise _refused(prefix + "top_p", WORDS["top_p"].format(v=p))
    m = num("min_p")
    if m is not None and not 0.0 <= m <= 1.0:
        raise _refused(prefix + "min_p", WORDS["min_p"].format(v=m))
    k = _int(sp.get("top_k"), prefix + "top_k")
    if k is not None and k < 1 and k != -1:
        raise _refused(prefix + "top_k", WORDS["top_k"].format(v=k))
    for key in ("frequency_penalty", "presence_penalty"):
        v = num(key)
        if v is not None and not -2.0 <= v <= 2.0:
            raise _refused(prefix + key, WORDS["penalty"].format(key=key, v=v))
    r = num("repetition_penalty")
    if r is not None and not 0.0 < r <= 2.0:
        raise _refused(prefix + "repetition_penalty", WORDS["repetition_penalty"].format(v=r))
    return t or 0.0


def _max_new(v: Any, name: str) -> int | None:
    n = _int(v, name)
    if n is not None and n < 0:
        raise _refused(name, WORDS["max_new_tokens"].format(v=n))
    return n


def admit(prompts: list[list[int]], max_new_tokens: int | None, limits: Limits, name: str, n_name: str) -> int:
    """SGLang's context checks, in its words; returns max_new_tokens (unset: the default the context leaves)."""
    ctx = limits.context_length
    longest = max(len(p) for p in prompts)
    if longest >= ctx:
        raise _refused(name, WORDS["input_too_long"].format(n=longest, ctx=ctx))
    if max_new_tokens is None:
        return min(limits.default_max_tokens, ctx - longest)
    if max_new_tokens + longest > ctx:
        raise _refused(
            n_name, WORDS["over_context"].format(ctx=ctx, total=max_new_tokens + longest, n=longest, new=max_new_tokens)
        )
    return max_new_tokens


def _generate_prompts(body: dict, tok, vocab_size: int) -> tuple[list[list[int] | None], bool, str]:
    """(prompts, batch, the field they came from) of a /generate body, as SGLang's
    GenerateReqInput._determine_batch_size reads them: a list `text`, or `input_ids` whose first item is a list,
    is a batch (`{"text": []}` a batch of none). An empty token list inside a batch passes SGLang's checks
    (TokenizerManager._validate_one_request counts 0 tokens): None here."""
    if body.get("input_ids") is not None:
        ids = body["input_ids"]
        if isinstance(ids, list) and not ids:
            raise _refused("input_ids", WORDS["empty_input_ids"])
        batch = isinstance(ids, list) and isinstance(ids[0], list)
        if not batch:
            return [token_ids(ids, "input_ids", vocab_size)], False, "input_ids"
        return [token_ids(r, "input_ids", vocab_size) if r else None for r in ids], True, "input_ids"
    if body.get("text") is not None:
        text = body["text"]
        if not isinstance(text, list):
            return [_encode(tok, text, "text")], False, "text"
        return [_encode(tok, t, "text") for t in text], True, "text"
    raise _refused("text", WORDS["no_prompt"])


def generate_request(body: dict, tok, limits: Limits) -> GenRequest:
    """A native `/generate` body (text | input_ids, sampling_params, stream, rid). The body's types are
    checked first (SGLang's pydantic parse: a 400 before any stream), then what SGLang's TokenizerManager
    checks (RequestRefused, `in_stream` when the body asked to stream)."""
    stream = _bool(body.get("stream"), "stream")
    sp = _obj(body.get("sampling_params"), "sampling_params")
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise _bad("rid", f"must be a string, got {_show(rid)}")
    try:
        prompts, batch, name = _generate_prompts(body, tok, limits.vocab_size)
        temperature = _sampling(sp, "sampling_params.")
        n = _max_new(sp.get("max_new_tokens"), "sampling_params.max_new_tokens")
        admitted = [p for p in prompts if p is not None]
        max_new = admit(admitted, n, limits, name, "sampling_params.max_new_tokens") if admitted else 0
    except RequestRefused as e:
        e.in_stream = stream
        raise
    return GenRequest(
        prompts=prompts,
        max_new_tokens=max_new,
        batch=batch,
        stream=stream,
        stop=_stops(sp.get("stop"), "sampling_params.stop", limits.max_stop_strings),
        stop_token_ids=_stop_token_ids(sp.get("stop_token_ids"), "sampling_params.stop_token_ids"),
        # SGLang's SamplingParams keeps the raw value and tests its truth (schedule_batch: `if ...ignore_eos`)
        ignore_eos=bool(sp.get("ignore_eos")),
        temperature=temperature,
        rid=rid,
    )


def _stop_token_ids(v: Any, name: str) -> list[int]:
    """Integers, any value: SGLang keeps them as a set the sampled token is looked up in
    (SamplingParams.__post_init__, schedule_batch `token_id in stop_token_ids`), so one outside the vocabulary
    never matches and is no error."""
    if not v:
        return []
    if not isinstance(v, list) or not all(_is_int(t) for t in v):
        raise _bad(name, f"must be a list of token ids (integers), got {_show(v)}")
    return list(v)


def _chat_ids(messages: Any, tok, roles: tuple[str, ...]) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of messages")
    msgs = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, f"must be an object with role and content, got {_show(m)}")
        role = m.get("role")
        if role not in roles:
            raise _bad(f"{where}.role", f"unknown role {_show(role)}; expected one of {', '.join(roles)}")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: the text ones
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise _bad(f"{where}.content[{j}]", "the reference server takes text parts only")
                parts.append(part["text"])
            content = "".join(parts)
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise _bad(f"{where}.content", f"must be a string or a list of text parts, got {_show(content)}")
        msgs.append({"role": role, "content": content})
    try:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # a template that raises on these messages (its own rules on roles/order)
        raise _bad("messages", f"the chat template refused them: {str(e).splitlines()[0] if str(e) else e!r}")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise _bad("messages", "empty prompt: give at least one input token")
    return ids


def openai_request(body: dict, tok, limits: Limits, chat: bool) -> GenRequest:
    """A `/v1/completions` (prompt) or `/v1/chat/completions` (messages) body."""
    batch = False
    if chat:
        prompts = [_chat_ids(body.get("messages"), tok, limits.chat_roles)]
        name = "messages"
    else:
        name = "prompt"
        prompt = body.get("prompt")
        if prompt is None:
            raise _bad("prompt", "field required")
        # a list of strings or of token lists is a batch: one choice per prompt (serving_completions
        # _build_completion_response: `index=idx` over the batch's results)
        batch = isinstance(prompt, list) and bool(prompt) and not _is_int(prompt[0])
        rows = prompt if batch else [prompt]
        prompts = [
            token_ids(p, name, limits.vocab_size) if isinstance(p, list) else _encode(tok, p, name) for p in rows
        ]
    longest = max(len(p) for p in prompts)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    n = _max_new(body.get(key), key)
    if n is None and not chat:
        n = min(16, limits.context_length - longest)  # the OpenAI default of /v1/completions
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("model", f"must be a string, got {_show(model)}")
    opts = _obj(body.get("stream_options"), "stream_options")
    return GenRequest(
        prompts=prompts,
        max_new_tokens=admit(prompts, n, limits, name, key),
        batch=batch,
        stream=_bool(body.get("stream"), "stream"),
        stop=_stops(body.get("stop"), "stop", limits.max_stop_strings),
        stop_token_ids=_stop_token_ids(body.get("stop_token_ids"), "stop_token_ids"),
        ignore_eos=_bool(body.get("ignore_eos"), "ignore_eos"),
        temperature=_sampling(body, ""),
        model=model,
        include_usage=_bool(opts.get("include_usage"), "stream_options.include_usage"),
        return_spec_tokens_details=_bool(body.get("return_spec_tokens_details"), "return_spec_tokens_details"),
    )
