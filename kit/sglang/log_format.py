"""SGLang's server log lines, per release: decode/prefill lines, events, and the lines that end a startup.

SGLang 0.5.23 logs, every `--decode-log-interval` decode forwards (`metrics_reporter.py` `report_decode_stats`):

    [2026-05-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 88, token usage: 0.00,
        accept len: 2.35, accept rate: 0.45, cuda graph: True, gen throughput (token/s): 91.20, #queue-req: 0

Older releases (0.4.6) wrote `Decode batch. ` and no rate; other devices log `cpu graph`/`npu graph`/`musa graph`;
SGLANG_LOG_FORWARD_ITERS=1 gives `Decode batch [iter]`; a line may carry MFU suffixes. So a line is parsed as its
`key: value` pairs, one parser for every release. Also recognised: prefill lines, readiness, load warnings,
architecture errors and exception lines. A startup that fails in a child process is announced by the parent's
SIGQUIT handler ("It usually means one child failed.", tokenizer_manager.py / engine.py) after the child's
traceback, 5 s before SGLang kills its tree: `STARTUP_FAILED` matches it, so the starter reports at once.

    from kit.sglang.log_format import parse_line
    parse_line("[2026-05-01 12:00:00 TP0] Decode batch, ..., accept len: 2.35, ...")["accept_len"]
"""

from __future__ import annotations

import re

_PREFIX = re.compile(r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?P<rank>(?: [A-Z]+\d+)*)\] (?P<msg>.*)$")
_BATCH = re.compile(r"^(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?[.,] (?P<rest>.*)$")
_PAIR = re.compile(r"^(?P<key>[#A-Za-z][^:]*?): (?P<val>\S+?),?$")
KEYS = {
    "#running-req": "running_req",
    "#token": "tokens",
    "token usage": "token_usage",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "gen throughput (token/s)": "gen_throughput",
    "#queue-req": "queue_req",
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
    "cap len": "cap_len",
    "block accept len": "block_accept_len",
}
_GRAPH = re.compile(r"^(cuda|cpu|npu|musa) graph$")
EVENTS = [
    ("ready", re.compile(r"The server is fired up and ready to roll")),
    ("load_warning", re.compile(r"skipping unexpected weight|not found in params_dict|unexpected weight", re.I)),
    ("arch_error", re.compile(r"Model architectures .* (are not supported for now|failed to be inspected)")),
    ("error", re.compile(r"^(Traceback \(most recent call last\)|[A-Za-z_.]*(Error|Exception): )")),
    ("accept_summary", re.compile(r"avg_spec_accept_length=")),
]
# the parent's SIGQUIT handler after a child (scheduler, detokenizer) died: startup will not complete
STARTUP_FAILED = re.compile(r"It usually means (?:one|the) child failed")


def _num(v: str):
    if v in ("True", "False"):
        return v == "True"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def parse_line(line: str) -> dict | None:
    """One log line -> a row dict (kind = decode/prefill/ready/load_warning/arch_error/error/...), or None."""
    line = line.rstrip("\n")
    m = _PREFIX.match(line)
    time_, rank, msg = (m["time"], m["rank"].strip() or None, m["msg"]) if m else (None, None, line.strip())
    b = _BATCH.match(msg)
    kind = b["kind"].lower() if b else next((k for k, rx in EVENTS if rx.search(msg)), None)
    if kind is None:
        return None
    row = {"time": time_, "rank": rank, "kind": kind, "message": msg}
    pairs = [p for part in b["rest"].split(", ") if (p := _PAIR.match(part.strip()))] if b else []
    for p in pairs:
        key, val = p["key"].strip(), p["val"]
        if g := _GRAPH.match(key):
            row["graph"], row["graph_device"] = _num(val), g[1]
        elif key in KEYS:
            row[KEYS[key]] = _num(val)
    if kind == "accept_summary":
        row["accept_len"] = _num(msg.split("avg_spec_accept_length=", 1)[1].split()[0])
    return row
