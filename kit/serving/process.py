"""Server process lifecycle: start in its own process group, stream the log, wait for readiness, stop.

    with ServerProcess(argv, env=env, port=30000, log_file="server.log", on_line=print) as srv:
        info = srv.wait_ready(timeout=600)     # the engine's ready path, then its server info and models
        ...                                    # srv.base_url, srv.tail(20), srv.lines
        srv.catch_up()                         # the lines logged about requests that just returned
    # leaving the block: SIGTERM to the whole group, SIGKILL after `grace` seconds

No orphans: the server runs under a supervisor (`python -m kit.serving.process --supervise PPID GRACE -- argv...`)
that leads a new process group and polls its parent pid every 0.2 s (a server may be started from any thread); when
the starter is gone, even SIGKILLed, it terminates the group. It exits with the server's exit code.

The server writes straight to the log file (an unnamed temporary file without `log_file`) and a reader thread
follows it: a pipe would hold a server that logs faster than a busy starter reads. What is engine-specific (ready and
info paths, the log line that says startup failed, the stop signal and grace) is the serving engine's
(`kit.serving.engines`): a failed startup is reported with the server's own exception line as soon as it is logged.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kit.env.multigpu import MULTICAST_OFF
from kit.findings import KitInputError
from kit.serving.engines import Engine, get_engine
from kit.serving.engines.base import exception_line


class ServerExited(KitInputError):
    """The server process ended before it became ready; the message holds the exit code and log tail."""


class ServerNotReady(ServerExited):
    """The server was still starting when the wait ran out (it was stopped); `last`: the last line it logged."""

    def __init__(self, message: str, timeout: float, last: str):
        super().__init__(message)
        self.timeout, self.last = timeout, last


def port_in_use(host: str, port: int) -> bool:
    """Whether a server could not bind `port` now, bound with SO_REUSEADDR as uvicorn binds: a port whose connections
    are still in TIME_WAIT is free to a server, one with a listening socket is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1" if host in ("localhost",) else host, port))
        except OSError:
            return True
    return False


