"""The run-and-record helper every bench script shares: a command run to its end and timed, and a run's JSON
document kept whole on disk.

Why: a bench is read from its JSON (the line it prints last, or the file it keeps). A bench on a GPU host can stop
at any point (its own time limit, a failed phase); what it measured until then must be on disk as whole JSON, and
each error must say in which phase it happened.

    t = run_timed([sys.executable, "-m", "kit", "inspect", d, "--json"], stdout=Path("kit.out"), ok=(0, 1))
    t.seconds, t.peak_rss_mb, t.returncode, t.stderr
    rec = Record(Path("out"), "summary.json", timeout_s=300)
    rec.doc["measured"] = {...}; rec.error("server", exc); rec.save()   # out/summary.json, whole, every time
    emit(doc)                                                           # the JSON line a bench prints last
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path


def emit(doc) -> None:
    """The bench's result: one JSON document on one line of stdout (the last a reader takes)."""
    print(json.dumps(doc, default=str), flush=True)


def write_json(path: Path, doc, indent: int | None = 1) -> Path:
    """`doc` written whole: beside its place first, then moved there (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=indent, default=str) + "\n")
    tmp.replace(path)
    return path


def load_avg() -> list[float]:
    """This machine's 1, 5 and 15-minute load averages (other work on a shared machine shows here)."""
    return [round(x, 2) for x in os.getloadavg()]


@dataclass
class Timed:
    """One command run to its end: wall seconds, the process's peak RSS (MiB), exit status, its output."""

    argv: list[str]
    seconds: float
    peak_rss_mb: float
    returncode: int
    stdout: str  # "" when it went to a file
    stderr: str


def run_timed(
    argv: Sequence,
    *,
    stdout: Path | None = None,
    env: dict | None = None,
    cwd: Path | str | None = None,
    sync: bool = False,
    ok: Container[int] | None = (0,),
    interrupt_after: float | None = None,
) -> Timed:
    """Run `argv` as a fresh process to its end. The time includes the interpreter's start (and, with `sync`, the
    wait for its bytes to reach the disk); the peak RSS is the child's own (wait4's rusage). Its stdout goes to
    `stdout` when given, else it is kept; RuntimeError naming the command when its exit status is not in `ok`
    (None: any status). `interrupt_after` seconds: the process gets SIGINT then (a kit verb stops its servers and
    keeps what it measured), and the time is what it ran."""
    argv = [str(a) for a in argv]
    with tempfile.TemporaryFile() as err, open(stdout, "wb") if stdout else tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd)
        timer = threading.Timer(interrupt_after or 0, p.send_signal, [signal.SIGINT])
        if interrupt_after:
            timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        timer.cancel()
        if sync:
            os.sync()
        seconds = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text_err = err.read().decode(errors="replace")
        text_out = ""
        if not stdout:
            out.seek(0)
            text_out = out.read().decode(errors="replace")
    t = Timed(argv, seconds, usage.ru_maxrss / 1024, p.returncode, text_out, text_err)
    if ok is not None and t.returncode not in ok:
        raise RuntimeError(f"{shlex.join(argv)} exited {t.returncode}: {text_err[-500:]}")
    return t


class Record:
    """A run's document: `doc` (with an `errors` list), written whole to out/name by `save`; `left` is what
    remains of `timeout_s`. Phases run in threads write the document under `lock`."""

    def __init__(self, out: Path, name: str, doc: dict | None = None, timeout_s: float | None = None, echo: str = ""):
        self.out, self.name, self.timeout_s, self.echo = Path(out), name, timeout_s, echo
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
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
        """The document as it stands, with the run's wall time so far."""
        self.doc["wall_s"] = self.elapsed()
        write_json(self.out / self.name, self.doc)
