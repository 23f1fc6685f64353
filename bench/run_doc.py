"""One GPU bench run's JSON document on disk: what it measured so far, its errors and its clock.

Why: a bench on a GPU host can be stopped at any point (its own limit, a lost machine); what it measured up to
then must be on disk as whole JSON, and each error must say in which phase it happened. One class serves
bench/gpu_server_oracle.py, bench/gpu_capture_miniature.py and bench/gpu_breakeven.py.

    run = RunDoc(Path("out"), "summary.json", timeout_s=300)
    run.doc["measured"] = {...}; run.error("server", exc); run.save()   # out/summary.json, whole, every time
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class RunDoc:
    """`doc` (with an `errors` list), written to out/name by `save`; `left` is what remains of `timeout_s`."""

    def __init__(self, out: Path, name: str, doc: dict | None = None, timeout_s: float | None = None, echo: str = ""):
        self.out, self.name, self.timeout_s, self.echo = Path(out), name, timeout_s, echo
        self.t0 = time.monotonic()
        self.lock = threading.Lock()  # phases run in threads write the document under it
        self.doc = doc if doc is not None else {}
        self.doc.setdefault("errors", [])

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def left(self, reserve: float = 5.0) -> float:
        """Seconds a phase may still take (at least 1), `reserve` kept for writing up."""
        if self.timeout_s is None:
            raise ValueError(f"{self.name}: this run has no time limit")
        return max(1.0, self.timeout_s - (time.monotonic() - self.t0) - reserve)

    def error(self, where: str, e: BaseException | str) -> None:
        """An error of phase `where`: the exception's type and message (the tail, where a traceback ends)."""
        text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
        with self.lock:
            self.doc["errors"].append({"where": where, "error": str(text)[-1500:], "t": self.elapsed()})
        if self.echo:
            print(f"{self.echo}: {where}: {str(text)[-300:]}", flush=True)

    def save(self) -> None:
        """The document, whole: written beside its place, then moved there."""
        self.doc["wall_s"] = self.elapsed()
        tmp = self.out / (self.name + ".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        tmp.replace(self.out / self.name)