_ISSUED_PORTS: set[int] = set()
_PORT_LOCK = threading.Lock()  # several threads picking at once get different ports
# free_port draws below the kernel's ephemeral range (an outgoing connection may take one of those before the
# server binds it), SGLang's default 30000 and its neighbours left out
_PICK_FROM, _SGLANG_DEFAULTS = 20000, range(30000, 30100)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; other systems' ranges start higher (49152)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now that this process has not handed out before (servers picked one after another, or
    from several threads, each get their own), drawn at random below the ephemeral range."""
    pool = [p for p in range(_PICK_FROM, _ephemeral_low()) if p not in _SGLANG_DEFAULTS]
    with _PORT_LOCK:
        for port in random.sample(pool, min(len(pool), 200)):
            if port not in _ISSUED_PORTS and not port_in_use(host, port):
                _ISSUED_PORTS.add(port)
                return port
    while True:  # no room below the ephemeral range: the kernel's pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))  # while bound, no other caller (another thread included) is given this port
            port = s.getsockname()[1]
            if port not in _ISSUED_PORTS:
                _ISSUED_PORTS.add(port)
                return port


def http_json(url: str, api_key: str | None = None, timeout: float = 60.0, data: dict | None = None):
    """(status, parsed body or text) for GET (or POST when data is given); status 0 if unreachable."""
    req = urllib.request.Request(
        url, data=None if data is None else json.dumps(data).encode(), headers={"Content-Type": "application/json"}
    )
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return 0, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


class ServerProcess:
    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 30000,
        api_key: str | None = None,
        log_file: str | None = None,
        on_line: Callable[[str], None] | None = None,
        grace: float | None = None,
        tail_lines: int = 200,
        engine: str | Engine = "sglang",
    ):
        self.engine = get_engine(engine)
        self.argv, self.env, self.host, self.port = list(argv), dict(env or {}), host, int(port)
        self.api_key, self.log_file, self.on_line = api_key, log_file, on_line
        self.grace = self.engine.stop_grace_s if grace is None else grace
        self.ready = False
        self.startup_failure: str | None = None  # the engine's reason, read from the log before ready
        self.lines: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._log_fd: int | None = None  # the log, read at explicit offsets (pread) and sized by catch_up
        self._taken = threading.Condition()
        self._taken_pos = 0  # the log's bytes read so far, every whole line in them taken

    @classmethod
    def from_spec(cls, spec, engine: str | Engine = "sglang", **kw) -> ServerProcess:
        """A process for a `kit.serving.launch.LaunchSpec`: argv, env, host/port, api key and log file from it."""
        kw.setdefault("log_file", spec.log_file)
        eng, host, port = get_engine(engine), spec.host or "127.0.0.1", spec.port or 30000
        return cls(eng.argv(spec), env=spec.env, host=host, port=port, api_key=spec.api_key, engine=eng, **kw)

    @property
    def base_url(self) -> str:
        h = "127.0.0.1" if self.host in ("0.0.0.0", "::", "[::]") else self.host
        return f"http://{h}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    pgid = pid  # the supervisor leads its own group

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def start(self) -> ServerProcess:
        if self.proc is not None:
            raise KitInputError("server already started")
        cmd = [sys.executable, "-m", "kit.serving.process", "--supervise", str(os.getpid()), str(self.grace), "--"]
        # multicast off unless the launch itself says otherwise (kit.env.multigpu.MULTICAST_OFF)
        env = {**os.environ, **MULTICAST_OFF, **self.env, "PYTHONUNBUFFERED": "1"}
        bind_host = "0.0.0.0" if self.host in ("0.0.0.0", "::", "[::]") else self.host
        # under the port lock: a child forked while another thread's probe socket (free_port, this check) is
        # open holds a copy of it until it execs, and that thread would find its own port taken
        with _PORT_LOCK:
            if port_in_use(bind_host, self.port):
                raise KitInputError(
                    f"port {self.port} on {self.host} is already in use; stop that server "
                    f"or choose another --port (kit.serving.process.free_port() gives a free one)"
                )
            with self._open_log() as out:
                start_at = out.seek(0, os.SEEK_END)
                std = dict(stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
                self.proc = subprocess.Popen(cmd + self.argv, env=env, start_new_session=True, **std)
                self._log_fd = os.dup(out.fileno())  # ours: `out` closes here, the server keeps its own
        self._taken_pos = start_at
        self._reader = threading.Thread(target=self._follow, args=(self._log_fd, start_at), name="kit-server-log")
        self._reader.daemon = True
        self._reader.start()
        return self

    def _open_log(self):
        """The file the server writes to: `log_file`, appended to, else an unnamed temporary file (O_APPEND: every
        process the server forks writes at the end)."""
        if self.log_file:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log_file, "a+b")  # the reader reads through a copy of this descriptor
        else:
            out = tempfile.TemporaryFile()
        fcntl.fcntl(out.fileno(), fcntl.F_SETFL, fcntl.fcntl(out.fileno(), fcntl.F_GETFL) | os.O_APPEND)
        return out

    def _follow(self, fd: int, pos: int, idle_s: float = 0.01) -> None:
        """Read the log from byte `pos` as the server writes it, a line at a time, until the server has exited and
        the file is read to its end. Lines end at \\n, \\r\\n or a lone \\r (a progress bar's redraw)."""
        buf = b""
        try:
            while True:
                exited = self.proc.poll() is not None  # before the read: what it wrote before exiting is read
                chunk = os.pread(fd, 1 << 16, pos)
                if chunk:
                    pos += len(chunk)
                    buf += chunk
                    # a \r at the end may be the first half of \r\n: it waits for the next chunk
                    cut = len(buf) - 1 if buf.endswith(b"\r") else len(buf)
                    *done, rest = buf[:cut].replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
                    buf = rest + buf[cut:]
                    for raw in done:
                        self._take(raw.decode(errors="replace"))
                    self._mark_taken(pos)
                    continue
                if exited:
                    break
                time.sleep(idle_s)
            if buf.rstrip(b"\r"):  # a last line without its newline
                self._take(buf.rstrip(b"\r").decode(errors="replace"))
        finally:  # the descriptor stays open for catch_up; _join_reader closes it
            self._mark_taken(pos)

    def _mark_taken(self, pos: int) -> None:
        with self._taken:
            self._taken_pos = pos
            self._taken.notify_all()

    def _reading(self) -> bool:
        return bool(self._reader and self._reader.is_alive())

    def catch_up(self, timeout: float = 5.0) -> bool:
        """Wait until every line the server had written by now has been taken (into `lines`, through `on_line`): the
        reader polls, so a line logged before a reply may arrive after it. False when `timeout` passed."""
        if self._log_fd is None:
            return True
        end = os.fstat(self._log_fd).st_size
        with self._taken:
            return self._taken.wait_for(lambda: self._taken_pos >= end or not self._reading(), timeout=timeout)

    def _take(self, line: str) -> None:
        self.lines.append(line)
        if not self.ready and self.startup_failure is None:
            self.startup_failure = self.engine.startup_failure(line, list(self.lines))
        if self.on_line:
            with contextlib.suppress(Exception):  # a notebook callback must not stop the log reader
                self.on_line(line)

    def tail(self, n: int = 30) -> list[str]:
        return list(self.lines)[-n:]

    def wait_ready(self, timeout: float = 600.0, poll: float = 0.5) -> dict:
        """Block until the engine's ready path answers 200; return {"server_info": ..., "models": ..., "model": id}.
        ServerExited when the process ends first or the log says startup failed; ServerNotReady after `timeout`."""
        if self.proc is None:
            self.start()
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self._join_reader()
                why = self.startup_failure or exception_line(self.tail(50))
                raise ServerExited(
                    f"server exited with code {rc} before it was ready{': ' + why if why else ''}; last log lines:\n"
                    + "\n".join(self.tail(20))
                )
            if self.startup_failure is not None:
                tail = "\n".join(self.tail(20))
                self.stop()
                raise ServerExited(f"server failed to start: {self.startup_failure} (stopped); last log lines:\n{tail}")
            status, _ = http_json(self.base_url + self.engine.ready_path, self.api_key, timeout=poll + 2)
            if status == 200:
                self.ready = True
                break
            if time.monotonic() > deadline:
                lines = self.tail(20)
                self.stop()
                last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
                msg = f"server not ready after {timeout:.0f}s (stopped); last log lines:\n" + "\n".join(lines)
                raise ServerNotReady(msg, timeout, last)
            time.sleep(poll)
        answers = (http_json(self.base_url + path, self.api_key) for path in self.engine.server_info_paths)
        info = next((body for status, body in answers if status == 200), None)  # the first path that answers
        _, models = http_json(self.base_url + self.engine.models_path, self.api_key)
        model = ((models or {}).get("data") or [{}])[0].get("id") if isinstance(models, dict) else None
        return {"server_info": info, "models": models, "model": model}

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _join_reader(self) -> None:
        """Wait for the reader to take the lines the server wrote before it exited (bounded: a stray process may go
        on writing)."""
        if self._reader:
            self._reader.join(timeout=10)
        if self._log_fd is not None and not self._reading():
            os.close(self._log_fd)
            self._log_fd = None

    def stop(self, grace: float | None = None) -> int | None:
        """The engine's stop signal (SIGTERM) to the whole group, SIGKILL after `grace` s; returns the exit code."""
        if self.proc is None:
            return None
        grace = self.grace if grace is None else grace
        if self.proc.poll() is None:
            self._signal_group(self.engine.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace + 2)
        self._signal_group(signal.SIGKILL)  # stragglers that ignored SIGTERM
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self._join_reader()
        return self.proc.returncode

    def wait(self) -> int | None:
        return None if self.proc is None else self.proc.wait()

    def __enter__(self) -> ServerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_together(engine: str | Engine, servers: int, shared: bool = False) -> bool:
    """Whether `servers` servers of `engine` start at once (`Engine.starts_together`, or `shared`: each was sized by
    `Engine.share_device` for its share of the device). When they do, this process's OpenMP wait policy is pinned
    first: each server would otherwise sample its loading siblings as other work."""
    import kit

    together = servers > 1 and (shared or get_engine(engine).starts_together)
    if together:
        kit.pin_omp_wait_policy()
    return together


def start_ready(srv: ServerProcess, timeout: float = 600.0, beside: list[ServerProcess] = ()) -> dict:
    """Start `srv` and wait until it is ready (`wait_ready`'s info). The servers `beside` it start and are waited for
    too where their engine's servers load side by side (`Engine.starts_together`), so `srv`'s requests then have the
    machine to themselves; others are left to start when entered. If one fails, every one started here is stopped."""
    waiting = [s for s in beside if s.proc is None]
    ahead = [s for s in waiting if start_together(s.engine, 1 + len(waiting))]
    started = []
    try:
        for s in (srv, *ahead):
            started.append(s.start())
        info = srv.wait_ready(timeout)
        for s in ahead:
            s.wait_ready(timeout)
    except BaseException:
        for s in started:
            s.stop()
        raise
    return info


def _kill_group_members(pgid: int) -> None:
    """SIGKILL every other process of our group (a straggler that ignored SIGTERM)."""
    me = os.getpid()
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not d.isdigit() or int(d) == me:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(int(d)) == pgid:
                os.kill(int(d), signal.SIGKILL)


def supervise(parent_pid: int, grace: float, argv: list[str]) -> int:
    # the starter's death is seen by polling our parent pid (an orphan is re-parented), not by PR_SET_PDEATHSIG:
    # that signal fires when the starting *thread* ends, which would stop a server started from a worker thread
    if os.getppid() != parent_pid:  # the starter died before we got here
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        child = subprocess.Popen(argv)  # same process group as this supervisor
    except OSError as e:
        print(f"kit.serving.process: cannot start {argv[0]!r}: {e}", flush=True)
        return 127
    while child.poll() is None and not stop.is_set() and os.getppid() == parent_pid:
        stop.wait(0.2)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if child.poll() is None:
        child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=grace)
    os.killpg(os.getpgid(0), signal.SIGTERM)  # grandchildren; the supervisor ignores it
    time.sleep(0.2)
    if child.poll() is None:
        child.kill()
        child.wait()
    _kill_group_members(os.getpgid(0))
    rc = child.returncode
    return 128 - rc if rc < 0 else rc  # -15 -> 143, like a shell


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "--supervise" and sys.argv[4] == "--":
        sys.exit(supervise(int(sys.argv[2]), float(sys.argv[3]), sys.argv[5:]))
    print(__doc__)
