"""Parse SGLang server logs (and the reference server's, which prints the same lines) into rows.

SGLang 0.5.23 logs, every `--decode-log-interval` decode forwards (`metrics_reporter.py`
`report_decode_stats`):

    [2026-05-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 88, token usage: 0.00,
        accept len: 2.35, accept rate: 0.45, cuda graph: True, gen throughput (token/s): 91.20, #queue-req: 0

Older releases (e.g. 0.4.6) wrote `Decode batch. ` and only `accept len: x.xx, ` (no rate);
`cuda graph` is `cpu graph`/`npu graph`/`musa graph` on other devices; `Decode batch [iter]`
with SGLANG_LOG_FORWARD_ITERS=1; the line may end without a comma or carry MFU suffixes. So a
line is parsed as its `key: value` pairs, not by one rigid regex. Also recognised: prefill
lines, readiness ("The server is fired up and ready to roll!"), load warnings ("skipping
unexpected weight", "not found in params_dict"), architecture errors ("Model architectures
[...] are not supported for now") and exception lines.

    from kit.serving.logs import parse_log, LogWatcher
    df = parse_log("server.log")            # pandas DataFrame, one row per recognised line
    w = LogWatcher(); ServerProcess(..., on_line=w)   # w.frame(), w.ready, w.accept_len()
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from pathlib import Path

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
COLUMNS = [
    "line_no",
    "time",
    "rank",
    "kind",
    "running_req",
    "tokens",
    "token_usage",
    "accept_len",
    "accept_rate",
    "graph",
    "graph_device",
    "gen_throughput",
    "queue_req",
    "new_token",
    "message",
]


def _num(v: str):
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def parse_line(line: str) -> dict | None:
    """One log line -> a row dict (kind = decode/prefill/ready/load_warning/arch_error/error/...), or None."""
    line = line.rstrip("\n")
    m = _PREFIX.match(line)
    time_, rank, msg = (m["time"], m["rank"].strip() or None, m["msg"]) if m else (None, None, line.strip())
    b = _BATCH.match(msg)
    if b:
        row = {"time": time_, "rank": rank, "kind": b["kind"].lower(), "message": msg}
        for part in b["rest"].split(", "):
            p = _PAIR.match(part.strip())
            if not p:
                continue
            key, val = p["key"].strip(), p["val"]
            g = _GRAPH.match(key)
            if g:
                row["graph"], row["graph_device"] = _num(val), g[1]
            elif key in KEYS:
                row[KEYS[key]] = _num(val)
        return row
    for kind, rx in EVENTS:
        if rx.search(msg):
            row = {"time": time_, "rank": rank, "kind": kind, "message": msg}
            if kind == "accept_summary":
                row["accept_len"] = _num(msg.split("avg_spec_accept_length=", 1)[1].split()[0])
            return row
    return None


def parse_lines(lines: Iterable[str]) -> list[dict]:
    rows = []
    for i, line in enumerate(lines):
        r = parse_line(line)
        if r is not None:
            r["line_no"] = i
            rows.append(r)
    return rows


def to_frame(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows, columns=COLUMNS)


def parse_log(source: str | Path | Iterable[str]):
    """A log file path, a whole log text, or an iterable of lines -> DataFrame (COLUMNS)."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and Path(source).is_file()):
        lines = Path(source).read_text(errors="replace").splitlines()
    elif isinstance(source, str):
        lines = source.splitlines()
    else:
        lines = list(source)
    return to_frame(parse_lines(lines))


def summarize(rows: list[dict]) -> dict:
    """Headline numbers: decode lines, mean accept len/rate over them, last throughput, readiness."""
    dec = [r for r in rows if r["kind"] == "decode"]
    al = [r["accept_len"] for r in dec if isinstance(r.get("accept_len"), (int, float))]
    ar = [r["accept_rate"] for r in dec if isinstance(r.get("accept_rate"), (int, float))]
    tp = [r["gen_throughput"] for r in dec if isinstance(r.get("gen_throughput"), (int, float))]
    return {
        "decode_lines": len(dec),
        "accept_len_mean": sum(al) / len(al) if al else None,
        "accept_rate_mean": sum(ar) / len(ar) if ar else None,
        "gen_throughput_last": tp[-1] if tp else None,
        "ready": any(r["kind"] == "ready" for r in rows),
        "load_warnings": sum(r["kind"] == "load_warning" for r in rows),
        "errors": sum(r["kind"] in ("error", "arch_error") for r in rows),
    }


class LogWatcher:
    """A `ServerProcess(on_line=...)` callback that keeps parsed rows (thread-safe) and echoes lines."""

    def __init__(self, echo: bool = False, keep_lines: int = 5000):
        self.rows: list[dict] = []
        self.lines: list[str] = []
        self.echo, self.keep = echo, keep_lines
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            if len(self.lines) > self.keep:
                del self.lines[: len(self.lines) - self.keep]
            r = parse_line(line)
            if r is not None:
                r["line_no"] = len(self.rows)
                self.rows.append(r)
        if self.echo:
            print(line, flush=True)

    @property
    def ready(self) -> bool:
        return any(r["kind"] == "ready" for r in self.rows)

    def summary(self) -> dict:
        with self._lock:
            return summarize(list(self.rows))

    def frame(self):
        with self._lock:
            return to_frame(list(self.rows))
