"""Server lifecycle: readiness, early exit, port in use, group stop, and no orphans when the starter dies.

A tiny stdlib HTTP server stands in for SGLang (the lifecycle code does not care what serves).
Run: python -m pytest kit/tests/test_process.py -q
"""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from kit.findings import KitInputError
from kit.serving.process import ServerExited, ServerProcess, free_port, port_in_use

# answers /health 200 after 0.3 s; spawns a grandchild that ignores SIGTERM (a stubborn worker)
FAKE = textwrap.dedent("""
    import http.server, json, subprocess, sys, time
    port = int(sys.argv[1])
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "fake"}]}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
    time.sleep(0.3)
    print("The server is fired up and ready to roll!", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def wait_gone(pgid: int, timeout: float = 10) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if not group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


def test_ready_log_and_group_stop(tmp_path):
    port = free_port()
    lines = []
    log = tmp_path / "logs" / "server.log"
    srv = ServerProcess(
        [sys.executable, "-c", FAKE, str(port)], port=port, log_file=str(log), on_line=lines.append, grace=1
    )
    with srv:
        info = srv.wait_ready(timeout=30, poll=0.1)
        assert info["model"] == "fake"
        pgid = srv.pgid
        assert os.getpgid(srv.pid) == pgid != os.getpgid(0)
    assert wait_gone(pgid), "the stubborn grandchild survived stop()"
    assert "fired up" in log.read_text() and any("fired up" in l for l in lines)


def test_a_server_logging_while_its_starter_is_busy_is_never_held(tmp_path):
    """1 MB of log (sixteen times a pipe's buffer) while the starter's log callback is stuck: the server
    writes it all and says so; the starter then reads every line, split as a text pipe splits them."""
    done = tmp_path / "done"
    talker = textwrap.dedent(f"""
        import sys
        for i in range(16384):
            sys.stdout.write("line %05d ".ljust(63, "x") % i + "\\n")
        sys.stdout.write("bar 1\\rbar 2\\r\\nwindows\\r\\nno newline")
        sys.stdout.flush()
        open({str(done)!r}, "w").close()
    """)
    lines, written_while_stuck = [], []

    def busy(line):
        if not written_while_stuck:  # the first line: stuck until the server has written all (or 20 s)
            end = time.monotonic() + 20
            while not done.exists() and time.monotonic() < end:
                time.sleep(0.01)
            written_while_stuck.append(done.exists())
        lines.append(line)

    log = tmp_path / "server.log"
    srv = ServerProcess([sys.executable, "-c", talker], port=free_port(), log_file=str(log), on_line=busy, grace=1)
    with srv:
        srv.wait()
    assert written_while_stuck == [True]  # the server finished while nothing read its output
    assert len(lines) == 16384 + 4 and lines[16383].startswith("line 16383 ")
    assert lines[-4:] == ["bar 1", "bar 2", "windows", "no newline"]
    assert log.read_bytes().endswith(b"bar 1\rbar 2\r\nwindows\r\nno newline")  # the server's own bytes


def test_catch_up_waits_for_every_line_written_before_it_and_not_for_an_unfinished_one(tmp_path):
    """The server logs 20,000 lines, then says so through a file (as a reply would), then starts a line it
    does not finish: once `catch_up()` returns, every whole line is taken; the unfinished one holds nothing."""
    replied = tmp_path / "replied"
    talker = textwrap.dedent(f"""
        import sys, time
        for i in range(20000):
            sys.stdout.write("request line %05d\\n" % i)
        sys.stdout.flush()
        open({str(replied)!r}, "w").close()
        sys.stdout.write("a line not finished")
        sys.stdout.flush()
        time.sleep(60)
    """)
    taken = []
    srv = ServerProcess([sys.executable, "-c", talker], port=free_port(), on_line=taken.append, grace=1)
    with srv:
        end = time.monotonic() + 30
        while not replied.exists() and time.monotonic() < end:
            time.sleep(0.001)
        t0 = time.monotonic()
        assert srv.catch_up(timeout=20)
        waited = time.monotonic() - t0
        assert len(taken) == 20000 and taken[-1] == "request line 19999"
        assert waited < 10  # the unfinished line is not waited for
    assert taken[-1] == "a line not finished"  # taken once the server has gone
    assert srv.catch_up(timeout=1)  # after the stop: nothing left to wait for


def test_early_exit_reports_code_and_tail():
    srv = ServerProcess(
        [sys.executable, "-c", "print('loading'); print('ValueError: boom'); raise SystemExit(3)"], port=free_port()
    )
    with pytest.raises(ServerExited) as e:
        with srv:
            srv.wait_ready(timeout=30, poll=0.1)
    assert "code 3" in str(e.value) and "ValueError: boom" in str(e.value)


# SGLang 0.5.17's log when a scheduler dies during startup (docs/results/h200_matrix/other_target_width.json):
# the child's traceback, then the parent's SIGQUIT line; the parent then sleeps before it kills its tree
SGLANG_CHILD_FAILED = textwrap.dedent("""
    import time
    print('[2026-11-30 13:56:40] Load weight end.', flush=True)
    print('Traceback (most recent call last):', flush=True)
    print('  File "/tmp/site/sglang/srt/models/llama_eagle3.py", line 238, in forward', flush=True)
    print('RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x1728 and 3072x1024)', flush=True)
    print('', flush=True)
    print('[2026-11-30 13:56:44] SIGQUIT received. signum=None, frame=None. It usually means one child failed.', flush=True)
    time.sleep(600)
""")


def test_sglang_startup_failure_reported_with_its_exception_line():
    """The process is still alive after SGLang's SIGQUIT line: the log, not an exit or a timeout, ends the wait."""
    srv = ServerProcess([sys.executable, "-c", SGLANG_CHILD_FAILED], port=free_port(), grace=1)
    with pytest.raises(ServerExited) as e:
        srv.wait_ready(timeout=300, poll=0.1)
    msg = str(e.value)
    assert msg.startswith("server failed to start: RuntimeError: mat1 and mat2 shapes cannot be multiplied"), msg
    assert srv.returncode is not None  # stopped, not left sleeping


def test_exit_message_leads_with_the_exception_line():
    code = "print('Traceback (most recent call last):'); print('[x] KeyError: model.layers.0'); raise SystemExit(137)"
    srv = ServerProcess([sys.executable, "-c", code], port=free_port())
    with pytest.raises(
        ServerExited, match=r"^server exited with code 137 before it was ready: KeyError: model\.layers\.0;"
    ):
        srv.wait_ready(timeout=30, poll=0.1)


def test_port_in_use_reported_before_launch():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        srv = ServerProcess([sys.executable, "-c", "raise SystemExit(9)"], port=port)
        with pytest.raises(KitInputError, match=f"port {port}"):
            srv.start()
        assert srv.proc is None


def test_a_port_whose_server_just_stopped_is_free():
    # the server's end of a closed connection waits in TIME_WAIT; a server binding with SO_REUSEADDR (as uvicorn
    # does) takes the port at once, so the check before launch must not refuse it
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = srv.accept()
        conn.close()  # the server side closes first
        time.sleep(0.05)
        client.close()
    assert not port_in_use("127.0.0.1", port)
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()
        assert port_in_use("127.0.0.1", port)  # a listening socket still counts


def test_no_orphans_when_starter_is_sigkilled(tmp_path):
    port = free_port()
    starter = textwrap.dedent(f"""
        import sys, time
        from kit.serving.process import ServerProcess
        srv = ServerProcess([sys.executable, "-c", {FAKE!r}, "{port}"], port={port}, grace=1).start()
        srv.wait_ready(timeout=30, poll=0.1)
        print(srv.pgid, flush=True)
        time.sleep(600)
    """)
    p = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    try:
        pgid = int(p.stdout.readline())
        assert group_alive(pgid)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert wait_gone(pgid, 15), "server group outlived its SIGKILLed starter"
    finally:
        if p.poll() is None:
            p.kill()


def test_launched_server_env_keeps_nvlink_multicast_off():
    code = "import os; print('ENV', os.environ['NCCL_NVLS_ENABLE'], os.environ['TORCH_SYMM_MEM_DISABLE_MULTICAST'],"
    code += " os.environ['NVSHMEM_DISABLE_NVLS'], os.environ['NCCL_PROTO'])"
    srv = ServerProcess([sys.executable, "-c", code], env={"NCCL_PROTO": "LL"}, port=free_port()).start()
    assert srv.wait() == 0
    srv.stop()
    assert "ENV 0 1 1 LL" in srv.tail(5)


def test_exit_message_names_the_engines_own_reason():
    """The reference server ends a failed load with one `kit serve: error:` line and exit 2 (no traceback)."""
    code = "print('[2026-12-01 05:15:02] kit serve: error: fc.weight: shape (32, 96) != expected (32, 192)'); raise SystemExit(2)"
    srv = ServerProcess([sys.executable, "-c", code], port=free_port(), engine="reference")
    with pytest.raises(
        ServerExited, match=r"^server (exited with code 2 before it was ready|failed to start): fc\.weight: shape"
    ):
        srv.wait_ready(timeout=30, poll=0.1)


def test_a_server_started_from_a_thread_outlives_the_thread():
    import threading

    port = free_port()
    srv = ServerProcess([sys.executable, "-c", FAKE, str(port)], port=port, grace=1)
    t = threading.Thread(target=lambda: srv.start().wait_ready(30))
    t.start()
    t.join()  # the starting thread is gone; the server must still answer (launch_all starts servers this way)
    try:
        time.sleep(0.6)
        assert srv.proc.poll() is None
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        srv.stop()
    assert wait_gone(srv.pgid)


def test_free_port_never_hands_out_a_port_twice():
    assert len({free_port() for _ in range(50)}) == 50


def test_free_port_draws_below_the_ephemeral_range(monkeypatch):
    from kit.serving import process

    low = process._ephemeral_low()
    ports = [free_port() for _ in range(20)]
    if low > process._PICK_FROM + 1000:  # the usual Linux range (32768-60999): room below it
        assert all(process._PICK_FROM <= p < low and p not in process._SGLANG_DEFAULTS for p in ports), ports
    monkeypatch.setattr(process, "_ephemeral_low", lambda: process._PICK_FROM)  # no room: the kernel's pick
    assert free_port() not in ports


def test_start_ready_starts_the_servers_beside_it_only_where_their_engine_allows():
    from kit.serving.process import start_ready

    def fake(engine, code=FAKE):
        port = free_port()
        return ServerProcess([sys.executable, "-c", code, str(port)], port=port, grace=1, engine=engine)

    ref, ref_beside, sg, sg_beside = fake("reference"), fake("reference"), fake("sglang"), fake("sglang")
    try:
        assert start_ready(ref, 30, beside=[ref_beside])["model"] == "fake"
        assert ref_beside.ready and ref_beside.proc.poll() is None  # loaded alongside, and waited for
        start_ready(sg, 30, beside=[sg_beside])
        assert sg_beside.proc is None  # SGLang's servers start one at a time: this one when entered
        failing, beside = fake("reference", "raise SystemExit(3)"), fake("reference")
        with pytest.raises(ServerExited, match="code 3"):
            start_ready(failing, 30, beside=[beside])
        assert beside.proc.poll() is not None  # what was started with the failed one is stopped
    finally:
        for s in (ref, ref_beside, sg, sg_beside):
            s.stop()


def test_a_server_forks_only_while_no_port_probe_is_open(monkeypatch):
    """A child forked while another thread's free_port probe socket is open holds that port until it execs:
    the port check and the fork run under the lock free_port probes under."""
    from kit.serving import process

    held = []
    real = subprocess.Popen

    def popen(*a, **kw):
        held.append(process._PORT_LOCK.locked())
        return real(*a, **kw)

    monkeypatch.setattr(process.subprocess, "Popen", popen)
    srv = ServerProcess([sys.executable, "-c", "pass"], port=free_port(), grace=1).start()
    srv.proc.wait(10)
    assert held == [True]
