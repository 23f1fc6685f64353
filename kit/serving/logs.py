"""Server logs into rows: each serving engine's parser (`kit.serving.engines`), one row schema (COLUMNS).

A serving engine's `parse_log_line` turns one line into a row (kind = decode/prefill/ready/load_warning/arch_error/
error/...; SGLang's formats per release: `kit.sglang.log_format`). This module is engine-neutral: files and texts
into frames, headline numbers, and a thread-safe watcher for a running server.

    df = parse_log("server.log")            # pandas DataFrame, one row per recognised line
    w = LogWatcher(); ServerProcess(..., on_line=w)   # w.frame(), w.ready, w.summary()
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from kit.serving.engines import get_engine

COLUMNS = (
    "line_no time rank kind running_req tokens token_usage accept_len accept_rate graph graph_device gen_throughput "
    "queue_req new_token message"
).split()


def parse_lines(lines: Iterable[str], engine: str = "sglang") -> list[dict]:
    parse = get_engine(engine).parse_log_line
    return [{**r, "line_no": i} for i, line in enumerate(lines) if (r := parse(line)) is not None]


def to_frame(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows, columns=COLUMNS)


def parse_log(source: str | Path | Iterable[str], engine: str = "sglang"):
    """A log file path, a whole log text, or an iterable of lines -> DataFrame (COLUMNS)."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and Path(source).is_file()):
        source = Path(source).read_text(errors="replace")
    return to_frame(parse_lines(source.splitlines() if isinstance(source, str) else source, engine))


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

    def __init__(self, echo: bool = False, keep_lines: int = 5000, engine: str = "sglang"):
        self.parse = get_engine(engine).parse_log_line
        self.rows: list[dict] = []
        self.lines: list[str] = []
        self.echo, self.keep, self._lock = echo, keep_lines, threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            del self.lines[: max(0, len(self.lines) - self.keep)]
            r = self.parse(line)
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
